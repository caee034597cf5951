//! Compact vectors for an index, made from the float32 rows after pooling, normalisation and
//! dimensions, as sentence-transformers' `quantize_embeddings` makes them, so that they are
//! interchangeable with its: int8 and uint8 cut each dimension's calibrated range into 256 steps;
//! binary keeps the sign of each dimension as one bit, packed eight to a byte, first dimension in
//! the highest bit (NumPy's `packbits`), as uint8 (ubinary) or as int8 offset by -128 (binary).

use nornir_options::{Precision, Ranges};

use crate::error::{EmbedError, Result};
use crate::values::embeddings::{Embeddings, Usage};

/// Vectors in a compact precision, one after another, `bytes_per_vector` each (int8 values as
/// their two's-complement bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactVectors {
    /// The precision of every value.
    pub precision: Precision,
    /// The float32 vectors' dimensions.
    pub dimensions: usize,
    data: Vec<u8>,
    /// What the float32 call read: its tokens and the texts it cut.
    usage: Usage,
}

impl CompactVectors {
    /// The tokens the model read for these vectors and how many texts were longer than the
    /// model reads and cut, as the float32 call reports them.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Bytes of one vector.
    pub fn bytes_per_vector(&self) -> usize {
        self.precision.bytes_per_vector(self.dimensions)
    }

    /// The number of vectors.
    pub fn len(&self) -> usize {
        self.data.len() / self.bytes_per_vector().max(1)
    }

    /// No vectors.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Vector `i`'s bytes.
    pub fn row(&self, i: usize) -> &[u8] {
        let w = self.bytes_per_vector();
        &self.data[i * w..(i + 1) * w]
    }

    /// Every vector's values, as [`row_values`](Self::row_values) gives each.
    pub fn rows_values(&self) -> Vec<Vec<i64>> {
        (0..self.len()).map(|i| self.row_values(i)).collect()
    }

    /// Every vector's bytes, one after another.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// Vector `i`'s values as integers of its type (signed for int8 and binary); for float32,
    /// its values' bits.
    pub fn row_values(&self, i: usize) -> Vec<i64> {
        let row = self.row(i);
        match self.precision {
            Precision::Float32 => {
                row.chunks_exact(4).map(|b| i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))).collect()
            }
            p if p.is_signed() => row.iter().map(|&b| i64::from(b as i8)).collect(),
            _ => row.iter().map(|&b| i64::from(b)).collect(),
        }
    }
}

/// What `precision` needs of vectors `dim` wide: int8 and uint8 ranges of that width, binary
/// a width that is a multiple of 8. Returns the ranges int8 and uint8 use.
pub(crate) fn check(precision: Precision, dim: usize, ranges: Option<&Ranges>) -> Result<Option<&Ranges>> {
    if precision.needs_ranges() {
        let r = ranges.ok_or_else(|| {
            EmbedError::invalid(
                "ranges",
                format!(
                    "{precision} needs each dimension's range: calibrate on texts like yours, or read saved ranges"
                ),
            )
        })?;
        r.check_width(dim)?;
        return Ok(Some(r));
    }
    if precision.is_binary() && !dim.is_multiple_of(8) {
        return Err(EmbedError::invalid(
            "precision",
            format!(
                "{precision} packs 8 dimensions to a byte and the vectors have {dim}: ask for dimensions that are a multiple of 8"
            ),
        ));
    }
    Ok(None)
}

