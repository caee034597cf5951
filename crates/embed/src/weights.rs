//! The model's weights, read once from `model.onnx` and handed to every CPU session of the model
//! as ONNX Runtime's shared initializers (`AddInitializer`), so that the sessions use one copy,
//! and the pre-packed weights container, which ONNX Runtime fills only for shared initializers,
//! keeps one copy of what the kernels pre-pack from them.
//!
//! A small reader of the ONNX protobuf's wire format: `ModelProto.graph` (field 7),
//! `GraphProto.initializer` (5), and of each `TensorProto` its `dims` (1), `data_type` (2),
//! `name` (8) and `raw_data` (9). A tensor kept any other way (typed data fields, an external
//! file: `data_location` 14, `external_data` 13) stays in the model, and each session loads it.
//! ONNX Runtime takes only buffers the caller owns as shared initializers, so each one is decoded
//! into a tensor of its own.
//!
//! What ONNX Runtime computes from a shared initializer at load (constant folding, e.g. a graph
//! that dequantizes int8 weights with `Cast` and `Mul`) is still made once per session.
//!
//! The same reader finds the operators that quantize activations with one scale per tensor
//! ([`per_tensor_activation_ops`]), from each `NodeProto`'s `op_type` (4) and `domain` (7).

use std::path::Path;
use std::sync::Arc;

use ort::value::{DynValue, Tensor, Value};

/// Initializers shared by every CPU session of one model.
#[derive(Debug, Default)]
pub(crate) struct SharedWeights {
    pub values: Vec<(String, Arc<DynValue>)>,
    /// Bytes of tensor data shared.
    pub bytes: u64,
}

/// The initializers of the ONNX file `model` (read from `path`) that can be shared. A file this
/// reader does not understand shares nothing: ONNX Runtime reads it as before and says what is
/// wrong.
pub(crate) fn from_model_bytes(model: &[u8], path: &Path) -> SharedWeights {
    from_model(model).unwrap_or_else(|| {
        tracing::debug!(model = %path.display(), "weights not shared: the ONNX protobuf could not be read");
        SharedWeights::default()
    })
}

fn from_model(model: &[u8]) -> Option<SharedWeights> {
    let graph = read_graph(model)?;
    let read_when_running = read_when_running(&graph);
    let mut out = SharedWeights::default();
    let wanted = |t: &RawTensor<'_>| t.shareable() && read_when_running.contains(t.name);
    for t in graph.initializers.into_iter().filter(wanted) {
        match owned_tensor(&t) {
            Ok(value) => {
                out.bytes += t.raw.len() as u64;
                out.values.push((t.name.to_owned(), Arc::new(value)));
            }
            Err(e) => tracing::debug!(initializer = t.name, error = %e, "not shared"),
        }
    }
    Some(out)
}

/// What the reader takes from `GraphProto`: its initializers whose data is all in `raw_data`,
/// the names of every initializer, and each node's inputs and outputs, in the graph's order.
struct Graph<'a> {
    initializers: Vec<RawTensor<'a>>,
    constant_names: Vec<&'a str>,
    nodes: Vec<(Vec<&'a str>, Vec<&'a str>)>,
}

/// The model's graph; `None` for a malformed message.
fn read_graph(model: &[u8]) -> Option<Graph<'_>> {
    let mut graph = None;
    for field in fields(model) {
        if let (7, Field::Bytes(g)) = field? {
            graph = Some(g);
        }
    }
    let mut out = Graph { initializers: Vec::new(), constant_names: Vec::new(), nodes: Vec::new() };
    for field in fields(graph?) {
        match field? {
            (1, Field::Bytes(node)) => out.nodes.push(node_io(node)?),
            (5, Field::Bytes(t)) => {
                let (name, raw) = raw_tensor(t)?;
                out.constant_names.extend(name);
                out.initializers.extend(raw);
            }
            _ => {}
        }
    }
    Some(out)
}

