//! An image-and-text dual encoder's two graphs (transformers' `modeling_clip.py` and
//! `modeling_siglip.py`), each runnable alone: the text tower (`input_ids`, `attention_mask` ->
//! `text_embeds`) and the vision tower (`pixel_values` -> `image_embeds`), both pre-norm layers
//! (`pre_norm.rs`) read from the description in [`Dual`], never from a family's name.

use std::collections::HashMap;

use super::{ATTENTION_MASK, Bias, INPUT_IDS, Masks, Net, Tensors};
use crate::ConvertError;
use crate::config::Config;
use crate::config::dual::{Dual, Linear, Projection, TextPool, VisionHead};
use crate::config::names::{Gated, Mlp};
use crate::graph::{Attr, FLOAT, Graph, INT64};
use crate::weights::Weights;

/// The vision graph's input, as transformers and the exporters name it.
pub(crate) const PIXEL_VALUES: &str = "pixel_values";
/// The towers' outputs.
pub(crate) const TEXT_EMBEDS: &str = "text_embeds";
pub(crate) const IMAGE_EMBEDS: &str = "image_embeds";

fn tower<'a, 'w>(g: &'a mut Graph, c: &'a Config, weights: &'w Weights, base: &str, fused: bool) -> Net<'a, 'w> {
    let t = Tensors { weights, base: base.to_owned() };
    Net { g, c, names: c.names, t, fused, lora_low: HashMap::new() }
}

/// The text tower: embeddings, layers (causal where it pools at the end-of-text token), final
/// norm, the pooled token, the projection.
pub(crate) fn build_text(
    g: &mut Graph,
    c: &Config,
    d: &Dual,
    weights: &Weights,
    fused: bool,
) -> Result<(), ConvertError> {
    let n = d.names;
    let mut net = tower(g, c, weights, n.text, fused);
    net.check_layer_count()?;
    let ids = net.g.input(INPUT_IDS, INT64, &["batch", "sequence"]);
    net.g.input(ATTENTION_MASK, INT64, &["batch", "sequence"]);
    let ids = match d.text_pool {
        TextPool::LastOfPadded { length, pad } => net.padded_ids(&ids, length, pad),
        // Padding ids read as 0, so that the highest id is a real token's.
        _ => net.masked_ids(&ids, 0),
    };
    let words = net.table(n.token_embedding, c.vocab, c.hidden)?;
    let mut x = net.g.node("Gather", "", &[&words, &ids], &[("axis", Attr::Int(0))], None);
    let positions = net.table(n.position_embedding, c.max_positions, c.hidden)?;
    let positions = net.first_rows(&positions, &ids);
    x = net.g.op("Add", &[&x, &positions]);
    let bias = match d.text_pool {
        TextPool::LastOfPadded { .. } => net.no_bias(),
        _ => Bias::Full(net.causal_bias(&ids)),
    };
    let masks = Masks { global: bias, local: None, rotary: None, local_rotary: None };
    for layer in 0..c.layers {
        x = net.pre_norm_layer(&x, &masks, layer)?;
    }
    if let Some(norm) = net.names().final_norm {
        x = net.layer_norm(&x, &net.p(norm))?;
    }
    let pooled = match d.text_pool {
        TextPool::LastOfPadded { length, .. } => net.row_at(&x, length as i64 - 1),
        TextPool::HighestId => {
            let ids = net.g.node("Cast", "", &[&ids], &[("to", Attr::Int(FLOAT.into()))], None);
            net.row_at_max(&x, &ids)
        }
        TextPool::FirstOf(id) => {
            let id = net.g.i64("text.end_of_text", &[], &[id]);
            let hits = net.g.op("Equal", &[&ids, &id]);
            let hits = net.g.node("Cast", "", &[&hits], &[("to", Attr::Int(FLOAT.into()))], None);
            net.row_at_max(&x, &hits)
        }
        TextPool::Mean => net.mean_over_tokens(&x),
    };
    net.text_embeds(&pooled, d)
}