/// `rows` in `precision`; int8 and uint8 need `ranges` of the rows' width. Values outside a
/// range are clamped to its ends.
pub fn to_precision(rows: &Embeddings, precision: Precision, ranges: Option<&Ranges>) -> Result<CompactVectors> {
    let dim = rows.dim();
    let ranges = check(precision, dim, ranges)?;
    let mut data = Vec::with_capacity(rows.len() * precision.bytes_per_vector(dim));
    match (precision, ranges) {
        (Precision::Int8 | Precision::Uint8, Some(r)) => {
            let offset = if precision == Precision::Int8 { 128.0 } else { 0.0 };
            for row in rows.rows() {
                for (j, &x) in row.iter().enumerate() {
                    let (lo, hi) = (r.min()[j], r.max()[j]);
                    let step = (hi - lo) / 255.0;
                    let at = if step > 0.0 { (x - lo) / step } else { 0.0 };
                    // NumPy's astype truncates toward zero, as `as` does.
                    let v = (at.clamp(0.0, 255.0) - offset) as i32;
                    data.push(v as u8);
                }
            }
        }
        (Precision::Binary | Precision::Ubinary, _) => {
            let offset = if precision == Precision::Binary { 128u8 } else { 0 };
            for row in rows.rows() {
                for byte in row.chunks_exact(8) {
                    let bits = byte.iter().fold(0u8, |acc, &x| (acc << 1) | u8::from(x > 0.0));
                    data.push(bits.wrapping_sub(offset));
                }
            }
        }
        // float32 (`check` gives int8 and uint8 their ranges).
        _ => rows.as_slice().iter().for_each(|x| data.extend_from_slice(&x.to_le_bytes())),
    }
    Ok(CompactVectors { precision, dimensions: dim, data, usage: rows.usage() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(data: Vec<f32>, dim: usize) -> Embeddings {
        Embeddings::new(data, dim).expect("rows")
    }

    #[test]
    fn binary_packs_signs_first_dimension_highest() {
        let r = rows(
            vec![
                1.0, -1.0, 0.5, 0.0, -0.2, 0.3, 0.1, -9.0, /* row 2 */ -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0,
                2.0,
            ],
            8,
        );
        let u = to_precision(&r, Precision::Ubinary, None).expect("ubinary");
        assert_eq!(u.as_bytes(), &[0b1010_0110, 0b0000_0001]);
        let b = to_precision(&r, Precision::Binary, None).expect("binary");
        assert_eq!(b.row_values(0), [0b1010_0110 - 128]);
        assert_eq!(b.row_values(1), [1 - 128]);
        let odd = to_precision(&rows(vec![1.0; 12], 12), Precision::Binary, None).unwrap_err().to_string();
        assert!(odd.contains("multiple of 8"), "{odd}");
    }

    #[test]
    fn int8_and_uint8_cut_each_range_into_256_steps() {
        let calib = rows(vec![-1.0, 0.0, 1.0, 2.0], 2);
        let ranges = Ranges::of_rows(calib.rows(), "test").expect("ranges");
        assert_eq!((ranges.min(), ranges.max()), (&[-1.0, 0.0][..], &[1.0, 2.0][..]));
        let r = rows(vec![-1.0, 2.0, 0.0, 1.0, 5.0, -3.0], 2);
        let u = to_precision(&r, Precision::Uint8, Some(&ranges)).expect("uint8");
        // 2 / (2 / 255) is 254.99998 in float32, as in NumPy: 254.
        assert_eq!(u.as_bytes(), &[0, 254, 127, 127, 255, 0]);
        let i = to_precision(&r, Precision::Int8, Some(&ranges)).expect("int8");
        assert_eq!(i.row_values(0), [-128, 126]);
        // 127.5 - 128 = -0.5, truncated toward zero as NumPy's astype does.
        assert_eq!(i.row_values(1), [0, 0]);
        assert!(to_precision(&r, Precision::Int8, None).is_err());
        let wide = Ranges::new(vec![0.0; 3], vec![0.0; 3], "x").expect("ranges");
        assert!(to_precision(&r, Precision::Int8, Some(&wide)).unwrap_err().to_string().contains("3 dimensions"));
        assert_eq!("float".parse::<Precision>(), Ok(Precision::Float32));
        assert!("int4".parse::<Precision>().unwrap_err().contains("ubinary"));
    }
}
