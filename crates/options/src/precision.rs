//! The precision of compact vectors and the ranges int8 and uint8 need, as sentence-transformers'
//! `quantize_embeddings` names them. Turning vectors into them is the embedder's (`compact.rs`).

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::InvalidOption;

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
///
/// Made only through [`new`](Self::new) (files and JSON bodies too), so every ranges value a
/// surface holds has `min` and `max` of one non-zero length, finite, with `min <= max`; whether
/// its width fits the vectors is checked where they meet.
///
/// ```
/// use nornir_options::Ranges;
/// let r = Ranges::new(vec![-1.0, 0.0], vec![1.0, 0.5], "two dimensions").unwrap();
/// assert_eq!(r.dimensions(), 2);
/// let e = Ranges::new(vec![1.0], vec![-1.0], "upside down").unwrap_err();
/// assert!(e.to_string().contains("min 1 is above max -1"), "{e}");
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "RangesFile")]
pub struct Ranges {
    min: Vec<f32>,
    max: Vec<f32>,
    source: String,
}

/// What a ranges file or body holds before it is checked.
#[derive(Deserialize)]
struct RangesFile {
    min: Vec<f32>,
    max: Vec<f32>,
    #[serde(default)]
    source: String,
}

impl TryFrom<RangesFile> for Ranges {
    type Error = InvalidOption;
    fn try_from(f: RangesFile) -> Result<Self, InvalidOption> {
        Self::new(f.min, f.max, f.source)
    }
}

impl PartialEq for Ranges {
    fn eq(&self, other: &Self) -> bool {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        bits(&self.min) == bits(&other.min) && bits(&self.max) == bits(&other.max) && self.source == other.source
    }
}

impl Eq for Ranges {}

impl Ranges {
    /// Ranges from each dimension's smallest and largest value, said to come from `source`.
    /// Refused unless both lists have the same non-zero length, every value is finite and no
    /// `min` is above its `max`.
    pub fn new(min: Vec<f32>, max: Vec<f32>, source: impl Into<String>) -> Result<Self, InvalidOption> {
        let bad = |reason: String| Err(InvalidOption::new("ranges", reason));
        if min.is_empty() || min.len() != max.len() {
            return bad(format!(
                "min has {} values and max {}: give one smallest and one largest value per dimension",
                min.len(),
                max.len()
            ));
        }
        for (j, (lo, hi)) in min.iter().zip(&max).enumerate() {
            if !lo.is_finite() || !hi.is_finite() {
                return bad(format!("dimension {j} has min {lo} and max {hi}: every value must be a finite number"));
            }
            if lo > hi {
                return bad(format!(
                    "dimension {j}: min {lo} is above max {hi}: every min must be at most its max (were they swapped?)"
                ));
            }
        }
        Ok(Self { min, max, source: source.into() })
    }

    /// The ranges of `rows` (vectors of one width, at least one), said to come from `source`.
    pub fn of_rows<'a>(
        rows: impl IntoIterator<Item = &'a [f32]>,
        source: impl Into<String>,
    ) -> Result<Self, InvalidOption> {
        let (mut min, mut max) = (Vec::new(), Vec::new());
        for row in rows {
            if min.is_empty() {
                (min, max) = (row.to_vec(), row.to_vec());
            }
            if row.len() != min.len() {
                return Err(InvalidOption::new("ranges", "calibration vectors must all have one width"));
            }
            for (j, &x) in row.iter().enumerate() {
                min[j] = min[j].min(x);
                max[j] = max[j].max(x);
            }
        }
        if min.is_empty() {
            return Err(InvalidOption::new("ranges", "calibration needs at least one text"));
        }
        Self::new(min, max, source)
    }

    /// Reads ranges written by [`write`](Self::write) (or any JSON object with `min` and `max`
    /// lists), checked as [`new`](Self::new) checks them.
    pub fn read(path: &Path) -> Result<Self, InvalidOption> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| InvalidOption::new("ranges", format!("{}: {e}", path.display())))?;
        Self::from_json(&text).map_err(|e| InvalidOption::new("ranges", format!("{}: {}", path.display(), e.reason)))
    }

    /// Ranges from JSON text (`{"min": [...], "max": [...], "source": "..."}`), checked as
    /// [`new`](Self::new) checks them.
    pub fn from_json(text: &str) -> Result<Self, InvalidOption> {
        let file: RangesFile = serde_json::from_str(text).map_err(|e| {
            InvalidOption::new("ranges", format!("not a ranges object, {{\"min\": [...], \"max\": [...]}} ({e})"))
        })?;
        file.try_into()
    }

    /// Writes the ranges as JSON.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, serde_json::to_vec(self).map_err(std::io::Error::other)?)
    }

    /// How many dimensions they cover.
    pub fn dimensions(&self) -> usize {
        self.min.len()
    }

    /// Per dimension, the smallest value.
    pub fn min(&self) -> &[f32] {
        &self.min
    }

    /// Per dimension, the largest value.
    pub fn max(&self) -> &[f32] {
        &self.max
    }

    /// Where they came from (the calibration texts and their count, or a file).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Refused unless they cover `dimensions` (the vectors they are to quantize).
    pub fn check_width(&self, dimensions: usize) -> Result<(), InvalidOption> {
        if self.dimensions() == dimensions {
            return Ok(());
        }
        Err(InvalidOption::new(
            "ranges",
            format!(
                "the ranges cover {} dimensions and the vectors have {dimensions}: calibrate at this width",
                self.dimensions()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_way_in_checks_the_ranges() {
        let too_short = Ranges::new(vec![0.0; 3], vec![1.0; 2], "x").unwrap_err();
        assert!(too_short.reason.contains("min has 3 values and max 2"), "{too_short}");
        assert!(Ranges::new(vec![], vec![], "x").is_err());
        let nan = Ranges::new(vec![f32::NAN], vec![1.0], "x").unwrap_err();
        assert!(nan.reason.contains("finite"), "{nan}");
        let json = Ranges::from_json(r#"{"min": [0.5, 0], "max": [0.1, 1]}"#).unwrap_err();
        assert!(json.reason.contains("min 0.5 is above max 0.1"), "{json}");
        assert!(Ranges::from_json("[1, 2]").unwrap_err().reason.contains("not a ranges object"));
        let ok = Ranges::from_json(r#"{"min": [0, -1], "max": [0, 1], "source": "s"}"#).expect("ranges");
        assert_eq!((ok.min(), ok.max(), ok.source()), (&[0.0, -1.0][..], &[0.0, 1.0][..], "s"));
        assert_eq!(Ranges::from_json(&serde_json::to_string(&ok).expect("json")).expect("back"), ok);
        assert!(ok.check_width(3).unwrap_err().reason.contains("cover 2 dimensions"));
        let rows: [&[f32]; 2] = [&[-1.0, 0.0], &[1.0, 2.0]];
        let r = Ranges::of_rows(rows, "two").expect("ranges");
        assert_eq!((r.min(), r.max()), (&[-1.0, 0.0][..], &[1.0, 2.0][..]));
        assert!(Ranges::of_rows(std::iter::empty(), "none").is_err());
    }
}
