//! EVA02's vision tower as jina-clip builds it (jina's `eva_model.py`, from EVA-CLIP's
//! `eva_vit_model.py`): patches and a class token with absolute positions, pre-norm blocks whose
//! attention rotates the patches' queries and keys by their row and column
//! (`VisionRotaryEmbeddingFast`), with a norm before the output projection and SwiGLU with a norm
//! before its last layer (`subln`), then the final norm, the class token's row and its
//! projections.
//!
//! The rotary embedding turns adjacent pairs of a head's dimensions (`rotate_half` over
//! `(d r)`, r = 2). Attention scores do not change when the queries' and keys' dimensions are
//! reordered alike within each head, so the converter stores the query and key rows of each head
//! evens first, odds second, and the pairs become the two halves that [`Net::rotate`] turns.

use std::ops::Range;

use super::{Net, transpose};
use crate::ConvertError;
use crate::config::Activation;
use crate::config::dual::{Dual, Eva, EvaRotary};
use crate::graph::{Attr, FLOAT};

/// The rotary theta of `VisionRotaryEmbeddingFast` (`freqs_for='lang'`).
const THETA: f32 = 10_000.0;

impl Net<'_, '_> {
    /// The whole vision graph: `pixel_values` -> `image_embeds`.
    pub(super) fn eva_vision(&mut self, d: &Dual, eva: &Eva) -> Result<(), ConvertError> {
        let (c, n, image) = (self.c, d.names, d.image);
        let h = c.hidden;
        self.check_layer_count()?;
        let pixels = self.g.input(super::dual::PIXEL_VALUES, FLOAT, &["batch", "channels", "height", "width"]);
        let conv = self.p(n.patch_embedding);
        let p = image.patch;
        let kernel = self.t.get(&format!("{conv}.weight"), &[h, image.channels, p, p])?;
        let kernel = self.g.f32(&format!("{conv}.weight"), &[h, image.channels, p, p], kernel);
        let bias = self.t.get(&format!("{conv}.bias"), &[h])?;
        let bias = self.g.f32(&format!("{conv}.bias"), &[h], bias);
        let side = || Attr::Ints(vec![p as i64, p as i64]);
        let attrs = [("kernel_shape", side()), ("strides", side())];
        let patches = self.g.node("Conv", "", &[&pixels, &kernel, &bias], &attrs, None);
        let flat = self.g.i64("vision.flat_shape", &[3], &[0, h as i64, -1]);
        let patches = self.g.op("Reshape", &[&patches, &flat]);
        let patches = self.g.node("Transpose", "", &[&patches], &[("perm", Attr::Ints(vec![0, 2, 1]))], None);
        let class = self.p(n.class_embedding);
        let class = self.t.get(&class, &[1, 1, h])?;
        let class = self.g.f32("vision.class_token", &[1, 1, h], class);
        let class = self.repeat_per_row(&class, &patches, 3);
        let mut x = self.g.node("Concat", "", &[&class, &patches], &[("axis", Attr::Int(1))], None);
        let tokens = image.side() * image.side() + 1;
        let positions = self.p(n.position_embedding);
        let positions = self.t.get(&positions, &[1, tokens, h])?;
        let positions = self.g.f32("vision.positions", &[1, tokens, h], positions);
        x = self.g.op("Add", &[&x, &positions]);
        let rotary = eva.rotary.map(|r| self.eva_rotary_table(r, image.side()));
        for layer in 0..c.layers {
            x = self.eva_block(&x, eva, rotary.as_ref(), layer)?;
        }
        let class = self.row_at(&x, 0);
        let mut out = self.layer_norm(&class, &self.p(n.post_norm))?;
        let mut width = h;
        for projection in [eva.head, eva.projection].into_iter().flatten() {
            out = self.projected(&out, &projection, width)?;
            width = projection.outputs;
        }
        self.image_embeds(&out)
    }

    /// Block `i`: `x + gamma_1 · attention(norm1(x))`, then `x + gamma_2 · mlp(norm2(x))`.
    fn eva_block(
        &mut self,
        x: &str,
        eva: &Eva,
        rotary: Option<&(String, String)>,
        i: usize,
    ) -> Result<String, ConvertError> {
        let h = self.c.hidden;
        let l = self.layer_prefix(i);
        let normed = self.layer_norm(x, &format!("{l}.norm1"))?;
        let interleaved = rotary.is_some();
        let (mut q, mut k, v) = self.eva_qkv(&normed, &l, eva, interleaved)?;
        if let Some((cos, sin)) = rotary {
            q = self.rotate(&q, cos, sin, &l);
            k = self.rotate(&k, cos, sin, &l);
        }
        let no_bias = self.no_bias();
        let mut context = self.attend(&q, &k, &v, &no_bias, &l);
        if eva.sub_norms {
            context = self.layer_norm(&context, &format!("{l}.attn.inner_attn_ln"))?;
        }
        let mut a = self.linear(&context, &format!("{l}.attn.proj"), h, h)?;
        if eva.layer_scale {
            a = self.scaled_by(&a, &format!("{l}.gamma_1"))?;
        }
        let x = self.g.op("Add", &[x, &a]);
        let normed = self.layer_norm(&x, &format!("{l}.norm2"))?;
        let mut f = self.eva_mlp(&normed, &l, eva)?;
        if eva.layer_scale {
            f = self.scaled_by(&f, &format!("{l}.gamma_2"))?;
        }
        Ok(self.g.op("Add", &[&x, &f]))
    }

