//! The networks as ONNX nodes, written from the published definitions of each family
//! (transformers' `modeling_bert.py`, `modeling_xlm_roberta.py`, `modeling_modernbert.py`, the
//! decoders', and the model repositories' own modeling code for JinaBERT v2, jina-embeddings-v3,
//! NomicBERT and GTE's `NewModel`), but reading only the family-neutral description in
//! [`Config`] and the tensor names in [`Names`], never a family's name. This file holds the blocks
//! they share (linear layers, norms, activations, attention, the gated feed-forward);
//! `post_norm.rs` the embeddings and the post-norm layers, `pre_norm.rs` the pre-norm one,
//! `positions.rs` ALiBi, rotary tables and masks (`padded.rs`, `window.rs` and `alibi.rs` the
//! fused graph's attention as nornir's operators), `heads.rs` the masked-LM and classification heads, `decoder.rs` the
//! causal decoders and their yes/no reranker head.

mod alibi;
mod causal;
mod decoder;
pub(crate) mod dual;
mod eva;
mod heads;
mod lora;
mod padded;
mod positions;
mod post_norm;
mod pre_norm;
mod window;

use std::collections::HashMap;

use crate::ConvertError;
use crate::config::dual::TextPool;
use crate::config::{Activation, Config, Head, Names};
use crate::graph::{Attr, FLOAT, Graph, MS_DOMAIN};
use crate::weights::Weights;

pub(crate) use positions::{Bias, Masks};

/// The graph's inputs, as nornir and the exporters name them.
pub(crate) const INPUT_IDS: &str = "input_ids";
pub(crate) const ATTENTION_MASK: &str = "attention_mask";
pub(crate) const TOKEN_TYPE_IDS: &str = "token_type_ids";
/// jina-embeddings-v3's adapter index (an int64 scalar), as jina's own ONNX export names it.
pub(crate) const TASK_ID: &str = "task_id";

/// Reads tensors under one prefix (`bert.`, `roberta.`, `model.`, `new.` or none), with
/// LayerNorm's old names and LoRA's parametrized weights.
struct Tensors<'w> {
    weights: &'w Weights,
    base: String,
}

impl Tensors<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ConvertError> {
        self.weights.f32(name, shape)
    }

    fn has(&self, name: &str) -> bool {
        self.weights.contains(name)
    }

    /// A layer's weight: `<prefix>.weight`, or under a LoRA parametrization
    /// `<prefix>.parametrizations.weight.original` (jina-embeddings-v3).
    fn weight_name(&self, prefix: &str) -> String {
        let lora = format!("{prefix}.parametrizations.weight.original");
        if !self.has(&format!("{prefix}.weight")) && self.has(&lora) { lora } else { format!("{prefix}.weight") }
    }

    /// A norm's scale and shift: `.weight`/`.bias`, or the older `.gamma`/`.beta`; a norm without
    /// a bias (ModernBERT's) shifts by zero.
    fn norm(&self, prefix: &str, width: usize, bias: bool) -> Result<(Vec<f32>, Vec<f32>), ConvertError> {
        if self.has(&format!("{prefix}.gamma")) {
            return Ok((
                self.get(&format!("{prefix}.gamma"), &[width])?,
                self.get(&format!("{prefix}.beta"), &[width])?,
            ));
        }
        let scale = self.get(&format!("{prefix}.weight"), &[width])?;
        let shift_name = format!("{prefix}.bias");
        let shift = if bias || self.has(&shift_name) { self.get(&shift_name, &[width])? } else { vec![0.0; width] };
        Ok((scale, shift))
    }
}

/// The names a checkpoint's word embeddings may have, after its prefix.
const WORD_EMBEDDINGS: [&str; 3] = [
    "embeddings.word_embeddings.weight",
    "embeddings.word_embeddings.parametrizations.weight.original",
    "embeddings.tok_embeddings.weight",
];

