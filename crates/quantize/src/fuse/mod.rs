//! Fusions after the int8 rewrite: subgraphs that ONNX Runtime's CPU provider runs as many small
//! kernels, each replaced by one of its `com.microsoft` operators computing the same function.
//! ONNX Runtime's own extended-level fusions do not match these graphs once their MatMuls are
//! int8 (and its `SkipLayerNormalization` measured slower than the nodes it replaces), so the
//! rewrite does it.
//!
//! - [`Fusion::Gelu`]: `x * 0.5 * (1 + erf(x / sqrt 2))`, in any order of its products, becomes
//!   `Gelu(x)`.
//! - [`Fusion::Attention`]: an encoder's self-attention over heads (reshape to heads, transpose,
//!   scale, `Q Kᵀ`, an additive mask, softmax, `· V`, transpose and reshape back) becomes
//!   `MultiHeadAttention(q, k, v, bias, attention_bias = mask)`, the query, key and value biases
//!   taken into it. Each row of the result still depends on its own text only.
//! - [`Fusion::Qkv`] (asked for only): the `MatMulIntegerToFloat` nodes that read one quantized
//!   input with the same scales become one, over their weights side by side, and a `Split`.
//!
//! A fusion adds the new node in place of the subgraph's last node, so that it writes the same
//! value; the nodes it made dead are then removed, and a node whose value something else still
//! reads stays. The result is checked by the command that runs it (`nornir vector quantize`
//! compares it with the unfused graph). `view.rs` finds the subgraphs; this file rewrites them.

mod view;

use std::collections::HashMap;

use crate::graph::{
    MS_DOMAIN, Names, default_domain, int_attribute, ints_attribute, new_node, node_name, op, remove_dead, splice,
};
use crate::onnx::{AttributeProto, GraphProto, NodeProto, TensorProto};
use crate::tensor::{self};
use crate::{Fused, Fusion};
use view::{Attention, View};

/// Applies the fusions in `which`; returns what was fused, in graph order.
pub(crate) fn fuse(g: &mut GraphProto, which: &[Fusion], opset: i64) -> Vec<Fused> {
    let mut out = Rewrites { names: Names::of(g), ..Rewrites::default() };
    {
        let view = View::new(g);
        for (i, n) in g.node.iter().enumerate() {
            if !default_domain(n) {
                continue;
            }
            let name = node_name(n, i);
            match op(n) {
                "Erf" if which.contains(&Fusion::Gelu) => {
                    if let Some((last, x)) = view.gelu(n).filter(|(last, _)| !out.replacements.contains_key(last)) {
                        let y = g.node[last].output[0].as_str();
                        let node = new_node("Gelu", MS_DOMAIN, out.names.fresh(&format!("{name}_gelu")), &[x], &[y]);
                        out.replace(last, vec![node], Fusion::Gelu);
                    }
                }
                "Softmax" if which.contains(&Fusion::Attention) => {
                    if let Some(a) = view.attention(n, opset).filter(|a| !out.replacements.contains_key(&a.last)) {
                        let nodes = out.attention(&a, &format!("{name}_attention"), g.node[a.last].output[0].as_str());
                        out.replace(a.last, nodes, Fusion::Attention);
                    }
                }
                _ => {}
            }
        }
    }
    let mut fused = out.fused;
    splice(g, out.replacements, out.inits);
    if which.contains(&Fusion::Qkv) {
        fused.extend(shared_input_products(g, opset));
    }
    if !fused.is_empty() {
        remove_dead(g, |_| true);
    }
    fused
}

