//! The rewrite: find each constant weight, make it int8, replace its node, drop what is left dead.

use std::collections::{HashMap, HashSet};

use protobuf::Message;

use crate::onnx::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TypeProto, ValueInfoProto,
    type_proto,
};
use crate::tensor::{self, FLOAT, INT8, UINT8};
use crate::{
    Activations, CalibrationGraph, Granularity, Kept, QuantizeError, QuantizeOptions, QuantizeReport, Rewritten,
    WeightType,
};

pub(crate) const MS_DOMAIN: &str = "com.microsoft";

/// Rewrites `model` (the bytes of an .onnx file) for int8 on the CPU. Returns the new model's
/// bytes and what was done; a model with no constant-weight MatMul or Gemm is an error that says
/// why each candidate was left alone.
pub fn quantize(model: &[u8], options: &QuantizeOptions) -> Result<(Vec<u8>, QuantizeReport), QuantizeError> {
    let mut m = ModelProto::parse_from_bytes(model).map_err(QuantizeError::NotOnnx)?;
    let opset = m
        .opset_import
        .iter()
        .filter(|o| matches!(o.domain.as_deref().unwrap_or_default(), "" | "ai.onnx"))
        .filter_map(|o| o.version)
        .max()
        .unwrap_or(0);
    if opset < 10 {
        return Err(QuantizeError::UnsupportedOpset(opset));
    }
    let graph = m.graph.as_mut().ok_or(QuantizeError::NoGraph)?;
    let before = initializer_bytes(graph);
    let nodes_before = graph.node.len();
    let mut r = Rewriter::new(graph, options, opset);
    r.run()?;
    let (rewritten, kept_fp32, int8_gathers) = (r.rewritten, r.kept, r.gathers);
    if rewritten.is_empty() && int8_gathers.is_empty() {
        let why = if kept_fp32.is_empty() {
            "the graph has no MatMul or Gemm node".to_owned()
        } else {
            kept_fp32.iter().map(|k| format!("{} {}: {}", k.op, k.node, k.reason)).collect::<Vec<_>>().join("; ")
        };
        return Err(QuantizeError::NothingToQuantize(why));
    }
    let fused = crate::fuse::fuse(graph, &options.fusions, opset);
    let after = initializer_bytes(graph);
    let nodes_after = graph.node.len();
    if !m.opset_import.iter().any(|o| o.domain.as_deref() == Some(MS_DOMAIN)) {
        let mut ms = OperatorSetIdProto::new();
        ms.domain = Some(MS_DOMAIN.to_owned());
        ms.version = Some(1);
        m.opset_import.push(ms);
    }
    let bytes = m.write_to_bytes().map_err(QuantizeError::Write)?;
    let report = QuantizeReport {
        rewritten,
        kept_fp32,
        int8_gathers,
        fused,
        nodes_before,
        nodes_after,
        opset,
        weight_bytes_before: before,
        weight_bytes_after: after,
    };
    Ok((bytes, report))
}

/// The output [`calibration_model`] adds.
pub const CALIBRATION_OUTPUT: &str = "nornir_calibration";

