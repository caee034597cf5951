//! An embedder's compact calls: float32 rows made int8, uint8 or binary after pooling,
//! normalisation and dimensions, and the ranges int8 and uint8 need, calibrated on texts.

use std::future::Future;

use crate::call::CallOptions;
use crate::compact::{CompactVectors, Ranges, check, to_precision};
use crate::embedder::Embedder;
use crate::error::Result;

/// A sample of 99 texts (news, questions, code, several languages, one long paragraph): the
/// default calibration set for int8 and uint8 ranges, and `nornir vector bench`'s input.
pub const SAMPLE_TEXTS: &str = include_str!("../../../testdata/parity-sample.txt");

impl Embedder {
    /// `texts` in the call's precision (else the embedder's, else float32), from the float32
    /// rows `embed_with` gives with the same options: dimensions first, then normalisation,
    /// then quantization. int8 and uint8 need ranges (the call's, else the embedder's): see
    /// [`calibrate`](Self::calibrate). Binary needs dimensions that are a multiple of 8.
    pub fn embed_compact<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions) -> Result<CompactVectors> {
        let (default, default_ranges) = &self.engine.default_precision;
        let precision = options.precision.or(*default).unwrap_or_default();
        let ranges = options.ranges.as_ref().or(default_ranges.as_ref());
        // What the options alone refuse is refused before any text runs.
        check(precision, options.dimensions.unwrap_or(self.dimension()), ranges.map(|r| &**r))?;
        let rows = self.embed_with(texts, options)?;
        to_precision(&rows, precision, ranges.map(|r| &**r))
    }

    /// Each dimension's range over the vectors of `texts` made with `options` (their
    /// dimensions and normalisation, as the vectors to quantize will have them): what int8 and
    /// uint8 cut into 256 steps. Calibrate on texts like the ones you will embed; queries and
    /// documents must share the ranges ([`Ranges::write`] and [`Ranges::read`] keep them).
    pub fn calibrate<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions, source: &str) -> Result<Ranges> {
        ranges_of(&self.embed_with(texts, options)?, source)
    }

    /// [`calibrate`](Self::calibrate) on [`SAMPLE_TEXTS`].
    pub fn calibrate_on_sample(&self, options: &CallOptions) -> Result<Ranges> {
        let texts: Vec<&str> = SAMPLE_TEXTS.lines().collect();
        self.calibrate(&texts, options, SAMPLE_SOURCE)
    }

    /// [`calibrate_on_sample`](Self::calibrate_on_sample) as a future, as
    /// [`embed_async`](Self::embed_async) is (dropping it cancels the call).
    pub fn calibrate_on_sample_async(&self, options: &CallOptions) -> impl Future<Output = Result<Ranges>> + '_ {
        let texts: Vec<&str> = SAMPLE_TEXTS.lines().collect();
        let rows = self.embed_with_async(&texts, options);
        async move { ranges_of(&rows.await?, SAMPLE_SOURCE) }
    }
}

/// How calibration names the built-in sample.
const SAMPLE_SOURCE: &str = "nornir's built-in sample";

/// The ranges of `rows`, their source said with their count and width.
fn ranges_of(rows: &crate::Embeddings, source: &str) -> Result<Ranges> {
    Ranges::of(rows, format!("{source} ({} texts, {} dimensions)", rows.len(), rows.dim()))
}
