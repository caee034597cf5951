//! JinaBERT's ALiBi attention in a fused graph without the queries x keys matrix. Each layer is
//! one node of nornir's [`ALIBI_ATTENTION`] operator, a model-local function whose body is made of
//! standard operators: the queries in blocks of [`QUERY_BLOCK`], one block at a time (a `Loop`),
//! each against every key with its slice of the bias, `-slope(head) x |i - j|`, made inside the
//! loop, and the padding as `MultiHeadAttention`'s key padding mask (its `mask_filter_value` for a
//! padded key: the softmax gives it 0 as the float minimum does). Memory holds one block's
//! `heads x block x keys` scores, not the whole `heads x queries x keys`; the arithmetic is the
//! whole-matrix one, row by row. Any runtime runs that body; nornir registers its own kernel of
//! the operator on the CPU, which never holds more than a tile of scores.

use super::{ATTENTION_MASK, Net, attention_node};
use crate::config::Config;
use crate::graph::{Attr, FLOAT, Graph, NORNIR_DOMAIN};

/// Int32, as ONNX numbers its element types.
const INT32: i32 = 6;

/// Queries per block: 512 x 8,192 keys x 12 heads is 192 MiB of scores.
const QUERY_BLOCK: i64 = 512;

/// The operator (in [`NORNIR_DOMAIN`]): inputs `query`, `key`, `value` (`[batch, sequence,
/// hidden]`, heads side by side), `attention_mask` (int64 `[batch, sequence]`, 1 where a key is
/// attended), `negative_slopes` (`[heads]`: `-slope` per head) and, optionally, `qkv_bias`
/// (`[3 x hidden]`, added to the query, key and value); output `[batch, sequence, hidden]`.
pub const ALIBI_ATTENTION: &str = "AlibiAttention";

/// What every ALiBi layer of one graph shares: `-slope` per head, `[heads]`.
pub(crate) struct AlibiSlopes(String);

impl Net<'_, '_> {
    /// The slopes every layer's node reads.
    pub(super) fn alibi_blocks(&mut self) -> AlibiSlopes {
        let slopes: Vec<f32> = alibi_slopes(self.c.heads).into_iter().map(|s| -s as f32).collect();
        AlibiSlopes(self.g.f32("alibi_negative_slopes", &[self.c.heads], slopes))
    }

    /// ALiBi attention of `q`, `k`, `v` (`[batch, sequence, hidden]`) with the projections'
    /// biases `qkv_bias` ("" for none): one [`ALIBI_ATTENTION`] node.
    pub(super) fn alibi_attention(&mut self, [q, k, v, qkv_bias]: [&str; 4], a: &AlibiSlopes, _l: &str) -> String {
        let c = self.c;
        let biased = !qkv_bias.is_empty();
        let name = ALIBI_ATTENTION;
        let mut formals = vec!["query", "key", "value", "attention_mask", "negative_slopes"];
        if biased {
            formals.push("qkv_bias");
        }
        self.g.define_function(name, &formals, &[], |g| alibi_body(g, c, biased));
        let mut inputs = vec![q, k, v, ATTENTION_MASK, &a.0];
        if biased {
            inputs.push(qkv_bias);
        }
        self.g.node(name, NORNIR_DOMAIN, &inputs, &[], None)
    }
}

