//! ModernBERT's sliding-window attention in a fused graph without the queries x keys matrix.
//! Each local layer is one node of nornir's [`WINDOW_ATTENTION`] operator, a model-local function
//! whose body is made of standard operators: the sequence in blocks of half the window, each
//! block of queries against its own block of keys and the two beside it (where every key within
//! half a window of its queries lies), as one `MultiHeadAttention` over `batch x blocks` rows of
//! 3 blocks of keys. Cost and memory grow with the length, not its square; the scores are the
//! whole-matrix ones, masked the same way. Any runtime runs that body; nornir registers its own
//! kernel of the operator on the CPU, which computes only the band's tiles and holds no more
//! than a tile of scores per thread.

use super::{ATTENTION_MASK, Net, attention_node};
use crate::config::Config;
use crate::graph::{Attr, Graph, NORNIR_DOMAIN};

/// Bool, as ONNX numbers its element types.
const BOOL: i32 = 9;

/// The operator (in [`NORNIR_DOMAIN`]): inputs `query`, `key`, `value` (`[batch, sequence,
/// hidden]`, heads side by side), `attention_mask` (int64 `[batch, sequence]`, 1 where a key is
/// attended) and, optionally, `qkv_bias` (`[3 x hidden]`); attributes `num_heads` and `window`:
/// query `i` attends to the keys `j` with `|i - j| <= window` (half ModernBERT's
/// `local_attention`, both ends included); output `[batch, sequence, hidden]`.
pub const WINDOW_ATTENTION: &str = "WindowAttention";

impl Net<'_, '_> {
    /// Attention of `q`, `k`, `v` (`[batch, sequence, hidden]`) with the projections' biases
    /// `qkv_bias` ("" for none) within a sliding window of `window` tokens: one
    /// [`WINDOW_ATTENTION`] node.
    pub(super) fn window_attention(&mut self, [q, k, v, qkv_bias]: [&str; 4], window: usize) -> String {
        let c = self.c;
        let biased = !qkv_bias.is_empty();
        let mut formals = vec!["query", "key", "value", ATTENTION_MASK];
        if biased {
            formals.push("qkv_bias");
        }
        let body = |g: &mut Graph| window_body(g, c, window, biased);
        self.g.define_function(WINDOW_ATTENTION, &formals, &["num_heads", "window"], body);
        let mut inputs = vec![q, k, v, ATTENTION_MASK];
        if biased {
            inputs.push(qkv_bias);
        }
        let attributes = [("num_heads", Attr::Int(c.heads as i64)), ("window", Attr::Int((window / 2) as i64))];
        self.g.node(WINDOW_ATTENTION, NORNIR_DOMAIN, &inputs, &attributes, None)
    }
}

