//! ModernBERT's sliding-window attention in a fused graph without the queries x keys matrix:
//! the sequence in blocks of half the window, each block of queries against its own block of
//! keys and the two beside it (where every key within half a window of its queries lies), as one
//! `MultiHeadAttention` over `batch x blocks` rows of 3 blocks of keys. Cost and memory grow
//! with the length, not its square; the scores are the whole-matrix ones, masked the same way.

use super::{ATTENTION_MASK, Net, WINDOWED_ATTENTION, attention_node};
use crate::graph::Attr;

/// Bool, as ONNX numbers its element types.
const BOOL: i32 = 9;

/// What every windowed layer of one graph shares (its int64 constants are shared by name: one
/// window per graph).
pub(crate) struct Blocks {
    /// Queries per block: half the window (at least 1).
    block: usize,
    /// `Pad`'s pads for the queries `[batch, sequence, hidden]` up to whole blocks.
    pad_queries: String,
    /// `Pad`'s pads for keys and values: a block of zeros before, whole blocks and one more after.
    pad_keys: String,
    /// The sequence length as a 1-D int64, to cut the padding off the result.
    sequence_end: String,
    /// `[batch x blocks, 1, block, 3 x block]`: 0 where a key is within half a window of the
    /// query and not padding, the float minimum elsewhere.
    bias: String,
}

impl Net<'_, '_> {
    /// The blocks of a window of `window` tokens: the pads and the bias every windowed layer uses.
    pub(super) fn window_blocks(&mut self, window: usize) -> Blocks {
        let half = window / 2;
        let block = half.max(1);
        let b = block as i64;
        let len = self.sequence_length();
        // pad = (block - len % block) % block
        let block_i = self.g.constant_i64("window_block", &[], &[b]);
        let rem = self.g.op("Mod", &[&len, &block_i]);
        let short = self.g.op("Sub", &[&block_i, &rem]);
        let pad = self.g.op("Mod", &[&short, &block_i]);
        let one_axis = self.g.constant_i64("window_unsqueeze_axis", &[1], &[0]);
        let pad = self.g.op("Unsqueeze", &[&pad, &one_axis]);
        let sequence_end = self.g.op("Unsqueeze", &[&len, &one_axis]);
        let zeros2 = self.g.constant_i64("window_pads_zero_2", &[2], &[0, 0]);
        let zero1 = self.g.constant_i64("window_pads_zero_1", &[1], &[0]);
        let block1 = self.g.constant_i64("window_pads_block", &[1], &[b]);
        let pad_after_keys = self.g.op("Add", &[&pad, &block1]);
        let concat = |net: &mut Self, parts: &[&str]| net.g.node("Concat", "", parts, &[("axis", Attr::Int(0))], None);
        let pad_queries = concat(self, &[&zeros2, &zero1, &zero1, &pad, &zero1]);
        let pad_keys = concat(self, &[&zero1, &block1, &zero1, &zero1, &pad_after_keys, &zero1]);
        // The keys' mask in the same blocks: [batch x blocks, 1, 1, 3 x block].
        let mask_pads = concat(self, &[&zero1, &block1, &zero1, &pad_after_keys]);
        let mask = self.g.op("Pad", &[ATTENTION_MASK, &mask_pads]);
        let blocked = self.g.constant_i64("window_mask_blocks", &[3], &[0, -1, b]);
        let mask = self.g.op("Reshape", &[&mask, &blocked]);
        let mask = self.three_blocks(&mask, 2);
        let rows = self.g.constant_i64("window_mask_rows", &[4], &[-1, 1, 1, 3 * b]);
        let mask = self.g.op("Reshape", &[&mask, &rows]);
        let valid = self.g.node("Cast", "", &[&mask], &[("to", Attr::Int(BOOL.into()))], None);
        // Query a of a block against key c of its three: |block + a - c| <= half.
        let band: Vec<i64> =
            (0..block).flat_map(|a| (0..3 * block).map(move |c| i64::from((block + a).abs_diff(c) <= half))).collect();
        let band = self.g.constant_i64("window_band", &[1, 1, block, 3 * block], &band);
        let band = self.g.node("Cast", "", &[&band], &[("to", Attr::Int(BOOL.into()))], None);
        let allowed = self.g.op("And", &[&valid, &band]);
        let zero = self.scalar("window_zero", 0.0);
        let min = self.scalar("window_min", f32::MIN);
        let bias = self.g.op("Where", &[&allowed, &zero, &min]);
        Blocks { block, pad_queries, pad_keys, sequence_end, bias }
    }

    /// `[batch, blocks + 2, ...]` blocks as `[batch, blocks, 3 x ...]`: each block beside the
    /// one before and after it, joined on `axis`.
    fn three_blocks(&mut self, x: &str, axis: i64) -> String {
        let axis1 = self.g.constant_i64("window_block_axis", &[1], &[1]);
        let parts: Vec<String> = [(0, -2), (1, -1), (2, i64::MAX)]
            .into_iter()
            .map(|(start, end)| {
                let s = self.g.constant_i64(&format!("window_slice_start_{start}"), &[1], &[start]);
                let e = self.g.constant_i64(&format!("window_slice_end_{start}"), &[1], &[end]);
                self.g.op("Slice", &[x, &s, &e, &axis1])
            })
            .collect();
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        self.g.node("Concat", "", &parts, &[("axis", Attr::Int(axis))], None)
    }

    /// Windowed attention of `q`, `k`, `v` (`[batch, sequence, hidden]`) with the projections'
    /// biases `qkv_bias` ("" for none), in `blocks` (layer prefix `l`).
    pub(super) fn windowed_attention(&mut self, [q, k, v, qkv_bias]: [&str; 4], blocks: &Blocks, l: &str) -> String {
        let h = self.c.hidden;
        let b = blocks.block as i64;
        let padded_q = self.g.op("Pad", &[q, &blocks.pad_queries]);
        let rows = self.g.constant_i64("window_query_rows", &[3], &[-1, b, h as i64]);
        let queries = self.g.op("Reshape", &[&padded_q, &rows]);
        let per_block = self.g.constant_i64("window_key_blocks", &[4], &[0, -1, b, h as i64]);
        let key_rows = self.g.constant_i64("window_key_rows", &[3], &[-1, 3 * b, h as i64]);
        let [keys, values] = [k, v].map(|x| {
            let x = self.g.op("Pad", &[x, &blocks.pad_keys]);
            let x = self.g.op("Reshape", &[&x, &per_block]);
            let x = self.three_blocks(&x, 2);
            self.g.op("Reshape", &[&x, &key_rows])
        });
        let y = attention_node(self.g, self.c, [&queries, &keys, &values, qkv_bias, "", &blocks.bias]);
        let named = format!("{l}{WINDOWED_ATTENTION}");
        self.g.rename_value(&y, &named);
        let y = named;
        let shape = self.g.op("Shape", &[&padded_q]);
        let y = self.g.op("Reshape", &[&y, &shape]);
        let start = self.g.constant_i64("window_cut_start", &[1], &[0]);
        let axis = self.g.constant_i64("window_cut_axis", &[1], &[1]);
        self.g.op("Slice", &[&y, &start, &blocks.sequence_end, &axis])
    }
}