/// The operator's body in standard operators (its formal inputs by name).
fn alibi_body(g: &mut Graph, c: &Config, biased: bool) -> String {
    let h = c.hidden as i64;
    let shape = g.op("Shape", &["query"]);
    let axis1 = g.constant_i64("alibi_axis_1", &[1], &[1]);
    let sequence_axis = g.constant_i64("alibi_sequence_axis", &[], &[1]);
    let len = g.node("Gather", "", &[&shape, &sequence_axis], &[("axis", Attr::Int(0))], None);
    let block = g.constant_i64("alibi_block", &[], &[QUERY_BLOCK]);
    let less_one = g.constant_i64("alibi_block_less_one", &[], &[QUERY_BLOCK - 1]);
    // blocks = ceil(len / block); the queries are padded to blocks x block.
    let rounded_up = g.op("Add", &[&len, &less_one]);
    let blocks = g.op("Div", &[&rounded_up, &block]);
    let whole = g.op("Mul", &[&blocks, &block]);
    let pad = g.op("Sub", &[&whole, &len]);
    let axis0 = g.constant_i64("alibi_axis_0", &[1], &[0]);
    let pad = g.op("Unsqueeze", &[&pad, &axis0]);
    let sequence_end = g.op("Unsqueeze", &[&len, &axis0]);
    let zeros = g.constant_i64("alibi_pads_before", &[4], &[0, 0, 0, 0]);
    let zero = g.constant_i64("alibi_pads_hidden", &[1], &[0]);
    let pad_queries = g.node("Concat", "", &[&zeros, &pad, &zero], &[("axis", Attr::Int(0))], None);
    let start0 = g.constant_i64("alibi_range_start", &[], &[0]);
    let step = g.constant_i64("alibi_step", &[], &[1]);
    let positions = g.op("Range", &[&start0, &len, &step]);
    let keys = g.node("Cast", "", &[&positions], &[("to", Attr::Int(FLOAT.into()))], None);
    let head_axes = g.constant_i64("alibi_head_axes", &[2], &[1, 2]);
    let slopes = g.op("Unsqueeze", &["negative_slopes", &head_axes]);
    let key_padding = g.node("Cast", "", &["attention_mask"], &[("to", Attr::Int(INT32.into()))], None);
    let padded_q = g.op("Pad", &["query", &pad_queries]);
    let qkv_bias = if biased { "qkv_bias" } else { "" };
    let body = g.loop_body("alibi.blocks", FLOAT, |g, i| {
        let start = g.op("Mul", &[i, &block]);
        let end = g.op("Add", &[&start, &block]);
        let [from, to] = [&start, &end].map(|x| g.op("Unsqueeze", &[x, &axis0]));
        let queries = g.op("Slice", &[&padded_q, &from, &to, &axis1]);
        let rows = g.op("Range", &[&start, &end, &step]);
        let rows = g.node("Cast", "", &[&rows], &[("to", Attr::Int(FLOAT.into()))], None);
        let rows = g.op("Unsqueeze", &[&rows, &axis1]);
        let cols = g.op("Unsqueeze", &[&keys, &axis0]);
        let distance = g.op("Sub", &[&rows, &cols]);
        let distance = g.op("Abs", &[&distance]);
        let bias = g.op("Mul", &[&slopes, &distance]);
        let bias = g.op("Unsqueeze", &[&bias, &axis0]);
        attention_node(g, c, [&queries, "key", "value", qkv_bias, &key_padding, &bias])
    });
    let stacked = g.node("Loop", "", &[&blocks, ""], &[("body", Attr::Graph(body))], None);
    let y = g.node("Transpose", "", &[&stacked], &[("perm", Attr::Ints(vec![1, 0, 2, 3]))], None);
    let rows = g.constant_i64("alibi_merge_blocks", &[3], &[0, -1, h]);
    let y = g.op("Reshape", &[&y, &rows]);
    let start = g.constant_i64("alibi_cut_start", &[1], &[0]);
    g.op("Slice", &[&y, &start, &sequence_end, &axis1])
}

/// ALiBi's slopes as the published code computes them: for `n` a power of two,
/// `start^1 .. start^n` with `start = 2^(-8/n)`; otherwise the closest lower power of two's
/// slopes, then every other slope of twice that power, up to `n`.
pub(crate) fn alibi_slopes(n: usize) -> Vec<f64> {
    fn power_of_two(n: usize) -> Vec<f64> {
        let start = 2f64.powf(-(2f64.powf(-((n as f64).log2() - 3.0))));
        (0..n).map(|i| start * start.powi(i as i32)).collect()
    }
    if n.is_power_of_two() {
        return power_of_two(n);
    }
    let closest = 1usize << n.ilog2();
    let mut slopes = power_of_two(closest);
    slopes.extend(alibi_slopes(2 * closest).into_iter().step_by(2).take(n - closest));
    slopes
}

#[cfg(test)]
mod tests {
    use super::alibi_slopes;

    #[test]
    fn alibi_slopes_follow_the_published_rule_for_any_head_count() {
        // 8 heads: 1/2, 1/4, ..., 1/256.
        let eight = alibi_slopes(8);
        assert!(eight.iter().enumerate().all(|(i, s)| (s - 0.5f64.powi(i as i32 + 1)).abs() < 1e-15), "{eight:?}");
        // 12 heads (jina-embeddings-v2-base): the 8 above, then 16 heads' slopes 1, 3, 5, 7 (0-based).
        let twelve = alibi_slopes(12);
        let sixteen = alibi_slopes(16);
        assert_eq!(&twelve[..8], &eight[..]);
        assert_eq!(&twelve[8..], &[sixteen[0], sixteen[2], sixteen[4], sixteen[6]]);
        assert_eq!(alibi_slopes(6).len(), 6);
    }
}
