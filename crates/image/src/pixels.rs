//! Decoded pixels: an image in the mode Pillow's `Image.open` gives it ([`Opened`]), what
//! `Image.resize` does in each mode, a crop that pads as `ImageOps.expand` fills, and
//! `convert("RGB")` as `libImaging/Convert.c` makes it (alpha dropped, gray repeated, 16-bit
//! gray clipped, CMYK and palettes looked up); and the limits handed to the `image` crate's
//! decoders.

use crate::error::ImageError;
use crate::limits::ImageLimits;
use crate::nearest;
use crate::resample::{Resample, resize8, resize16};

/// Decoded pixels, 3 bytes each, row after row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rgb8 {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

/// What `convert("RGB")` gives each palette index: the palette's colours, black past its end
/// (Pillow's palette table is zeroed before the file's entries are copied in).
pub(crate) type Palette = [[u8; 3]; 256];

/// An image as Pillow opens it: its mode and samples, row after row, bands interleaved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Opened {
    pub width: u32,
    pub height: u32,
    pub pixels: Pixels,
}

/// The samples of each mode this crate opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pixels {
    /// "1": a byte a pixel, 0 or 255 (a pad may leave another non-zero value: white all the same).
    Bilevel(Vec<u8>),
    /// "L".
    L(Vec<u8>),
    /// "LA": gray, alpha.
    La(Vec<u8>),
    /// "I;16": 16-bit gray.
    I16(Vec<u16>),
    /// "RGB".
    Rgb(Vec<u8>),
    /// "RGBA".
    Rgba(Vec<u8>),
    /// "CMYK", the values Pillow holds (a JPEG's Adobe-inverted samples already turned back).
    Cmyk(Vec<u8>),
    /// "P", kept as each pixel's colour (`rgb`, 3 bytes a pixel) beside the palette. Pillow
    /// moves a P image's indices only whole: NEAREST resizing, crops and pads copy an index or
    /// write a new one, and `convert("RGB")` then looks each index up. Copying the looked-up
    /// colour instead gives the same RGB pixel for every copied index, so the colours can stand
    /// for the indices as long as every index that is written, not copied, is looked up too:
    /// the pad's fill index and the zero NEAREST leaves past the edge (both taken from
    /// `palette`).
    P { rgb: Vec<u8>, palette: Box<Palette> },
}

impl From<Rgb8> for Opened {
    /// RGB pixels as an RGB image.
    fn from(image: Rgb8) -> Self {
        Opened { width: image.width, height: image.height, pixels: Pixels::Rgb(image.data) }
    }
}

impl Opened {
    /// `convert("RGB")`.
    pub(crate) fn into_rgb(self) -> Rgb8 {
        let data = match self.pixels {
            // bit2rgb: any non-zero byte is white.
            Pixels::Bilevel(v) => gray_to_rgb(v.into_iter().map(|b| if b == 0 { 0 } else { 255 })),
            Pixels::L(v) => gray_to_rgb(v.into_iter()),
            Pixels::La(v) => gray_to_rgb(v.iter().step_by(2).copied()),
            Pixels::I16(v) => gray_to_rgb(v.into_iter().map(clip16)),
            Pixels::Rgb(v) | Pixels::P { rgb: v, .. } => v,
            Pixels::Rgba(v) => drop_alpha(&v),
            Pixels::Cmyk(v) => cmyk_to_rgb(&v),
        };
        Rgb8 { width: self.width, height: self.height, data }
    }

    /// `Image.resize((width, height), filter)` in this image's mode: a copy at the same size;
    /// NEAREST whatever the filter for 1 and P; LA and RGBA premultiplied by their alpha
    /// (La, RGBa), resized, then divided back, unless the filter is NEAREST. The new size must
    /// not be empty.
    pub(crate) fn resize(self, width: u32, height: u32, filter: Resample) -> Opened {
        if (width, height) == (self.width, self.height) {
            return self;
        }
        let (w, h, nw, nh) = (self.width as usize, self.height as usize, width as usize, height as usize);
        let pixels = match self.pixels {
            Pixels::Bilevel(v) => Pixels::Bilevel(nearest::resize::<u8, 1>(&v, w, h, nw, nh, [0])),
            Pixels::P { rgb, palette } => {
                Pixels::P { rgb: nearest::resize::<u8, 3>(&rgb, w, h, nw, nh, palette[0]), palette }
            }
            Pixels::L(v) => Pixels::L(resize8::<1>(&v, w, h, nw, nh, filter)),
            Pixels::Rgb(v) => Pixels::Rgb(resize8::<3>(&v, w, h, nw, nh, filter)),
            Pixels::Cmyk(v) => Pixels::Cmyk(resize8::<4>(&v, w, h, nw, nh, filter)),
            Pixels::I16(v) => Pixels::I16(resize16(&v, w, h, nw, nh, filter)),
            Pixels::La(v) if filter == Resample::Nearest => Pixels::La(resize8::<2>(&v, w, h, nw, nh, filter)),
            Pixels::Rgba(v) if filter == Resample::Nearest => Pixels::Rgba(resize8::<4>(&v, w, h, nw, nh, filter)),
            Pixels::La(v) => Pixels::La(unpremultiply::<2>(resize8::<2>(&premultiply::<2>(v), w, h, nw, nh, filter))),
            Pixels::Rgba(v) => {
                Pixels::Rgba(unpremultiply::<4>(resize8::<4>(&premultiply::<4>(v), w, h, nw, nh, filter)))
            }
        };
        Opened { width, height, pixels }
    }