/// The operator's body in standard operators (its formal inputs by name; the window is the one
/// every local layer of the graph shares).
fn window_body(g: &mut Graph, c: &Config, window: usize, biased: bool) -> String {
    let h = c.hidden as i64;
    let half = window / 2;
    let block = half.max(1);
    let b = block as i64;
    let shape = g.op("Shape", &["query"]);
    let one = g.i64("window_sequence_axis", &[], &[1]);
    let len = g.node("Gather", "", &[&shape, &one], &[("axis", Attr::Int(0))], None);
    // pad = (block - len % block) % block
    let block_i = g.constant_i64("window_block", &[], &[b]);
    let rem = g.op("Mod", &[&len, &block_i]);
    let short = g.op("Sub", &[&block_i, &rem]);
    let pad = g.op("Mod", &[&short, &block_i]);
    let one_axis = g.constant_i64("window_unsqueeze_axis", &[1], &[0]);
    let pad = g.op("Unsqueeze", &[&pad, &one_axis]);
    let sequence_end = g.op("Unsqueeze", &[&len, &one_axis]);
    let zeros2 = g.constant_i64("window_pads_zero_2", &[2], &[0, 0]);
    let zero1 = g.constant_i64("window_pads_zero_1", &[1], &[0]);
    let block1 = g.constant_i64("window_pads_block", &[1], &[b]);
    let pad_after_keys = g.op("Add", &[&pad, &block1]);
    let concat = |g: &mut Graph, parts: &[&str]| g.node("Concat", "", parts, &[("axis", Attr::Int(0))], None);
    // Queries up to whole blocks; keys and values a block of zeros before, one more after.
    let pad_queries = concat(g, &[&zeros2, &zero1, &zero1, &pad, &zero1]);
    let pad_keys = concat(g, &[&zero1, &block1, &zero1, &zero1, &pad_after_keys, &zero1]);
    // The keys' mask in the same blocks: [batch x blocks, 1, 1, 3 x block].
    let mask_pads = concat(g, &[&zero1, &block1, &zero1, &pad_after_keys]);
    let mask = g.op("Pad", &[ATTENTION_MASK, &mask_pads]);
    let blocked = g.constant_i64("window_mask_blocks", &[3], &[0, -1, b]);
    let mask = g.op("Reshape", &[&mask, &blocked]);
    let mask = three_blocks(g, &mask, 2);
    let rows = g.constant_i64("window_mask_rows", &[4], &[-1, 1, 1, 3 * b]);
    let mask = g.op("Reshape", &[&mask, &rows]);
    let valid = g.node("Cast", "", &[&mask], &[("to", Attr::Int(BOOL.into()))], None);
    // Query a of a block against key c of its three: |block + a - c| <= half.
    let band: Vec<i64> =
        (0..block).flat_map(|a| (0..3 * block).map(move |c| i64::from((block + a).abs_diff(c) <= half))).collect();
    let band = g.constant_i64("window_band", &[1, 1, block, 3 * block], &band);
    let band = g.node("Cast", "", &[&band], &[("to", Attr::Int(BOOL.into()))], None);
    let allowed = g.op("And", &[&valid, &band]);
    let zero = g.f32("window_zero", &[], vec![0.0]);
    let min = g.f32("window_min", &[], vec![f32::MIN]);
    let bias = g.op("Where", &[&allowed, &zero, &min]);
    let padded_q = g.op("Pad", &["query", &pad_queries]);
    let rows = g.constant_i64("window_query_rows", &[3], &[-1, b, h]);
    let queries = g.op("Reshape", &[&padded_q, &rows]);
    let per_block = g.constant_i64("window_key_blocks", &[4], &[0, -1, b, h]);
    let key_rows = g.constant_i64("window_key_rows", &[3], &[-1, 3 * b, h]);
    let [keys, values] = ["key", "value"].map(|x| {
        let x = g.op("Pad", &[x, &pad_keys]);
        let x = g.op("Reshape", &[&x, &per_block]);
        let x = three_blocks(g, &x, 2);
        g.op("Reshape", &[&x, &key_rows])
    });
    let qkv_bias = if biased { "qkv_bias" } else { "" };
    let y = attention_node(g, c, [&queries, &keys, &values, qkv_bias, "", &bias]);
    let shape = g.op("Shape", &[&padded_q]);
    let y = g.op("Reshape", &[&y, &shape]);
    let start = g.constant_i64("window_cut_start", &[1], &[0]);
    let axis = g.constant_i64("window_cut_axis", &[1], &[1]);
    g.op("Slice", &[&y, &start, &sequence_end, &axis])
}

/// `[batch, blocks + 2, ...]` blocks as `[batch, blocks, 3 x ...]`: each block beside the one
/// before and after it, joined on `axis`.
fn three_blocks(g: &mut Graph, x: &str, axis: i64) -> String {
    let axis1 = g.constant_i64("window_block_axis", &[1], &[1]);
    let parts: Vec<String> = [(0, -2), (1, -1), (2, i64::MAX)]
        .into_iter()
        .map(|(start, end)| {
            let s = g.constant_i64(&format!("window_slice_start_{start}"), &[1], &[start]);
            let e = g.constant_i64(&format!("window_slice_end_{start}"), &[1], &[end]);
            g.op("Slice", &[x, &s, &e, &axis1])
        })
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    g.node("Concat", "", &parts, &[("axis", Attr::Int(axis))], None)
}