    /// The queries, keys and values: `q_proj`, `k_proj`, `v_proj` (with `subln`) or the rows of
    /// one `qkv`, the query and value with `q_bias` and `v_bias`, the key without a bias. With
    /// `interleaved`, the queries' and keys' dimensions are reordered (see the module's note).
    fn eva_qkv(
        &mut self,
        x: &str,
        l: &str,
        eva: &Eva,
        interleaved: bool,
    ) -> Result<(String, String, String), ConvertError> {
        let h = self.c.hidden;
        let bias = |name: &str| eva.qkv_bias.then(|| format!("{l}.attn.{name}"));
        let (q_bias, v_bias) = (bias("q_bias"), bias("v_bias"));
        let separate = self.t.has(&format!("{l}.attn.q_proj.weight"));
        let part = |name: &'static str, fused_rows: Range<usize>| match separate {
            true => (format!("{l}.attn.{name}"), h, 0..h),
            false => (format!("{l}.attn.qkv"), 3 * h, fused_rows),
        };
        let (wq, wk, wv) = (part("q_proj", 0..h), part("k_proj", h..2 * h), part("v_proj", 2 * h..3 * h));
        Ok((
            self.eva_projection(x, wq, q_bias.as_deref(), interleaved)?,
            self.eva_projection(x, wk, None, interleaved)?,
            self.eva_projection(x, wv, v_bias.as_deref(), false)?,
        ))
    }

    /// `x Wᵀ (+ b)` for rows `rows` of the weight `prefix` (`outputs` rows in all), each head's
    /// rows evens first where `interleaved`.
    fn eva_projection(
        &mut self,
        x: &str,
        (prefix, outputs, rows): (String, usize, Range<usize>),
        bias: Option<&str>,
        interleaved: bool,
    ) -> Result<String, ConvertError> {
        let (h, heads) = (self.c.hidden, self.c.heads);
        let name = self.t.weight_name(&prefix);
        let w = self.t.weights.f32_rows(&name, &[outputs, h], rows.clone())?;
        let order = row_order(h, heads, interleaved);
        let w: Vec<f32> = order.iter().flat_map(|&r| w[r * h..(r + 1) * h].iter().copied()).collect();
        let label = format!("{prefix}.weight_t_{}{}", rows.start, if interleaved { "_pairs_split" } else { "" });
        let w = self.g.weight(&label, &[h, h], transpose(&w, h, h));
        let y = self.g.op("MatMul", &[x, &w]);
        let Some(bias) = bias else { return Ok(y) };
        let b = self.t.get(bias, &[h])?;
        let b: Vec<f32> = order.iter().map(|&r| b[r]).collect();
        let b = self.g.f32(bias, &[h], b);
        Ok(self.g.op("Add", &[&y, &b]))
    }

    /// SwiGLU `w3(ffn_ln(silu(w1 x) · w2 x))` or `fc2(ffn_ln(gelu(fc1 x)))`, each layer with its
    /// bias, `ffn_ln` where the tower has sub-norms.
    fn eva_mlp(&mut self, x: &str, l: &str, eva: &Eva) -> Result<String, ConvertError> {
        let (h, inter) = (self.c.hidden, self.c.intermediate);
        let (mut y, down) = if eva.swiglu {
            let a = self.linear(x, &format!("{l}.mlp.w1"), h, inter)?;
            let b = self.linear(x, &format!("{l}.mlp.w2"), h, inter)?;
            let a = self.activation(&a, Activation::Silu);
            (self.g.op("Mul", &[&a, &b]), format!("{l}.mlp.w3"))
        } else {
            let a = self.linear(x, &format!("{l}.mlp.fc1"), h, inter)?;
            (self.activation(&a, Activation::Gelu), format!("{l}.mlp.fc2"))
        };
        if eva.sub_norms {
            y = self.layer_norm_of(&y, &format!("{l}.mlp.ffn_ln"), inter)?;
        }
        self.linear(&y, &down, inter, h)
    }

    /// `x` times the per-channel scale `name` (`[hidden]`).
    fn scaled_by(&mut self, x: &str, name: &str) -> Result<String, ConvertError> {
        let h = self.c.hidden;
        let gamma = self.t.get(name, &[h])?;
        let gamma = self.g.f32(name, &[h], gamma);
        Ok(self.g.op("Mul", &[x, &gamma]))
    }

    /// Cosines and sines `[1 + side², 1, head width]` for [`Net::rotate`]: the class token (row
    /// 0) unturned, patch `(i, j)` (row `1 + i · side + j`) turned by its row `i` in the first
    /// quarter of each half and its column `j` in the second, as `VisionRotaryEmbeddingFast`
    /// turns its pairs (computed in float32 as it does).
    fn eva_rotary_table(&mut self, rotary: EvaRotary, side: usize) -> (String, String) {
        let dim = self.c.hidden / self.c.heads;
        let angles = rotary_angles(rotary, side, dim);
        let rows = angles.len() / (dim / 2) + 1;
        let (mut cos, mut sin) = (vec![1.0f32; dim], vec![0.0f32; dim]);
        for row in angles.chunks_exact(dim / 2) {
            for _half in 0..2 {
                cos.extend(row.iter().map(|a| f64::from(*a).cos() as f32));
                sin.extend(row.iter().map(|a| f64::from(*a).sin() as f32));
            }
        }
        let cos = self.g.f32("vision.rotary_cos", &[rows, 1, dim], cos);
        let sin = self.g.f32("vision.rotary_sin", &[rows, 1, dim], sin);
        (cos, sin)
    }
}

