//! Pillow's `Image.resize`, bit for bit, on 8-bit images of 1 to 4 bands (RGB first among them)
//! and on 16-bit gray (I;16): the separable convolution of `libImaging/Resample.c` (filter
//! support widened on downscale, weights normalised, then for 8 bits turned into 22-bit fixed
//! point; each pass's result rounded and clipped to the sample's bits, the horizontal pass first
//! unless Pillow 13 picks the vertical) and, for NEAREST, the affine scaling of `Geometry.c`.

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
    Ok(resize8::<3>(rgb, w, h, nw, nh, filter))
}

/// `data` (`w` x `h` pixels of `N` 8-bit bands, interleaved) resized to `nw` x `nh` as Pillow
/// resizes an 8-bit image of `N` bands (L, LA's premultiplied La, RGB, RGBA's RGBa, CMYK): every
/// band through the same weights, each on its own. The sizes are the caller's to check: none is
/// zero and `data` holds `w * h * N` bytes.
pub(crate) fn resize8<const N: usize>(
    data: &[u8],
    w: usize,
    h: usize,
    nw: usize,
    nh: usize,
    filter: Resample,
) -> Vec<u8> {
    if (w, h) == (nw, nh) {
        // Image.resize returns a copy when the size does not change.
        return data.to_vec();
    }
    if filter == Resample::Nearest {
        return nearest::resize::<u8, N>(data, w, h, nw, nh, [0; N]);
    }
    let vertical = Weights::new(h, nh, filter).fixed();
    if nw == w {
        return vertical_pass8(data, w * N, &vertical);
    }
    let horizontal = Weights::new(w, nw, filter).fixed();
    if nh == h {
        return horizontal_pass8::<N>(data, w, &horizontal);
    }
    if vertical_first(w, h, nw, nh) {
        let rows = vertical_pass8(data, w * N, &vertical);
        return horizontal_pass8::<N>(&rows, w, &horizontal);
    }
    // Only the rows the vertical pass reads are resampled (Pillow's row box; same result).
    let (first, last) = vertical.span();
    let rows = horizontal_pass8::<N>(&data[first * w * N..last * w * N], w, &horizontal);
    vertical_pass8(&rows, nw * N, &vertical.shifted(first))
}

/// 16-bit gray (Pillow's I;16) resized as Pillow's `_16bpc` passes resize it: the weights kept
/// as doubles, each pass's sum rounded half up and clipped to 0..=65535. Sizes as [`resize8`].
pub(crate) fn resize16(data: &[u16], w: usize, h: usize, nw: usize, nh: usize, filter: Resample) -> Vec<u16> {
    if (w, h) == (nw, nh) {
        return data.to_vec();
    }
    if filter == Resample::Nearest {
        return nearest::resize::<u16, 1>(data, w, h, nw, nh, [0]);
    }
    let vertical = Weights::new(h, nh, filter);
    if nw == w {
        return vertical_pass16(data, w, &vertical);
    }
    let horizontal = Weights::new(w, nw, filter);
    if nh == h {
        return horizontal_pass16(data, w, &horizontal);
    }
    if vertical_first(w, h, nw, nh) {
        let rows = vertical_pass16(data, w, &vertical);
        return horizontal_pass16(&rows, w, &horizontal);
    }
    let (first, last) = vertical.span();
    let rows = horizontal_pass16(&data[first * w..last * w], w, &horizontal);
    vertical_pass16(&rows, nw, &vertical.shifted(first))
}

/// Pillow 13 runs the vertical pass first when the height loses more than twice as many pixels
/// as the width (found by measuring 13.0.0; 12.x always went horizontal first).
fn vertical_first(w: usize, h: usize, nw: usize, nh: usize) -> bool {
    nh < h && (h - nh) as i64 > 2 * (w as i64 - nw as i64)
}

/// Bits after the fixed point: 32 - 8 - 2, leaving room for overshoot and the sign.
const PRECISION_BITS: u32 = 22;

/// Each output pixel's first input index, and its weights (doubles, or 8-bit's fixed point).
struct Weights<T> {
    starts: Vec<usize>,
    /// `starts.len()` runs, each `stride` long; a run's unused tail is zero.
    values: Vec<T>,
    lens: Vec<usize>,
    stride: usize,
}

