//! Compact vectors for an index, made from the float32 rows after pooling, normalisation and
//! dimensions, as sentence-transformers' `quantize_embeddings` makes them, so that they are
//! interchangeable with its: int8 and uint8 cut each dimension's calibrated range into 256 steps;
//! binary keeps the sign of each dimension as one bit, packed eight to a byte, first dimension in
//! the highest bit (NumPy's `packbits`), as uint8 (ubinary) or as int8 offset by -128 (binary).

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::embeddings::Embeddings;
use crate::error::{EmbedError, Result};

/// The type of each value of an output vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// The float32 vector as it is.
    #[default]
    Float32,
    /// A byte per dimension, -128 to 127, over the dimension's calibrated range.
    Int8,
    /// A byte per dimension, 0 to 255, over the dimension's calibrated range.
    Uint8,
    /// A bit per dimension (positive: 1), eight to a byte, each byte offset by -128.
    Binary,
    /// A bit per dimension (positive: 1), eight to a byte, unsigned.
    Ubinary,
}

impl Precision {
    /// Every precision, by its name.
    pub const ALL: [Precision; 5] = [Self::Float32, Self::Int8, Self::Uint8, Self::Binary, Self::Ubinary];

    /// Its name: `float32`, `int8`, `uint8`, `binary`, `ubinary` (sentence-transformers' and
    /// Cohere's, with `float` for float32).
    pub fn label(self) -> &'static str {
        match self {
            Self::Float32 => "float32",
            Self::Int8 => "int8",
            Self::Uint8 => "uint8",
            Self::Binary => "binary",
            Self::Ubinary => "ubinary",
        }
    }

    /// One bit per dimension.
    pub fn is_binary(self) -> bool {
        matches!(self, Self::Binary | Self::Ubinary)
    }

    /// Needs each dimension's range ([`Ranges`]).
    pub fn needs_ranges(self) -> bool {
        matches!(self, Self::Int8 | Self::Uint8)
    }

    /// Values are signed (int8, binary).
    pub fn is_signed(self) -> bool {
        matches!(self, Self::Int8 | Self::Binary)
    }

    /// Bytes of one vector of `dimensions`.
    pub fn bytes_per_vector(self, dimensions: usize) -> usize {
        match self {
            Self::Float32 => 4 * dimensions,
            Self::Int8 | Self::Uint8 => dimensions,
            Self::Binary | Self::Ubinary => dimensions.div_ceil(8),
        }
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "float32" | "float" | "f32" => Ok(Self::Float32),
            "int8" => Ok(Self::Int8),
            "uint8" => Ok(Self::Uint8),
            "binary" => Ok(Self::Binary),
            "ubinary" => Ok(Self::Ubinary),
            other => Err(format!("unknown precision {other:?}: use one of float32, int8, uint8, binary, ubinary")),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Each dimension's range for int8 and uint8: the smallest and largest value of a calibration
/// set's vectors, as sentence-transformers computes them. Queries and documents must share one,
/// so it is saved as JSON and read back.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Ranges {
    /// Per dimension, the smallest value.
    pub min: Vec<f32>,
    /// Per dimension, the largest value.
    pub max: Vec<f32>,
    /// Where the ranges came from (the calibration texts, their count).
    #[serde(default)]
    pub source: String,
}

impl PartialEq for Ranges {
    fn eq(&self, other: &Self) -> bool {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        bits(&self.min) == bits(&other.min) && bits(&self.max) == bits(&other.max) && self.source == other.source
    }
}

impl Eq for Ranges {}

impl Ranges {
    /// The ranges of `rows` (at least one), said to come from `source`.
    pub fn of(rows: &Embeddings, source: impl Into<String>) -> Result<Self> {
        if rows.is_empty() {
            return Err(EmbedError::invalid("ranges", "calibration needs at least one text"));
        }
        let mut min = vec![f32::INFINITY; rows.dim()];
        let mut max = vec![f32::NEG_INFINITY; rows.dim()];
        for row in rows.rows() {
            for (j, &x) in row.iter().enumerate() {
                min[j] = min[j].min(x);
                max[j] = max[j].max(x);
            }
        }
        Ok(Self { min, max, source: source.into() })
    }

    /// Reads ranges written by [`write`](Self::write).
    pub fn read(path: &Path) -> Result<Self> {
        let bad = |reason: String| EmbedError::invalid("ranges", format!("{}: {reason}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let r: Self = serde_json::from_str(&text).map_err(|e| bad(format!("not a ranges file ({e})")))?;
        if r.min.len() != r.max.len() || r.min.is_empty() {
            return Err(bad("min and max must be lists of the same, non-zero length".to_owned()));
        }
        Ok(r)
    }

    /// Writes the ranges as JSON.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, serde_json::to_vec(self).map_err(std::io::Error::other)?)
    }

    /// How many dimensions they cover.
    pub fn dimensions(&self) -> usize {
        self.min.len()
    }
}

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
}

impl CompactVectors {
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
        if r.dimensions() != dim {
            return Err(EmbedError::invalid(
                "ranges",
                format!(
                    "the ranges cover {} dimensions and the vectors have {dim}: calibrate at this width",
                    r.dimensions()
                ),
            ));
        }
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
                    let step = (r.max[j] - r.min[j]) / 255.0;
                    let at = if step > 0.0 { (x - r.min[j]) / step } else { 0.0 };
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
    Ok(CompactVectors { precision, dimensions: dim, data })
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
        let ranges = Ranges::of(&calib, "test").expect("ranges");
        assert_eq!((ranges.min.clone(), ranges.max.clone()), (vec![-1.0, 0.0], vec![1.0, 2.0]));
        let r = rows(vec![-1.0, 2.0, 0.0, 1.0, 5.0, -3.0], 2);
        let u = to_precision(&r, Precision::Uint8, Some(&ranges)).expect("uint8");
        // 2 / (2 / 255) is 254.99998 in float32, as in NumPy: 254.
        assert_eq!(u.as_bytes(), &[0, 254, 127, 127, 255, 0]);
        let i = to_precision(&r, Precision::Int8, Some(&ranges)).expect("int8");
        assert_eq!(i.row_values(0), [-128, 126]);
        // 127.5 - 128 = -0.5, truncated toward zero as NumPy's astype does.
        assert_eq!(i.row_values(1), [0, 0]);
        assert!(to_precision(&r, Precision::Int8, None).is_err());
        let wide = Ranges::of(&rows(vec![0.0; 3], 3), "x").expect("ranges");
        assert!(to_precision(&r, Precision::Int8, Some(&wide)).unwrap_err().to_string().contains("3 dimensions"));
        assert_eq!("float".parse::<Precision>(), Ok(Precision::Float32));
        assert!("int4".parse::<Precision>().unwrap_err().contains("ubinary"));
    }
}