/// The vision tower: patches (and a class token), positions, layers, the pooled row, the
/// projection or SigLIP's attention-pooling head.
pub(crate) fn build_vision(g: &mut Graph, d: &Dual, weights: &Weights, fused: bool) -> Result<(), ConvertError> {
    let (c, n, image) = (&d.vision, d.names, d.image);
    let h = c.hidden;
    let mut net = tower(g, c, weights, n.vision, fused);
    if let VisionHead::Eva(eva) = d.vision_head {
        return net.eva_vision(d, &eva);
    }
    net.check_layer_count()?;
    let pixels = net.g.input(PIXEL_VALUES, FLOAT, &["batch", "channels", "height", "width"]);
    let conv = net.p(n.patch_embedding);
    let p = image.patch;
    let kernel = net.t.get(&format!("{conv}.weight"), &[h, image.channels, p, p])?;
    let kernel = net.g.f32(&format!("{conv}.weight"), &[h, image.channels, p, p], kernel);
    let mut inputs = vec![pixels, kernel];
    if matches!(d.vision_head, VisionHead::AttentionPool) {
        let bias = net.t.get(&format!("{conv}.bias"), &[h])?;
        inputs.push(net.g.f32(&format!("{conv}.bias"), &[h], bias));
    }
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let (side, stride) = (Attr::Ints(vec![p as i64, p as i64]), Attr::Ints(vec![p as i64, p as i64]));
    let patches = net.g.node("Conv", "", &inputs, &[("kernel_shape", side), ("strides", stride)], None);
    let flat = net.g.i64("vision.flat_shape", &[3], &[0, h as i64, -1]);
    let patches = net.g.op("Reshape", &[&patches, &flat]);
    let mut x = net.g.node("Transpose", "", &[&patches], &[("perm", Attr::Ints(vec![0, 2, 1]))], None);
    if let VisionHead::ClassToken { .. } = d.vision_head {
        let class = net.p(n.class_embedding);
        let class = net.t.get(&class, &[h])?;
        let class = net.g.f32("vision.class_token", &[1, 1, h], class);
        let class = net.repeat_per_row(&class, &x, 3);
        x = net.g.node("Concat", "", &[&class, &x], &[("axis", Attr::Int(1))], None);
    }
    let positions = net.table(n.position_embedding, c.max_positions, h)?;
    x = net.g.op("Add", &[&x, &positions]);
    if let VisionHead::ClassToken { .. } = d.vision_head {
        x = net.layer_norm(&x, &net.p(n.pre_norm))?;
    }
    let masks = Masks { global: net.no_bias(), local: None, rotary: None, local_rotary: None };
    for layer in 0..c.layers {
        x = net.pre_norm_layer(&x, &masks, layer)?;
    }
    let out = match d.vision_head {
        VisionHead::ClassToken { projection } => {
            let first = net.row_at(&x, 0);
            let first = net.layer_norm(&first, &net.p(n.post_norm))?;
            net.project(&first, projection, h, d.dim)?
        }
        VisionHead::AttentionPool => {
            let x = net.layer_norm(&x, &net.p(n.post_norm))?;
            net.attention_pool(&x, &net.p(n.pool_head))?
        }
        VisionHead::Eva(_) => unreachable!("built by eva_vision"),
    };
    net.image_embeds(&out)
}

impl Net<'_, '_> {
    /// `pooled` through the text projections, as the graph's `text_embeds` output.
    pub(super) fn text_embeds(&mut self, pooled: &str, d: &Dual) -> Result<(), ConvertError> {
        let mut out = pooled.to_owned();
        let mut width = self.c.hidden;
        for p in &d.text_projections {
            out = self.projected(&out, p, width)?;
            width = p.outputs;
        }
        self.g.rename_value(&out, TEXT_EMBEDS);
        self.g.output(TEXT_EMBEDS, FLOAT, &["batch", "dim"]);
        Ok(())
    }

    /// `pooled` as the graph's `image_embeds` output.
    pub(super) fn image_embeds(&mut self, pooled: &str) -> Result<(), ConvertError> {
        self.g.rename_value(pooled, IMAGE_EMBEDS);
        self.g.output(IMAGE_EMBEDS, FLOAT, &["batch", "dim"]);
        Ok(())
    }

    /// The table `name` (after the tower's prefix), `[rows, width]`.
    pub(super) fn table(&mut self, name: &str, rows: usize, width: usize) -> Result<String, ConvertError> {
        let name = format!("{}.weight", self.p(name));
        let values = self.t.get(&name, &[rows, width])?;
        Ok(self.g.f32(&name, &[rows, width], values))
    }

