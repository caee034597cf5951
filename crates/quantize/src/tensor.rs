//! Reading and writing the tensor data the quantizer touches: float32, int8 and uint8, stored in
//! `raw_data` (little-endian) or in the typed fields.

use crate::QuantizeError;
use crate::onnx::TensorProto;

pub const FLOAT: i32 = 1;
pub const UINT8: i32 = 2;
pub const INT8: i32 = 3;
pub const INT64: i32 = 7;
pub const FLOAT16: i32 = 10;
pub const BFLOAT16: i32 = 16;
pub(crate) const EXTERNAL: i32 = 1;

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

/// A float16 or bfloat16 tensor's values, widened to float32 (exactly: every half value is a
/// float32 value). ONNX stores them in `raw_data`, or as 16-bit patterns in `int32_data`.
pub fn half_values(t: &TensorProto) -> Result<Vec<f32>, QuantizeError> {
    let widen: fn(u16) -> f32 = if t.data_type == Some(BFLOAT16) { bf16_to_f32 } else { f16_to_f32 };
    let from_raw = |raw: &[u8]| raw.chunks_exact(2).map(|c| widen(u16::from_le_bytes([c[0], c[1]]))).collect();
    let typed: Vec<f32> = t.int32_data.iter().map(|&v| widen(v as u16)).collect();
    stored(t, "16-bit float", from_raw, &typed)
}

fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// IEEE half to single: normal, subnormal, zero, infinity and NaN.
fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits >> 15) << 31;
    let exponent = u32::from((bits >> 10) & 0x1f);
    let mantissa = u32::from(bits & 0x3ff);
    let magnitude = match (exponent, mantissa) {
        (0, 0) => 0,
        // Subnormal: mantissa x 2^-24, exact in float32.
        (0, m) => (m as f32 * f32::from_bits(0x3380_0000)).to_bits(),
        (0x1f, m) => 0x7f80_0000 | (m << 13),
        (e, m) => ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(sign | magnitude)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_floats_widen_exactly() {
        // float16: 1, -2, 65504 (largest), 2^-24 (smallest subnormal), 2^-14 (smallest normal), inf.
        let cases =
            [(0x3c00, 1.0), (0xc000, -2.0), (0x7bff, 65504.0), (0x0001, 2f32.powi(-24)), (0x0400, 2f32.powi(-14))];
        for (bits, want) in cases {
            assert_eq!(f16_to_f32(bits), want, "{bits:#06x}");
        }
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        // bfloat16 is float32's top half: 1.5 and -3.140625.
        assert_eq!((bf16_to_f32(0x3fc0), bf16_to_f32(0xc049)), (1.5, -3.140625));
        let mut t = TensorProto::new();
        (t.dims, t.data_type, t.raw_data) = (vec![2], Some(FLOAT16), Some(vec![0x00, 0x3c, 0x00, 0xc0]));
        assert_eq!(half_values(&t).expect("values"), [1.0, -2.0]);
    }
}
