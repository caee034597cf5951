//! What attention adds to its scores and how queries and keys learn where they are: the padding
//! mask, ALiBi's per-head distance bias, ModernBERT's sliding window, and rotary tables.

use super::alibi::{AlibiSlopes, alibi_slopes};
use super::{ATTENTION_MASK, INPUT_IDS, Net};
use crate::config::{Positions, RopeScaling};
use crate::graph::{Attr, FLOAT};

/// Bool, as ONNX numbers its element types.
const BOOL: i32 = 9;

/// What a layer's attention adds to its scores.
pub(crate) enum Bias {
    /// The padding mask alone, in a fused graph: nornir's `Attention` operator (`padded.rs`),
    /// which reads the attention mask itself.
    Padding,
    /// A bias at the shape attention takes it (ALiBi's, a window, or the padding mask of the
    /// plain graph, which broadcasts).
    Full(String),
    /// ModernBERT's sliding window of this many tokens in a fused graph: nornir's
    /// `WindowAttention` operator (`window.rs`).
    Window(usize),
    /// ALiBi in a fused graph: blocks of queries, each with its slice of the bias (`alibi.rs`).
    Alibi(AlibiSlopes),
}

/// The additive biases and rotary tables every layer shares.
pub(crate) struct Masks {
    /// Added to every global layer's scores: the padding mask (with ALiBi's bias).
    pub(crate) global: Bias,
    /// ModernBERT's local layers: the padding mask and the window.
    pub(crate) local: Option<Bias>,
    /// Rotary cosines and sines `[sequence, 1, head width]`, for the global layers and for
    /// ModernBERT's local ones (their own base).
    pub(crate) rotary: Option<(String, String)>,
    pub(crate) local_rotary: Option<(String, String)>,
}

impl Net<'_, '_> {
    /// Every mask and table the layers read.
    pub(super) fn masks(&mut self) -> Masks {
        let c = self.c;
        let global = match c.positions {
            Positions::Alibi if self.fused => Bias::Alibi(self.alibi_blocks()),
            Positions::Alibi => {
                let (padding, alibi) = (self.padding_bias(), self.alibi());
                Bias::Full(self.g.op("Add", &[&padding, &alibi]))
            }
            _ if self.fused => Bias::Padding,
            _ => Bias::Full(self.padding_bias()),
        };
        let local = c.local.as_ref().map(|l| l.window).map(|window| match self.fused {
            true => Bias::Window(window),
            false => Bias::Full(self.window_bias(window)),
        });
        let rotary = match c.positions {
            Positions::Rotary { base, scaling } => Some(self.rotary_table(base, scaling, "rope")),
            _ => None,
        };
        let local_rotary =
            c.local.as_ref().map(|l| l.base).map(|base| self.rotary_table(base, RopeScaling::None, "local_rope"));
        Masks { global, local, rotary, local_rotary }
    }

    /// The sequence length as an int64 scalar, written once and shared.
    pub(super) fn sequence_length(&mut self) -> String {
        if self.g.has_value("sequence_length") {
            return "sequence_length".to_owned();
        }
        let shape = self.g.op("Shape", &[INPUT_IDS]);
        let one = self.g.i64("sequence_axis", &[], &[1]);
        self.g.node("Gather", "", &[&shape, &one], &[("axis", Attr::Int(0))], Some("sequence_length"))
    }

    /// Positions `0..sequence` as int64 `[sequence]`.
    pub(super) fn position_range(&mut self) -> String {
        if self.g.has_value("position_range") {
            return "position_range".to_owned();
        }
        let len = self.sequence_length();
        let zero = self.g.i64("range_start", &[], &[0]);
        let step = self.g.i64("range_step", &[], &[1]);
        self.g.node("Range", "", &[&zero, &len, &step], &[], Some("position_range"))
    }

