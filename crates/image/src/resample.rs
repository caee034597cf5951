//! Pillow's `Image.resize` on 8-bit RGB, bit for bit: the separable convolution of
//! `libImaging/Resample.c` (filter support widened on downscale, weights normalised then turned
//! into 22-bit fixed point, each pass's result rounded and clipped to 8 bits, the horizontal
//! pass first unless Pillow 13 picks the vertical) and, for NEAREST, the affine scaling of
//! `Geometry.c`.

use crate::error::ImageError;
use crate::nearest;

/// Pillow's resampling filters, numbered as `PIL.Image.Resampling` numbers them (and as
/// `preprocessor_config.json` writes `resample`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resample {
    /// 0: the nearest pixel.
    Nearest,
    /// 1: Lanczos, a = 3.
    Lanczos,
    /// 2: triangle (bilinear).
    Bilinear,
    /// 3: Keys cubic, a = -0.5.
    Bicubic,
    /// 4: box.
    Box,
    /// 5: Hamming-windowed sinc.
    Hamming,
}

impl Resample {
    /// The filter Pillow numbers `code`, if any.
    pub fn from_pillow(code: u8) -> Option<Self> {
        Some(match code {
            0 => Self::Nearest,
            1 => Self::Lanczos,
            2 => Self::Bilinear,
            3 => Self::Bicubic,
            4 => Self::Box,
            5 => Self::Hamming,
            _ => return None,
        })
    }

    /// Pillow's name for it (`BICUBIC`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Nearest => "NEAREST",
            Self::Lanczos => "LANCZOS",
            Self::Bilinear => "BILINEAR",
            Self::Bicubic => "BICUBIC",
            Self::Box => "BOX",
            Self::Hamming => "HAMMING",
        }
    }

    /// The filter's support and its function, as Resample.c defines them.
    fn kernel(self) -> (f64, fn(f64) -> f64) {
        match self {
            Self::Box => (0.5, box_filter),
            Self::Bilinear => (1.0, bilinear_filter),
            Self::Hamming => (1.0, hamming_filter),
            Self::Bicubic => (2.0, bicubic_filter),
            // NEAREST never convolves; Lanczos is the widest and stands in.
            Self::Lanczos | Self::Nearest => (3.0, lanczos_filter),
        }
    }
}

/// `rgb` (`width * height` pixels, 3 bytes each, row after row) resized to `new_width` x
/// `new_height` exactly as Pillow 13's `Image.resize((new_width, new_height), filter)` resizes an
/// RGB image.
pub fn resize_rgb8(
    rgb: &[u8],
    width: u32,
    height: u32,
    new_width: u32,
    new_height: u32,
    filter: Resample,
) -> Result<Vec<u8>, ImageError> {
    let pixels = (width as usize).checked_mul(height as usize).and_then(|p| p.checked_mul(3));
    if width == 0 || height == 0 || pixels != Some(rgb.len()) {
        return Err(ImageError::BadPixels(format!("{} bytes for a {width}x{height} image", rgb.len())));
    }
    if new_width == 0 || new_height == 0 {
        return Err(ImageError::BadPixels(format!("cannot resize to {new_width}x{new_height}")));
    }
    let (w, h, nw, nh) = (width as usize, height as usize, new_width as usize, new_height as usize);
    if (w, h) == (nw, nh) {
        // Image.resize returns a copy when the size does not change.
        return Ok(rgb.to_vec());
    }
    if filter == Resample::Nearest {
        return Ok(nearest::resize(rgb, w, h, nw, nh));
    }
    let vertical = Weights::new(h, nh, filter);
    if nw == w {
        return Ok(vertical_pass(rgb, w, &vertical));
    }
    let horizontal = Weights::new(w, nw, filter);
    if nh == h {
        return Ok(horizontal_pass(rgb, w, &horizontal));
    }
    // Pillow 13 runs the vertical pass first when the height loses more than twice as many
    // pixels as the width (found by measuring 13.0.0; 12.x always went horizontal first).
    if nh < h && (h - nh) as i64 > 2 * (w as i64 - nw as i64) {
        let rows = vertical_pass(rgb, w, &vertical);
        return Ok(horizontal_pass(&rows, w, &horizontal));
    }
    // Only the rows the vertical pass reads are resampled (Pillow's row box; same result).
    let (first, last) = vertical.span();
    let rows = horizontal_pass(&rgb[first * w * 3..last * w * 3], w, &horizontal);
    Ok(vertical_pass(&rows, nw, &vertical.shifted(first)))
}

/// Bits after the fixed point: 32 - 8 - 2, leaving room for overshoot and the sign.
const PRECISION_BITS: u32 = 22;

/// Each output pixel's first input index, and its fixed-point weights.
struct Weights {
    starts: Vec<usize>,
    /// `starts.len()` runs, each `stride` long; a run's unused tail is zero.
    values: Vec<i32>,
    lens: Vec<usize>,
    stride: usize,
}

