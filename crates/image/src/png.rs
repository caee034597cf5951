//! PNG as Pillow opens it (`PngImagePlugin._MODES`) and converts it to RGB: 16-bit gray opens
//! as I;16 and is clipped to 255 (`I16_RGB`), 16-bit colour opens as 8-bit RGB or RGBA from the
//! high byte of each sample ("RGB;16B"), 16-bit gray with alpha as RGBA from the high bytes
//! ("LA;16B"), palettes are looked up, alpha (and tRNS) is dropped.

use std::io::Cursor;

use image::DynamicImage;

use crate::error::ImageError;
use crate::limits::ImageLimits;
use crate::pixels::{Rgb8, drop_alpha, gray_to_rgb, image_limits, require_rgb};

/// What the IHDR chunk declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub width: u32,
    pub height: u32,
    pub bit_depth: u8,
    pub color_type: u8,
}

impl Header {
    /// The mode Pillow opens this PNG in.
    pub(crate) fn pillow_mode(self) -> &'static str {
        match (self.color_type, self.bit_depth) {
            (0, 1) => "1",
            (0, 16) => "I;16",
            (0, _) => "L",
            (2, _) => "RGB",
            (3, _) => "P",
            (4, 8) => "LA",
            // 16-bit gray+alpha opens as RGBA; colour with alpha is RGBA.
            _ => "RGBA",
        }
    }
}

/// Reads the IHDR chunk, which a PNG must start with, without decoding anything.
pub(crate) fn header(bytes: &[u8]) -> Result<Header, ImageError> {
    let ihdr = bytes.get(8..29).filter(|h| &h[0..8] == b"\0\0\0\x0dIHDR");
    let Some(h) = ihdr else {
        return Err(ImageError::decode("PNG", "it does not start with an IHDR chunk"));
    };
    let be = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    Ok(Header { width: be(8), height: be(12), bit_depth: h[16], color_type: h[17] })
}

/// A PNG decoded and converted to RGB.
pub(crate) fn decode(bytes: &[u8], limits: &ImageLimits, convert_rgb: bool) -> Result<Rgb8, ImageError> {
    let head = header(bytes)?;
    limits.check_pixels("PNG", head.width.into(), head.height.into())?;
    require_rgb(head.pillow_mode(), convert_rgb)?;
    let err = |e: image::ImageError| ImageError::decode("PNG", e);
    let decoder =
        image::codecs::png::PngDecoder::with_limits(Cursor::new(bytes), image_limits(limits, head.width, head.height))
            .map_err(err)?;
    let image = DynamicImage::from_decoder(decoder).map_err(err)?;
    let (width, height) = (image.width(), image.height());
    if (width, height) != (head.width, head.height) {
        return Err(ImageError::decode("PNG", "the decoded size differs from the header's"));
    }
    let data = match image {
        // 1, 2 and 4-bit gray are expanded to 8 bits by scaling, as Pillow's L;2 and L;4 do.
        DynamicImage::ImageLuma8(img) => gray_to_rgb(img.into_raw().into_iter()),
        DynamicImage::ImageLumaA8(img) => gray_to_rgb(img.as_raw().iter().step_by(2).copied()),
        DynamicImage::ImageRgb8(img) => img.into_raw(),
        DynamicImage::ImageRgba8(img) => drop_alpha(img.as_raw()),
        DynamicImage::ImageLuma16(img) => gray_to_rgb(img.as_raw().iter().map(|&v| clip16(v))),
        DynamicImage::ImageLumaA16(img) => {
            let gray = img.as_raw().iter().step_by(2).copied();
            // Gray with a tRNS colour opens as I;16 (clipped); gray with alpha as RGBA (high byte).
            if head.color_type == 0 { gray_to_rgb(gray.map(clip16)) } else { gray_to_rgb(gray.map(high_byte)) }
        }
        DynamicImage::ImageRgb16(img) => img.as_raw().iter().map(|&v| high_byte(v)).collect(),
        DynamicImage::ImageRgba16(img) => {
            let mut out = Vec::with_capacity(img.as_raw().len() / 4 * 3);
            for px in img.as_raw().chunks_exact(4) {
                out.extend_from_slice(&[high_byte(px[0]), high_byte(px[1]), high_byte(px[2])]);
            }
            out
        }
        other => return Err(ImageError::decode("PNG", format!("unexpected pixel type {:?}", other.color()))),
    };
    Ok(Rgb8 { width, height, data })
}

/// Convert.c's `I16_RGB`: a 16-bit value above 255 becomes 255, others keep their low byte.
fn clip16(v: u16) -> u8 {
    u8::try_from(v).unwrap_or(u8::MAX)
}

/// The first (most significant) byte of a big-endian 16-bit sample, as Pillow's ";16B" unpackers take.
fn high_byte(v: u16) -> u8 {
    (v >> 8) as u8
}
