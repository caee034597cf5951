//! `embed`'s compact vectors: the precision, and the ranges int8 and uint8 need.

use std::path::PathBuf;

use clap::Args;

use super::Precision;

#[derive(Args, Clone, Debug, Default)]
#[command(next_help_heading = "Compact vectors")]
pub struct CompactArgs {
    /// The type of each value: float32, int8 or uint8 (each dimension's calibrated range cut into
    /// 256 steps), binary or ubinary (one bit per dimension, 8 to a byte, as int8 offset by -128 or
    /// as uint8); the same values as sentence-transformers' quantize_embeddings.
    #[arg(long, value_name = "P", default_value = "float32", value_parser = super::parse_with_library::<Precision>)]
    pub precision: Precision,
    /// Texts (one per line) whose vectors give int8's and uint8's ranges (default: the built-in
    /// sample of 99 texts, as every surface calibrates); the ranges are saved beside --output as
    /// OUTPUT.ranges.json.
    #[arg(long, value_name = "FILE", conflicts_with = "ranges")]
    pub calibrate: Option<PathBuf>,
    /// Ranges saved by an earlier run (queries and documents must share them).
    #[arg(long, value_name = "FILE")]
    pub ranges: Option<PathBuf>,
}

#[cfg_attr(not(feature = "embed-ort"), allow(dead_code))]
impl CompactArgs {
    /// Anything but float32 vectors was asked for.
    pub fn compacts(&self) -> bool {
        self.precision != Precision::Float32 || self.ranges.is_some() || self.calibrate.is_some()
    }
}
