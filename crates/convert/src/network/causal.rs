//! A causal decoder's attention (`decoder.rs` writes the rest): the causal bias, with Mistral's
//! window and the padding mask, added to scores written out in ONNX's operators; and in a fused
//! graph, for a batch without padding, ONNX Runtime's `GroupQueryAttention`, whose CPU kernel
//! never holds a layer's queries x keys matrix. Each layer is then an `If` between the two, and
//! only a padded batch makes the bias.

use super::{ATTENTION_MASK, Net};
use crate::config::Decoder;
use crate::graph::{Attr, FLOAT, Graph, MS_DOMAIN};

/// Bool and int32, as ONNX numbers its element types.
const BOOL: i32 = 9;
const INT32: i32 = 6;

/// How the layers attend.
pub(super) enum Causal {
    /// The plain graph: every batch adds the causal bias `[batch, 1, queries, keys]`.
    Bias(String),
    /// The fused graph: each layer is an `If` on `unpadded`. A batch without padding runs
    /// `com.microsoft.GroupQueryAttention`, causal, with each row's length (`seqlens_k`, its last
    /// position, int32 `[batch]`) and the sequence's (`total`, an int32 scalar); a padded batch
    /// adds `bias`, which is made only for such a batch (a `[1, 1, 1, 1]` zero otherwise).
    Grouped { unpadded: String, bias: String, seqlens_k: String, total: String },
}

impl Net<'_, '_> {
    /// How the layers attend: the causal bias of every batch, or in a fused graph
    /// `GroupQueryAttention`'s inputs and the bias of a padded batch only. ONNX Runtime's
    /// kernel takes heads whose width is a multiple of 8 only; others keep the bias.
    pub(super) fn causal(&mut self, d: &Decoder) -> Causal {
        let (r, window) = (self.position_range(), d.sliding_window);
        if !self.fused || !d.head_dim.is_multiple_of(8) {
            return Causal::Bias(causal_bias(self.g, &r, window));
        }
        let unpadded = self.unpadded();
        let unused = self.g.f32("causal_bias_unused", &[1, 1, 1, 1], vec![0.0]);
        let none = self.g.branch("causal_bias.unpadded", FLOAT, |g| g.op("Identity", &[&unused]));
        let whole = self.g.branch("causal_bias.padded", FLOAT, |g| causal_bias(g, &r, window));
        let branches = [("then_branch", Attr::Graph(none)), ("else_branch", Attr::Graph(whole))];
        let bias = self.g.node("If", "", &[&unpadded], &branches, None);
        let axis = self.g.constant_i64("sequence_axis_1", &[1], &[1]);
        let attended = self.g.node("ReduceSum", "", &[ATTENTION_MASK, &axis], &[("keepdims", Attr::Int(0))], None);
        let one = self.g.constant_i64("position_one", &[], &[1]);
        let last = self.g.op("Sub", &[&attended, &one]);
        let seqlens_k = self.g.node("Cast", "", &[&last], &[("to", Attr::Int(INT32.into()))], Some("seqlens_k"));
        let length = self.sequence_length();
        let total =
            self.g.node("Cast", "", &[&length], &[("to", Attr::Int(INT32.into()))], Some("total_sequence_length"));
        Causal::Grouped { unpadded, bias, seqlens_k, total }
    }

    /// Layer `l`'s attention of rotated `q` `[batch, sequence, heads, head width]` and `k`, `v`
    /// (`kv` heads) as `causal` says: `[batch, sequence, heads · head width]`.
    pub(super) fn causal_attention(
        &mut self,
        [q, k, v]: [&str; 3],
        causal: &Causal,
        shape: Heads,
        window: Option<usize>,
        l: &str,
    ) -> String {
        match causal {
            Causal::Bias(bias) => attention_by_bias(self.g, [q, k, v], bias, shape),
            Causal::Grouped { unpadded, bias, seqlens_k, total } => {
                let [merge_q, merge_kv] = [shape.heads, shape.kv].map(|n| merged_heads_shape(self.g, n * shape.dim));
                let grouped = self.g.branch(&format!("{l}.attention.unpadded"), FLOAT, |g| {
                    let [q, k, v] =
                        [(q, &merge_q), (k, &merge_kv), (v, &merge_kv)].map(|(x, merge)| g.op("Reshape", &[x, merge]));
                    grouped_query_attention(g, [&q, &k, &v], [seqlens_k.as_str(), total.as_str()], shape, window)
                });
                let masked = self
                    .g
                    .branch(&format!("{l}.attention.padded"), FLOAT, |g| attention_by_bias(g, [q, k, v], bias, shape));
                let branches = [("then_branch", Attr::Graph(grouped)), ("else_branch", Attr::Graph(masked))];
                self.g.node("If", "", &[unpadded.as_str()], &branches, None)
            }
        }
    }
}

/// A decoder's attention heads: `heads` query heads and `kv` key/value heads, each `dim` wide.
#[derive(Clone, Copy)]
pub(super) struct Heads {
    pub(super) heads: usize,
    pub(super) kv: usize,
    pub(super) dim: usize,
}

/// `[0, 0, width]`: heads side by side again, `[batch, sequence, width]`.
fn merged_heads_shape(g: &mut Graph, width: usize) -> String {
    g.constant_i64(&format!("heads_merge_{width}"), &[3], &[0, 0, width as i64])
}

