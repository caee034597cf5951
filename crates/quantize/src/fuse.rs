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
//! compares it with the unfused graph).

use std::collections::HashMap;

use crate::onnx::{AttributeProto, GraphProto, NodeProto, TensorProto};
use crate::rewrite::{
    MS_DOMAIN, Names, attr, attr_i, default_domain, int_attribute, ints_attribute, new_node, node_name, op,
    remove_dead, splice,
};
use crate::tensor::{self, FLOAT, INT64};
use crate::{Fused, Fusion};

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

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-3 * b.abs()
}

/// A matched self-attention: the names the fused node reads, and its attributes.
struct Attention<'g> {
    q: &'g str,
    k: &'g str,
    v: &'g str,
    /// Query, key and value biases, concatenated, where all three were a constant `Add`.
    bias: Option<Vec<f32>>,
    mask: Option<&'g str>,
    heads: usize,
    scale: f32,
    /// The node whose output the fused node writes.
    last: usize,
}

/// Read-only lookups over a graph's nodes and constants.
struct View<'g> {
    g: &'g GraphProto,
    producer: HashMap<&'g str, usize>,
    consumers: HashMap<&'g str, Vec<usize>>,
    inits: HashMap<&'g str, &'g TensorProto>,
}

impl<'g> View<'g> {
    fn new(g: &'g GraphProto) -> Self {
        let (mut producer, mut consumers) = (HashMap::new(), HashMap::<&str, Vec<usize>>::new());
        for (i, n) in g.node.iter().enumerate() {
            for o in &n.output {
                producer.insert(o.as_str(), i);
            }
            for input in &n.input {
                consumers.entry(input.as_str()).or_default().push(i);
            }
        }
        let inits = g.initializer.iter().map(|t| (tensor::name(t), t)).collect();
        View { g, producer, consumers, inits }
    }

