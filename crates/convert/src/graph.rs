//! A small ONNX graph builder: nodes with fresh value names, initializers, and the model around
//! them (opset, inputs and outputs with named dynamic axes).

use crate::onnx::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};

pub(crate) const FLOAT: i32 = 1;
pub(crate) const INT64: i32 = 7;
/// The default domain's opset the graph is written for: `LayerNormalization` needs 17.
pub(crate) const OPSET: i64 = 17;
pub(crate) const MS_DOMAIN: &str = "com.microsoft";

/// An attribute value for [`Graph::op`].
pub(crate) enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
}

/// The graph being written.
pub(crate) struct Graph {
    g: GraphProto,
    next: usize,
    initializers: std::collections::HashSet<String>,
}

impl Graph {
    pub(crate) fn new(name: &str) -> Graph {
        let mut g = GraphProto::new();
        g.name = Some(name.to_owned());
        Graph { g, next: 0, initializers: std::collections::HashSet::new() }
    }

    fn fresh(&mut self, base: &str) -> String {
        self.next += 1;
        format!("{base}_{}", self.next)
    }

    /// Adds a node of `op_type` (in `domain`, "" for ONNX's) reading `inputs`; returns its output's
    /// name (`base` and a number, or exactly `output` when given).
    pub(crate) fn node(
        &mut self,
        op_type: &str,
        domain: &str,
        inputs: &[&str],
        attrs: &[(&str, Attr)],
        output: Option<&str>,
    ) -> String {
        let out = match output {
            Some(name) => name.to_owned(),
            None => self.fresh(&op_type.to_lowercase()),
        };
        let mut n = NodeProto::new();
        n.name = Some(format!("{out}_node"));
        n.op_type = Some(op_type.to_owned());
        if !domain.is_empty() {
            n.domain = Some(domain.to_owned());
        }
        n.input = inputs.iter().map(|s| (*s).to_owned()).collect();
        n.output = vec![out.clone()];
        for (name, value) in attrs {
            let mut a = AttributeProto::new();
            a.name = Some((*name).to_owned());
            match value {
                Attr::Int(i) => {
                    a.i = Some(*i);
                    a.type_ = Some(2);
                }
                Attr::Float(f) => {
                    a.f = Some(*f);
                    a.type_ = Some(1);
                }
                Attr::Ints(v) => {
                    a.ints = v.clone();
                    a.type_ = Some(7);
                }
            }
            n.attribute.push(a);
        }
        self.g.node.push(n);
        out
    }

    /// Whether a node already writes the value `name`.
    pub(crate) fn has_value(&self, name: &str) -> bool {
        self.g.node.iter().any(|n| n.output.iter().any(|o| o == name))
    }

    /// A node in ONNX's domain without attributes.
    pub(crate) fn op(&mut self, op_type: &str, inputs: &[&str]) -> String {
        self.node(op_type, "", inputs, &[], None)
    }

    /// `name`, or `name` and a number where an initializer has it already.
    fn initializer_name(&mut self, name: &str) -> String {
        let name = if self.initializers.contains(name) { self.fresh(name) } else { name.to_owned() };
        self.initializers.insert(name.clone());
        name
    }

    /// An initializer of `data_type` holding `raw` (little-endian); returns its name.
    fn initializer(&mut self, name: &str, dims: &[usize], data_type: i32, raw: Vec<u8>) -> String {
        let name = self.initializer_name(name);
        let mut t = TensorProto::new();
        t.name = Some(name.clone());
        t.dims = dims.iter().map(|&d| d as i64).collect();
        t.data_type = Some(data_type);
        t.raw_data = Some(raw);
        self.g.initializer.push(t);
        name
    }