    /// `|i - j|` for every query `i` and key `j`, `[sequence, sequence]` int64.
    fn distances(&mut self) -> String {
        let r = self.position_range();
        let (rows, cols) = (self.g.i64("distance_rows", &[1], &[1]), self.g.i64("distance_cols", &[1], &[0]));
        let i = self.g.op("Unsqueeze", &[&r, &rows]);
        let j = self.g.op("Unsqueeze", &[&r, &cols]);
        let d = self.g.op("Sub", &[&i, &j]);
        self.g.op("Abs", &[&d])
    }

    /// The padding mask `[batch, 1, 1, keys]`: 0 where attended, the float minimum elsewhere,
    /// as transformers adds it.
    pub(super) fn padding_bias(&mut self) -> String {
        super::padded::padding_bias(self.g, ATTENTION_MASK)
    }

    /// Whether no row of the batch is padded (every attention mask value 1), a bool scalar.
    pub(super) fn unpadded(&mut self) -> String {
        super::padded::unpadded(self.g, ATTENTION_MASK)
    }

    /// ALiBi's bias `[1, heads, queries, keys]`: `-slope(head) * |i - j|`.
    fn alibi(&mut self) -> String {
        let heads = self.c.heads;
        let slopes: Vec<f32> = alibi_slopes(heads).into_iter().map(|s| -s as f32).collect();
        let slopes = self.g.f32("alibi_negative_slopes", &[heads, 1, 1], slopes);
        let d = self.distances();
        let d = self.g.node("Cast", "", &[&d], &[("to", Attr::Int(FLOAT.into()))], None);
        let bias = self.g.op("Mul", &[&slopes, &d]);
        let zero = self.g.i64("alibi_batch_axis", &[1], &[0]);
        self.g.op("Unsqueeze", &[&bias, &zero])
    }

    /// ModernBERT's local attention `[batch, 1, queries, keys]`: keys that are not padding and
    /// within `window / 2` of the query get 0, every other the float minimum.
    fn window_bias(&mut self, window: usize) -> String {
        let d = self.distances();
        let half = self.g.i64("window_half", &[], &[(window / 2) as i64]);
        let inside = self.g.op("LessOrEqual", &[&d, &half]);
        let valid = self.g.node("Cast", "", &[ATTENTION_MASK], &[("to", Attr::Int(BOOL.into()))], None);
        let axes = self.g.i64("window_mask_axes", &[2], &[1, 2]);
        let valid = self.g.op("Unsqueeze", &[&valid, &axes]);
        let allowed = self.g.op("And", &[&valid, &inside]);
        let zero = self.scalar("window_zero", 0.0);
        let min = self.scalar("window_min", f32::MIN);
        self.g.op("Where", &[&allowed, &zero, &min])
    }

