//! A fused graph's global attention with the padding mask as its only bias (BERT, XLM-R, GTE,
//! NomicBERT, ModernBERT's global layers, jina-embeddings-v3). Each layer is one node of nornir's
//! [`ATTENTION`] operator, a model-local function whose body is made of standard operators: a
//! batch in which no row is padded runs `MultiHeadAttention` without a mask (ONNX Runtime's
//! memory-efficient path on the CPU), any other with the mask expanded to the queries. Any
//! runtime runs that body; nornir registers its own kernel of the operator on the CPU, which
//! never holds more than a tile of scores, padded or not, and takes the cores the runs beside it
//! leave.

use super::{ATTENTION_MASK, Net, attention_node};
use crate::config::Config;
use crate::graph::{Attr, FLOAT, Graph, NORNIR_DOMAIN};

/// The operator (in [`NORNIR_DOMAIN`]): inputs `query`, `key`, `value` (`[batch, sequence,
/// hidden]`, heads side by side), `attention_mask` (int64 `[batch, sequence]`, 1 where a key is
/// attended) and, optionally, `qkv_bias` (`[3 x hidden]`, added to the query, key and value);
/// attribute `num_heads`; output `[batch, sequence, hidden]`. Scores are scaled by
/// `1 / sqrt(hidden / num_heads)`.
pub const ATTENTION: &str = "Attention";

impl Net<'_, '_> {
    /// Attention of `q`, `k`, `v` (`[batch, sequence, hidden]`) with the projections' biases
    /// `qkv_bias` ("" for none) and the padding mask: one [`ATTENTION`] node.
    pub(super) fn padded_attention(&mut self, [q, k, v, qkv_bias]: [&str; 4]) -> String {
        let c = self.c;
        let biased = !qkv_bias.is_empty();
        let mut formals = vec!["query", "key", "value", "attention_mask"];
        if biased {
            formals.push("qkv_bias");
        }
        self.g.define_function(ATTENTION, &formals, &["num_heads"], |g| padded_body(g, c, biased));
        let mut inputs = vec![q, k, v, ATTENTION_MASK];
        if biased {
            inputs.push(qkv_bias);
        }
        self.g.node(ATTENTION, NORNIR_DOMAIN, &inputs, &[("num_heads", Attr::Int(c.heads as i64))], None)
    }
}

/// The operator's body in standard operators (its formal inputs by name).
fn padded_body(g: &mut Graph, c: &Config, biased: bool) -> String {
    let qkv_bias = if biased { "qkv_bias" } else { "" };
    let node = |g: &mut Graph, mask: &str| attention_node(g, c, ["query", "key", "value", qkv_bias, "", mask]);
    let unpadded = unpadded(g, "attention_mask");
    let bias = padding_bias(g, "attention_mask");
    let target = queries_target(g, "attention_mask");
    let without = g.branch("attention.unpadded", FLOAT, |g| node(g, ""));
    let with = g.branch("attention.padded", FLOAT, |g| {
        let expanded = g.op("Expand", &[&bias, &target]);
        node(g, &expanded)
    });
    let branches = [("then_branch", Attr::Graph(without)), ("else_branch", Attr::Graph(with))];
    g.node("If", "", &[&unpadded], &branches, None)
}

/// The padding mask `[batch, 1, 1, keys]` of `mask` (int64 `[batch, keys]`): 0 where attended,
/// the float minimum elsewhere, as transformers adds it.
pub(super) fn padding_bias(g: &mut Graph, mask: &str) -> String {
    let m = g.node("Cast", "", &[mask], &[("to", Attr::Int(FLOAT.into()))], None);
    let one = g.f32("mask_one", &[], vec![1.0]);
    let min = g.f32("mask_min", &[], vec![f32::MIN]);
    let off = g.op("Sub", &[&one, &m]);
    let bias = g.op("Mul", &[&off, &min]);
    let axes = g.i64("mask_axes", &[2], &[1, 2]);
    g.op("Unsqueeze", &[&bias, &axes])
}

/// `[1, 1, queries, 1]`: what a `[batch, 1, 1, keys]` bias is expanded by to `[batch, 1,
/// queries, keys]`, the shape `MultiHeadAttention` takes (`[batch or 1, heads or 1, queries,
/// keys]`).
fn queries_target(g: &mut Graph, mask: &str) -> String {
    let shape = g.op("Shape", &[mask]);
    let (one_i, two_i) = (g.i64("mask_slice_one", &[1], &[1]), g.i64("mask_slice_two", &[1], &[2]));
    let queries = g.op("Slice", &[&shape, &one_i, &two_i]);
    let ones = g.i64("mask_ones", &[2], &[1, 1]);
    g.node("Concat", "", &[&ones, &queries, &one_i], &[("axis", Attr::Int(0))], None)
}

/// Whether no row of `mask` is padded (every value 1), a bool scalar.
pub(super) fn unpadded(g: &mut Graph, mask: &str) -> String {
    let min = g.node("ReduceMin", "", &[mask], &[("keepdims", Attr::Int(0))], None);
    let one = g.i64("mask_attended", &[], &[1]);
    g.op("Equal", &[&min, &one])
}