    /// The default-domain node of type `op_type` that writes `value`.
    fn made_by(&self, value: &str, op_type: &str) -> Option<&'g NodeProto> {
        let n = &self.g.node[*self.producer.get(value)?];
        (op(n) == op_type && default_domain(n)).then_some(n)
    }

    /// The default-domain nodes of type `op_type` that read `value`.
    fn read_by(&self, value: &str, op_type: &'g str) -> impl Iterator<Item = (usize, &'g NodeProto)> + '_ {
        self.consumers
            .get(value)
            .into_iter()
            .flatten()
            .map(|&i| (i, &self.g.node[i]))
            .filter(move |(_, n)| op(n) == op_type && default_domain(n))
    }

    /// An initializer, or the tensor of a `Constant` node.
    fn constant(&self, value: &str) -> Option<&'g TensorProto> {
        if let Some(t) = self.inits.get(value) {
            return Some(t);
        }
        attr(self.made_by(value, "Constant")?, "value")?.t.as_ref()
    }

    fn scalar(&self, value: &str) -> Option<f32> {
        let t = self.constant(value).filter(|t| t.data_type == Some(FLOAT) && tensor::numel(t) == 1)?;
        tensor::f32_values(t).ok()?.first().copied()
    }

    fn ints(&self, value: &str) -> Option<Vec<i64>> {
        let t = self.constant(value).filter(|t| t.data_type == Some(INT64))?;
        tensor::i64_values(t).ok()
    }

    /// `Transpose(x, perm)`'s input, where `value` is that.
    fn transposed(&self, value: &str, perm: &[i64]) -> Option<&'g str> {
        let t = self.made_by(value, "Transpose")?;
        let p = attr(t, "perm")?;
        (p.ints == perm).then(|| t.input[0].as_str())
    }

    /// `value` followed back through `Mul` and `Div` by scalar constants: the value before them
    /// and the factor they multiplied it by.
    fn unscaled(&self, mut value: &'g str) -> (&'g str, f32) {
        let mut factor = 1.0;
        loop {
            let Some(&i) = self.producer.get(value) else { return (value, factor) };
            let n = &self.g.node[i];
            if !default_domain(n) || n.input.len() != 2 {
                return (value, factor);
            }
            match (op(n), self.scalar(&n.input[0]), self.scalar(&n.input[1])) {
                ("Mul", _, Some(c)) => (value, factor) = (&n.input[0], factor * c),
                ("Mul", Some(c), _) => (value, factor) = (&n.input[1], factor * c),
                ("Div", _, Some(c)) if c != 0.0 => (value, factor) = (&n.input[0], factor / c),
                _ => return (value, factor),
            }
        }
    }

    /// Where `erf` is the Erf of an exact Gelu: the index of the pattern's last `Mul` and `x`.
    fn gelu(&self, erf: &'g NodeProto) -> Option<(usize, &'g str)> {
        let (x, factor) = self.unscaled(erf.input.first()?);
        if !close(factor, std::f32::consts::FRAC_1_SQRT_2) {
            return None;
        }
        let one_plus =
            self.read_by(&erf.output[0], "Add").find(|(_, a)| a.input.iter().any(|i| self.scalar(i) == Some(1.0)))?.1;
        let is_half = |v: &str| self.scalar(v).is_some_and(|c| close(c, 0.5));
        let is_half_x = |v: &str| {
            self.made_by(v, "Mul")
                .is_some_and(|m| (m.input[0] == x && is_half(&m.input[1])) || (m.input[1] == x && is_half(&m.input[0])))
        };
        let other = |n: &'g NodeProto, known: &str| -> Option<&'g str> {
            match n.input.as_slice() {
                [a, b] if a == known => Some(b.as_str()),
                [a, b] if b == known => Some(a.as_str()),
                _ => None,
            }
        };
        for (i, m) in self.read_by(&one_plus.output[0], "Mul") {
            let Some(with) = other(m, &one_plus.output[0]) else { continue };
            // (1 + erf) * (0.5 * x)
            if is_half_x(with) {
                return Some((i, x));
            }
            // ((1 + erf) * 0.5) * x, or ((1 + erf) * x) * 0.5
            for (j, last) in self.read_by(&m.output[0], "Mul") {
                let Some(outer) = other(last, &m.output[0]) else { continue };
                if (is_half(with) && outer == x) || (with == x && is_half(outer)) {
                    return Some((j, x));
                }
            }
        }
        None
    }

    /// Where `softmax` is the one of an encoder's self-attention over heads, what to fuse.
    fn attention(&self, softmax: &'g NodeProto, opset: i64) -> Option<Attention<'g>> {
        // Over the last axis of [batch, heads, queries, keys].
        let axis = attr_i(softmax, "axis", if opset >= 13 { -1 } else { 1 });
        if axis != -1 && axis != 3 {
            return None;
        }
        let scores = softmax.input.first()?;
        let (product, mask) = match self.made_by(scores, "Add") {
            Some(add) => {
                let from_matmul = |v: &str| self.made_by(self.unscaled(v).0, "MatMul").is_some();
                match add.input.as_slice() {
                    [a, b] if from_matmul(a) => (a.as_str(), Some(b.as_str())),
                    [a, b] if from_matmul(b) => (b.as_str(), Some(a.as_str())),
                    _ => return None,
                }
            }
            None => (scores.as_str(), None),
        };
        let (product, s0) = self.unscaled(product);
        let qk = self.made_by(product, "MatMul")?;
        let (q4, s1) = self.unscaled(&qk.input[0]);
        let (kt, s2) = self.unscaled(&qk.input[1]);
        let q_heads = self.made_by(self.transposed(q4, &[0, 2, 1, 3])?, "Reshape")?;
        let k = self.key(kt)?;
        // The probabilities, through the NaN guard of exported scaled_dot_product_attention.
        let probs = self
            .read_by(&softmax.output[0], "Where")
            .find(|(_, w)| {
                w.input.len() == 3
                    && w.input[2] == softmax.output[0]
                    && self.scalar(&w.input[1]) == Some(0.0)
                    && self.made_by(&w.input[0], "IsNaN").is_some_and(|n| n.input[0] == softmax.output[0])
            })
            .map_or(&softmax.output[0], |(_, w)| &w.output[0]);
        let (_, pv) = self.read_by(probs, "MatMul").find(|(_, m)| &m.input[0] == probs)?;
        let v = self.made_by(self.transposed(&pv.input[1], &[0, 2, 1, 3])?, "Reshape")?.input[0].as_str();
        let (_, back) = self
            .read_by(&pv.output[0], "Transpose")
            .find(|(_, t)| attr(t, "perm").is_some_and(|p| p.ints == [0, 2, 1, 3]))?;
        let (last, back_to_3d) = self.read_by(&back.output[0], "Reshape").next()?;
        let q = q_heads.input[0].as_str();
        let head_size = self.head_shape(&q_heads.input[1])?;
        let (q_in, k_in, v_in, bias) = match [q, k, v].map(|x| self.bias_add(x)) {
            [Some((qi, qb)), Some((ki, kb)), Some((vi, vb))] if qb.len() == kb.len() && kb.len() == vb.len() => {
                (qi, ki, vi, Some([qb, kb, vb].concat()))
            }
            _ => (q, k, v, None),
        };
        let hidden = match &bias {
            Some(b) => b.len() / 3,
            None => self.width(q)?,
        };
        let heads = match head_size {
            (Some(h), d) if h * d == hidden => h,
            (None, d) if d > 0 && hidden % d == 0 => hidden / d,
            _ => return None,
        };
        // MultiHeadAttention writes [batch, seq, hidden]: the reshape back must too.
        match self.shape_parts(&back_to_3d.input[1])?.as_slice() {
            [_, _, None | Some(-1)] => {}
            [_, _, Some(w)] if *w == hidden as i64 => {}
            _ => return None,
        }
        Some(Attention { q: q_in, k: k_in, v: v_in, bias, mask, heads, scale: s0 * s1 * s2, last })
    }

    /// The `[batch, seq, hidden]` value whose heads, transposed to `[batch, heads, head, seq]`, are
    /// `kt`: one `Transpose(0, 2, 3, 1)` of its reshape to heads, or a `Transpose(0, 2, 1, 3)`
    /// to `[batch, heads, seq, head]` whose last two axes are swapped by reshaping to three axes,
    /// `Transpose(0, 2, 1)` and reshaping back (as `torch.export` writes `k.transpose(-2, -1)`).
    fn key(&self, kt: &'g str) -> Option<&'g str> {
        if let Some(heads) = self.transposed(kt, &[0, 2, 3, 1]) {
            return Some(self.made_by(heads, "Reshape")?.input[0].as_str());
        }
        let to_4d = self.made_by(kt, "Reshape")?;
        let to_3d = self.made_by(self.transposed(&to_4d.input[0], &[0, 2, 1])?, "Reshape")?;
        let heads = self.transposed(&to_3d.input[0], &[0, 2, 1, 3])?;
        Some(self.made_by(heads, "Reshape")?.input[0].as_str())
    }

    /// `(heads, head size)` from the shape a `[batch, seq, hidden]` value is reshaped to: a
    /// constant, or a `Concat` whose last one or two parts are; heads unknown when given as -1.
    fn head_shape(&self, shape: &str) -> Option<(Option<usize>, usize)> {
        match self.shape_parts(shape)?.as_slice() {
            [_, _, h, Some(d)] if *d > 0 => Some((h.filter(|&h| h > 0).map(|h| h as usize), *d as usize)),
            _ => None,
        }
    }

    /// The dimensions a `Reshape` is given: a constant, or a `Concat` of one-element parts, each
    /// known where it is a constant.
    fn shape_parts(&self, shape: &str) -> Option<Vec<Option<i64>>> {
        match self.ints(shape) {
            Some(d) => Some(d.into_iter().map(Some).collect()),
            None => {
                let c = self.made_by(shape, "Concat")?;
                Some(c.input.iter().map(|p| self.ints(p).filter(|v| v.len() == 1).map(|v| v[0])).collect())
            }
        }
    }

    /// `x + b` with `b` a constant vector: `x` and `b`.
    fn bias_add(&self, value: &'g str) -> Option<(&'g str, Vec<f32>)> {
        let add = self.made_by(value, "Add")?;
        let vector = |v: &str| {
            let t = self.constant(v).filter(|t| t.data_type == Some(FLOAT) && t.dims.len() == 1)?;
            tensor::f32_values(t).ok()
        };
        match add.input.as_slice() {
            [x, b] if vector(b).is_some() => Some((x.as_str(), vector(b)?)),
            [b, x] if vector(b).is_some() => Some((x.as_str(), vector(b)?)),
            _ => None,
        }
    }

    /// The last dimension of a constant weight's product: `value` written by a MatMul or
    /// MatMulIntegerToFloat whose second input is a 2-D initializer.
    fn width(&self, value: &str) -> Option<usize> {
        let n = &self.g.node[*self.producer.get(value)?];
        if !matches!(op(n), "MatMul" | "MatMulIntegerToFloat") {
            return None;
        }
        match self.constant(n.input.get(1)?)?.dims.as_slice() {
            [_, w] if *w > 0 => Some(*w as usize),
            _ => None,
        }
    }
}
