//! The one error type of this crate: each variant prints one line that says what is wrong and
//! what to do about it.

use std::path::PathBuf;

/// What went wrong reading a processor's settings or turning image bytes into pixels.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The image bytes are more than [`crate::ImageLimits::max_bytes`].
    #[error("the image is {len} bytes, over the limit of {max}: send a smaller file or raise ImageLimits::max_bytes")]
    TooManyBytes {
        /// The length of the bytes given.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The image's header declares more pixels than [`crate::ImageLimits::max_pixels`], or a
    /// side longer than [`crate::MAX_SIDE`]; nothing was decoded.
    #[error(
        "the image declares {width}x{height} pixels, over the limit of {max} (or of 65535 a side): send a smaller image or raise ImageLimits::max_pixels"
    )]
    TooManyPixels {
        /// Declared width.
        width: u64,
        /// Declared height.
        height: u64,
        /// The limit, in pixels.
        max: u64,
    },
    /// The config's resize would make more pixels than [`crate::ImageLimits::max_pixels`] of
    /// this image (a long, thin image resized by its shortest edge).
    #[error(
        "resizing this image as the processor does gives {width}x{height} pixels, over the limit of {max}: send an image closer to square or raise ImageLimits::max_pixels"
    )]
    ResizeTooLarge {
        /// The width the resize would produce.
        width: u64,
        /// The height the resize would produce.
        height: u64,
        /// The limit, in pixels.
        max: u64,
    },
    /// The config's resize would leave this image no rows or no columns (a long, thin image
    /// fitted into the size by open_clip's `longest` mode), which Pillow refuses too.
    #[error(
        "resizing this image as the processor does gives {width}x{height} pixels, an empty image (Pillow refuses it too): send an image closer to square"
    )]
    ResizeToNothing {
        /// The width the resize would produce.
        width: u64,
        /// The height the resize would produce.
        height: u64,
    },
    /// The bytes are not a PNG, JPEG, WebP or GIF file.
    #[error("the bytes are not a PNG, JPEG, WebP or GIF image: convert the image to one of those")]
    UnknownFormat,
    /// The file looked like `format` but could not be decoded.
    #[error("could not decode the {format} image ({detail}): check that the file is complete and valid")]
    Decode {
        /// PNG, JPEG, WebP or GIF.
        format: &'static str,
        /// What the decoder said.
        detail: String,
    },
    /// The image is decoded but is not RGB and the processor's settings ask for no conversion.
    #[error(
        "the image is {mode}, not RGB, and the processor's do_convert_rgb is not true (transformers would refuse it too): convert the image to RGB or set \"do_convert_rgb\": true"
    )]
    NotRgb {
        /// The Pillow mode the image opens in (L, RGBA, P, ...).
        mode: &'static str,
    },
    /// Pixels handed to [`crate::ImageProcessor::preprocess_rgb8`] do not fit their size.
    #[error("{0}: pass width * height * 3 bytes of RGB, width and height at least 1")]
    BadPixels(String),
    /// A setting in `preprocessor_config.json` that this crate cannot follow exactly.
    #[error("preprocessor_config.json: `{key}` {reason}")]
    Config {
        /// The key, as written in the file.
        key: &'static str,
        /// What is wrong, and what to write instead.
        reason: String,
    },
    /// The config names an image processor this crate does not implement.
    #[error(
        "image processor `{0}` is not supported: this crate computes CLIPImageProcessor (also read as CLIPFeatureExtractor), SiglipImageProcessor and JinaCLIPImageProcessor only"
    )]
    UnsupportedProcessor(String),
    /// The config file is not a JSON object, or is too large.
    #[error("preprocessor_config.json is not usable ({0}): check the model folder's file")]
    ConfigFile(String),
    /// The config file could not be read.
    #[error("could not read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl ImageError {
    /// A config error for `key`.
    pub(crate) fn config(key: &'static str, reason: impl Into<String>) -> Self {
        ImageError::Config { key, reason: reason.into() }
    }

    /// A decode error for `format`.
    pub(crate) fn decode(format: &'static str, detail: impl std::fmt::Display) -> Self {
        ImageError::Decode { format, detail: one_line(&detail.to_string()) }
    }
}

/// `text` on one line, cut to a length fit for an error message.
fn one_line(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(200) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

/// `text` cut short for an error message.
pub(crate) fn short(text: &str) -> String {
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}