/// The additive bias `[batch, 1, queries, keys]` over positions `r`: 0 where key `j` is not
/// padding, `j <= i` (and `i - j < window`), the float minimum elsewhere. One `Where`, so a row
/// with no key allowed is the minimum throughout, whose softmax is uniform, not NaN.
pub(super) fn causal_bias(g: &mut Graph, r: &str, window: Option<usize>) -> String {
    let (rows, cols) = (g.constant_i64("causal_rows", &[1], &[1]), g.constant_i64("causal_cols", &[1], &[0]));
    let i = g.op("Unsqueeze", &[r, &rows]);
    let j = g.op("Unsqueeze", &[r, &cols]);
    let mut allowed = g.op("LessOrEqual", &[&j, &i]);
    if let Some(window) = window {
        let distance = g.op("Sub", &[&i, &j]);
        let w = g.constant_i64("sliding_window", &[], &[window as i64]);
        let inside = g.op("Less", &[&distance, &w]);
        allowed = g.op("And", &[&allowed, &inside]);
    }
    let valid = g.node("Cast", "", &[ATTENTION_MASK], &[("to", Attr::Int(BOOL.into()))], None);
    let axes = g.constant_i64("causal_mask_axes", &[2], &[1, 2]);
    let valid = g.op("Unsqueeze", &[&valid, &axes]);
    let allowed = g.op("And", &[&valid, &allowed]);
    let zero = g.constant_f32("causal_zero", 0.0);
    let min = g.constant_f32("causal_min", f32::MIN);
    g.node("Where", "", &[&allowed, &zero, &min], &[], Some("causal_bias"))
}

/// Scaled dot-product attention of rotated `q` `[batch, sequence, heads, head width]` and `k`,
/// `v` (`kv` heads) with the additive `bias`, written out in ONNX's operators:
/// `[batch, sequence, heads · head width]`.
fn attention_by_bias(g: &mut Graph, [q, k, v]: [&str; 3], bias: &str, h: Heads) -> String {
    let Heads { heads, kv, dim } = h;
    let k = repeat_kv(g, k, heads, kv, dim);
    let v = repeat_kv(g, v, heads, kv, dim);
    let q = g.node("Transpose", "", &[q], &[("perm", Attr::Ints(vec![0, 2, 1, 3]))], None);
    let k = g.node("Transpose", "", &[&k], &[("perm", Attr::Ints(vec![0, 2, 3, 1]))], None);
    let v = g.node("Transpose", "", &[&v], &[("perm", Attr::Ints(vec![0, 2, 1, 3]))], None);
    let scores = g.op("MatMul", &[&q, &k]);
    let scale = g.constant_f32(&format!("attention_scale_{dim}"), 1.0 / (dim as f32).sqrt());
    let scores = g.op("Mul", &[&scores, &scale]);
    let scores = g.op("Add", &[&scores, bias]);
    let probs = g.node("Softmax", "", &[&scores], &[("axis", Attr::Int(-1))], None);
    let context = g.op("MatMul", &[&probs, &v]);
    let context = g.node("Transpose", "", &[&context], &[("perm", Attr::Ints(vec![0, 2, 1, 3]))], None);
    let merge = merged_heads_shape(g, heads * dim);
    g.op("Reshape", &[&context, &merge])
}

/// `com.microsoft.GroupQueryAttention` of `q` `[batch, sequence, heads · head width]`, `k` and
/// `v` (`kv` heads side by side) for a batch without padding: causal, each query head reading
/// key head `h / (heads / kv)` as [`repeat_kv`] does, and with a window the keys `i - j <
/// window`: ONNX Runtime 1.31's `local_window_size` is the number of keys a query reads, itself
/// included (`scripts/decoders_reference.py` checks it with a window shorter than its rows).
/// Its present key and value are written, as the schema requires, and not read.
fn grouped_query_attention(
    g: &mut Graph,
    [q, k, v]: [&str; 3],
    [seqlens_k, total]: [&str; 2],
    h: Heads,
    window: Option<usize>,
) -> String {
    let scale = 1.0 / (h.dim as f32).sqrt();
    let mut attrs = vec![
        ("num_heads", Attr::Int(h.heads as i64)),
        ("kv_num_heads", Attr::Int(h.kv as i64)),
        ("scale", Attr::Float(scale)),
    ];
    if let Some(window) = window {
        attrs.push(("local_window_size", Attr::Int(window as i64)));
    }
    g.node_with_extra_outputs("GroupQueryAttention", MS_DOMAIN, &[q, k, v, "", "", seqlens_k, total], &attrs, 2)
}

/// Grouped-query attention's sharing: `x` `[batch, sequence, kv heads, head width]` with each
/// key/value head repeated for its `heads / kv heads` query heads (query head `h` reads key
/// head `h / repeats`, as transformers' `repeat_kv`), `[batch, sequence, heads, head width]`.
pub(super) fn repeat_kv(g: &mut Graph, x: &str, heads: usize, kv_heads: usize, head_dim: usize) -> String {
    if heads == kv_heads {
        return x.to_owned();
    }
    let repeats = heads / kv_heads;
    let axis = g.i64("kv_repeat_axis", &[1], &[3]);
    let x = g.op("Unsqueeze", &[x, &axis]);
    let shape = g.i64(
        &format!("kv_repeat_{kv_heads}x{repeats}"),
        &[5],
        &[1, 1, kv_heads as i64, repeats as i64, head_dim as i64],
    );
    let x = g.op("Expand", &[&x, &shape]);
    let merged = g.i64(&format!("kv_merge_{heads}x{head_dim}"), &[4], &[0, 0, heads as i64, head_dim as i64]);
    g.op("Reshape", &[&x, &merged])
}
