//! The rewrite: find each constant weight, make it int8, replace its node, drop what is left dead.
//! `matmul.rs` rewrites MatMul and Gemm (and quantizes their inputs per token), `smooth.rs`
//! computes SmoothQuant's factors; this file holds the rewriter's state, the constant lookup and
//! `Gather`.

mod matmul;
mod smooth;

pub use smooth::{CALIBRATION_OUTPUT, calibration_model};

use std::collections::{HashMap, HashSet};

use crate::graph::*;
use crate::onnx::{GraphProto, NodeProto, TensorProto};
use crate::tensor::{self, BFLOAT16, FLOAT, FLOAT16, INT8, UINT8};
use crate::weight::*;
use crate::{Kept, QuantizeError, QuantizeOptions, Rewritten};

pub(crate) struct Rewriter<'g> {
    pub(crate) g: &'g mut GraphProto,
    pub(crate) options: &'g QuantizeOptions,
    pub(crate) inits: HashMap<String, usize>,
    pub(crate) producer: HashMap<String, usize>,
    pub(crate) consumers: HashMap<String, Vec<usize>>,
    pub(crate) uses: HashMap<String, usize>,
    pub(crate) names: Names,
    pub(crate) replaced: HashMap<usize, Vec<NodeProto>>,
    pub(crate) removed: HashSet<usize>,
    pub(crate) dead_candidates: Vec<usize>,
    pub(crate) new_inits: Vec<TensorProto>,
    pub(crate) rewritten: Vec<Rewritten>,
    pub(crate) kept: Vec<Kept>,
    pub(crate) gathers: Vec<String>,
    /// The default domain's opset: `ReduceMax` takes its axes as an input from 18 on.
    pub(crate) opset: i64,
    /// The constants every per-token quantization reads, made once per graph.
    pub(crate) per_token: Option<PerTokenConstants>,
    /// Activations already quantized per token: their uint8 rows and row scales, by name.
    pub(crate) quantized: HashMap<String, (String, String)>,
    /// SmoothQuant factors by activation name (`None`: not smoothed).
    pub(crate) smoothings: HashMap<String, Option<Vec<f32>>>,
}

/// Names of the scalar initializers of per-token activation quantization.
#[derive(Clone)]
pub(crate) struct PerTokenConstants {
    /// 127: the largest quantized magnitude.
    pub(crate) levels: String,
    /// The smallest scale, so that a row of zeros quantizes to zeros, not NaN.
    pub(crate) floor: String,
    /// 1.0: `QuantizeLinear` runs on rows already divided by their scale.
    pub(crate) one: String,
    /// 128 as uint8: zero, in the unsigned form the CPU kernels multiply fastest.
    pub(crate) zero_point: String,
    /// `[-1]`, for `ReduceMax` from opset 18 on.
    pub(crate) last_axis: String,
}

impl<'g> Rewriter<'g> {
    pub(crate) fn new(g: &'g mut GraphProto, options: &'g QuantizeOptions, opset: i64) -> Self {
        let inits = g.initializer.iter().enumerate().map(|(i, t)| (tensor::name(t).to_owned(), i)).collect();
        let mut producer = HashMap::new();
        let mut consumers: HashMap<String, Vec<usize>> = HashMap::new();
        let names = Names::of(g);
        for (i, n) in g.node.iter().enumerate() {
            for o in &n.output {
                producer.insert(o.clone(), i);
            }
            for input in &n.input {
                consumers.entry(input.clone()).or_default().push(i);
            }
        }
        let mut uses = HashMap::new();
        count_uses(g, &mut uses, true);
        Rewriter {
            g,
            options,
            inits,
            producer,
            consumers,
            uses,
            names,
            replaced: HashMap::new(),
            removed: HashSet::new(),
            dead_candidates: Vec::new(),
            new_inits: Vec::new(),
            rewritten: Vec::new(),
            kept: Vec::new(),
            gathers: Vec::new(),
            opset,
            per_token: None,
            quantized: HashMap::new(),
            smoothings: HashMap::new(),
        }
    }

    /// A name no value, initializer or node of the graph has yet.
    pub(crate) fn fresh(&mut self, base: &str) -> String {
        self.names.fresh(base)
    }

    pub(crate) fn init(&self, name: &str) -> Option<&TensorProto> {
        self.inits.get(name).map(|&i| &self.g.initializer[i])
    }

    pub(crate) fn producer_of(&self, name: &str) -> Option<(usize, &NodeProto)> {
        self.producer.get(name).map(|&i| (i, &self.g.node[i]))
    }

    pub(crate) fn run(&mut self) -> Result<(), QuantizeError> {
        for i in 0..self.g.node.len() {
            let n = &self.g.node[i];
            if !default_domain(n) || self.removed.contains(&i) {
                continue;
            }
            match op(n) {
                "MatMul" | "Gemm" => self.matmul(i)?,
                "Gather" => self.gather(i)?,
                _ => {}
            }
        }
        self.finish();
        Ok(())
    }

