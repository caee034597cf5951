//! PNG in the mode Pillow opens it in (`PngImagePlugin._MODES`): 1-bit gray as 1, 2 to 8-bit
//! gray as L, 16-bit gray as I;16, 16-bit colour as 8-bit RGB or RGBA from the high byte of
//! each sample ("RGB;16B"), 16-bit gray with alpha as RGBA from the high bytes ("LA;16B"),
//! palettes as P with the PLTE chunk's colours; a tRNS chunk changes no mode.

use std::io::Cursor;

use image::DynamicImage;

use crate::error::ImageError;
use crate::limits::ImageLimits;
use crate::pixels::{Opened, Palette, Pixels, drop_alpha, image_limits, require_rgb};

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

/// A PNG decoded in the mode Pillow opens it in.
pub(crate) fn decode(bytes: &[u8], limits: &ImageLimits, convert_rgb: bool) -> Result<Opened, ImageError> {
    let head = header(bytes)?;
    limits.check_pixels("PNG", head.width.into(), head.height.into())?;
    let mode = head.pillow_mode();
    require_rgb(mode, convert_rgb)?;
    let err = |e: image::ImageError| ImageError::decode("PNG", e);
    let decoder =
        image::codecs::png::PngDecoder::with_limits(Cursor::new(bytes), image_limits(limits, head.width, head.height))
            .map_err(err)?;
    let image = DynamicImage::from_decoder(decoder).map_err(err)?;
    let (width, height) = (image.width(), image.height());
    if (width, height) != (head.width, head.height) {
        return Err(ImageError::decode("PNG", "the decoded size differs from the header's"));
    }
    let unexpected = |image: &DynamicImage| {
        ImageError::decode("PNG", format!("unexpected pixel type {:?} for mode {mode}", image.color()))
    };
    // The image crate expands a tRNS chunk into an alpha channel that Pillow's mode does not
    // have: it is dropped. 1, 2 and 4-bit gray come scaled to 8 bits, as Pillow's 1, L;2 and
    // L;4 unpack them.
    let pixels = match (mode, image) {
        ("1" | "L", DynamicImage::ImageLuma8(img)) => gray(mode, img.into_raw()),
        ("1" | "L", DynamicImage::ImageLumaA8(img)) => gray(mode, img.as_raw().iter().step_by(2).copied().collect()),
        ("I;16", DynamicImage::ImageLuma16(img)) => Pixels::I16(img.into_raw()),
        ("I;16", DynamicImage::ImageLumaA16(img)) => Pixels::I16(img.as_raw().iter().step_by(2).copied().collect()),
        ("LA", DynamicImage::ImageLumaA8(img)) => Pixels::La(img.into_raw()),
        ("RGB", DynamicImage::ImageRgb8(img)) => Pixels::Rgb(img.into_raw()),
        ("RGB", DynamicImage::ImageRgba8(img)) => Pixels::Rgb(drop_alpha(img.as_raw())),
        ("RGB", DynamicImage::ImageRgb16(img)) => Pixels::Rgb(img.as_raw().iter().map(|&v| high_byte(v)).collect()),
        ("RGB", DynamicImage::ImageRgba16(img)) => {
            Pixels::Rgb(img.as_raw().chunks_exact(4).flat_map(|px| px[..3].iter().map(|&v| high_byte(v))).collect())
        }
        ("P", DynamicImage::ImageRgb8(img)) => Pixels::P { rgb: img.into_raw(), palette: palette(bytes) },
        ("P", DynamicImage::ImageRgba8(img)) => Pixels::P { rgb: drop_alpha(img.as_raw()), palette: palette(bytes) },
        ("RGBA", DynamicImage::ImageRgba8(img)) => Pixels::Rgba(img.into_raw()),
        ("RGBA", DynamicImage::ImageRgba16(img)) => Pixels::Rgba(img.as_raw().iter().map(|&v| high_byte(v)).collect()),
        // "LA;16B": the gray's high byte three times, then the alpha's.
        ("RGBA", DynamicImage::ImageLumaA16(img)) => Pixels::Rgba(
            img.as_raw().chunks_exact(2).flat_map(|px| [px[0], px[0], px[0], px[1]].map(high_byte)).collect(),
        ),
        (_, other) => return Err(unexpected(&other)),
    };
    Ok(Opened { width, height, pixels })
}

/// 8-bit gray samples as mode 1 or L.
fn gray(mode: &str, samples: Vec<u8>) -> Pixels {
    if mode == "1" { Pixels::Bilevel(samples) } else { Pixels::L(samples) }
}

/// The PLTE chunk's colours as Pillow's palette table (black past its end and where there is
/// none: the decoder has already refused a palette image without one).
fn palette(bytes: &[u8]) -> Box<Palette> {
    let mut table: Box<Palette> = Box::new([[0; 3]; 256]);
    let mut at = 8;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let Some(data) = at.checked_add(8 + len).and_then(|end| bytes.get(at + 8..end)) else { break };
        match &head[4..8] {
            b"PLTE" => {
                for (entry, rgb) in table.iter_mut().zip(data.chunks_exact(3)) {
                    entry.copy_from_slice(rgb);
                }
                break;
            }
            b"IDAT" | b"IEND" => break,
            _ => at += 12 + len,
        }
    }
    table
}

/// The first (most significant) byte of a big-endian 16-bit sample, as Pillow's ";16B" unpackers take.
fn high_byte(v: u16) -> u8 {
    (v >> 8) as u8
}
