//! How a converted graph stores its large weights: float32, float16 or bfloat16 ([`WeightDtype`]).

use super::{BFLOAT16, FLOAT, FLOAT16};

/// How the large weights are stored: float32, or half precision turned back into float32 by a
/// `Cast` where the graph reads them (ONNX Runtime folds the cast once, at load).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum WeightDtype {
    #[default]
    Float32,
    Float16,
    Bfloat16,
}

impl WeightDtype {
    pub(crate) fn element_bytes(self) -> usize {
        match self {
            WeightDtype::Float32 => 4,
            WeightDtype::Float16 | WeightDtype::Bfloat16 => 2,
        }
    }

    /// The name `--dtype` takes.
    pub fn name(self) -> &'static str {
        match self {
            WeightDtype::Float32 => "float32",
            WeightDtype::Float16 => "float16",
            WeightDtype::Bfloat16 => "bfloat16",
        }
    }

    pub(super) fn onnx(self) -> i32 {
        match self {
            WeightDtype::Float32 => FLOAT,
            WeightDtype::Float16 => FLOAT16,
            WeightDtype::Bfloat16 => BFLOAT16,
        }
    }

    /// `values` as little-endian bytes of this type (rounded to nearest even).
    pub(super) fn encode(self, values: &[f32]) -> Vec<u8> {
        match self {
            WeightDtype::Float32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            WeightDtype::Float16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
            WeightDtype::Bfloat16 => values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        }
    }
}

impl std::str::FromStr for WeightDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "float32" | "f32" => Ok(WeightDtype::Float32),
            "float16" | "f16" => Ok(WeightDtype::Float16),
            "bfloat16" | "bf16" => Ok(WeightDtype::Bfloat16),
            other => Err(format!("{other:?} is not a weight type: give float32, float16 or bfloat16")),
        }
    }
}
