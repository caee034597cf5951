//! A small ONNX graph builder: nodes with fresh value names, initializers, and the model around
//! them (opset, inputs and outputs with named dynamic axes). Where the graph is given an external
//! data file ([`Graph::stream_weights_to`]), each weight's bytes go to it when the weight is
//! added and only its offset stays: memory then holds one tensor at a time, not the model.

use std::io::Write;

mod branch;
mod dtype;
mod function;
pub use dtype::WeightDtype;
pub(crate) use function::NORNIR_DOMAIN;

use crate::onnx::{
    AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto, TensorShapeProto, TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};

pub(crate) const FLOAT: i32 = 1;
pub(crate) const INT64: i32 = 7;
pub(crate) const FLOAT16: i32 = 10;
pub(crate) const BFLOAT16: i32 = 16;
/// Initializers smaller than this stay inline when the others go to external data: shape
/// inference reads small constants (ONNX Runtime refuses an external `Slice` bound).
const EXTERNAL_MIN_BYTES: usize = 1024;
/// The default domain's opset the graph is written for: `LayerNormalization` needs 17.
pub(crate) const OPSET: i64 = 17;
pub(crate) const MS_DOMAIN: &str = "com.microsoft";

/// An attribute value for [`Graph::op`].
pub(crate) enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    /// A subgraph: an `If`'s branch ([`Graph::branch`]).
    Graph(GraphProto),
}

/// The external data file weights are written to as they are added.
struct Sink {
    location: String,
    path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    written: u64,
    /// The first write that failed: reported by [`Graph::finish_weights`].
    error: Option<std::io::Error>,
}

/// The graph being written.
pub(crate) struct Graph {
    g: GraphProto,
    next: usize,
    initializers: std::collections::HashSet<String>,
    sink: Option<Sink>,
    /// Weight bytes written to the sink.
    external_bytes: usize,
    /// How [`Graph::weight`] stores its values.
    dtype: WeightDtype,
    /// Model-local functions ([`Graph::define_function`]).
    functions: Vec<FunctionProto>,
}

impl Graph {
    pub(crate) fn new(name: &str) -> Graph {
        let mut g = GraphProto::new();
        g.name = Some(name.to_owned());
        Graph {
            g,
            next: 0,
            initializers: std::collections::HashSet::new(),
            sink: None,
            external_bytes: 0,
            dtype: WeightDtype::Float32,
            functions: Vec::new(),
        }
    }

    /// Stores the values of [`Graph::weight`] and [`Graph::weight_from_rows`] as `dtype`.
    pub(crate) fn with_weight_dtype(mut self, dtype: WeightDtype) -> Graph {
        self.dtype = dtype;
        self
    }

    /// From now on, writes every weight of [`EXTERNAL_MIN_BYTES`] or more to `path` (named
    /// `location` in the model, beside it) as it is added.
    pub(crate) fn stream_weights_to(&mut self, path: &std::path::Path, location: &str) -> std::io::Result<()> {
        let file = std::fs::File::create(path)?;
        self.sink = Some(Sink {
            location: location.to_owned(),
            path: path.to_path_buf(),
            file: std::io::BufWriter::with_capacity(1 << 22, file),
            written: 0,
            error: None,
        });
        Ok(())
    }

    /// Flushes the external data file; the first write that failed, with the file's path.
    pub(crate) fn finish_weights(&mut self) -> Result<(), (std::path::PathBuf, std::io::Error)> {
        let Some(sink) = &mut self.sink else { return Ok(()) };
        let result = match sink.error.take() {
            Some(e) => Err(e),
            None => sink.file.flush(),
        };
        result.map_err(|e| (sink.path.clone(), e))
    }

    /// Whether weights went to an external data file as they were added.
    pub(crate) fn streams_weights(&self) -> bool {
        self.sink.is_some()
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
        self.node_with_outputs(op_type, domain, inputs, attrs, vec![out.clone()]);
        out
    }

    /// [`Graph::node`] with `extra` outputs after the first (an operator whose outputs the schema
    /// requires though the graph reads only the first); returns the first's name.
    pub(crate) fn node_with_extra_outputs(
        &mut self,
        op_type: &str,
        domain: &str,
        inputs: &[&str],
        attrs: &[(&str, Attr)],
        extra: usize,
    ) -> String {
        let out = self.fresh(&op_type.to_lowercase());
        let outputs = std::iter::once(out.clone()).chain((1..=extra).map(|i| format!("{out}_{i}"))).collect();
        self.node_with_outputs(op_type, domain, inputs, attrs, outputs);
        out
    }

