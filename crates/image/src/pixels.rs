//! Decoded pixels (8-bit RGB, row after row) and the conversions to them that every format's
//! decoder shares, as Pillow's `libImaging/Convert.c` makes them: alpha dropped, gray repeated;
//! and the limits handed to the `image` crate's decoders.

use crate::error::ImageError;
use crate::limits::ImageLimits;

/// Decoded pixels, 3 bytes each, row after row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rgb8 {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

/// The `image` crate's limits for an image the header says is `width` x `height`.
pub(crate) fn image_limits(limits: &ImageLimits, width: u32, height: u32) -> image::Limits {
    let mut out = image::Limits::default();
    out.max_image_width = Some(width);
    out.max_image_height = Some(height);
    out.max_alloc = Some(limits.max_alloc());
    out
}

/// Refuses a non-RGB mode when the processor does not convert.
pub(crate) fn require_rgb(mode: &'static str, convert_rgb: bool) -> Result<(), ImageError> {
    if convert_rgb || mode == "RGB" { Ok(()) } else { Err(ImageError::NotRgb { mode }) }
}

/// RGBA bytes to RGB: Convert.c's `rgba2rgb` keeps the colour and drops the alpha.
pub(crate) fn drop_alpha(rgba: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rgba.len() / 4 * 3);
    for px in rgba.chunks_exact(4) {
        out.extend_from_slice(&px[..3]);
    }
    out
}

/// One gray byte per pixel to RGB (`l2rgb`).
pub(crate) fn gray_to_rgb(gray: impl Iterator<Item = u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(gray.size_hint().0 * 3);
    for v in gray {
        out.extend_from_slice(&[v, v, v]);
    }
    out
}
