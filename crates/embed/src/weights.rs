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

/// Reads the initializers of the ONNX file at `path` that can be shared. A file this reader
/// does not understand shares nothing: ONNX Runtime reads it as before and says what is wrong.
pub(crate) fn read(path: &Path) -> std::io::Result<SharedWeights> {
    let bytes = std::fs::read(path)?;
    Ok(from_model(&bytes).unwrap_or_else(|| {
        tracing::debug!(model = %path.display(), "weights not shared: the ONNX protobuf could not be read");
        SharedWeights::default()
    }))
}

fn from_model(model: &[u8]) -> Option<SharedWeights> {
    let mut out = SharedWeights::default();
    for t in raw_initializers(model)?.into_iter().filter(RawTensor::shareable) {
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

/// The graph's initializers whose data is all in `raw_data`; `None` for a malformed message.
fn raw_initializers(model: &[u8]) -> Option<Vec<RawTensor<'_>>> {
    let mut graph = None;
    for field in fields(model) {
        if let (7, Field::Bytes(g)) = field? {
            graph = Some(g);
        }
    }
    let mut out = Vec::new();
    for field in fields(graph?) {
        if let (5, Field::Bytes(t)) = field?
            && let Some(t) = raw_tensor(t)?
        {
            out.push(t);
        }
    }
    Some(out)
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

/// A `TensorProto` whose data is all in `raw_data`; `Some(None)` for one kept any other way.
fn raw_tensor(buf: &[u8]) -> Option<Option<RawTensor<'_>>> {
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
    Some(match (name, raw) {
        (Some(name), Some(raw)) if !elsewhere && !raw.is_empty() => Some(RawTensor { name, dims, data_type, raw }),
        _ => None,
    })
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
        out.push(u8::try_from(value.len()).expect("short value"));
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
        let all = raw_initializers(&model).expect("a valid message");
        let names: Vec<&str> = all.iter().map(|t| t.name).collect();
        assert_eq!(names, ["w", "wrong_size", "i8", "string"], "typed data is not raw data");
        assert_eq!((all[0].dims.as_slice(), all[0].data_type, all[0].raw), (&[2i64, 3][..], 1, &w[..]));
        let shared: Vec<&str> = all.iter().filter(|t| t.shareable()).map(|t| t.name).collect();
        assert_eq!(shared, ["w", "i8"], "a size that does not match, a type not shared");
    }

    #[test]
    fn a_damaged_file_is_refused_without_panicking() {
        assert!(raw_initializers(&[0x3a, 0xff]).is_none(), "a length past the end");
        assert!(raw_initializers(&[0x3b]).is_none(), "a group wire type");
        assert!(raw_initializers(&[]).is_none(), "no graph");
        let graph = bytes_field(5, &tensor("x", &[1], 1, &[0, 0, 128, 63]));
        let model = bytes_field(7, &graph);
        assert_eq!(raw_initializers(&model).map(|t| t.len()), Some(1));
        for cut in 1..model.len() {
            assert!(raw_initializers(&model[..cut]).is_none_or(|t| t.is_empty()), "cut at {cut}");
        }
    }
}