    fn node_with_outputs(
        &mut self,
        op_type: &str,
        domain: &str,
        inputs: &[&str],
        attrs: &[(&str, Attr)],
        outputs: Vec<String>,
    ) {
        let mut n = NodeProto::new();
        n.name = Some(format!("{}_node", outputs[0]));
        n.op_type = Some(op_type.to_owned());
        if !domain.is_empty() {
            n.domain = Some(domain.to_owned());
        }
        n.input = inputs.iter().map(|s| (*s).to_owned()).collect();
        n.output = outputs;
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
                Attr::Graph(g) => {
                    a.g = Some(g.clone()).into();
                    a.type_ = Some(5);
                }
            }
            n.attribute.push(a);
        }
        self.g.node.push(n);
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

    /// An initializer of `data_type` holding `raw` (little-endian); returns its name. A float
    /// weight goes to the external data file where there is one.
    fn initializer(&mut self, name: &str, dims: &[usize], data_type: i32, raw: Vec<u8>) -> String {
        self.initializer_from_chunks(name, dims, data_type, raw.len(), std::iter::once(raw))
    }

    /// An initializer whose `len` bytes come as `chunks`: written to the external data file one
    /// chunk at a time where it goes there, else joined inline.
    fn initializer_from_chunks(
        &mut self,
        name: &str,
        dims: &[usize],
        data_type: i32,
        len: usize,
        chunks: impl Iterator<Item = Vec<u8>>,
    ) -> String {
        let name = self.initializer_name(name);
        let mut t = TensorProto::new();
        t.name = Some(name.clone());
        t.dims = dims.iter().map(|&d| d as i64).collect();
        t.data_type = Some(data_type);
        let external = data_type != INT64 && len >= EXTERNAL_MIN_BYTES;
        match &mut self.sink {
            Some(sink) if external => {
                // ONNX Runtime maps external data with offsets aligned to 4 KiB when it can.
                let offset = sink.written.next_multiple_of(4096);
                let padding = vec![0u8; (offset - sink.written) as usize];
                let mut write = |bytes: &[u8]| {
                    if sink.error.is_none()
                        && let Err(e) = sink.file.write_all(bytes)
                    {
                        sink.error = Some(e);
                    }
                };
                write(&padding);
                let mut n = 0;
                for chunk in chunks {
                    write(&chunk);
                    n += chunk.len();
                }
                sink.written = offset + n as u64;
                self.external_bytes += n;
                t.external_data = vec![
                    entry("location", sink.location.clone()),
                    entry("offset", offset.to_string()),
                    entry("length", n.to_string()),
                ];
                t.data_location = Some(1);
            }
            _ => {
                let mut raw = Vec::with_capacity(len);
                chunks.for_each(|c| raw.extend_from_slice(&c));
                t.raw_data = Some(raw);
            }
        }
        self.g.initializer.push(t);
        name
    }

    /// A weight stored as the graph's weight type; returns the float32 value the graph reads
    /// (the initializer, or its `Cast` to float32).
    pub(crate) fn weight(&mut self, name: &str, dims: &[usize], values: Vec<f32>) -> String {
        let elements = values.len();
        let chunk = std::iter::once(Ok::<_, std::convert::Infallible>(values));
        let Ok(stored) = self.stored_weight(name, dims, elements, chunk);
        self.widened(&stored)
    }

    /// A weight stored as the graph's weight type from its values in `chunks` (of `elements` in
    /// all), each encoded and written as it comes; returns the stored initializer (see
    /// [`Graph::widened`]). The first error of `chunks` is returned, and the initializer is then
    /// not added.
    pub(crate) fn stored_weight<E>(
        &mut self,
        name: &str,
        dims: &[usize],
        elements: usize,
        chunks: impl Iterator<Item = Result<Vec<f32>, E>>,
    ) -> Result<String, E> {
        let dtype = self.dtype;
        let mut failed = None;
        let bytes = chunks.map_while(|c| match c {
            Ok(values) => Some(dtype.encode(&values)),
            Err(e) => {
                failed = Some(e);
                None
            }
        });
        // Collected only where inline; streamed chunk by chunk to external data.
        let name = self.initializer_from_chunks(name, dims, dtype.onnx(), elements * dtype.element_bytes(), bytes);
        match failed {
            Some(e) => {
                self.g.initializer.pop();
                Err(e)
            }
            None => Ok(name),
        }
    }

    /// `stored` (an initializer of [`Graph::stored_weight`]) as float32: itself, or a `Cast`.
    pub(crate) fn widened(&mut self, stored: &str) -> String {
        if self.dtype == WeightDtype::Float32 {
            return stored.to_owned();
        }
        self.node("Cast", "", &[stored], &[("to", Attr::Int(FLOAT.into()))], None)
    }

    /// A float32 initializer; returns its name.
    pub(crate) fn f32(&mut self, name: &str, dims: &[usize], values: Vec<f32>) -> String {
        self.initializer(name, dims, FLOAT, values.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    /// A float32 scalar written once under `name` and shared by every later caller (the name
    /// must say the value).
    pub(crate) fn constant_f32(&mut self, name: &str, value: f32) -> String {
        if self.initializers.contains(name) {
            return name.to_owned();
        }
        self.f32(name, &[], vec![value])
    }

    /// An int64 constant written once under `name` and shared by every later caller (the name
    /// must say the value, within one graph).
    pub(crate) fn constant_i64(&mut self, name: &str, dims: &[usize], values: &[i64]) -> String {
        if self.initializers.contains(name) {
            return name.to_owned();
        }
        self.i64(name, dims, values)
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

    /// Renames value `from` to `to` wherever a node writes or reads it, in branches too.
    pub(crate) fn rename_value(&mut self, from: &str, to: &str) {
        branch::rename_in(&mut self.g, from, to);
    }

    pub(crate) fn node_count(&self) -> usize {
        self.g.node.len()
    }

    /// Moves the bytes of every float initializer of [`EXTERNAL_MIN_BYTES`] or more into `data`
    /// (the external data file `location`), leaving a reference: for models whose weights pass
    /// protobuf's 2 GB limit, where they were not streamed to it.
    pub(crate) fn move_weights_out(&mut self, location: &str, data: &mut Vec<u8>) {
        for t in &mut self.g.initializer {
            if t.data_type == Some(INT64) || t.raw_data.as_ref().is_none_or(|r| r.len() < EXTERNAL_MIN_BYTES) {
                continue;
            }
            let Some(raw) = t.raw_data.take() else { continue };
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

    /// The weight bytes held in the graph and written to its external data file.
    pub(crate) fn weight_bytes(&self) -> usize {
        self.external_bytes + self.inline_bytes()
    }

    /// The weight bytes held in the graph.
    pub(crate) fn inline_bytes(&self) -> usize {
        self.g.initializer.iter().map(|t| t.raw_data.as_ref().map_or(0, Vec::len)).sum()
    }

    /// The model: this graph with ONNX's opset [`OPSET`] and ONNX Runtime's contrib domain, and
    /// nornir's domain where a function is defined.
    pub(crate) fn into_model(mut self, producer_version: &str) -> ModelProto {
        let mut m = ModelProto::new();
        m.ir_version = Some(8);
        m.producer_name = Some("nornir-convert".to_owned());
        m.producer_version = Some(producer_version.to_owned());
        m.opset_import = vec![function::opset("", OPSET), function::opset(MS_DOMAIN, 1)];
        m.functions = std::mem::take(&mut self.functions);
        if !m.functions.is_empty() {
            m.opset_import.push(function::opset(NORNIR_DOMAIN, 1));
        }
        m.graph = Some(self.g).into();
        m
    }

    /// The graph's initializer `name`: its dims, type and inline bytes (for tests).
    #[cfg(test)]
    pub(crate) fn initializer_data(&self, name: &str) -> Option<(Vec<i64>, i32, &[u8])> {
        let t = self.g.initializer.iter().find(|t| t.name.as_deref() == Some(name))?;
        Some((t.dims.clone(), t.data_type.unwrap_or(0), t.raw_data.as_deref().unwrap_or_default()))
    }

    /// Node counts by operator, branches' nodes included, in order of first appearance.
    pub(crate) fn op_counts(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<(String, usize)> = Vec::new();
        branch::count_ops(&self.g, &mut counts);
        counts
    }
}

fn entry(key: &str, value: String) -> StringStringEntryProto {
    let mut e = StringStringEntryProto::new();
    e.key = Some(key.to_owned());
    e.value = Some(value);
    e
}