    /// No bias: nothing in a fused graph, a zero the plain graph's scores broadcast.
    pub(super) fn no_bias(&mut self) -> Bias {
        Bias::Full(if self.fused { String::new() } else { self.scalar("attention.no_bias", 0.0) })
    }

    /// `ids` with the padding positions (attention mask 0) set to `value`.
    fn masked_ids(&mut self, ids: &str, value: i64) -> String {
        let keep = self.g.node("Cast", "", &[ATTENTION_MASK], &[("to", Attr::Int(9))], None);
        let value = self.g.i64(&format!("text.padding_id_{value}"), &[], &[value]);
        self.g.op("Where", &[&keep, ids, &value])
    }

    /// `ids` with the padding set to `pad`, then padded with `pad` (or cut) to `length` tokens:
    /// `padding="max_length"` done in the graph, whatever padding the caller used.
    fn padded_ids(&mut self, ids: &str, length: usize, pad: i64) -> String {
        let ids = self.masked_ids(ids, pad);
        let row = self.g.i64("text.padding_row", &[1, length], &vec![pad; length]);
        let row = self.repeat_per_row(&row, &ids, 2);
        let long = self.g.node("Concat", "", &[&ids, &row], &[("axis", Attr::Int(1))], None);
        let (zero, end, one) = (
            self.g.i64("text.cut_start", &[1], &[0]),
            self.g.i64("text.cut_end", &[1], &[length as i64]),
            self.g.i64("text.cut_axis", &[1], &[1]),
        );
        self.g.op("Slice", &[&long, &zero, &end, &one])
    }

    /// `row` (`[1, ...]`, of `rank` axes) repeated once per row of `like` (`[batch, ...]`).
    pub(super) fn repeat_per_row(&mut self, row: &str, like: &str, rank: usize) -> String {
        let shape = self.g.op("Shape", &[like]);
        let (zero, one) = (self.g.i64("repeat.start", &[1], &[0]), self.g.i64("repeat.end", &[1], &[1]));
        let batch = self.g.op("Slice", &[&shape, &zero, &one]);
        let rest = self.g.i64(&format!("repeat.ones_{rank}"), &[rank - 1], &vec![1; rank - 1]);
        let repeats = self.g.node("Concat", "", &[&batch, &rest], &[("axis", Attr::Int(0))], None);
        self.g.op("Tile", &[row, &repeats])
    }

    /// The sequence length of `ids` (`[batch, sequence]`), an int64 scalar.
    fn length_of(&mut self, ids: &str) -> String {
        let shape = self.g.op("Shape", &[ids]);
        let one = self.g.i64("length.axis", &[], &[1]);
        self.g.node("Gather", "", &[&shape, &one], &[("axis", Attr::Int(0))], None)
    }

    /// The first rows of `table`, one per position of `ids`.
    fn first_rows(&mut self, table: &str, ids: &str) -> String {
        let length = self.length_of(ids);
        let axis = self.g.i64("rows.axes", &[1], &[0]);
        let end = self.g.op("Unsqueeze", &[&length, &axis]);
        let start = self.g.i64("rows.start", &[1], &[0]);
        self.g.op("Slice", &[table, &start, &end, &axis])
    }

    /// `[1, 1, sequence, sequence]`: the most negative float where a key comes after its query.
    fn causal_bias(&mut self, ids: &str) -> String {
        let length = self.length_of(ids);
        let (zero, one) = (self.g.i64("causal.zero", &[], &[0]), self.g.i64("causal.one", &[], &[1]));
        let range = self.g.op("Range", &[&zero, &length, &one]);
        let (column, row) = (self.g.i64("causal.column", &[1], &[1]), self.g.i64("causal.row", &[1], &[0]));
        let queries = self.g.op("Unsqueeze", &[&range, &column]);
        let keys = self.g.op("Unsqueeze", &[&range, &row]);
        let later = self.g.op("Greater", &[&keys, &queries]);
        let (min, none) = (self.scalar("causal.min", f32::MIN), self.scalar("causal.none", 0.0));
        let bias = self.g.op("Where", &[&later, &min, &none]);
        let axes = self.g.i64("causal.axes", &[2], &[0, 1]);
        self.g.op("Unsqueeze", &[&bias, &axes])
    }