/// The `MatMulIntegerToFloat` nodes that read the same input, scale and zero points, with
/// constant 2-D weights of one type and as many rows, and one scale per column: one node over the
/// weights side by side at the first one's place, and a `Split` of its output into theirs.
fn shared_input_products(g: &mut GraphProto, opset: i64) -> Vec<Fused> {
    let inits: HashMap<&str, &TensorProto> = g.initializer.iter().map(|t| (tensor::name(t), t)).collect();
    let mut groups: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
    for (i, n) in g.node.iter().enumerate() {
        if op(n) != "MatMulIntegerToFloat" || n.domain.as_deref() != Some(MS_DOMAIN) || n.input.len() < 5 {
            continue;
        }
        let (Some(w), Some(s)) = (inits.get(n.input[1].as_str()), inits.get(n.input[3].as_str())) else { continue };
        if w.dims.len() != 2 || s.dims.len() != 1 || s.dims[0] != w.dims[1] {
            continue;
        }
        let mut key: Vec<String> = [0, 2, 4, 5].iter().map(|&k| n.input.get(k).cloned().unwrap_or_default()).collect();
        key.push(format!("{:?}/{}", w.data_type, w.dims[0]));
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    let mut names = Names::of(g);
    let (mut fused, mut replaced, mut new_inits) = (Vec::new(), HashMap::new(), Vec::new());
    for (_, members) in groups.into_iter().filter(|(_, m)| m.len() > 1) {
        let nodes: Vec<&NodeProto> = members.iter().map(|&i| &g.node[i]).collect();
        let Some((product, split, tensors)) = side_by_side(&nodes, &inits, &mut names, opset) else { continue };
        fused.push(Fused { fusion: Fusion::Qkv, node: product.name.clone().unwrap_or_default() });
        new_inits.extend(tensors);
        replaced.insert(members[0], vec![product, split]);
        replaced.extend(members[1..].iter().map(|&i| (i, Vec::new())));
    }
    splice(g, replaced, new_inits);
    fused
}

/// One `MatMulIntegerToFloat` over the weights of `nodes` side by side, the `Split` of its output
/// into theirs, and the new initializers; `None` if a weight or scale cannot be read.
fn side_by_side(
    nodes: &[&NodeProto],
    inits: &HashMap<&str, &TensorProto>,
    names: &mut Names,
    opset: i64,
) -> Option<(NodeProto, NodeProto, Vec<TensorProto>)> {
    let weights: Vec<&TensorProto> = nodes.iter().map(|n| inits[n.input[1].as_str()]).collect();
    let values = weights.iter().map(|t| tensor::int8_values(t)).collect::<Result<Vec<_>, _>>().ok()?;
    let scales =
        nodes.iter().map(|n| tensor::f32_values(inits[n.input[3].as_str()])).collect::<Result<Vec<_>, _>>().ok()?;
    let rows = weights[0].dims[0] as usize;
    let widths: Vec<usize> = weights.iter().map(|t| t.dims[1] as usize).collect();
    let total: usize = widths.iter().sum();
    let name = names.fresh(&format!("{}_side_by_side", nodes[0].name.as_deref().unwrap_or("matmul")));
    let mut weight = TensorProto::new();
    weight.name = Some(names.fresh(&format!("{name}_weight")));
    weight.dims = vec![rows as i64, total as i64];
    weight.data_type = weights[0].data_type;
    // Row r of the new weight is row r of each weight in turn; 8-bit values are stored as bytes.
    weight.raw_data = Some(
        (0..rows)
            .flat_map(|r| {
                values.iter().zip(&widths).flat_map(move |(v, &n)| v[r * n..(r + 1) * n].iter().map(|&x| x as u8))
            })
            .collect(),
    );
    let scale = tensor::new_f32(&names.fresh(&format!("{name}_scale")), &[total as i64], &scales.concat());
    let y = names.fresh(&format!("{name}_output"));
    let mut inputs: Vec<&str> = nodes[0].input.iter().map(String::as_str).collect();
    inputs[1] = tensor::name(&weight);
    inputs[3] = tensor::name(&scale);
    let product = new_node("MatMulIntegerToFloat", MS_DOMAIN, name.clone(), &inputs, &[&y]);
    let outputs: Vec<&str> = nodes.iter().map(|n| n.output[0].as_str()).collect();
    let sizes: Vec<i64> = widths.iter().map(|&n| n as i64).collect();
    let mut tensors = vec![weight, scale];
    // `split` is an input from opset 13 on, an attribute before.
    let mut split = if opset >= 13 {
        let sizes_name = names.fresh(&format!("{name}_split_sizes"));
        tensors.push(tensor::new_i64(&sizes_name, &[sizes.len() as i64], &sizes));
        new_node("Split", "", names.fresh(&format!("{name}_split")), &[&y, &sizes_name], &outputs)
    } else {
        let mut n = new_node("Split", "", names.fresh(&format!("{name}_split")), &[&y], &outputs);
        n.attribute.push(ints_attribute("split", sizes));
        n
    };
    split.attribute.push(int_attribute("axis", -1));
    Some((product, split, tensors))
}

/// The nodes that replace a subgraph's last node, by its index, and what they need.
#[derive(Default)]
struct Rewrites {
    replacements: HashMap<usize, Vec<NodeProto>>,
    inits: Vec<TensorProto>,
    fused: Vec<Fused>,
    names: Names,
    /// Each attention mask, broadcast to `[batch, 1, queries, keys]`, by its name: made once,
    /// where the first attention reads it.
    masks: HashMap<String, String>,
}

impl Rewrites {
    /// Records `nodes` in place of node `last`, which no earlier match ends at.
    fn replace(&mut self, last: usize, nodes: Vec<NodeProto>, fusion: Fusion) {
        let node = nodes.last().and_then(|n| n.name.clone()).unwrap_or_default();
        self.fused.push(Fused { fusion, node });
        self.replacements.insert(last, nodes);
    }

    fn int64(&mut self, base: &str, values: &[i64]) -> String {
        let name = self.names.fresh(base);
        self.inits.push(tensor::new_i64(&name, &[values.len() as i64], values));
        name
    }

    /// `MultiHeadAttention` writing `y`, after the nodes that broadcast its mask if this is the
    /// mask's first reader: ONNX Runtime takes `attention_bias` as `[batch or 1, heads or 1,
    /// queries, keys]`, where exports often give `[batch, 1, 1, keys]`; expanding it to
    /// `[.., .., queries, ..]` changes no value.
    fn attention(&mut self, a: &Attention<'_>, name: &str, y: &str) -> Vec<NodeProto> {
        let mut nodes = Vec::new();
        let mask = a.mask.map(|mask| match self.masks.get(mask) {
            Some(done) => done.clone(),
            None => {
                let [shape, queries, target, expanded] =
                    ["q_shape", "queries", "mask_shape", "mask"].map(|v| self.names.fresh(&format!("{name}_{v}")));
                let (one, two, ones) = (
                    self.int64(&format!("{name}_one"), &[1]),
                    self.int64(&format!("{name}_two"), &[2]),
                    self.int64(&format!("{name}_ones"), &[1, 1]),
                );
                let mut node = |op_type: &str, inputs: &[&str], output: &str| {
                    new_node(
                        op_type,
                        "",
                        self.names.fresh(&format!("{output}_{}", op_type.to_lowercase())),
                        inputs,
                        &[output],
                    )
                };
                let mut concat = node("Concat", &[&ones, &queries, &one], &target);
                concat.attribute.push(int_attribute("axis", 0));
                nodes.extend([
                    node("Shape", &[a.q], &shape),
                    node("Slice", &[&shape, &one, &two], &queries),
                    concat,
                    node("Expand", &[mask, &target], &expanded),
                ]);
                self.masks.insert(mask.to_owned(), expanded.clone());
                expanded
            }
        });
        let bias = a.bias.as_ref().map(|values| {
            let bias = self.names.fresh(&format!("{name}_qkv_bias"));
            self.inits.push(tensor::new_f32(&bias, &[values.len() as i64], values));
            bias
        });
        let inputs = [a.q, a.k, a.v, bias.as_deref().unwrap_or_default(), "", mask.as_deref().unwrap_or_default()];
        let used = if mask.is_some() {
            6
        } else if bias.is_some() {
            4
        } else {
            3
        };
        let mut node = new_node("MultiHeadAttention", MS_DOMAIN, self.names.fresh(name), &inputs[..used], &[y]);
        node.attribute.push(int_attribute("num_heads", a.heads as i64));
        node.attribute.push(float_attribute("scale", a.scale));
        nodes.push(node);
        nodes
    }
}

fn float_attribute(name: &str, value: f32) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = Some(name.to_owned());
    a.f = Some(value);
    a.type_ = Some(1);
    a
}