    /// The `keep_fp32` pattern that node `name` or its weight matches, if any.
    pub(crate) fn kept_by_pattern(&self, name: &str, weight: &str) -> Option<&str> {
        self.options
            .keep_fp32
            .iter()
            .find(|p| name.contains(p.as_str()) || weight.contains(p.as_str()))
            .map(String::as_str)
    }

    pub(crate) fn keep(&mut self, i: usize, reason: impl Into<String>) {
        let n = &self.g.node[i];
        self.kept.push(Kept { node: node_name(n, i), op: op(n).to_owned(), reason: reason.into() });
    }

    /// The constant behind value `name`, if the graph computes it from initializers only in a way
    /// the quantizer reads. `Err(reason)` says why not.
    pub(crate) fn constant(&self, name: &str) -> Result<Result<Constant, String>, QuantizeError> {
        if let Some(t) = self.init(name) {
            if t.data_type != Some(FLOAT) {
                return Ok(Err(format!("weight {name:?} is not float32")));
            }
            let Some(dims) = dims2(t) else { return Ok(Err(format!("weight {name:?} is not 2-D"))) };
            return Ok(Ok(Constant {
                dims,
                stored: Stored::F32(tensor::f32_values(t)?),
                source: "float32 initializer",
                base: name.to_owned(),
                scale_name: None,
                chain: Vec::new(),
            }));
        }
        let Some((p, node)) = self.producer_of(name) else {
            return Ok(Err("the weight is a graph input, given at run time, not a constant".to_owned()));
        };
        match op(node) {
            "DequantizeLinear" if default_domain(node) => self.dequantize_linear(p, node),
            "Mul" if default_domain(node) => self.cast_mul(p, node),
            "Cast" if default_domain(node) => self.widened(p, node),
            other => Ok(Err(computed(other))),
        }
    }

    /// `DequantizeLinear(q, scale[, zero_point])` of initializers.
    pub(crate) fn dequantize_linear(
        &self,
        p: usize,
        node: &NodeProto,
    ) -> Result<Result<Constant, String>, QuantizeError> {
        let get = |k: usize| node.input.get(k).filter(|s| !s.is_empty()).and_then(|s| self.init(s));
        let (Some(q), Some(scale)) = (get(0), get(1)) else {
            return Ok(Err("DequantizeLinear of values that are not initializers".to_owned()));
        };
        let Some(dims) = dims2(q) else { return Ok(Err("the quantized weight is not 2-D".to_owned())) };
        if !matches!(q.data_type, Some(INT8 | UINT8)) || scale.data_type != Some(FLOAT) {
            return Ok(Err("DequantizeLinear of a type other than int8/uint8 with float32 scales".to_owned()));
        }
        let scales = tensor::f32_values(scale)?;
        let axis = match (scales.len(), attr_i(node, "axis", 1).rem_euclid(2)) {
            (1, _) => ScaleAxis::Tensor,
            (len, 1) if len == dims[1] => ScaleAxis::Column,
            (len, 0) if len == dims[0] => ScaleAxis::Row,
            _ => return Ok(Err("DequantizeLinear with blocked or mismatched scales".to_owned())),
        };
        let zero_point = get(2).map(tensor::int8_values).transpose()?;
        Ok(Ok(Constant {
            dims,
            stored: Stored::Int8 {
                q: tensor::int8_values(q)?,
                signed: q.data_type == Some(INT8),
                zero_point,
                scale: scales,
                axis,
            },
            source: "int8 initializer through DequantizeLinear",
            base: tensor::name(q).to_owned(),
            scale_name: Some(tensor::name(scale).to_owned()),
            chain: vec![p],
        }))
    }

    /// `Cast(w, to=float)` of a float16 or bfloat16 initializer (`convert --dtype` stores a
    /// decoder's weights so): quantized from the values widened.
    pub(crate) fn widened(&self, p: usize, node: &NodeProto) -> Result<Result<Constant, String>, QuantizeError> {
        let Some(w) = node.input.first().and_then(|s| self.init(s)) else { return Ok(Err(computed("Cast"))) };
        if attr_i(node, "to", 0) != i64::from(FLOAT) || !matches!(w.data_type, Some(FLOAT16 | BFLOAT16)) {
            return Ok(Err(computed("Cast")));
        }
        let Some(dims) = dims2(w) else { return Ok(Err("the half-precision weight is not 2-D".to_owned())) };
        Ok(Ok(Constant {
            dims,
            stored: Stored::F32(tensor::half_values(w)?),
            source: if w.data_type == Some(FLOAT16) {
                "float16 initializer through Cast"
            } else {
                "bfloat16 initializer through Cast"
            },
            base: tensor::name(w).to_owned(),
            scale_name: None,
            chain: vec![p],
        }))
    }