/// A `NodeProto`'s inputs (field 1) and outputs (2).
fn node_io(buf: &[u8]) -> Option<(Vec<&str>, Vec<&str>)> {
    let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
    for field in fields(buf) {
        match field? {
            (1, Field::Bytes(n)) => inputs.push(std::str::from_utf8(n).ok()?),
            (2, Field::Bytes(n)) => outputs.push(std::str::from_utf8(n).ok()?),
            _ => {}
        }
    }
    Some((inputs, outputs))
}

/// The initializers some node reads while the model runs. A node whose inputs are all constant
/// (initializers, or outputs of such nodes; nodes come in topological order) is computed once
/// at load by ONNX Runtime's constant folding, so an initializer that only such nodes read (the
/// int8 weights of a graph that dequantizes them with `Cast` and `Mul`) is not needed after
/// load: sharing it would keep a copy that no session uses.
fn read_when_running<'a>(graph: &Graph<'a>) -> std::collections::HashSet<&'a str> {
    let mut constant: std::collections::HashSet<&str> = graph.constant_names.iter().copied().collect();
    let mut read = std::collections::HashSet::new();
    for (inputs, outputs) in &graph.nodes {
        let present = || inputs.iter().filter(|i| !i.is_empty());
        if present().all(|i| constant.contains(i)) {
            constant.extend(outputs.iter().copied());
        } else {
            read.extend(present().filter(|i| graph.constant_names.contains(i)));
        }
    }
    read
}

/// Operators that quantize their float input with one scale for the whole tensor, found at run
/// time: a text's result then depends on the other texts of its batch and on its padding.
const PER_TENSOR_ACTIVATION_OPS: [(&str, &str); 3] = [
    ("", "DynamicQuantizeLinear"),
    ("com.microsoft", "DynamicQuantizeMatMul"),
    ("com.microsoft", "DynamicQuantizeLSTM"),
];

/// The operators of the model at `path` that quantize activations per tensor, each named once
/// (`DynamicQuantizeLinear`, `com.microsoft.DynamicQuantizeMatMul`), with how many nodes use it.
/// Empty for a float graph, for one with per-token scales (`nornir vector quantize`), and for a
/// file this reader does not understand (ONNX Runtime then says what is wrong with it).
pub(crate) fn per_tensor_activation_ops(model: &[u8]) -> Vec<(String, usize)> {
    let mut found: Vec<(String, usize)> = Vec::new();
    let mut graph = None;
    for field in fields(model) {
        match field {
            Some((7, Field::Bytes(g))) => graph = Some(g),
            Some(_) => {}
            None => return found,
        }
    }
    for field in fields(graph.unwrap_or_default()) {
        let Some((1, Field::Bytes(node))) = field else { continue };
        let (mut op, mut domain) = ("", "");
        for f in fields(node) {
            match f {
                Some((4, Field::Bytes(o))) => op = std::str::from_utf8(o).unwrap_or_default(),
                Some((7, Field::Bytes(d))) => domain = std::str::from_utf8(d).unwrap_or_default(),
                _ => {}
            }
        }
        let domain = if domain == "ai.onnx" { "" } else { domain };
        if PER_TENSOR_ACTIVATION_OPS.contains(&(domain, op)) {
            let name = if domain.is_empty() { op.to_owned() } else { format!("{domain}.{op}") };
            match found.iter_mut().find(|(n, _)| *n == name) {
                Some((_, count)) => *count += 1,
                None => found.push((name, 1)),
            }
        }
    }
    found
}

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one protobuf message, in order; `None` for a malformed one, then nothing more.
fn fields(mut buf: &[u8]) -> impl Iterator<Item = Option<(u64, Field<'_>)>> {
    let mut failed = false;
    std::iter::from_fn(move || {
        if buf.is_empty() || failed {
            return None;
        }
        let field = next_field(&mut buf);
        failed = field.is_none();
        Some(field)
    })
}