    /// Rotary cosines and sines `[sequence, 1, head width]` for `base`: rows of tables computed
    /// here in float64 for every position the model takes, and for NomicBERT's dynamic scaling,
    /// computed in the graph (float32, as its published code does) where the batch is longer
    /// than it was trained on.
    fn rotary_table(&mut self, base: f64, scaling: RopeScaling, name: &str) -> (String, String) {
        let c = self.c;
        let dim = c.hidden / c.heads;
        let half = dim / 2;
        let inv_freq = inverse_frequencies(base, scaling, dim);
        let rows = c.max_positions;
        let (mut cos, mut sin) = (Vec::with_capacity(rows * dim), Vec::with_capacity(rows * dim));
        for p in 0..rows {
            for j in 0..dim {
                let angle = p as f64 * inv_freq[j % half];
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let cos = self.g.f32(&format!("{name}_cos_table"), &[rows, dim], cos);
        let sin = self.g.f32(&format!("{name}_sin_table"), &[rows, dim], sin);
        let len = self.sequence_length();
        let zero = self.g.i64(&format!("{name}_start"), &[1], &[0]);
        let axis = self.g.i64(&format!("{name}_axis"), &[1], &[0]);
        let one = self.g.i64(&format!("{name}_unsqueeze"), &[1], &[1]);
        let end = self.g.op("Unsqueeze", &[&len, &axis]);
        let mut tables = [cos, sin].map(|t| self.g.op("Slice", &[&t, &zero, &end, &axis]));
        if let RopeScaling::DynamicNtk { factor, trained } = scaling {
            let dynamic = self.dynamic_ntk_angles(base, factor, trained, name);
            let trained = self.g.i64(&format!("{name}_trained"), &[], &[trained as i64]);
            let longer = self.g.op("Greater", &[&len, &trained]);
            let [dyn_cos, dyn_sin] = [self.g.op("Cos", &[&dynamic]), self.g.op("Sin", &[&dynamic])];
            tables = [
                self.g.op("Where", &[&longer, &dyn_cos, &tables[0]]),
                self.g.op("Where", &[&longer, &dyn_sin, &tables[1]]),
            ];
        }
        let [cos, sin] = tables.map(|t| self.g.op("Unsqueeze", &[&t, &one]));
        (cos, sin)
    }

    /// NomicBERT's angles `[sequence, head width]` for a batch of `length` tokens:
    /// `base' = base * (factor * length / trained - (factor - 1))^(dim / (dim - 2))`.
    fn dynamic_ntk_angles(&mut self, base: f64, factor: f64, trained: usize, name: &str) -> String {
        let dim = self.c.hidden / self.c.heads;
        let len = self.sequence_length();
        let len = self.g.node("Cast", "", &[&len], &[("to", Attr::Int(FLOAT.into()))], None);
        let slope = self.scalar(&format!("{name}_ntk_slope"), (factor / trained as f64) as f32);
        let offset = self.scalar(&format!("{name}_ntk_offset"), (factor - 1.0) as f32);
        let one = self.scalar(&format!("{name}_ntk_one"), 1.0);
        let ratio = self.g.op("Mul", &[&len, &slope]);
        let ratio = self.g.op("Sub", &[&ratio, &offset]);
        let ratio = self.g.op("Max", &[&ratio, &one]);
        let log_ratio = self.g.op("Log", &[&ratio]);
        let power = self.scalar(&format!("{name}_ntk_power"), (dim as f64 / (dim as f64 - 2.0)) as f32);
        let log_base = self.scalar(&format!("{name}_ntk_log_base"), base.ln() as f32);
        let log_scaled = self.g.op("Mul", &[&log_ratio, &power]);
        let log_scaled = self.g.op("Add", &[&log_scaled, &log_base]);
        // inv_freq = exp(-(2i/dim) * ln base'), each frequency twice (both halves).
        let exponents: Vec<f32> = (0..dim).map(|j| -((2 * (j % (dim / 2))) as f64 / dim as f64) as f32).collect();
        let exponents = self.g.f32(&format!("{name}_ntk_exponents"), &[1, dim], exponents);
        let scaled = self.g.op("Mul", &[&exponents, &log_scaled]);
        let inv_freq = self.g.op("Exp", &[&scaled]);
        let r = self.position_range();
        let r = self.g.node("Cast", "", &[&r], &[("to", Attr::Int(FLOAT.into()))], None);
        let axis = self.g.i64(&format!("{name}_ntk_axis"), &[1], &[1]);
        let r = self.g.op("Unsqueeze", &[&r, &axis]);
        self.g.op("Mul", &[&r, &inv_freq])
    }

    /// Rotary positions on `x` `[batch, sequence, hidden]`: each head's halves `(a, b)` become
    /// `(a cos - b sin, b cos + a sin)`.
    pub(super) fn rotate(&mut self, x: &str, cos: &str, sin: &str, l: &str) -> String {
        let (h, heads) = (self.c.hidden, self.c.heads);
        let dim = h / heads;
        let split = self.g.i64(&format!("{l}.rotary_heads_shape"), &[4], &[0, 0, heads as i64, dim as i64]);
        let y = self.g.op("Reshape", &[x, &split]);
        let axis = self.g.i64(&format!("{l}.rotary_axis"), &[1], &[3]);
        let (zero, mid, end) = (
            self.g.i64(&format!("{l}.rotary_zero"), &[1], &[0]),
            self.g.i64(&format!("{l}.rotary_mid"), &[1], &[(dim / 2) as i64]),
            self.g.i64(&format!("{l}.rotary_end"), &[1], &[dim as i64]),
        );
        let a = self.g.op("Slice", &[&y, &zero, &mid, &axis]);
        let b = self.g.op("Slice", &[&y, &mid, &end, &axis]);
        let minus_b = self.g.op("Neg", &[&b]);
        let rotated = self.g.node("Concat", "", &[&minus_b, &a], &[("axis", Attr::Int(3))], None);
        let y_cos = self.g.op("Mul", &[&y, cos]);
        let r_sin = self.g.op("Mul", &[&rotated, sin]);
        let out = self.g.op("Add", &[&y_cos, &r_sin]);
        let merge = self.g.i64(&format!("{l}.rotary_merge_shape"), &[3], &[0, 0, h as i64]);
        self.g.op("Reshape", &[&out, &merge])
    }
}

/// Rotary frequencies `base^(-2i / dim)` for `i < dim / 2`, in float64, with a static scaling
/// applied as transformers' `modeling_rope_utils.py` does (NomicBERT's dynamic scaling is applied
/// in the graph).
pub(crate) fn inverse_frequencies(base: f64, scaling: RopeScaling, dim: usize) -> Vec<f64> {
    (0..dim / 2)
        .map(|i| {
            let exponent = (2 * i) as f64 / dim as f64;
            let f = base.powf(-exponent);
            match scaling {
                RopeScaling::Ntk { factor } => (base * factor).powf(-exponent) / factor.powf(2.0 / dim as f64),
                RopeScaling::None | RopeScaling::DynamicNtk { .. } => f,
                RopeScaling::Linear { factor } => f / factor,
                RopeScaling::Llama3 { factor, low, high, original } => {
                    let wavelength = 2.0 * std::f64::consts::PI / f;
                    if wavelength < original / high {
                        f
                    } else if wavelength > original / low {
                        f / factor
                    } else {
                        let smooth = (original / wavelength - low) / (high - low);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::inverse_frequencies;
    use crate::config::RopeScaling;

    #[test]
    fn rotary_frequencies_follow_transformers_scalings() {
        let plain = inverse_frequencies(10_000.0, RopeScaling::None, 8);
        assert_eq!(plain, vec![1.0, 10_000f64.powf(-0.25), 0.01, 10_000f64.powf(-0.75)]);
        let linear = inverse_frequencies(10_000.0, RopeScaling::Linear { factor: 4.0 }, 8);
        assert!(linear.iter().zip(&plain).all(|(l, p)| (l * 4.0 - p).abs() < 1e-15));
        // Llama 3.1's numbers: factor 8, low 1, high 4, 8192 original positions. Wavelengths under
        // 2048 are kept, over 8192 divided by 8, between interpolated.
        let llama3 = RopeScaling::Llama3 { factor: 8.0, low: 1.0, high: 4.0, original: 8192.0 };
        let (dim, base) = (128, 500_000.0);
        let scaled = inverse_frequencies(base, llama3, dim);
        for (f, p) in scaled.iter().zip(inverse_frequencies(base, RopeScaling::None, dim)) {
            let wavelength = 2.0 * std::f64::consts::PI / p;
            if wavelength < 2048.0 {
                assert_eq!(*f, p);
            } else if wavelength > 8192.0 {
                assert!((f * 8.0 - p).abs() < 1e-18);
            } else {
                let smooth = (8192.0 / wavelength - 1.0) / 3.0;
                assert!((f - ((1.0 - smooth) * p / 8.0 + smooth * p)).abs() < 1e-18);
                assert!(*f < p && *f > p / 8.0);
            }
        }
    }
}