    /// `Mul(Cast(q, to=float), scale)` of initializers, either order.
    pub(crate) fn cast_mul(&self, p: usize, node: &NodeProto) -> Result<Result<Constant, String>, QuantizeError> {
        let not_const = || Ok(Err(computed("Mul")));
        if node.input.len() != 2 {
            return not_const();
        }
        for (a, b) in [(0, 1), (1, 0)] {
            let (Some((c, cast)), Some(scale)) = (self.producer_of(&node.input[a]), self.init(&node.input[b])) else {
                continue;
            };
            if op(cast) != "Cast" || attr_i(cast, "to", 0) != i64::from(FLOAT) || scale.data_type != Some(FLOAT) {
                continue;
            }
            let Some(q) = cast.input.first().and_then(|s| self.init(s)) else { continue };
            if !matches!(q.data_type, Some(INT8 | UINT8)) {
                continue;
            }
            let Some(dims) = dims2(q) else { return Ok(Err("the quantized weight is not 2-D".to_owned())) };
            let scales = tensor::f32_values(scale)?;
            let sdims: Vec<usize> = scale.dims.iter().map(|&d| d.max(0) as usize).collect();
            let axis = match (scales.len(), sdims.as_slice()) {
                (1, _) => ScaleAxis::Tensor,
                (len, [l] | [1, l]) if len == dims[1] && *l == len => ScaleAxis::Column,
                (len, [l, 1]) if len == dims[0] && *l == len => ScaleAxis::Row,
                _ => continue,
            };
            return Ok(Ok(Constant {
                dims,
                stored: Stored::Int8 {
                    q: tensor::int8_values(q)?,
                    signed: q.data_type == Some(INT8),
                    zero_point: None,
                    scale: scales,
                    axis,
                },
                source: "int8 initializer through Cast and Mul",
                base: tensor::name(q).to_owned(),
                scale_name: Some(tensor::name(scale).to_owned()),
                chain: vec![p, c],
            }));
        }
        not_const()
    }

    /// The values of a constant float32 bias of shape `[n]` or `[1, n]`.
    pub(crate) fn bias_vector(&self, name: &str, n: usize) -> Option<Vec<f32>> {
        let t = self.init(name)?;
        let ok = t.data_type == Some(FLOAT) && (t.dims == [n as i64] || t.dims == [1, n as i64]);
        if ok { tensor::f32_values(t).ok() } else { None }
    }

    pub(crate) fn add_f32(&mut self, base: &str, dims: &[i64], values: &[f32]) -> String {
        let name = self.fresh(base);
        self.new_inits.push(tensor::new_f32(&name, dims, values));
        name
    }

    /// `Gather(Mul(Cast(q), scale), ids)` with one scale per row (or one in all) becomes
    /// `Mul(Cast(Gather(q, ids)), Gather(scale, ids))`: the same values, from an int8 table.
    pub(crate) fn gather(&mut self, i: usize) -> Result<(), QuantizeError> {
        let n = self.g.node[i].clone();
        if n.input.len() != 2 || n.output.len() != 1 || attr_i(&n, "axis", 0) != 0 {
            return Ok(());
        }
        if self.uses.get(&n.input[0]) != Some(&1) {
            return Ok(());
        }
        let Some((p, mul)) = self.producer_of(&n.input[0]).filter(|(_, m)| op(m) == "Mul") else { return Ok(()) };
        let Ok(c) = self.cast_mul(p, mul)? else { return Ok(()) };
        let (Stored::Int8 { axis, .. }, Some(scale_name)) = (&c.stored, c.scale_name.clone()) else { return Ok(()) };
        let axis = *axis;
        if axis == ScaleAxis::Column {
            return Ok(());
        }
        let q_name = c.base.clone();
        let name = node_name(&n, i);
        let (ids, out) = (n.input[1].clone(), n.output[0].clone());
        let rows = self.fresh(&format!("{out}_int8_rows"));
        let rows_f = self.fresh(&format!("{out}_rows_f32"));
        let mut nodes = vec![
            new_node("Gather", "", self.fresh(&format!("{name}_int8")), &[&q_name, &ids], &[&rows]),
            cast_to_float(self.fresh(&format!("{name}_cast")), &rows, &rows_f),
        ];
        let scale_in = if axis == ScaleAxis::Row {
            let s = self.fresh(&format!("{out}_row_scales"));
            nodes.push(new_node("Gather", "", self.fresh(&format!("{name}_scales")), &[&scale_name, &ids], &[&s]));
            s
        } else {
            scale_name
        };
        nodes.push(new_node("Mul", "", self.fresh(&format!("{name}_dequantize")), &[&rows_f, &scale_in], &[&out]));
        self.replaced.insert(i, nodes);
        self.dead_candidates.extend(c.chain);
        self.gathers.push(name);
        Ok(())
    }

    /// The new node list, then nodes and initializers left dead by the rewrite removed.
    pub(crate) fn finish(&mut self) {
        let candidates: HashSet<String> =
            self.dead_candidates.iter().flat_map(|&i| self.g.node[i].output.iter().cloned()).collect();
        let mut replacements = std::mem::take(&mut self.replaced);
        replacements.extend(self.removed.iter().map(|&i| (i, Vec::new())));
        splice(self.g, replacements, std::mem::take(&mut self.new_inits));
        remove_dead(self.g, |o| candidates.contains(o));
    }
}