fn next_field<'a>(buf: &mut &'a [u8]) -> Option<(u64, Field<'a>)> {
    let key = varint(buf)?;
    let value = match key & 7 {
        0 => Field::Varint(varint(buf)?),
        1 => take(buf, 8).map(|_| Field::Fixed)?,
        2 => {
            let n = varint(buf)?;
            Field::Bytes(take(buf, usize::try_from(n).ok()?)?)
        }
        5 => take(buf, 4).map(|_| Field::Fixed)?,
        _ => return None,
    };
    Some((key >> 3, value))
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if n > buf.len() {
        return None;
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Some(head)
}

struct RawTensor<'a> {
    name: &'a str,
    dims: Vec<i64>,
    data_type: u64,
    raw: &'a [u8],
}

/// A `TensorProto`'s name, and the tensor when its data is all in `raw_data` (`None` for one
/// kept any other way); `None` for a malformed message.
fn raw_tensor(buf: &[u8]) -> Option<(Option<&str>, Option<RawTensor<'_>>)> {
    let (mut name, mut dims, mut data_type, mut raw, mut elsewhere) = (None, Vec::new(), 0, None, false);
    for field in fields(buf) {
        match field? {
            (1, Field::Varint(d)) => dims.push(i64::try_from(d).ok()?),
            (1, Field::Bytes(mut packed)) => {
                while !packed.is_empty() {
                    dims.push(i64::try_from(varint(&mut packed)?).ok()?);
                }
            }
            (2, Field::Varint(t)) => data_type = t,
            (8, Field::Bytes(n)) => name = Some(std::str::from_utf8(n).ok()?),
            (9, Field::Bytes(r)) => raw = Some(r),
            // Typed data fields, external data, its location: not in raw_data.
            (4..=7 | 10 | 11 | 13 | 14, _) => elsewhere = true,
            _ => {}
        }
    }
    let tensor = match (name, raw) {
        (Some(name), Some(raw)) if !elsewhere && !raw.is_empty() => Some(RawTensor { name, dims, data_type, raw }),
        _ => None,
    };
    Some((name, tensor))
}

impl RawTensor<'_> {
    /// The bytes of one element, for the element types that are shared (ONNX's
    /// `TensorProto.DataType` numbers).
    fn element_size(&self) -> Option<usize> {
        Some(match self.data_type {
            2 | 3 => 1,
            4 | 5 | 10 | 16 => 2,
            1 | 6 | 12 => 4,
            7 | 11 | 13 => 8,
            _ => return None,
        })
    }

    /// A type that is shared, and exactly as many bytes as the dims say.
    fn shareable(&self) -> bool {
        let count = self.dims.iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
        self.element_size().zip(count).and_then(|(size, n)| n.checked_mul(size)) == Some(self.raw.len())
    }
}