impl Weights {
    /// Resample.c's `precompute_coeffs` then `normalize_coeffs_8bpc`, for the box (0, in_size).
    fn new(in_size: usize, out_size: usize, filter: Resample) -> Self {
        let (base_support, f) = filter.kernel();
        // The box edges are C floats: (in1 - in0) is computed in single precision.
        let scale = f64::from(in_size as f32 - 0.0f32) / out_size as f64;
        let filterscale = if scale < 1.0 { 1.0 } else { scale };
        let support = base_support * filterscale;
        let stride = support.ceil() as usize * 2 + 1;
        let inv_filterscale = 1.0 / filterscale;
        let mut weights = Weights {
            starts: Vec::with_capacity(out_size),
            values: vec![0; out_size.saturating_mul(stride)],
            lens: Vec::with_capacity(out_size),
            stride,
        };
        let mut k = vec![0.0f64; stride];
        for xx in 0..out_size {
            let center = 0.0 + (xx as f64 + 0.5) * scale;
            // C's (int) cast truncates toward zero; negatives are clamped to 0 after.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64).max(0) as usize;
            let len = xmax.saturating_sub(xmin).min(stride);
            let mut total = 0.0;
            for (x, slot) in k[..len].iter_mut().enumerate() {
                let w = f((((x + xmin) as f64 - center) + 0.5) * inv_filterscale);
                *slot = w;
                total += w;
            }
            let run = &mut weights.values[xx * stride..xx * stride + len];
            for (out, &w) in run.iter_mut().zip(&k[..len]) {
                let w = if total != 0.0 { w / total } else { w };
                let fixed = w * f64::from(1u32 << PRECISION_BITS);
                *out = if w < 0.0 { (-0.5 + fixed) as i32 } else { (0.5 + fixed) as i32 };
            }
            weights.starts.push(xmin);
            weights.lens.push(len);
        }
        weights
    }

    /// The input rows `[first, last)` that any output reads.
    fn span(&self) -> (usize, usize) {
        let first = self.starts.first().copied().unwrap_or(0);
        let last = self.starts.iter().zip(&self.lens).map(|(s, l)| s + l).max().unwrap_or(first);
        (first, last)
    }

    /// The same weights with every start moved back by `by` rows.
    fn shifted(mut self, by: usize) -> Self {
        self.starts.iter_mut().for_each(|s| *s -= by);
        self
    }

    /// The output `i`'s first input index and its weights.
    fn run(&self, i: usize) -> (usize, &[i32]) {
        let at = i * self.stride;
        (self.starts[i], &self.values[at..at + self.lens[i]])
    }
}

/// An accumulated sum back to 8 bits: drop the fraction (rounding was added up front), clip.
#[inline]
fn clip8(sum: i32) -> u8 {
    (sum >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Half of one in fixed point: the rounding every sum starts from.
const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// Each row of `rows` (`width` RGB pixels) resampled along x.
fn horizontal_pass(rows: &[u8], width: usize, weights: &Weights) -> Vec<u8> {
    let out_width = weights.starts.len();
    let mut out = vec![0u8; rows.len() / (width * 3) * out_width * 3];
    for (line, line_out) in rows.chunks_exact(width * 3).zip(out.chunks_exact_mut(out_width * 3)) {
        for (xx, px) in line_out.chunks_exact_mut(3).enumerate() {
            let (start, k) = weights.run(xx);
            let (mut r, mut g, mut b) = (HALF, HALF, HALF);
            for (src, &w) in line.get(start * 3..).unwrap_or_default().chunks_exact(3).zip(k) {
                r = r.wrapping_add(i32::from(src[0]).wrapping_mul(w));
                g = g.wrapping_add(i32::from(src[1]).wrapping_mul(w));
                b = b.wrapping_add(i32::from(src[2]).wrapping_mul(w));
            }
            px.copy_from_slice(&[clip8(r), clip8(g), clip8(b)]);
        }
    }
    out
}

/// `rows` (`width` RGB pixels each) resampled along y. Integer sums, so summing a whole row per
/// weight gives the same values as Pillow's pixel-by-pixel loop.
fn vertical_pass(rows: &[u8], width: usize, weights: &Weights) -> Vec<u8> {
    let line = width * 3;
    let out_height = weights.starts.len();
    let mut out = vec![0u8; out_height * line];
    let mut sums = vec![0i32; line];
    for (yy, line_out) in out.chunks_exact_mut(line).enumerate() {
        let (start, k) = weights.run(yy);
        sums.fill(HALF);
        for (y, &w) in k.iter().enumerate() {
            let src = &rows[(start + y) * line..(start + y + 1) * line];
            for (sum, &v) in sums.iter_mut().zip(src) {
                *sum = sum.wrapping_add(i32::from(v).wrapping_mul(w));
            }
        }
        for (o, &s) in line_out.iter_mut().zip(&sums) {
            *o = clip8(s);
        }
    }
    out
}

fn box_filter(x: f64) -> f64 {
    if x > -0.5 && x <= 0.5 { 1.0 } else { 0.0 }
}

fn bilinear_filter(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 { 1.0 - x } else { 0.0 }
}

fn hamming_filter(x: f64) -> f64 {
    let x = x.abs();
    if x == 0.0 {
        return 1.0;
    }
    if x >= 1.0 {
        return 0.0;
    }
    let x = x * std::f64::consts::PI;
    // Resample.c writes the window's constants as C floats: 0.54f and 0.46f.
    x.sin() / x * (f64::from(0.54f32) + f64::from(0.46f32) * x.cos())
}

fn bicubic_filter(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        return ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    }
    if x < 2.0 {
        return (((x - 5.0) * x + 8.0) * x - 4.0) * A;
    }
    0.0
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    let x = x * std::f64::consts::PI;
    x.sin() / x
}

fn lanczos_filter(x: f64) -> f64 {
    if (-3.0..3.0).contains(&x) { sinc(x) * sinc(x / 3.0) } else { 0.0 }
}
