//! A constant weight as the graph stores it (float32, or int8 with scales) and its int8 form.

use crate::Granularity;

/// Where the scale of a stored int8 weight applies.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum ScaleAxis {
    Tensor,
    /// One per column (output feature) of a `[K, N]` weight.
    Column,
    /// One per row.
    Row,
}

/// A constant weight as the graph stores it.
pub(crate) enum Stored {
    F32(Vec<f32>),
    Int8 { q: Vec<i32>, signed: bool, zero_point: Option<Vec<i32>>, scale: Vec<f32>, axis: ScaleAxis },
}

pub(crate) struct Constant {
    pub(crate) dims: [usize; 2],
    pub(crate) stored: Stored,
    pub(crate) source: &'static str,
    /// The name a new int8 initializer is derived from: the int8 initializer itself, where the
    /// weight is stored as int8.
    pub(crate) base: String,
    /// The initializer holding the scales, where the weight is stored as int8.
    pub(crate) scale_name: Option<String>,
    /// Nodes that computed it, dead once nothing else reads them.
    pub(crate) chain: Vec<usize>,
}

/// An int8 weight ready for the int8 operator, `[K, N]` row-major.
pub(crate) struct Int8Weight {
    pub(crate) q: Vec<i8>,
    pub(crate) scale: Vec<f32>,
    pub(crate) reused: bool,
}

impl Constant {
    /// Dequantized values, `[rows, cols]` as stored.
    pub(crate) fn values(&self) -> Vec<f32> {
        match &self.stored {
            Stored::F32(v) => v.clone(),
            Stored::Int8 { q, zero_point, scale, axis, .. } => {
                let cols = self.dims[1];
                q.iter()
                    .enumerate()
                    .map(|(idx, &v)| {
                        let k = match axis {
                            ScaleAxis::Tensor => 0,
                            ScaleAxis::Column => idx % cols,
                            ScaleAxis::Row => idx / cols,
                        };
                        let zp = zero_point.as_ref().map_or(0, |z| z[k.min(z.len() - 1)]);
                        (v - zp) as f32 * scale[k.min(scale.len() - 1)]
                    })
                    .collect()
            }
        }
    }

    /// The weight as `[K, N]` int8 with its scales; `transposed` when the graph stores `[N, K]`;
    /// `smooth`: row `i` multiplied by `smooth[i]` first.
    pub(crate) fn to_int8(&self, granularity: Granularity, transposed: bool, smooth: Option<&[f32]>) -> Int8Weight {
        if let Stored::Int8 { q, signed: true, zero_point, scale, axis } = &self.stored
            && !transposed
            && smooth.is_none()
            && zero_point.as_ref().is_none_or(|z| z.iter().all(|&v| v == 0))
            && (*axis == ScaleAxis::Tensor || (*axis == ScaleAxis::Column && granularity == Granularity::PerChannel))
        {
            return Int8Weight { q: q.iter().map(|&v| v as i8).collect(), scale: scale.clone(), reused: true };
        }
        let [rows, cols] = self.dims;
        let stored = self.values();
        let (k, n) = if transposed { (cols, rows) } else { (rows, cols) };
        let mut w: Vec<f32> =
            if transposed { (0..k * n).map(|idx| stored[(idx % n) * cols + idx / n]).collect() } else { stored };
        if let Some(factors) = smooth {
            w.iter_mut().enumerate().for_each(|(idx, v)| *v *= factors[idx / n]);
        }
        let step = |max: f32| if max > 0.0 && max.is_finite() { max / 127.0 } else { 1.0 };
        let scale: Vec<f32> = match granularity {
            Granularity::PerTensor => vec![step(w.iter().fold(0.0f32, |m, v| m.max(v.abs())))],
            Granularity::PerChannel => {
                (0..n).map(|j| step((0..k).fold(0.0f32, |m, i| m.max(w[i * n + j].abs())))).collect()
            }
        };
        let q = w
            .iter()
            .enumerate()
            .map(|(idx, v)| (v / scale[if scale.len() == 1 { 0 } else { idx % n }]).round().clamp(-127.0, 127.0) as i8)
            .collect();
        Int8Weight { q, scale, reused: false }
    }
}