/// A tensor over a buffer of its own, decoded from little-endian `raw_data` (a `shareable` one).
fn owned_tensor(t: &RawTensor<'_>) -> ort::Result<DynValue> {
    macro_rules! decode {
        ($t:ty) => {{
            const SIZE: usize = std::mem::size_of::<$t>();
            let v: Vec<$t> =
                t.raw.chunks_exact(SIZE).map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or([0; SIZE]))).collect();
            Tensor::from_array((t.dims.clone(), v)).map(Value::into_dyn)
        }};
    }
    match t.data_type {
        1 => decode!(f32),
        2 => decode!(u8),
        3 => decode!(i8),
        4 => decode!(u16),
        5 => decode!(i16),
        6 => decode!(i32),
        7 => decode!(i64),
        10 => decode!(half::f16),
        11 => decode!(f64),
        12 => decode!(u32),
        13 => decode!(u64),
        16 => decode!(half::bf16),
        other => Err(ort::Error::new(format!("element type {other} is not shared"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A protobuf field with a length-delimited value.
    fn bytes_field(number: u64, value: &[u8]) -> Vec<u8> {
        let mut out = vec![u8::try_from(number << 3 | 2).expect("small field number")];
        let mut n = value.len();
        while n >= 0x80 {
            out.push(u8::try_from(n & 0x7f).expect("7 bits") | 0x80);
            n >>= 7;
        }
        out.push(u8::try_from(n).expect("7 bits"));
        out.extend_from_slice(value);
        out
    }

    fn tensor(name: &str, dims: &[u8], data_type: u8, raw: &[u8]) -> Vec<u8> {
        let mut t = bytes_field(1, dims); // packed dims
        t.extend([2 << 3, data_type]);
        t.extend(bytes_field(8, name.as_bytes()));
        t.extend(bytes_field(9, raw));
        t
    }

    #[test]
    fn reads_raw_initializers_and_leaves_the_rest() {
        let w = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut graph = bytes_field(5, &tensor("w", &[2, 3], 1, &w));
        graph.extend(bytes_field(5, &tensor("wrong_size", &[4], 1, &w[..8])));
        let mut typed = tensor("typed", &[1], 1, &[]);
        typed.extend(bytes_field(4, &1.0f32.to_le_bytes()));
        graph.extend(bytes_field(5, &typed));
        graph.extend(bytes_field(5, &tensor("i8", &[3], 3, &[1, 0xff, 7])));
        graph.extend(bytes_field(5, &tensor("string", &[1], 8, b"abcd")));
        let mut model = vec![1 << 3, 8]; // ir_version
        model.extend(bytes_field(7, &graph));
        let all = read_graph(&model).expect("a valid message").initializers;
        let names: Vec<&str> = all.iter().map(|t| t.name).collect();
        assert_eq!(names, ["w", "wrong_size", "i8", "string"], "typed data is not raw data");
        assert_eq!((all[0].dims.as_slice(), all[0].data_type, all[0].raw), (&[2i64, 3][..], 1, &w[..]));
        let shared: Vec<&str> = all.iter().filter(|t| t.shareable()).map(|t| t.name).collect();
        assert_eq!(shared, ["w", "i8"], "a size that does not match, a type not shared");
    }

    #[test]
    fn a_damaged_file_is_refused_without_panicking() {
        assert!(read_graph(&[0x3a, 0xff]).is_none(), "a length past the end");
        assert!(read_graph(&[0x3b]).is_none(), "a group wire type");
        assert!(read_graph(&[]).is_none(), "no graph");
        let graph = bytes_field(5, &tensor("x", &[1], 1, &[0, 0, 128, 63]));
        let model = bytes_field(7, &graph);
        assert_eq!(read_graph(&model).map(|g| g.initializers.len()), Some(1));
        for cut in 1..model.len() {
            assert!(read_graph(&model[..cut]).is_none_or(|g| g.initializers.is_empty()), "cut at {cut}");
        }
    }

    fn node(inputs: &[&str], outputs: &[&str]) -> Vec<u8> {
        let mut n = Vec::new();
        for i in inputs {
            n.extend(bytes_field(1, i.as_bytes()));
        }
        for o in outputs {
            n.extend(bytes_field(2, o.as_bytes()));
        }
        bytes_field(1, &n)
    }

    #[test]
    fn only_what_the_running_graph_reads_is_shared() {
        // x -> MatMul(x, Mul(Cast(w_int8), scale)) and MatMul(x, w): the dequantization is folded
        // at load, so only w is read while the model runs.
        let mut graph = Vec::new();
        for (name, ty, raw) in [("w_int8", 3u8, &[1u8, 2][..]), ("scale", 1, &0.5f32.to_le_bytes()), ("w", 1, &[0; 8])]
        {
            let dims = [u8::try_from(raw.len()).expect("small") / if ty == 1 { 4 } else { 1 }];
            graph.extend(bytes_field(5, &tensor(name, &dims, ty, raw)));
        }
        graph.extend(node(&["w_int8"], &["c"]));
        graph.extend(node(&["c", "scale"], &["dequantized"]));
        graph.extend(node(&["x", "dequantized"], &["y"]));
        graph.extend(node(&["x", "w", ""], &["z"]));
        let model = bytes_field(7, &graph);
        let g = read_graph(&model).expect("valid");
        assert_eq!(g.nodes.len(), 4);
        let read: Vec<&str> = g.constant_names.iter().copied().filter(|n| read_when_running(&g).contains(n)).collect();
        assert_eq!(read, ["w"]);
    }
}