/// Each patch's angles, `dim / 2` per patch in row-major order: the row's position times the
/// `dim / 4` frequencies, then the column's. Positions are `k / ft · pt` for `k < ft`, `pt` the
/// trained side and `ft` the image's (`intp_freq`) or the trained one.
fn rotary_angles(rotary: EvaRotary, side: usize, dim: usize) -> Vec<f32> {
    // VisionRotaryEmbeddingFast(dim = head width / 2): 1 / theta^(2m / dim) for m < dim / 2.
    let half = dim / 2;
    let freqs: Vec<f32> = (0..half / 2).map(|m| 1.0 / THETA.powf((2 * m) as f32 / half as f32)).collect();
    let trained = rotary.trained_side as f32;
    let ft = if rotary.interpolate { side } else { rotary.trained_side } as f32;
    let position = |k: usize| k as f32 / ft * trained;
    let mut angles = Vec::with_capacity(side * side * half);
    for i in 0..side {
        for j in 0..side {
            angles.extend(freqs.iter().map(|f| position(i) * f));
            angles.extend(freqs.iter().map(|f| position(j) * f));
        }
    }
    angles
}

/// The rows of a `[hidden, ...]` projection in the order stored: each head's own where not
/// `interleaved`, else its even dimensions then its odd ones.
fn row_order(hidden: usize, heads: usize, interleaved: bool) -> Vec<usize> {
    let dim = hidden / heads;
    (0..heads)
        .flat_map(|head| {
            (0..dim).map(move |j| match interleaved {
                false => head * dim + j,
                true if j < dim / 2 => head * dim + 2 * j,
                true => head * dim + 2 * (j - dim / 2) + 1,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interleaved turn of pairs `(2m, 2m + 1)` by angle `a[m]` equals the halves' turn of the
    /// reordered vector by the same angles, reordered back.
    #[test]
    fn reordered_halves_turn_as_interleaved_pairs() {
        let dim = 8;
        let x: Vec<f64> = (0..dim).map(|v| (v as f64 * 0.7).sin() + 0.3).collect();
        let angles: Vec<f64> = (0..dim / 2).map(|m| 0.4 + m as f64).collect();
        // rotate_half over (d r): out[2m] = x[2m] cos - x[2m+1] sin, out[2m+1] = x[2m+1] cos + x[2m] sin.
        let mut pairs = vec![0.0; dim];
        for m in 0..dim / 2 {
            let (c, s) = (angles[m].cos(), angles[m].sin());
            pairs[2 * m] = x[2 * m] * c - x[2 * m + 1] * s;
            pairs[2 * m + 1] = x[2 * m + 1] * c + x[2 * m] * s;
        }
        let order = row_order(dim, 1, true);
        let y: Vec<f64> = order.iter().map(|&r| x[r]).collect();
        let mut halves = vec![0.0; dim];
        for m in 0..dim / 2 {
            let (c, s) = (angles[m].cos(), angles[m].sin());
            halves[m] = y[m] * c - y[m + dim / 2] * s;
            halves[m + dim / 2] = y[m + dim / 2] * c + y[m] * s;
        }
        for (stored, &original) in order.iter().enumerate() {
            assert!((halves[stored] - pairs[original]).abs() < 1e-12);
        }
    }

    #[test]
    fn rows_and_columns_take_the_first_and_second_quarter() {
        let rotary = EvaRotary { trained_side: 4, interpolate: true };
        let (side, dim) = (2, 8);
        let a = rotary_angles(rotary, side, dim);
        assert_eq!(a.len(), side * side * dim / 2);
        // Patch (1, 0): row position 1 / 2 · 4 = 2 in the first quarter, column 0 in the second.
        let patch = &a[2 * 4..3 * 4];
        assert_eq!(patch, &[2.0, 2.0 * 0.01, 0.0, 0.0]);
    }
}
