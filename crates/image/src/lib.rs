//! Image bytes to a model's pixel tensor (float32, `[3, H, W]`, channels first), exactly as
//! Hugging Face transformers' slow image processors (`CLIPImageProcessor`,
//! `SiglipImageProcessor`, 4.x) compute it from a Pillow image opened from the same bytes: the
//! same decoded pixels (libjpeg-turbo for JPEG), Pillow's `convert("RGB")`, Pillow's resize
//! bit for bit, numpy's crop, rescale and normalisation in the same float arithmetic. Every
//! setting comes from the model folder's `preprocessor_config.json`, read as the processor reads
//! it ([`ImageProcessor`]).
//!
//! jina-clip's `JinaCLIPImageProcessor` is computed too: open_clip's eval transform, torchvision
//! on the Pillow image, bit for bit (crop offsets rounded half to even as Python's `round`, a
//! larger crop padded with `fill_color`, `ToTensor` and `Normalize` in float32). By default the
//! image is converted to RGB first, as jina's own entry points (`encode_image`, the
//! sentence-transformers module) hand it to the processor;
//! [`ImageProcessor::with_rgb_first`]`(false)` gives the processor's own order instead, called
//! on the image as opened: kept in the mode Pillow opens it in (1, L, LA, I;16, RGB, RGBA, CMYK,
//! P), resized as `Image.resize` does in that mode (NEAREST for 1 and P, alpha premultiplied for
//! LA and RGBA, 16-bit sums for I;16), cropped and padded in it, and converted to RGB after.
//!
//! It is bounded for untrusted input: a byte limit checked first, a pixel limit checked against
//! the header before any pixel is decoded ([`ImageLimits`]), every config value checked where it
//! is read, and an error (never a panic) for any input.
//!
//! It is not a general image library: it reads PNG, JPEG, WebP and GIF (first frame) only,
//! applies no EXIF rotation and no colour profile (neither does `Image.open`), composites no
//! alpha (the 4.x processors drop it; transformers 5's `...ImageProcessorPil` classes blend it
//! onto white, which this crate does not follow), and knows no other processor. Resizing
//! follows Pillow 13, which runs the vertical pass first when the height shrinks much more than
//! the width; Pillow 12 ran the horizontal pass first (12.2 and 12.3 bar images over 100 times
//! taller than wide), so there the two differ slightly.
//! JPEG errors unwind out of libjpeg's C code and are caught: build with `panic = "unwind"`
//! (Rust's default).

#![warn(missing_docs)]

mod config;
mod decode;
mod error;
mod gif;
mod jpeg;
mod limits;
mod nearest;
mod pixels;
mod png;
mod processor;
mod resample;
mod size;

pub use error::ImageError;
pub use limits::{ImageLimits, MAX_SIDE};
pub use processor::{CONFIG_FILE, ImageProcessor, MAX_CONFIG_BYTES, PixelTensor};
pub use resample::{Resample, resize_rgb8};

/// Entry points for fuzzing: any bytes in, an error or a tensor out, never a panic.
pub mod fuzzing {
    use crate::{ImageError, ImageLimits, ImageProcessor, PixelTensor};

    /// Limits small enough for a fuzzer to run many inputs a second.
    const FUZZ_LIMITS: ImageLimits = ImageLimits { max_bytes: 1 << 20, max_pixels: 4_000_000 };

    /// The configs an input that is not a valid config stands for, picked by its first byte:
    /// CLIP with a 64-pixel crop, and jina-clip's transform in each resize mode (small sizes, a
    /// pad fill, both filters), so that every mode's resize, crop and pad is reached.
    const FALLBACKS: [&str; 4] = [
        r#"{"image_processor_type": "CLIPImageProcessor", "size": 64, "crop_size": 64}"#,
        r#"{"image_processor_type": "JinaCLIPImageProcessor", "size": 48}"#,
        r#"{"image_processor_type": "JinaCLIPImageProcessor", "size": [40, 56], "resize_mode": "longest",
            "fill_color": 7, "interpolation": "bilinear"}"#,
        r#"{"image_processor_type": "JinaCLIPImageProcessor", "size": [33, 47], "resize_mode": "squash"}"#,
    ];

    /// Reads `config_json` as a `preprocessor_config.json` (one of four fallbacks, CLIP's and
    /// jina-clip's, when it is not valid, so that the image is still decoded) and preprocesses
    /// `image` with it; jina-clip's transform runs on the image as opened when the config's
    /// length is odd, converted to RGB first when it is even.
    pub fn preprocess(config_json: &[u8], image: &[u8]) -> Result<PixelTensor, ImageError> {
        let parsed = std::str::from_utf8(config_json).ok().map(ImageProcessor::from_json);
        let processor = match parsed {
            Some(Ok(processor)) => processor,
            _ => {
                let pick = config_json.first().map_or(0, |b| usize::from(*b) % FALLBACKS.len());
                ImageProcessor::from_json(FALLBACKS[pick])?
            }
        };
        let processor = processor.with_rgb_first(config_json.len().is_multiple_of(2));
        processor.preprocess(image, &FUZZ_LIMITS)
    }
}