/// `model` with one more output, [`CALIBRATION_OUTPUT`]: the magnitudes `|x|` of every activation
/// that smoothing would divide (each `LayerNormalization` output read by a MatMul the rewrite
/// makes int8), concatenated along the last axis, `[batch, tokens, sum of widths]`. Max-pooled
/// over a text's tokens and then over sample texts, they are the channel maxima that
/// [`QuantizeOptions::channel_max`] takes. The rest of the graph is unchanged.
pub fn calibration_model(model: &[u8], options: &QuantizeOptions) -> Result<CalibrationGraph, QuantizeError> {
    let mut m = ModelProto::parse_from_bytes(model).map_err(QuantizeError::NotOnnx)?;
    let graph = m.graph.as_mut().ok_or(QuantizeError::NoGraph)?;
    let mut found = Vec::new();
    {
        let r = Rewriter::new(graph, options, 0);
        for n in &r.g.node {
            if op(n) != "LayerNormalization" || !default_domain(n) {
                continue;
            }
            let (Some(x), Some(gamma)) = (n.output.first(), n.input.get(1).and_then(|g| r.init(g))) else { continue };
            if !r.int8_readers(x)?.is_empty() {
                found.push((x.clone(), tensor::numel(gamma)));
            }
        }
    }
    if found.is_empty() {
        return Err(QuantizeError::NothingToQuantize(
            "no LayerNormalization output feeds a MatMul with a constant weight, so there is nothing to calibrate"
                .to_owned(),
        ));
    }
    let mut magnitudes = Vec::new();
    for (x, _) in &found {
        let abs = format!("{x}_nornir_calibration_abs");
        graph.node.push(new_node("Abs", "", format!("{x}_nornir_calibration"), &[x], &[&abs]));
        magnitudes.push(abs);
    }
    let inputs: Vec<&str> = magnitudes.iter().map(String::as_str).collect();
    let mut concat = new_node("Concat", "", "nornir_calibration_concat".to_owned(), &inputs, &[CALIBRATION_OUTPUT]);
    concat.attribute.push(int_attribute("axis", -1));
    graph.node.push(concat);
    let mut tensor_type = type_proto::Tensor::new();
    tensor_type.elem_type = Some(FLOAT);
    let mut ty = TypeProto::new();
    ty.tensor_type = protobuf::MessageField::some(tensor_type);
    let mut out = ValueInfoProto::new();
    out.name = Some(CALIBRATION_OUTPUT.to_owned());
    out.type_ = protobuf::MessageField::some(ty);
    graph.output.push(out);
    Ok(CalibrationGraph { model: m.write_to_bytes().map_err(QuantizeError::Write)?, activations: found })
}

fn initializer_bytes(g: &GraphProto) -> usize {
    g.initializer
        .iter()
        .map(|t| t.raw_data.as_ref().map_or(0, Vec::len) + 4 * (t.float_data.len() + t.int32_data.len()))
        .sum()
}

pub(crate) fn attr<'a>(n: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    n.attribute.iter().find(|a| a.name.as_deref() == Some(name))
}

pub(crate) fn attr_i(n: &NodeProto, name: &str, default: i64) -> i64 {
    attr(n, name).and_then(|a| a.i).unwrap_or(default)
}

fn attr_f(n: &NodeProto, name: &str, default: f32) -> f32 {
    attr(n, name).and_then(|a| a.f).unwrap_or(default)
}

pub(crate) fn node_name(n: &NodeProto, index: usize) -> String {
    match n.name.as_deref() {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => format!("#{index}"),
    }
}

pub(crate) fn op(n: &NodeProto) -> &str {
    n.op_type.as_deref().unwrap_or_default()
}

pub(crate) fn default_domain(n: &NodeProto) -> bool {
    matches!(n.domain.as_deref().unwrap_or_default(), "" | "ai.onnx")
}

pub(crate) fn new_node(op_type: &str, domain: &str, name: String, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = Some(op_type.to_owned());
    if !domain.is_empty() {
        n.domain = Some(domain.to_owned());
    }
    n.name = Some(name);
    n.input = inputs.iter().map(|s| (*s).to_owned()).collect();
    n.output = outputs.iter().map(|s| (*s).to_owned()).collect();
    n
}

fn cast_to_float(name: String, input: &str, output: &str) -> NodeProto {
    let mut n = new_node("Cast", "", name, &[input], &[output]);
    n.attribute.push(int_attribute("to", i64::from(FLOAT)));
    n
}

/// A node attribute holding one integer (`AttributeProto.type` INT, 2).
pub(crate) fn int_attribute(name: &str, value: i64) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = Some(name.to_owned());
    a.i = Some(value);
    a.type_ = Some(2);
    a
}

/// A node attribute holding a list of integers (`AttributeProto.type` INTS, 7).
pub(crate) fn ints_attribute(name: &str, values: Vec<i64>) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = Some(name.to_owned());
    a.ints = values;
    a.type_ = Some(7);
    a
}

/// How many times each value is read: by a node of the graph or of any subgraph, or as a graph
/// output.
pub(crate) fn count_uses(g: &GraphProto, uses: &mut HashMap<String, usize>, top: bool) {
    for n in &g.node {
        for i in n.input.iter().filter(|i| !i.is_empty()) {
            *uses.entry(i.clone()).or_default() += 1;
        }
        for a in &n.attribute {
            for sub in a.g.as_ref().into_iter().chain(a.graphs.iter()) {
                count_uses(sub, uses, false);
            }
        }
    }
    if top {
        for o in &g.output {
            *uses.entry(o.name.clone().unwrap_or_default()).or_default() += 1;
        }
    }
}

