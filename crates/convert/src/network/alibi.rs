//! JinaBERT's ALiBi attention in a fused graph without the queries x keys matrix: the queries in
//! blocks of [`QUERY_BLOCK`], one block at a time (a `Loop`), each against every key with its
//! slice of the bias, `-slope(head) x |i - j|`, made inside the loop, and the padding as the
//! operator's key padding mask (its `mask_filter_value` for a padded key: the softmax gives it
//! 0 as the float minimum does). Memory
//! holds one block's `heads x block x keys` scores, not the whole `heads x queries x keys`;
//! the arithmetic is the whole-matrix one, row by row.

use super::{ATTENTION_MASK, Net, attention_node};
use crate::graph::{Attr, FLOAT};

/// Int32, as ONNX numbers its element types.
const INT32: i32 = 6;

/// Queries per block: 512 x 8,192 keys x 12 heads is 192 MiB of scores.
const QUERY_BLOCK: i64 = 512;

/// What every ALiBi layer of one graph shares.
pub(crate) struct AlibiBlocks {
    /// `Pad`'s pads for the queries `[batch, sequence, hidden]` up to whole blocks.
    pad_queries: String,
    /// The number of blocks: the loop's trip count (an int64 scalar).
    blocks: String,
    /// The sequence length as a 1-D int64, to cut the padding off the result.
    sequence_end: String,
    /// The keys' positions `[keys]`, float32.
    keys: String,
    /// The padding mask as `MultiHeadAttention`'s key padding mask, int32 `[batch, keys]` (1
    /// where a key is attended): the bias then stays `[1, heads, block, keys]`, not a copy per row.
    key_padding: String,
    /// `-slope` per head, `[heads, 1, 1]`.
    slopes: String,
}

impl Net<'_, '_> {
    /// The blocks of queries and what each layer's loop reads.
    pub(super) fn alibi_blocks(&mut self) -> AlibiBlocks {
        let len = self.sequence_length();
        let block = self.g.constant_i64("alibi_block", &[], &[QUERY_BLOCK]);
        let less_one = self.g.constant_i64("alibi_block_less_one", &[], &[QUERY_BLOCK - 1]);
        // blocks = ceil(len / block); the queries are padded to blocks x block.
        let rounded_up = self.g.op("Add", &[&len, &less_one]);
        let blocks = self.g.op("Div", &[&rounded_up, &block]);
        let whole = self.g.op("Mul", &[&blocks, &block]);
        let pad = self.g.op("Sub", &[&whole, &len]);
        let axis0 = self.g.constant_i64("alibi_axis_0", &[1], &[0]);
        let pad = self.g.op("Unsqueeze", &[&pad, &axis0]);
        let sequence_end = self.g.op("Unsqueeze", &[&len, &axis0]);
        let zeros = self.g.constant_i64("alibi_pads_before", &[4], &[0, 0, 0, 0]);
        let zero = self.g.constant_i64("alibi_pads_hidden", &[1], &[0]);
        let pad_queries = self.g.node("Concat", "", &[&zeros, &pad, &zero], &[("axis", Attr::Int(0))], None);
        let r = self.position_range();
        let keys = self.g.node("Cast", "", &[&r], &[("to", Attr::Int(FLOAT.into()))], None);
        let heads = self.c.heads;
        let slopes: Vec<f32> = alibi_slopes(heads).into_iter().map(|s| -s as f32).collect();
        let slopes = self.g.f32("alibi_negative_slopes", &[heads, 1, 1], slopes);
        let key_padding = self.g.node("Cast", "", &[ATTENTION_MASK], &[("to", Attr::Int(INT32.into()))], None);
        AlibiBlocks { pad_queries, blocks, sequence_end, keys, key_padding, slopes }
    }

    /// ALiBi attention of `q`, `k`, `v` (`[batch, sequence, hidden]`) with the projections'
    /// biases `qkv_bias` ("" for none), block of queries by block (layer prefix `l`).
    pub(super) fn alibi_attention(&mut self, [q, k, v, qkv_bias]: [&str; 4], a: &AlibiBlocks, l: &str) -> String {
        let (c, h) = (self.c, self.c.hidden as i64);
        let padded_q = self.g.op("Pad", &[q, &a.pad_queries]);
        let block = self.g.constant_i64("alibi_block", &[], &[QUERY_BLOCK]);
        let step = self.g.constant_i64("alibi_step", &[], &[1]);
        let axis0 = self.g.constant_i64("alibi_axis_0", &[1], &[0]);
        let axis1 = self.g.constant_i64("alibi_axis_1", &[1], &[1]);
        let body = self.g.loop_body(&format!("{l}.attention.blocks"), FLOAT, |g, i| {
            let start = g.op("Mul", &[i, &block]);
            let end = g.op("Add", &[&start, &block]);
            let [from, to] = [&start, &end].map(|x| g.op("Unsqueeze", &[x, &axis0]));
            let queries = g.op("Slice", &[&padded_q, &from, &to, &axis1]);
            let rows = g.op("Range", &[&start, &end, &step]);
            let rows = g.node("Cast", "", &[&rows], &[("to", Attr::Int(FLOAT.into()))], None);
            let rows = g.op("Unsqueeze", &[&rows, &axis1]);
            let cols = g.op("Unsqueeze", &[&a.keys, &axis0]);
            let distance = g.op("Sub", &[&rows, &cols]);
            let distance = g.op("Abs", &[&distance]);
            let bias = g.op("Mul", &[&a.slopes, &distance]);
            let bias = g.op("Unsqueeze", &[&bias, &axis0]);
            attention_node(g, c, [&queries, k, v, qkv_bias, &a.key_padding, &bias])
        });
        let stacked = self.g.node("Loop", "", &[&a.blocks, ""], &[("body", Attr::Graph(body))], None);
        let y = self.g.node("Transpose", "", &[&stacked], &[("perm", Attr::Ints(vec![1, 0, 2, 3]))], None);
        let rows = self.g.constant_i64("alibi_merge_blocks", &[3], &[0, -1, h]);
        let y = self.g.op("Reshape", &[&y, &rows]);
        let start = self.g.constant_i64("alibi_cut_start", &[1], &[0]);
        self.g.op("Slice", &[&y, &start, &a.sequence_end, &axis1])
    }
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
