//! Read-only matching over a graph: the subgraphs the fusions replace, found and checked.

use std::collections::HashMap;

use crate::graph::{attr, attr_i, default_domain, op};
use crate::onnx::{GraphProto, NodeProto, TensorProto};
use crate::tensor::{self, FLOAT, INT64};

pub(crate) fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-3 * b.abs()
}

/// A matched self-attention: the names the fused node reads, and its attributes.
pub(crate) struct Attention<'g> {
    pub(crate) q: &'g str,
    pub(crate) k: &'g str,
    pub(crate) v: &'g str,
    /// Query, key and value biases, concatenated, where all three were a constant `Add`.
    pub(crate) bias: Option<Vec<f32>>,
    pub(crate) mask: Option<&'g str>,
    pub(crate) heads: usize,
    pub(crate) scale: f32,
    /// The node whose output the fused node writes.
    pub(crate) last: usize,
}

/// Read-only lookups over a graph's nodes and constants.
pub(crate) struct View<'g> {
    pub(crate) g: &'g GraphProto,
    pub(crate) producer: HashMap<&'g str, usize>,
    pub(crate) consumers: HashMap<&'g str, Vec<usize>>,
    pub(crate) inits: HashMap<&'g str, &'g TensorProto>,
}

impl<'g> View<'g> {
    pub(crate) fn new(g: &'g GraphProto) -> Self {
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
    pub(crate) fn made_by(&self, value: &str, op_type: &str) -> Option<&'g NodeProto> {
        let n = &self.g.node[*self.producer.get(value)?];
        (op(n) == op_type && default_domain(n)).then_some(n)
    }

    /// The default-domain nodes of type `op_type` that read `value`.
    pub(crate) fn read_by(&self, value: &str, op_type: &'g str) -> impl Iterator<Item = (usize, &'g NodeProto)> + '_ {
        self.consumers
            .get(value)
            .into_iter()
            .flatten()
            .map(|&i| (i, &self.g.node[i]))
            .filter(move |(_, n)| op(n) == op_type && default_domain(n))
    }

    /// An initializer, or the tensor of a `Constant` node.
    pub(crate) fn constant(&self, value: &str) -> Option<&'g TensorProto> {
        if let Some(t) = self.inits.get(value) {
            return Some(t);
        }
        attr(self.made_by(value, "Constant")?, "value")?.t.as_ref()
    }

    pub(crate) fn scalar(&self, value: &str) -> Option<f32> {
        let t = self.constant(value).filter(|t| t.data_type == Some(FLOAT) && tensor::numel(t) == 1)?;
        tensor::f32_values(t).ok()?.first().copied()
    }

    pub(crate) fn ints(&self, value: &str) -> Option<Vec<i64>> {
        let t = self.constant(value).filter(|t| t.data_type == Some(INT64))?;
        tensor::i64_values(t).ok()
    }

    /// `Transpose(x, perm)`'s input, where `value` is that.
    pub(crate) fn transposed(&self, value: &str, perm: &[i64]) -> Option<&'g str> {
        let t = self.made_by(value, "Transpose")?;
        let p = attr(t, "perm")?;
        (p.ints == perm).then(|| t.input[0].as_str())
    }

    /// `value` followed back through `Mul` and `Div` by scalar constants: the value before them
    /// and the factor they multiplied it by.
    pub(crate) fn unscaled(&self, mut value: &'g str) -> (&'g str, f32) {
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
    pub(crate) fn gelu(&self, erf: &'g NodeProto) -> Option<(usize, &'g str)> {
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
    pub(crate) fn attention(&self, softmax: &'g NodeProto, opset: i64) -> Option<Attention<'g>> {
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
    pub(crate) fn key(&self, kt: &'g str) -> Option<&'g str> {
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
    pub(crate) fn head_shape(&self, shape: &str) -> Option<(Option<usize>, usize)> {
        match self.shape_parts(shape)?.as_slice() {
            [_, _, h, Some(d)] if *d > 0 => Some((h.filter(|&h| h > 0).map(|h| h as usize), *d as usize)),
            _ => None,
        }
    }

    /// The dimensions a `Reshape` is given: a constant, or a `Concat` of one-element parts, each
    /// known where it is a constant.
    pub(crate) fn shape_parts(&self, shape: &str) -> Option<Vec<Option<i64>>> {
        match self.ints(shape) {
            Some(d) => Some(d.into_iter().map(Some).collect()),
            None => {
                let c = self.made_by(shape, "Concat")?;
                Some(c.input.iter().map(|p| self.ints(p).filter(|v| v.len() == 1).map(|v| v[0])).collect())
            }
        }
    }

    /// `x + b` with `b` a constant vector: `x` and `b`.
    pub(crate) fn bias_add(&self, value: &'g str) -> Option<(&'g str, Vec<f32>)> {
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
    pub(crate) fn width(&self, value: &str) -> Option<usize> {
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
