//! Image bytes to the pixels Pillow's `Image.open` gives them, in the same mode: the format
//! found from its magic bytes, the size read from its header and checked against the limits
//! before any pixel is decoded.

use std::io::Cursor;

use image::{DynamicImage, ImageDecoder};

use crate::error::ImageError;
use crate::limits::ImageLimits;
use crate::pixels::{Opened, Pixels, drop_alpha, image_limits, require_rgb};
use crate::{gif, jpeg, png};

/// The formats read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Png,
    Jpeg,
    WebP,
    Gif,
}

/// `bytes` decoded in the mode Pillow opens them in. With `convert_rgb` false an image that
/// Pillow opens in any mode but RGB is refused (before decoding), as the processor's numpy steps
/// would refuse it.
pub(crate) fn decode(bytes: &[u8], limits: &ImageLimits, convert_rgb: bool) -> Result<Opened, ImageError> {
    if bytes.len() > limits.max_bytes {
        return Err(ImageError::TooManyBytes { len: bytes.len(), max: limits.max_bytes });
    }
    match sniff(bytes).ok_or(ImageError::UnknownFormat)? {
        Format::Png => png::decode(bytes, limits, convert_rgb),
        Format::Jpeg => jpeg::decode(bytes, limits, convert_rgb),
        Format::WebP => webp(bytes, limits, convert_rgb),
        Format::Gif => gif::decode(bytes, limits, convert_rgb),
    }
}

/// The format its first bytes name.
fn sniff(bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Format::Jpeg)
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some(Format::Gif)
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some(Format::WebP)
    } else {
        None
    }
}

/// WebP, lossy or lossless. Pillow opens it as RGBA when the header says it has alpha, else RGB.
fn webp(bytes: &[u8], limits: &ImageLimits, convert_rgb: bool) -> Result<Opened, ImageError> {
    let err = |e: image::ImageError| ImageError::decode("WebP", e);
    let mut decoder = image::codecs::webp::WebPDecoder::new(Cursor::new(bytes)).map_err(err)?;
    let (width, height) = decoder.dimensions();
    limits.check_pixels("WebP", width.into(), height.into())?;
    let mode = if decoder.color_type().has_alpha() { "RGBA" } else { "RGB" };
    require_rgb(mode, convert_rgb)?;
    decoder.set_limits(image_limits(limits, width, height)).map_err(err)?;
    let pixels = match (mode, DynamicImage::from_decoder(decoder).map_err(err)?) {
        ("RGB", DynamicImage::ImageRgb8(img)) => Pixels::Rgb(img.into_raw()),
        ("RGB", DynamicImage::ImageRgba8(img)) => Pixels::Rgb(drop_alpha(img.as_raw())),
        (_, DynamicImage::ImageRgba8(img)) => Pixels::Rgba(img.into_raw()),
        (_, other) => return Err(ImageError::decode("WebP", format!("unexpected pixel type {:?}", other.color()))),
    };
    Ok(Opened { width, height, pixels })
}
