//! Reading and writing the tensor data the quantizer touches: float32, int8 and uint8, stored in
//! `raw_data` (little-endian) or in the typed fields.

use crate::QuantizeError;
use crate::onnx::TensorProto;

pub const FLOAT: i32 = 1;
pub const UINT8: i32 = 2;
pub const INT8: i32 = 3;
pub const INT64: i32 = 7;
const EXTERNAL: i32 = 1;

pub fn name(t: &TensorProto) -> &str {
    t.name.as_deref().unwrap_or_default()
}

pub fn numel(t: &TensorProto) -> usize {
    t.dims.iter().map(|&d| d.max(0) as usize).product()
}

fn check_stored_here(t: &TensorProto) -> Result<(), QuantizeError> {
    if t.data_location == Some(EXTERNAL) {
        return Err(QuantizeError::ExternalData { tensor: name(t).to_owned() });
    }
    Ok(())
}

fn bad(t: &TensorProto, why: String) -> QuantizeError {
    QuantizeError::BadTensor { tensor: name(t).to_owned(), why }
}

/// A tensor's values: decoded from `raw_data` by `from_raw` where the values are stored there,
/// else the typed field `typed`; `what` names them in the error for a wrong count.
fn stored<T: Clone>(
    t: &TensorProto,
    what: &str,
    from_raw: impl Fn(&[u8]) -> Vec<T>,
    typed: &[T],
) -> Result<Vec<T>, QuantizeError> {
    check_stored_here(t)?;
    let n = numel(t);
    let values = match &t.raw_data {
        Some(raw) if !raw.is_empty() || n == 0 => from_raw(raw),
        _ => typed.to_vec(),
    };
    if values.len() != n {
        return Err(bad(t, format!("holds {} {what} values for {n} elements", values.len())));
    }
    Ok(values)
}

/// A float32 tensor's values.
pub fn f32_values(t: &TensorProto) -> Result<Vec<f32>, QuantizeError> {
    let from_raw = |raw: &[u8]| raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    stored(t, "float32", from_raw, &t.float_data)
}

/// An int8 or uint8 tensor's values, widened to i32.
pub fn int8_values(t: &TensorProto) -> Result<Vec<i32>, QuantizeError> {
    let signed = t.data_type == Some(INT8);
    let from_raw = |raw: &[u8]| raw.iter().map(|&b| if signed { i32::from(b as i8) } else { i32::from(b) }).collect();
    stored(t, "8-bit", from_raw, &t.int32_data)
}

/// An int64 tensor's values.
pub fn i64_values(t: &TensorProto) -> Result<Vec<i64>, QuantizeError> {
    let from_raw = |raw: &[u8]| {
        raw.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect()
    };
    stored(t, "int64", from_raw, &t.int64_data)
}

pub fn new_f32(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = Some(name.to_owned());
    t.dims = dims.to_vec();
    t.data_type = Some(FLOAT);
    t.raw_data = Some(values.iter().flat_map(|v| v.to_le_bytes()).collect());
    t
}

pub fn new_i8(name: &str, dims: &[i64], values: &[i8]) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = Some(name.to_owned());
    t.dims = dims.to_vec();
    t.data_type = Some(INT8);
    t.raw_data = Some(values.iter().map(|&v| v as u8).collect());
    t
}

pub fn new_u8(name: &str, dims: &[i64], values: &[u8]) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = Some(name.to_owned());
    t.dims = dims.to_vec();
    t.data_type = Some(UINT8);
    t.raw_data = Some(values.to_vec());
    t
}

pub fn new_i64(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = Some(name.to_owned());
    t.dims = dims.to_vec();
    t.data_type = Some(INT64);
    t.raw_data = Some(values.iter().flat_map(|v| v.to_le_bytes()).collect());
    t
}