/// Writes the network into `g`: inputs, nodes, initializers, and its one output. `fused` writes
/// attention as `com.microsoft.MultiHeadAttention` and GELU as `com.microsoft.Gelu`/`FastGelu`.
pub(crate) fn build(g: &mut Graph, c: &Config, weights: &Weights, fused: bool) -> Result<(), ConvertError> {
    if let Some(d) = &c.decoder {
        return decoder::build(g, c, d, weights, fused);
    }
    if let Some(d) = c.dual.as_deref().filter(|d| d.text_pool != TextPool::Mean) {
        return dual::build_text(g, c, d, weights, fused);
    }
    // A dual encoder's text tower that is an encoder of its own is under the tower's prefix.
    let bases: Vec<String> = match c.dual.as_deref() {
        Some(d) => vec![format!("{}roberta.", d.names.text), d.names.text.to_owned()],
        None => ["", "bert.", "roberta.", "xlm_roberta.", "model.", "new."].map(String::from).to_vec(),
    };
    let base = bases.iter().find(|p| WORD_EMBEDDINGS.iter().any(|w| weights.contains(&format!("{p}{w}")))).ok_or_else(
        || ConvertError::MissingTensor {
            tensor: WORD_EMBEDDINGS[0].to_owned(),
            files: weights.files().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
        },
    )?;
    let t = Tensors { weights, base: base.clone() };
    let mut net = Net { g, c, names: c.names, t, fused, lora_low: HashMap::new() };
    net.check_layer_count()?;
    let mut x = net.embeddings()?;
    let masks = net.masks();
    for layer in 0..c.layers {
        x = if c.pre_norm { net.pre_norm_layer(&x, &masks, layer)? } else { net.post_norm_layer(&x, &masks, layer)? };
    }
    if let Some(norm) = net.names().final_norm {
        x = net.layer_norm(&x, &net.p(norm))?;
    }
    let (output, axes): (String, &[&str]) = match c.head {
        Head::Encoder => (x, &["batch", "sequence", "hidden"]),
        Head::MaskedLm => (net.masked_lm(&x)?, &["batch", "sequence", "vocabulary"]),
        Head::SequenceClassification | Head::YesNo => (net.classifier(&x)?, &["batch", "labels"]),
        Head::TextTower => {
            let d = c.dual.as_deref().expect("a text tower's config is a dual encoder's");
            let pooled = net.mean_over_tokens(&x);
            return net.text_embeds(&pooled, d);
        }
    };
    let name = c.head.output_name();
    net.g.rename_value(&output, name);
    net.g.output(name, FLOAT, axes);
    Ok(())
}

/// A `com.microsoft.MultiHeadAttention` node in `g` with `c`'s heads and scale, over `inputs`:
/// query, key, value, the projections' biases, key padding mask and attention bias ("" for one
/// left out; trailing ones are dropped).
fn attention_node(g: &mut Graph, c: &Config, inputs: [&str; 6]) -> String {
    let scale = 1.0 / ((c.hidden / c.heads) as f32).sqrt();
    let used = inputs.iter().rposition(|i| !i.is_empty()).map_or(0, |last| last + 1);
    let attrs = [("num_heads", Attr::Int(c.heads as i64)), ("scale", Attr::Float(scale))];
    g.node("MultiHeadAttention", MS_DOMAIN, &inputs[..used], &attrs, None)
}

struct Net<'a, 'w> {
    g: &'a mut Graph,
    c: &'a Config,
    /// The encoder family's tensor names (`None` for a decoder, which names its own).
    names: Option<&'static Names>,
    t: Tensors<'w>,
    fused: bool,
    /// `x Aₜᵀ` of each (input, LoRA layer) already written.
    lora_low: HashMap<String, String>,
}

impl Net<'_, '_> {
    fn p(&self, name: &str) -> String {
        format!("{}{name}", self.t.base)
    }