    /// A float32 initializer; returns its name.
    pub(crate) fn f32(&mut self, name: &str, dims: &[usize], values: Vec<f32>) -> String {
        self.initializer(name, dims, FLOAT, values.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    /// An int64 constant (an initializer); returns its name.
    pub(crate) fn i64(&mut self, name: &str, dims: &[usize], values: &[i64]) -> String {
        self.initializer(name, dims, INT64, values.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    /// A graph input or output of `elem_type` with these axes (a name is a dynamic axis).
    fn value(name: &str, elem_type: i32, axes: &[&str]) -> ValueInfoProto {
        let mut shape = TensorShapeProto::new();
        for axis in axes {
            let mut d = tensor_shape_proto::Dimension::new();
            d.dim_param = Some((*axis).to_owned());
            shape.dim.push(d);
        }
        let mut tensor = type_proto::Tensor::new();
        tensor.elem_type = Some(elem_type);
        tensor.shape = Some(shape).into();
        let mut ty = TypeProto::new();
        ty.tensor_type = Some(tensor).into();
        let mut v = ValueInfoProto::new();
        v.name = Some(name.to_owned());
        v.type_ = Some(ty).into();
        v
    }

    pub(crate) fn input(&mut self, name: &str, elem_type: i32, axes: &[&str]) -> String {
        self.g.input.push(Self::value(name, elem_type, axes));
        name.to_owned()
    }

    pub(crate) fn output(&mut self, name: &str, elem_type: i32, axes: &[&str]) {
        self.g.output.push(Self::value(name, elem_type, axes));
    }

    /// Renames value `from` to `to` wherever a node writes or reads it.
    pub(crate) fn rename_value(&mut self, from: &str, to: &str) {
        for n in &mut self.g.node {
            for v in n.output.iter_mut().chain(n.input.iter_mut()).filter(|v| *v == from) {
                *v = to.to_owned();
            }
        }
    }

    pub(crate) fn node_count(&self) -> usize {
        self.g.node.len()
    }

    /// Moves the bytes of every float initializer of 1 KiB or more into `data` (the external data
    /// file `location`), leaving a reference: for models whose weights pass protobuf's 2 GB limit.
    /// Small constants stay inline: shape inference reads them (ONNX Runtime refuses an external
    /// `Slice` bound).
    pub(crate) fn move_weights_out(&mut self, location: &str, data: &mut Vec<u8>) {
        for t in &mut self.g.initializer {
            if t.data_type != Some(FLOAT) || t.raw_data.as_ref().is_none_or(|r| r.len() < 1024) {
                continue;
            }
            let Some(raw) = t.raw_data.take() else { continue };
            let entry = |key: &str, value: String| {
                let mut e = StringStringEntryProto::new();
                e.key = Some(key.to_owned());
                e.value = Some(value);
                e
            };
            // ONNX Runtime maps external data with offsets aligned to 4 KiB when it can.
            data.resize(data.len().next_multiple_of(4096), 0);
            t.external_data = vec![
                entry("location", location.to_owned()),
                entry("offset", data.len().to_string()),
                entry("length", raw.len().to_string()),
            ];
            t.data_location = Some(1);
            data.extend_from_slice(&raw);
        }
    }

    /// The weight bytes held in the graph.
    pub(crate) fn weight_bytes(&self) -> usize {
        self.g.initializer.iter().map(|t| t.raw_data.as_ref().map_or(0, Vec::len)).sum()
    }

    /// The model: this graph with ONNX's opset [`OPSET`] and ONNX Runtime's contrib domain.
    pub(crate) fn into_model(self, producer_version: &str) -> ModelProto {
        let mut m = ModelProto::new();
        m.ir_version = Some(8);
        m.producer_name = Some("nornir-convert".to_owned());
        m.producer_version = Some(producer_version.to_owned());
        for (domain, version) in [("", OPSET), (MS_DOMAIN, 1)] {
            let mut o = OperatorSetIdProto::new();
            o.domain = Some(domain.to_owned());
            o.version = Some(version);
            m.opset_import.push(o);
        }
        m.graph = Some(self.g).into();
        m
    }

    /// Node counts by operator, in order of first appearance.
    pub(crate) fn op_counts(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for n in &self.g.node {
            let op = n.op_type.clone().unwrap_or_default();
            match counts.iter_mut().find(|(o, _)| *o == op) {
                Some((_, c)) => *c += 1,
                None => counts.push((op, 1)),
            }
        }
        counts
    }
}