/// The names a graph uses (values, initializers, inputs, nodes), to make new ones that it does not.
#[derive(Default)]
pub(crate) struct Names(HashSet<String>);

impl Names {
    pub(crate) fn of(g: &GraphProto) -> Self {
        let mut names: HashSet<String> = g.initializer.iter().map(|t| tensor::name(t).to_owned()).collect();
        names.extend(g.input.iter().filter_map(|v| v.name.clone()));
        for n in &g.node {
            names.extend(n.output.iter().cloned());
            names.extend(n.name.clone());
        }
        Names(names)
    }

    /// `base`, or `base_2`, `base_3`... if the graph has it.
    pub(crate) fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_owned();
        let mut k = 1;
        while self.0.contains(&name) {
            k += 1;
            name = format!("{base}_{k}");
        }
        self.0.insert(name.clone());
        name
    }
}

/// Puts each node list of `replacements` in place of the node at its index (an empty list removes
/// it), and adds `inits`.
pub(crate) fn splice(g: &mut GraphProto, mut replacements: HashMap<usize, Vec<NodeProto>>, inits: Vec<TensorProto>) {
    let old = std::mem::take(&mut g.node);
    for (i, n) in old.into_iter().enumerate() {
        match replacements.remove(&i) {
            Some(nodes) => g.node.extend(nodes),
            None => g.node.push(n),
        }
    }
    g.initializer.extend(inits);
}

/// Removes the nodes whose outputs are all `removable` and read by nothing (no node, subgraph or
/// graph output), until none is left, then the initializers nothing reads.
pub(crate) fn remove_dead(g: &mut GraphProto, removable: impl Fn(&str) -> bool) {
    loop {
        let mut uses = HashMap::new();
        count_uses(g, &mut uses, true);
        let before = g.node.len();
        g.node.retain(|n| !n.output.iter().all(|o| removable(o) && !uses.contains_key(o)));
        if g.node.len() == before {
            let inputs: HashSet<String> = g.input.iter().filter_map(|v| v.name.clone()).collect();
            g.initializer.retain(|t| uses.contains_key(tensor::name(t)) || inputs.contains(tensor::name(t)));
            return;
        }
    }
}

/// Where the scale of a stored int8 weight applies.
#[derive(Clone, Copy, PartialEq)]
enum ScaleAxis {
    Tensor,
    /// One per column (output feature) of a `[K, N]` weight.
    Column,
    /// One per row.
    Row,
}

/// A constant weight as the graph stores it.
enum Stored {
    F32(Vec<f32>),
    Int8 { q: Vec<i32>, signed: bool, zero_point: Option<Vec<i32>>, scale: Vec<f32>, axis: ScaleAxis },
}

struct Constant {
    dims: [usize; 2],
    stored: Stored,
    source: &'static str,
    /// The name a new int8 initializer is derived from: the int8 initializer itself, where the
    /// weight is stored as int8.
    base: String,
    /// The initializer holding the scales, where the weight is stored as int8.
    scale_name: Option<String>,
    /// Nodes that computed it, dead once nothing else reads them.
    chain: Vec<usize>,
}

/// An int8 weight ready for the int8 operator, `[K, N]` row-major.
struct Int8Weight {
    q: Vec<i8>,
    scale: Vec<f32>,
    reused: bool,
}

impl Constant {
    /// Dequantized values, `[rows, cols]` as stored.
    fn values(&self) -> Vec<f32> {
        match &self.stored {
            Stored::F32(v) => v.clone(),
            Stored::Int8 { q, zero_point, scale, axis, .. } => {
                let cols = self.dims[1];
                q.iter()
                    .enumerate()
                    .map(|(idx, &v)| {
                        let k = match axis {
                            ScaleAxis::Tensor => 0,
                            ScaleAxis::Column => idx % cols,
                            ScaleAxis::Row => idx / cols,
                        };
                        let zp = zero_point.as_ref().map_or(0, |z| z[k.min(z.len() - 1)]);
                        (v - zp) as f32 * scale[k.min(scale.len() - 1)]
                    })
                    .collect()
            }
        }
    }