    /// Position `i` of every row of `x` (`[batch, sequence, width]`): `[batch, width]`.
    pub(super) fn row_at(&mut self, x: &str, i: i64) -> String {
        let i = self.g.i64(&format!("row_at_{i}"), &[], &[i]);
        self.g.node("Gather", "", &[x, &i], &[("axis", Attr::Int(1))], None)
    }

    /// Each row of `x` at the first position where `scores` (`[batch, sequence]`) is highest.
    fn row_at_max(&mut self, x: &str, scores: &str) -> String {
        let at = self.g.node("ArgMax", "", &[scores], &[("axis", Attr::Int(1)), ("keepdims", Attr::Int(1))], None);
        self.g.node("GatherND", "", &[x, &at], &[("batch_dims", Attr::Int(1))], None)
    }

    /// `x` (`inputs` wide) through `p`'s layer and its activation.
    pub(super) fn projected(&mut self, x: &str, p: &Projection, inputs: usize) -> Result<String, ConvertError> {
        let y = self.project(x, p.layer, inputs, p.outputs)?;
        Ok(match p.then {
            Some(activation) => self.activation(&y, activation),
            None => y,
        })
    }

    pub(super) fn project(
        &mut self,
        x: &str,
        layer: Linear,
        inputs: usize,
        outputs: usize,
    ) -> Result<String, ConvertError> {
        self.linear_rows(x, layer.name, inputs, outputs, 0..outputs, layer.bias)
    }

    /// SigLIP's `MultiheadAttentionPoolingHead` (`head`): the probe attends over `x` through
    /// `nn.MultiheadAttention` (one packed input projection), then `out + mlp(norm(out))`; the
    /// probe's row.
    fn attention_pool(&mut self, x: &str, head: &str) -> Result<String, ConvertError> {
        let h = self.c.hidden;
        let probe = self.t.get(&format!("{head}.probe"), &[1, 1, h])?;
        let probe = self.g.f32(&format!("{head}.probe"), &[1, 1, h], probe);
        let probe = self.repeat_per_row(&probe, x, 3);
        let q = self.packed_projection(&probe, head, 0)?;
        let k = self.packed_projection(x, head, 1)?;
        let v = self.packed_projection(x, head, 2)?;
        let no_bias = self.no_bias();
        let context = self.attend(&q, &k, &v, &no_bias, head);
        let out = self.linear(&context, &format!("{head}.attention.out_proj"), h, h)?;
        let normed = self.layer_norm(&out, &format!("{head}.layernorm"))?;
        let f = self.feed_forward(&normed, head, &HEAD_MLP)?;
        let pooled = self.g.op("Add", &[&out, &f]);
        Ok(self.row_at(&pooled, 0))
    }

    /// Part `part` (0 queries, 1 keys, 2 values) of `nn.MultiheadAttention`'s packed
    /// `in_proj_weight` `[3 · hidden, hidden]` and `in_proj_bias`, applied to `x`.
    fn packed_projection(&mut self, x: &str, head: &str, part: usize) -> Result<String, ConvertError> {
        let h = self.c.hidden;
        let rows = part * h..(part + 1) * h;
        let name = format!("{head}.attention.in_proj_weight");
        let w = self.t.weights.f32_rows(&name, &[3 * h, h], rows.clone())?;
        let w = self.g.weight(&format!("{name}_t_{part}"), &[h, h], super::transpose(&w, h, h));
        let b = self.t.get(&format!("{head}.attention.in_proj_bias"), &[3 * h])?;
        let b = self.g.f32(&format!("{head}.attention.in_proj_bias_{part}"), &[h], b[rows].to_vec());
        let y = self.g.op("MatMul", &[x, &w]);
        Ok(self.g.op("Add", &[&y, &b]))
    }
}

/// The attention-pooling head's MLP (after its prefix).
const HEAD_MLP: Mlp = Mlp {
    plain: "mlp.fc1",
    gated: Gated::Fused { weight: "mlp.fc1", activated_first: None },
    down: "mlp.fc2",
    norm: "",
};