impl Weights<f64> {
    /// Resample.c's `precompute_coeffs` for the box (0, in_size): each run normalised to sum 1.
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
            values: vec![0.0; out_size.saturating_mul(stride)],
            lens: Vec::with_capacity(out_size),
            stride,
        };
        for xx in 0..out_size {
            let center = 0.0 + (xx as f64 + 0.5) * scale;
            // C's (int) cast truncates toward zero; negatives are clamped to 0 after.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64).max(0) as usize;
            let len = xmax.saturating_sub(xmin).min(stride);
            let run = &mut weights.values[xx * stride..xx * stride + len];
            let mut total = 0.0;
            for (x, slot) in run.iter_mut().enumerate() {
                let w = f((((x + xmin) as f64 - center) + 0.5) * inv_filterscale);
                *slot = w;
                total += w;
            }
            if total != 0.0 {
                run.iter_mut().for_each(|w| *w /= total);
            }
            weights.starts.push(xmin);
            weights.lens.push(len);
        }
        weights
    }

    /// `normalize_coeffs_8bpc`: the weights in 22-bit fixed point, rounded half away from zero.
    fn fixed(self) -> Weights<i32> {
        let scale = f64::from(1u32 << PRECISION_BITS);
        let values = self
            .values
            .iter()
            .map(|&w| if w < 0.0 { (-0.5 + w * scale) as i32 } else { (0.5 + w * scale) as i32 })
            .collect();
        Weights { starts: self.starts, values, lens: self.lens, stride: self.stride }
    }
}

impl<T> Weights<T> {
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
    fn run(&self, i: usize) -> (usize, &[T]) {
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

/// Each row of `rows` (`width` pixels of `N` bands) resampled along x.
fn horizontal_pass8<const N: usize>(rows: &[u8], width: usize, weights: &Weights<i32>) -> Vec<u8> {
    let out_width = weights.starts.len();
    let mut out = vec![0u8; rows.len() / (width * N) * out_width * N];
    for (line, line_out) in rows.chunks_exact(width * N).zip(out.chunks_exact_mut(out_width * N)) {
        for (xx, px) in line_out.chunks_exact_mut(N).enumerate() {
            let (start, k) = weights.run(xx);
            let mut sums = [HALF; N];
            for (src, &w) in line.get(start * N..).unwrap_or_default().chunks_exact(N).zip(k) {
                for (sum, &v) in sums.iter_mut().zip(src) {
                    *sum = sum.wrapping_add(i32::from(v).wrapping_mul(w));
                }
            }
            for (o, &s) in px.iter_mut().zip(&sums) {
                *o = clip8(s);
            }
        }
    }
    out
}

/// `rows` (`line` bytes each, whatever the bands) resampled along y. Integer sums, so summing a
/// whole row per weight gives the same values as Pillow's pixel-by-pixel loop.
fn vertical_pass8(rows: &[u8], line: usize, weights: &Weights<i32>) -> Vec<u8> {
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

/// Resample.c's `ROUND_UP` then `CLIP16`: half away from zero, truncated, clipped to 16 bits.
#[inline]
fn clip16(sum: f64) -> u16 {
    let rounded = if sum >= 0.0 { (sum + 0.5) as i32 } else { (sum - 0.5) as i32 };
    rounded.clamp(0, 65535) as u16
}

/// Each row of 16-bit gray resampled along x, summed in doubles in Pillow's order.
fn horizontal_pass16(rows: &[u16], width: usize, weights: &Weights<f64>) -> Vec<u16> {
    let out_width = weights.starts.len();
    let mut out = vec![0u16; rows.len() / width * out_width];
    for (line, line_out) in rows.chunks_exact(width).zip(out.chunks_exact_mut(out_width)) {
        for (xx, o) in line_out.iter_mut().enumerate() {
            let (start, k) = weights.run(xx);
            let mut sum = 0.0;
            for (&v, &w) in line.get(start..).unwrap_or_default().iter().zip(k) {
                sum += f64::from(v) * w;
            }
            *o = clip16(sum);
        }
    }
    out
}

/// 16-bit gray resampled along y; each pixel's sum runs over the rows in order, as Pillow's does.
fn vertical_pass16(rows: &[u16], width: usize, weights: &Weights<f64>) -> Vec<u16> {
    let out_height = weights.starts.len();
    let mut out = vec![0u16; out_height * width];
    let mut sums = vec![0f64; width];
    for (yy, line_out) in out.chunks_exact_mut(width).enumerate() {
        let (start, k) = weights.run(yy);
        sums.fill(0.0);
        for (y, &w) in k.iter().enumerate() {
            let src = &rows[(start + y) * width..(start + y + 1) * width];
            for (sum, &v) in sums.iter_mut().zip(src) {
                *sum += f64::from(v) * w;
            }
        }
        for (o, &s) in line_out.iter_mut().zip(&sums) {
            *o = clip16(s);
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