    /// The weight as `[K, N]` int8 with its scales; `transposed` when the graph stores `[N, K]`;
    /// `smooth`: row `i` multiplied by `smooth[i]` first.
    fn to_int8(&self, granularity: Granularity, transposed: bool, smooth: Option<&[f32]>) -> Int8Weight {
        if let Stored::Int8 { q, signed: true, zero_point, scale, axis } = &self.stored
            && !transposed
            && smooth.is_none()
            && zero_point.as_ref().is_none_or(|z| z.iter().all(|&v| v == 0))
            && (*axis == ScaleAxis::Tensor || (*axis == ScaleAxis::Column && granularity == Granularity::PerChannel))
        {
            return Int8Weight { q: q.iter().map(|&v| v as i8).collect(), scale: scale.clone(), reused: true };
        }
        let [rows, cols] = self.dims;
        let stored = self.values();
        let (k, n) = if transposed { (cols, rows) } else { (rows, cols) };
        let mut w: Vec<f32> =
            if transposed { (0..k * n).map(|idx| stored[(idx % n) * cols + idx / n]).collect() } else { stored };
        if let Some(factors) = smooth {
            w.iter_mut().enumerate().for_each(|(idx, v)| *v *= factors[idx / n]);
        }
        let step = |max: f32| if max > 0.0 && max.is_finite() { max / 127.0 } else { 1.0 };
        let scale: Vec<f32> = match granularity {
            Granularity::PerTensor => vec![step(w.iter().fold(0.0f32, |m, v| m.max(v.abs())))],
            Granularity::PerChannel => {
                (0..n).map(|j| step((0..k).fold(0.0f32, |m, i| m.max(w[i * n + j].abs())))).collect()
            }
        };
        let q = w
            .iter()
            .enumerate()
            .map(|(idx, v)| (v / scale[if scale.len() == 1 { 0 } else { idx % n }]).round().clamp(-127.0, 127.0) as i8)
            .collect();
        Int8Weight { q, scale, reused: false }
    }
}

struct Rewriter<'g> {
    g: &'g mut GraphProto,
    options: &'g QuantizeOptions,
    inits: HashMap<String, usize>,
    producer: HashMap<String, usize>,
    consumers: HashMap<String, Vec<usize>>,
    uses: HashMap<String, usize>,
    names: Names,
    replaced: HashMap<usize, Vec<NodeProto>>,
    removed: HashSet<usize>,
    dead_candidates: Vec<usize>,
    new_inits: Vec<TensorProto>,
    rewritten: Vec<Rewritten>,
    kept: Vec<Kept>,
    gathers: Vec<String>,
    /// The default domain's opset: `ReduceMax` takes its axes as an input from 18 on.
    opset: i64,
    /// The constants every per-token quantization reads, made once per graph.
    per_token: Option<PerTokenConstants>,
    /// Activations already quantized per token: their uint8 rows and row scales, by name.
    quantized: HashMap<String, (String, String)>,
    /// SmoothQuant factors by activation name (`None`: not smoothed).
    smoothings: HashMap<String, Option<Vec<f32>>>,
}

/// Names of the scalar initializers of per-token activation quantization.
#[derive(Clone)]
struct PerTokenConstants {
    /// 127: the largest quantized magnitude.
    levels: String,
    /// The smallest scale, so that a row of zeros quantizes to zeros, not NaN.
    floor: String,
    /// 1.0: `QuantizeLinear` runs on rows already divided by their scale.
    one: String,
    /// 128 as uint8: zero, in the unsigned form the CPU kernels multiply fastest.
    zero_point: String,
    /// `[-1]`, for `ReduceMax` from opset 18 on.
    last_axis: String,
}