    /// The `height` x `width` window whose top-left corner is at (`top`, `left`) of the image
    /// (negative where the window starts before it), in this mode: where it leaves the image,
    /// each band is `fill`, as `ImageOps.expand(image, border, fill)` pads before a crop (for 1,
    /// a non-zero fill is white; for P, `fill` is an index).
    pub(crate) fn window(&self, top: i64, left: i64, height: u32, width: u32, fill: u8) -> Opened {
        let g = Geometry {
            w: self.width as usize,
            h: self.height as usize,
            top,
            left,
            nw: width as usize,
            nh: height as usize,
        };
        let pixels = match &self.pixels {
            Pixels::Bilevel(v) => Pixels::Bilevel(g.window(v, [fill])),
            Pixels::L(v) => Pixels::L(g.window(v, [fill])),
            Pixels::La(v) => Pixels::La(g.window(v, [fill; 2])),
            Pixels::I16(v) => Pixels::I16(g.window(v, [u16::from(fill)])),
            Pixels::Rgb(v) => Pixels::Rgb(g.window(v, [fill; 3])),
            Pixels::Rgba(v) => Pixels::Rgba(g.window(v, [fill; 4])),
            Pixels::Cmyk(v) => Pixels::Cmyk(g.window(v, [fill; 4])),
            Pixels::P { rgb, palette } => {
                Pixels::P { rgb: g.window(rgb, palette[usize::from(fill)]), palette: palette.clone() }
            }
        };
        Opened { width, height, pixels }
    }
}

/// A window's place over an image: the source size, the window's corner and its size.
struct Geometry {
    w: usize,
    h: usize,
    top: i64,
    left: i64,
    nw: usize,
    nh: usize,
}

impl Geometry {
    /// `data` (`N` samples a pixel) seen through the window, `fill` outside the image.
    fn window<T: Copy, const N: usize>(&self, data: &[T], fill: [T; N]) -> Vec<T> {
        let mut out = fill.repeat(self.nw * self.nh);
        let (w, h) = (self.w as i64, self.h as i64);
        // The window's columns that fall inside the image.
        let x0 = (-self.left).clamp(0, self.nw as i64);
        let x1 = (w - self.left).clamp(0, self.nw as i64);
        if x0 >= x1 {
            return out;
        }
        let n = (x1 - x0) as usize * N;
        for (y, row) in out.chunks_exact_mut(self.nw * N).enumerate() {
            let sy = self.top + y as i64;
            if (0..h).contains(&sy) {
                let src = ((sy * w + self.left + x0) as usize) * N;
                let dst = x0 as usize * N;
                row[dst..dst + n].copy_from_slice(&data[src..src + n]);
            }
        }
        out
    }
}

/// `rgbA2rgba` / `lA2la`: each colour band times alpha / 255, rounded as MULDIV255.
fn premultiply<const N: usize>(mut data: Vec<u8>) -> Vec<u8> {
    for px in data.chunks_exact_mut(N) {
        let alpha = px[N - 1];
        for v in &mut px[..N - 1] {
            *v = muldiv255(i32::from(*v), i32::from(alpha)) as u8;
        }
    }
    data
}

/// `rgba2rgbA` / `la2lA`: each colour band times 255 / alpha, truncated and clipped, where
/// alpha is neither 0 nor 255 (those keep the band as it is).
fn unpremultiply<const N: usize>(mut data: Vec<u8>) -> Vec<u8> {
    for px in data.chunks_exact_mut(N) {
        let alpha = u32::from(px[N - 1]);
        if alpha != 0 && alpha != 255 {
            for v in &mut px[..N - 1] {
                *v = (255 * u32::from(*v) / alpha).min(255) as u8;
            }
        }
    }
    data
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

/// Convert.c's `I16_RGB`: a 16-bit value above 255 becomes 255, others keep their low byte.
pub(crate) fn clip16(v: u16) -> u8 {
    u8::try_from(v).unwrap_or(u8::MAX)
}

/// `cmyk2rgb`: with nk = 255 - K, each channel is nk - C * nk / 255 (rounded as MULDIV255),
/// clipped.
fn cmyk_to_rgb(cmyk: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(cmyk.len() / 4 * 3);
    for px in cmyk.chunks_exact(4) {
        let nk = 255 - i32::from(px[3]);
        for &v in &px[..3] {
            out.push((nk - muldiv255(i32::from(v), nk)).clamp(0, 255) as u8);
        }
    }
    out
}

/// libImaging's MULDIV255: a * b / 255, rounded, in integers.
fn muldiv255(a: i32, b: i32) -> i32 {
    let tmp = a * b + 128;
    ((tmp >> 8) + tmp) >> 8
}