    /// The encoder family's tensor names.
    fn names(&self) -> &'static Names {
        self.names.expect("an encoder's config has its family's names")
    }

    /// The prefix of layer `i`'s tensors.
    fn layer_prefix(&self, i: usize) -> String {
        self.p(&format!("{}.{i}", self.names().layers))
    }

    /// Refuses a config that asks for more layers than the weights hold, naming both counts.
    fn check_layer_count(&self) -> Result<(), ConvertError> {
        let c = self.c;
        let held = |i: usize| {
            let prefix = format!("{}.", self.layer_prefix(i));
            self.t.weights.names().any(|n| n.starts_with(&prefix))
        };
        if c.layers > 0 && !held(c.layers - 1) {
            let found = (0..c.layers).take_while(|&i| held(i)).count();
            return Err(ConvertError::Config {
                file: "config.json".to_owned(),
                why: format!(
                    "says num_hidden_layers {} but the weights hold {found} layers: the config and the weights do not belong together",
                    c.layers
                ),
            });
        }
        Ok(())
    }

    /// A `Linear` layer's weight `[out, in]` (its rows `rows` of it), stored transposed as the
    /// `[in, out]` MatMul reads.
    fn weight_t_rows(
        &mut self,
        prefix: &str,
        inputs: usize,
        outputs: usize,
        rows: std::ops::Range<usize>,
    ) -> Result<String, ConvertError> {
        let name = self.t.weight_name(prefix);
        // Only the rows asked for are read.
        let w = self.t.weights.f32_rows(&name, &[outputs, inputs], rows.clone())?;
        let n = rows.len();
        let wt = transpose(&w, n, inputs);
        let label = if rows.len() == outputs {
            format!("{prefix}.weight_t")
        } else {
            format!("{prefix}.weight_t_{}", rows.start)
        };
        Ok(self.g.weight(&label, &[inputs, n], wt))
    }

    fn weight_t(&mut self, prefix: &str, inputs: usize, outputs: usize) -> Result<String, ConvertError> {
        self.weight_t_rows(prefix, inputs, outputs, 0..outputs)
    }

    fn bias_rows(&mut self, prefix: &str, width: usize, rows: std::ops::Range<usize>) -> Result<String, ConvertError> {
        let b = self.t.get(&format!("{prefix}.bias"), &[width])?;
        let label =
            if rows.len() == width { format!("{prefix}.bias") } else { format!("{prefix}.bias_{}", rows.start) };
        Ok(self.g.f32(&label, &[rows.len()], b[rows].to_vec()))
    }

    /// `x Wᵀ + b`.
    fn linear(&mut self, x: &str, prefix: &str, inputs: usize, outputs: usize) -> Result<String, ConvertError> {
        self.linear_rows(x, prefix, inputs, outputs, 0..outputs, true)
    }

    /// `x Wᵀ (+ b)` for the output rows `rows` of a layer of `outputs`, with its LoRA adapter's
    /// low-rank update where the checkpoint has one.
    fn linear_rows(
        &mut self,
        x: &str,
        prefix: &str,
        inputs: usize,
        outputs: usize,
        rows: std::ops::Range<usize>,
        bias: bool,
    ) -> Result<String, ConvertError> {
        let w = self.weight_t_rows(prefix, inputs, outputs, rows.clone())?;
        let mut y = self.g.op("MatMul", &[x, &w]);
        if let Some(update) = self.lora_update(x, prefix, inputs, outputs, rows.clone())? {
            y = self.g.op("Add", &[&y, &update]);
        }
        if bias {
            let b = self.bias_rows(prefix, outputs, rows)?;
            y = self.g.op("Add", &[&y, &b]);
        }
        Ok(y)
    }

    /// LayerNorm over the hidden width, with the family's bias choice.
    fn layer_norm(&mut self, x: &str, prefix: &str) -> Result<String, ConvertError> {
        self.layer_norm_of(x, prefix, self.c.hidden)
    }

    /// LayerNorm over the last axis, `width` wide.
    fn layer_norm_of(&mut self, x: &str, prefix: &str, h: usize) -> Result<String, ConvertError> {
        let (scale, shift) = self.t.norm(prefix, h, self.c.biases.norm)?;
        let scale = self.g.f32(&format!("{prefix}.scale"), &[h], scale);
        let shift = self.g.f32(&format!("{prefix}.shift"), &[h], shift);
        Ok(self.g.node(
            "LayerNormalization",
            "",
            &[x, &scale, &shift],
            &[("axis", Attr::Int(-1)), ("epsilon", Attr::Float(self.c.eps))],
            None,
        ))
    }

    /// Attention of `q`, `k`, `v` with the projections' biases (the fourth input, "" for none)
    /// and `bias`, as one of nornir's operators (`padded.rs`, `window.rs`, `alibi.rs`) or, for a
    /// bias given whole, `com.microsoft.MultiHeadAttention`.
    fn multi_head_attention(&mut self, qkv: [&str; 4], bias: &Bias, l: &str) -> String {
        match bias {
            Bias::Full(bias) => attention_node(self.g, self.c, [qkv[0], qkv[1], qkv[2], qkv[3], "", bias]),
            Bias::Window(window) => self.window_attention(qkv, *window),
            Bias::Alibi(blocks) => self.alibi_attention(qkv, blocks, l),
            Bias::Padding => self.padded_attention(qkv),
        }
    }

    fn scalar(&mut self, name: &str, v: f32) -> String {
        self.g.f32(name, &[], vec![v])
    }

    fn activation(&mut self, x: &str, act: Activation) -> String {
        match (act, self.fused) {
            (Activation::Relu, _) => self.g.op("Relu", &[x]),
            (Activation::Silu, _) => {
                let s = self.g.op("Sigmoid", &[x]);
                self.g.op("Mul", &[x, &s])
            }
            (Activation::QuickGelu, _) => {
                let k = self.scalar("quick_gelu_scale", 1.702);
                let s = self.g.op("Mul", &[x, &k]);
                let s = self.g.op("Sigmoid", &[&s]);
                self.g.op("Mul", &[x, &s])
            }
            (Activation::Gelu, true) => self.g.node("Gelu", MS_DOMAIN, &[x], &[], None),
            (Activation::GeluTanh, true) => self.g.node("FastGelu", MS_DOMAIN, &[x], &[], None),
            (Activation::Gelu, false) => {
                // x * 0.5 * (1 + erf(x / sqrt 2))
                let r = self.scalar("gelu_sqrt2", std::f32::consts::SQRT_2);
                let (half, one) = (self.scalar("gelu_half", 0.5), self.scalar("gelu_one", 1.0));
                let e = self.g.op("Div", &[x, &r]);
                let e = self.g.op("Erf", &[&e]);
                let e = self.g.op("Add", &[&e, &one]);
                let y = self.g.op("Mul", &[x, &e]);
                self.g.op("Mul", &[&y, &half])
            }
            (Activation::GeluTanh, false) => {
                // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
                let (half, one) = (self.scalar("gelu_half", 0.5), self.scalar("gelu_one", 1.0));
                let k = self.scalar("gelu_cubic", 0.044715);
                let s = self.scalar("gelu_sqrt_2_over_pi", (2.0 / std::f32::consts::PI).sqrt());
                let x2 = self.g.op("Mul", &[x, x]);
                let x3 = self.g.op("Mul", &[&x2, x]);
                let x3 = self.g.op("Mul", &[&x3, &k]);
                let inner = self.g.op("Add", &[x, &x3]);
                let inner = self.g.op("Mul", &[&inner, &s]);
                let th = self.g.op("Tanh", &[&inner]);
                let th = self.g.op("Add", &[&th, &one]);
                let y = self.g.op("Mul", &[x, &th]);
                self.g.op("Mul", &[&y, &half])
            }
        }
    }

    /// Scaled dot-product attention of `q`, `k`, `v` (`[batch, sequence, hidden]`, heads side by
    /// side) with the additive `bias`; `[batch, sequence, hidden]`.
    fn attend(&mut self, q: &str, k: &str, v: &str, bias: &Bias, l: &str) -> String {
        let (h, heads) = (self.c.hidden, self.c.heads);
        let head_dim = h / heads;
        let scale = 1.0 / (head_dim as f32).sqrt();
        if self.fused {
            return self.multi_head_attention([q, k, v, ""], bias, l);
        }
        // The plain graph's padding mask broadcasts to the scores (blocks are a fused graph's).
        let padding;
        let bias = match bias {
            Bias::Full(bias) => bias,
            Bias::Padding => {
                padding = self.padding_bias();
                &padding
            }
            Bias::Window(window) => return self.window_attention([q, k, v, ""], *window),
            Bias::Alibi(blocks) => return self.alibi_attention([q, k, v, ""], blocks, l),
        };
        let split = self.g.i64(&format!("{l}.heads_shape"), &[4], &[0, 0, heads as i64, head_dim as i64]);
        let mut per_head = Vec::new();
        for (y, perm) in [(q, [0, 2, 1, 3]), (k, [0, 2, 3, 1]), (v, [0, 2, 1, 3])] {
            let y = self.g.op("Reshape", &[y, &split]);
            per_head.push(self.g.node("Transpose", "", &[&y], &[("perm", Attr::Ints(perm.to_vec()))], None));
        }
        let scores = self.g.op("MatMul", &[&per_head[0], &per_head[1]]);
        let s = self.scalar(&format!("{l}.attention.scale"), scale);
        let scores = self.g.op("Mul", &[&scores, &s]);
        let scores = self.g.op("Add", &[&scores, bias]);
        let probs = self.g.node("Softmax", "", &[&scores], &[("axis", Attr::Int(-1))], None);
        let ctx = self.g.op("MatMul", &[&probs, &per_head[2]]);
        let ctx = self.g.node("Transpose", "", &[&ctx], &[("perm", Attr::Ints(vec![0, 2, 1, 3]))], None);
        let merge = self.g.i64(&format!("{l}.merge_shape"), &[3], &[0, 0, h as i64]);
        self.g.op("Reshape", &[&ctx, &merge])
    }

    /// The gated feed-forward `out(act(a) * b)` where `a` and `b` are the two halves of one
    /// projection (`up_gate` `[2 · intermediate, hidden]`, the activated half first or second),
    /// or two projections (`Split`).
    fn gated_mlp(
        &mut self,
        x: &str,
        gate: Gate<'_>,
        out: &str,
        activation: Activation,
    ) -> Result<String, ConvertError> {
        let (h, inter) = (self.c.hidden, self.c.intermediate);
        let (in_bias, out_bias) = (self.c.biases.mlp_in, self.c.biases.mlp_out);
        let (activated, linear) = match gate {
            Gate::Fused { weight, activated_first } => {
                let (first, second) = (0..inter, inter..2 * inter);
                let (a, b) = if activated_first { (first, second) } else { (second, first) };
                (
                    self.linear_rows(x, weight, h, 2 * inter, a, in_bias)?,
                    self.linear_rows(x, weight, h, 2 * inter, b, in_bias)?,
                )
            }
            Gate::Split { activated, linear } => (
                self.linear_rows(x, activated, h, inter, 0..inter, in_bias)?,
                self.linear_rows(x, linear, h, inter, 0..inter, in_bias)?,
            ),
        };
        let a = self.activation(&activated, activation);
        let y = self.g.op("Mul", &[&a, &linear]);
        self.linear_rows(&y, out, inter, h, 0..h, out_bias)
    }
}

/// `w` `[rows, cols]` transposed to `[cols, rows]`, in tiles that stay in the cache.
fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const TILE: usize = 64;
    let mut t = vec![0f32; rows * cols];
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..rows.min(r0 + TILE) {
                for c in c0..cols.min(c0 + TILE) {
                    t[c * rows + r] = w[r * cols + c];
                }
            }
        }
    }
    t
}

/// Where a gated feed-forward's two projections are.
enum Gate<'a> {
    /// One weight `[2 · intermediate, hidden]`.
    Fused { weight: &'a str, activated_first: bool },
    /// Two weights `[intermediate, hidden]` (NomicBERT's `fc12` activated, `fc11` linear).
    Split { activated: &'a str, linear: &'a str },
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_transpose_in_tiles_is_a_transpose() {
        let (rows, cols) = (70, 131);
        let w: Vec<f32> = (0..rows * cols).map(|v| v as f32).collect();
        let t = super::transpose(&w, rows, cols);
        for r in 0..rows {
            for c in 0..cols {
                assert_eq!(t[c * rows + r], w[r * cols + c]);
            }
        }
    }
}