impl<'g> Rewriter<'g> {
    fn new(g: &'g mut GraphProto, options: &'g QuantizeOptions, opset: i64) -> Self {
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
    fn fresh(&mut self, base: &str) -> String {
        self.names.fresh(base)
    }

    fn init(&self, name: &str) -> Option<&TensorProto> {
        self.inits.get(name).map(|&i| &self.g.initializer[i])
    }

    fn producer_of(&self, name: &str) -> Option<(usize, &NodeProto)> {
        self.producer.get(name).map(|&i| (i, &self.g.node[i]))
    }

    fn run(&mut self) -> Result<(), QuantizeError> {
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
    fn kept_by_pattern(&self, name: &str, weight: &str) -> Option<&str> {
        self.options
            .keep_fp32
            .iter()
            .find(|p| name.contains(p.as_str()) || weight.contains(p.as_str()))
            .map(String::as_str)
    }

    fn keep(&mut self, i: usize, reason: impl Into<String>) {
        let n = &self.g.node[i];
        self.kept.push(Kept { node: node_name(n, i), op: op(n).to_owned(), reason: reason.into() });
    }

    /// The constant behind value `name`, if the graph computes it from initializers only in a way
    /// the quantizer reads. `Err(reason)` says why not.
    fn constant(&self, name: &str) -> Result<Result<Constant, String>, QuantizeError> {
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
            other => Ok(Err(computed(other))),
        }
    }

    /// `DequantizeLinear(q, scale[, zero_point])` of initializers.
    fn dequantize_linear(&self, p: usize, node: &NodeProto) -> Result<Result<Constant, String>, QuantizeError> {
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

    /// `Mul(Cast(q, to=float), scale)` of initializers, either order.
    fn cast_mul(&self, p: usize, node: &NodeProto) -> Result<Result<Constant, String>, QuantizeError> {
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

    fn matmul(&mut self, i: usize) -> Result<(), QuantizeError> {
        let n = self.g.node[i].clone();
        let name = node_name(&n, i);
        let is_gemm = op(&n) == "Gemm";
        if n.input.len() < 2 || n.output.is_empty() {
            self.keep(i, "malformed node");
            return Ok(());
        }
        let weight_name = n.input[1].clone();
        if let Some(p) = self.kept_by_pattern(&name, &weight_name) {
            self.keep(i, format!("kept in float32 by the pattern {p:?}"));
            return Ok(());
        }
        if is_gemm && attr_i(&n, "transA", 0) != 0 {
            self.keep(i, "Gemm with transA");
            return Ok(());
        }
        let c = match self.constant(&weight_name)? {
            Ok(c) => c,
            Err(reason) => {
                self.keep(i, reason);
                return Ok(());
            }
        };
        let transposed = is_gemm && attr_i(&n, "transB", 0) != 0;
        let (k, cols) = if transposed { (c.dims[1], c.dims[0]) } else { (c.dims[0], c.dims[1]) };
        let smooth = match self.options.activations {
            Activations::PerToken => self.smoothing(&n.input[0])?,
            Activations::PerTensor => None,
        };
        let mut w = c.to_int8(self.options.granularity, transposed, smooth.as_deref());
        if is_gemm {
            let alpha = attr_f(&n, "alpha", 1.0);
            w.scale.iter_mut().for_each(|s| *s *= alpha);
        }

        // The bias: Gemm's C, or a lone Add of a constant vector after a MatMul.
        let mut bias: Option<String> = None;
        let mut output = n.output[0].clone();
        if is_gemm {
            if let Some(cname) = n.input.get(2).filter(|s| !s.is_empty()) {
                let beta = attr_f(&n, "beta", 1.0);
                match self.bias_vector(cname, cols) {
                    Some(v) => {
                        bias = Some(self.add_f32(
                            &format!("{cname}_bias"),
                            &[cols as i64],
                            &v.iter().map(|x| x * beta).collect::<Vec<_>>(),
                        ))
                    }
                    None => {
                        self.keep(i, "Gemm whose C is not a constant vector of the output width");
                        return Ok(());
                    }
                }
            }
        } else if self.uses.get(&output) == Some(&1)
            && let Some(&j) = self.consumers.get(&output).and_then(|c| c.first())
            && op(&self.g.node[j]) == "Add"
            && default_domain(&self.g.node[j])
            && self.g.node[j].input.len() == 2
        {
            let add = &self.g.node[j];
            let other = if add.input[0] == output { add.input[1].clone() } else { add.input[0].clone() };
            if let Some(v) = self.bias_vector(&other, cols) {
                let add_out = add.output[0].clone();
                bias = Some(if self.init(&other).is_some_and(|t| t.dims.len() == 1) {
                    other
                } else {
                    self.add_f32(&format!("{other}_1d"), &[cols as i64], &v)
                });
                output = add_out;
                self.removed.insert(j);
            }
        }

        let base = format!("{}_nornir_int8", c.base);
        let qname = self.fresh(&base);
        let sname = self.fresh(&format!("{base}_scale"));
        let sdims: Vec<i64> = if w.scale.len() == 1 { Vec::new() } else { vec![cols as i64] };
        // uint8 weights are the int8 ones shifted by their zero point 128.
        let weight_zero_point = match self.options.weights.resolved() {
            WeightType::Int8 => {
                self.new_inits.push(tensor::new_i8(&qname, &[k as i64, cols as i64], &w.q));
                None
            }
            _ => {
                let shifted: Vec<u8> = w.q.iter().map(|&v| (i16::from(v) + 128) as u8).collect();
                self.new_inits.push(tensor::new_u8(&qname, &[k as i64, cols as i64], &shifted));
                Some(self.per_token_constants().zero_point)
            }
        };
        self.new_inits.push(tensor::new_f32(&sname, &sdims, &w.scale));
        let activations = self.options.activations;
        let nodes = match activations {
            Activations::PerTensor => {
                let mut inputs = vec![n.input[0].as_str(), qname.as_str(), sname.as_str()];
                inputs.push(weight_zero_point.as_deref().unwrap_or_default());
                match &bias {
                    Some(b) => inputs.push(b.as_str()),
                    None if weight_zero_point.is_none() => {
                        inputs.pop();
                    }
                    None => {}
                }
                let node_name = self.fresh(&format!("{name}_int8"));
                vec![new_node("DynamicQuantizeMatMul", MS_DOMAIN, node_name, &inputs, &[output.as_str()])]
            }
            Activations::PerToken => self.per_token_matmul(
                &name,
                &n.input[0],
                smooth.as_deref(),
                [&qname, &sname],
                weight_zero_point.as_deref(),
                bias.as_deref(),
                &output,
            ),
        };
        self.replaced.insert(i, nodes);
        self.dead_candidates.extend(c.chain);
        let granularity = if w.scale.len() == 1 { Granularity::PerTensor } else { Granularity::PerChannel };
        self.rewritten.push(Rewritten {
            node: name,
            op: op(&n).to_owned(),
            weight: weight_name,
            shape: [k, cols],
            source: format!("{}{}", c.source, if w.reused { " (reused as stored)" } else { " (quantized)" }),
            granularity,
            activations,
            weights: self.options.weights.resolved(),
            bias_folded: bias.is_some(),
        });
        Ok(())
    }

    /// `x @ w` with `x` quantized per row: `MatMulIntegerToFloat(q, w, s, w_scale, 128)` of the
    /// row-quantized input (see [`Self::quantized_input`]), which multiplies each output row by
    /// its `s` and each column by its weight scale. The bias is a separate `Add`: with per-row
    /// scales, ONNX Runtime's kernel would scale a bias passed to it as well.
    #[allow(clippy::too_many_arguments)]
    fn per_token_matmul(
        &mut self,
        name: &str,
        x: &str,
        smooth: Option<&[f32]>,
        [w, w_scale]: [&str; 2],
        w_zero_point: Option<&str>,
        bias: Option<&str>,
        out: &str,
    ) -> Vec<NodeProto> {
        let c = self.per_token_constants();
        let (mut nodes, q, scale) = self.quantized_input(name, x, smooth);
        let product = if bias.is_some() { self.fresh(&format!("{out}_before_bias")) } else { out.to_owned() };
        nodes.push(new_node(
            "MatMulIntegerToFloat",
            MS_DOMAIN,
            self.fresh(&format!("{name}_int8")),
            &[&q, w, &scale, w_scale, &c.zero_point, w_zero_point.unwrap_or_default()]
                [..5 + usize::from(w_zero_point.is_some())],
            &[&product],
        ));
        if let Some(b) = bias {
            nodes.push(new_node("Add", "", self.fresh(&format!("{name}_bias")), &[&product, b], &[out]));
        }
        nodes
    }

    /// The nodes that quantize `x` per row, made once for all the MatMuls that read `x` (a
    /// layer's query, key and value share theirs), and the names of the uint8 rows and their
    /// scales: `s = max(|x|, floor) / 127` over the last axis and
    /// `q = QuantizeLinear(x * (127 / max(|x|, floor)), 1, 128)`. With `smooth`, `x` is first
    /// divided by it, channel by channel (the weights were multiplied by it). The nodes are empty
    /// when an earlier MatMul made them.
    fn quantized_input(&mut self, name: &str, x: &str, smooth: Option<&[f32]>) -> (Vec<NodeProto>, String, String) {
        if let Some((q, scale)) = self.quantized.get(x) {
            return (Vec::new(), q.clone(), scale.clone());
        }
        let c = self.per_token_constants();
        let value = |s: &mut Self, suffix: &str| s.fresh(&format!("{x}_{suffix}"));
        let mut nodes = Vec::new();
        let input = match smooth {
            Some(factors) => {
                let inverse: Vec<f32> = factors.iter().map(|f| 1.0 / f).collect();
                let divisor = self.add_f32(&format!("{x}_smoothing"), &[inverse.len() as i64], &inverse);
                let smoothed = value(self, "smoothed");
                nodes.push(new_node("Mul", "", self.fresh(&format!("{name}_smooth")), &[x, &divisor], &[&smoothed]));
                smoothed
            }
            None => x.to_owned(),
        };
        let abs = value(self, "abs");
        let max = value(self, "row_max");
        let floored = value(self, "row_max_floored");
        let inverse = value(self, "row_inverse_scale");
        let scale = value(self, "row_scale");
        let scaled = value(self, "scaled");
        let q = value(self, "uint8");
        nodes.push(new_node("Abs", "", self.fresh(&format!("{name}_abs")), &[&input], &[&abs]));
        let mut reduce = if self.opset >= 18 {
            new_node("ReduceMax", "", self.fresh(&format!("{name}_row_max")), &[&abs, &c.last_axis], &[&max])
        } else {
            let mut r = new_node("ReduceMax", "", self.fresh(&format!("{name}_row_max")), &[&abs], &[&max]);
            r.attribute.push(ints_attribute("axes", vec![-1]));
            r
        };
        reduce.attribute.push(int_attribute("keepdims", 1));
        nodes.push(reduce);
        nodes.extend([
            new_node("Max", "", self.fresh(&format!("{name}_row_floor")), &[&max, &c.floor], &[&floored]),
            new_node("Div", "", self.fresh(&format!("{name}_row_inverse")), &[&c.levels, &floored], &[&inverse]),
            new_node("Div", "", self.fresh(&format!("{name}_row_scale")), &[&floored, &c.levels], &[&scale]),
            new_node("Mul", "", self.fresh(&format!("{name}_scale_rows")), &[&input, &inverse], &[&scaled]),
            new_node(
                "QuantizeLinear",
                "",
                self.fresh(&format!("{name}_quantize")),
                &[&scaled, &c.one, &c.zero_point],
                &[&q],
            ),
        ]);
        self.quantized.insert(x.to_owned(), (q.clone(), scale.clone()));
        (nodes, q, scale)
    }

    /// SmoothQuant's per-channel factors for `x` when a `LayerNormalization` with constant scale
    /// (and bias) makes it: `f_j = a_j^alpha / w_j^(1 - alpha)`, with `a_j = |gamma_j| + |beta_j|`
    /// (how large channel j of the normalised rows can be) and `w_j` the largest weight of row j
    /// over every MatMul that reads `x` and is rewritten. Channels that LayerNorm makes large (the
    /// outlier dimensions of BERT-like models) are divided down before per-token quantization,
    /// and their weight rows multiplied up, which the weights' per-column scales absorb. Computed
    /// once per `x`; `None` where `x` is not such a LayerNorm's output.
    fn smoothing(&mut self, x: &str) -> Result<Option<Vec<f32>>, QuantizeError> {
        if let Some(done) = self.smoothings.get(x) {
            return Ok(done.clone());
        }
        let factors = self.compute_smoothing(x)?;
        self.smoothings.insert(x.to_owned(), factors.clone());
        Ok(factors)
    }

    /// The MatMul and Gemm nodes that read `x` as their input and that the rewrite makes int8 (a
    /// constant weight, no `keep_fp32` pattern), with their weights: what smoothing rescales and
    /// calibration measures for.
    fn int8_readers(&self, x: &str) -> Result<Vec<(usize, Constant)>, QuantizeError> {
        let mut readers = Vec::new();
        for &j in self.consumers.get(x).into_iter().flatten() {
            let n = &self.g.node[j];
            // A Gemm with transA reads x transposed, and the rewrite keeps it in float.
            let reads_x = matches!(op(n), "MatMul" | "Gemm")
                && default_domain(n)
                && n.input.first().map(String::as_str) == Some(x)
                && n.input.len() > 1
                && !(op(n) == "Gemm" && attr_i(n, "transA", 0) != 0);
            if !reads_x || self.kept_by_pattern(&node_name(n, j), &n.input[1]).is_some() {
                continue;
            }
            if let Ok(c) = self.constant(&n.input[1])? {
                readers.push((j, c));
            }
        }
        Ok(readers)
    }

    fn compute_smoothing(&self, x: &str) -> Result<Option<Vec<f32>>, QuantizeError> {
        let Some(alpha) = self.options.smoothing else { return Ok(None) };
        let Some((_, ln)) = self.producer_of(x).filter(|(_, n)| op(n) == "LayerNormalization" && default_domain(n))
        else {
            return Ok(None);
        };
        let gamma = match ln.input.get(1).and_then(|g| self.init(g)) {
            Some(t) if t.data_type == Some(FLOAT) => tensor::f32_values(t)?,
            _ => return Ok(None),
        };
        let beta = match ln.input.get(2).filter(|b| !b.is_empty()).map(|b| self.init(b)) {
            None => vec![0.0; gamma.len()],
            Some(Some(t)) if t.data_type == Some(FLOAT) => tensor::f32_values(t)?,
            Some(_) => return Ok(None),
        };
        if beta.len() != gamma.len() {
            return Ok(None);
        }
        let k = gamma.len();
        let mut row_max = vec![0f32; k];
        for (j, c) in self.int8_readers(x)? {
            let n = &self.g.node[j];
            let transposed = op(n) == "Gemm" && attr_i(n, "transB", 0) != 0;
            let (rows, cols) = (c.dims[0], c.dims[1]);
            if (if transposed { cols } else { rows }) != k {
                return Ok(None);
            }
            for (idx, v) in c.values().iter().enumerate() {
                let i = if transposed { idx % cols } else { idx / cols };
                row_max[i] = row_max[i].max(v.abs());
            }
        }
        let measured = self.options.channel_max.get(x).filter(|m| m.len() == k);
        let factors = (0..k)
            .map(|j| {
                let a = measured.map_or(gamma[j].abs() + beta[j].abs(), |m| m[j]);
                let f = a.powf(alpha) / row_max[j].powf(1.0 - alpha);
                if f.is_finite() && f > 0.0 { f.clamp(1e-3, 1e3) } else { 1.0 }
            })
            .collect();
        Ok(Some(factors))
    }

    fn per_token_constants(&mut self) -> PerTokenConstants {
        if let Some(c) = &self.per_token {
            return c.clone();
        }
        let levels = self.add_f32("nornir_int8_levels", &[], &[127.0]);
        let floor = self.add_f32("nornir_int8_scale_floor", &[], &[1e-30]);
        let one = self.add_f32("nornir_int8_one", &[], &[1.0]);
        let zero_point = self.fresh("nornir_int8_zero_point");
        self.new_inits.push(tensor::new_u8(&zero_point, &[], &[128]));
        let last_axis = self.fresh("nornir_int8_last_axis");
        self.new_inits.push(tensor::new_i64(&last_axis, &[1], &[-1]));
        let c = PerTokenConstants { levels, floor, one, zero_point, last_axis };
        self.per_token = Some(c.clone());
        c
    }

    /// The values of a constant float32 bias of shape `[n]` or `[1, n]`.
    fn bias_vector(&self, name: &str, n: usize) -> Option<Vec<f32>> {
        let t = self.init(name)?;
        let ok = t.data_type == Some(FLOAT) && (t.dims == [n as i64] || t.dims == [1, n as i64]);
        if ok { tensor::f32_values(t).ok() } else { None }
    }

    fn add_f32(&mut self, base: &str, dims: &[i64], values: &[f32]) -> String {
        let name = self.fresh(base);
        self.new_inits.push(tensor::new_f32(&name, dims, values));
        name
    }

    /// `Gather(Mul(Cast(q), scale), ids)` with one scale per row (or one in all) becomes
    /// `Mul(Cast(Gather(q, ids)), Gather(scale, ids))`: the same values, from an int8 table.
    fn gather(&mut self, i: usize) -> Result<(), QuantizeError> {
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
    fn finish(&mut self) {
        let candidates: HashSet<String> =
            self.dead_candidates.iter().flat_map(|&i| self.g.node[i].output.iter().cloned()).collect();
        let mut replacements = std::mem::take(&mut self.replaced);
        replacements.extend(self.removed.iter().map(|&i| (i, Vec::new())));
        splice(self.g, replacements, std::mem::take(&mut self.new_inits));
        remove_dead(self.g, |o| candidates.contains(o));
    }
}

fn computed(op: &str) -> String {
    format!("both inputs are computed at run time (the second by {op}), as in attention; int8 needs a constant weight")
}

fn dims2(t: &TensorProto) -> Option<[usize; 2]> {
    match t.dims.as_slice() {
        [a, b] if *a > 0 && *b > 0 => Some([*a as usize, *b as usize]),
        _ => None,
    }
}
