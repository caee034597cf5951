//! An embedder's compact calls: float32 rows made int8, uint8 or binary after pooling,
//! normalisation and dimensions, and the one rule for the ranges int8 and uint8 need, which
//! every surface (the CLI, the server, Python) uses:
//!
//! 1. ranges given with the call win, then those the embedder was built with;
//! 2. otherwise ranges calibrated on [`SAMPLE_TEXTS`] once per vector width and normalisation,
//!    kept for the embedder's life (the same texts, the same ranges, on every surface);
//! 3. calibration embeds with the call's width and normalisation and the embedder's own prompt:
//!    the call's prompt is left out, so that queries and documents, embedded with different
//!    prompts, share one set of ranges.
//!
//! A chunking call gives each document's vector (its chunks combined) in the precision.

use std::future::Future;
use std::sync::{Arc, PoisonError};

use crate::call::future::Work;
use crate::call::runner::{Runner, block_on};
use crate::embedder::Embedder;
use crate::error::Result;
use crate::kinds::compact::{CompactVectors, check, to_precision};
use crate::report::describe::RangesReport;
use crate::values::embeddings::Embeddings;
use nornir_options::{CallOptions, ModelKind, Precision, Ranges};

/// A sample of 99 texts (news, questions, code, several languages, one long paragraph): the
/// default calibration set for int8 and uint8 ranges, and `nornir vector bench`'s input.
pub const SAMPLE_TEXTS: &str = include_str!("../../../../testdata/parity-sample.txt");

/// How calibration names the built-in sample.
const SAMPLE_SOURCE: &str = "nornir's built-in sample";

/// What a compact call resolved to: its precision, and its ranges when it needs them.
struct Compact {
    precision: Precision,
    /// Ranges chosen by rule 1, or the key of rule 2's calibration.
    ranges: Result<Option<Arc<Ranges>>, (usize, bool)>,
}

impl Embedder {
    /// `texts` in the call's precision (else the embedder's, else float32), from the float32
    /// rows `embed_with` gives with the same options: dimensions first, then normalisation,
    /// then quantization. int8 and uint8 use the ranges of the module's rule (given, else
    /// calibrated once on the built-in sample). Binary needs dimensions that are a multiple of 8.
    pub fn embed_compact<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions) -> Result<CompactVectors> {
        block_on(self.compact_body(self.blocking(), owned(texts), options.clone()))
    }

    /// [`embed_compact`](Self::embed_compact) as a future (dropping it cancels the call).
    pub fn embed_compact_async<'a, S: AsRef<str>>(
        &'a self,
        texts: &[S],
        options: &CallOptions,
    ) -> impl Future<Output = Result<CompactVectors>> + 'a {
        self.compact_body(self.queued(), owned(texts), options.clone())
    }

    /// A compact call's one body, run as `runner` says.
    async fn compact_body(
        &self,
        runner: Runner<'_>,
        texts: Vec<String>,
        options: CallOptions,
    ) -> Result<CompactVectors> {
        let compact = self.compact_of(&options)?;
        let ranges = match compact.ranges {
            Ok(given) => given,
            Err(key) => Some(self.calibrated(runner, key, &options).await?),
        };
        self.engine.expect_kind(ModelKind::Embedder, "embed")?;
        let rows = runner.run(Work::Texts(texts, options)).await?;
        to_precision(&rows, compact.precision, ranges.as_deref())
    }

    /// The ranges an int8 or uint8 call with `options` uses, by the module's rule: given, else
    /// calibrated on the built-in sample (once per width and normalisation).
    pub fn ranges_for(&self, options: &CallOptions) -> Result<Arc<Ranges>> {
        block_on(self.ranges_body(self.blocking(), options))
    }

    /// [`ranges_for`](Self::ranges_for) as a future: the calibration runs as an async call.
    pub async fn ranges_for_async(&self, options: &CallOptions) -> Result<Arc<Ranges>> {
        self.ranges_body(self.queued(), options).await
    }

    /// [`ranges_for`](Self::ranges_for)'s one body.
    async fn ranges_body(&self, runner: Runner<'_>, options: &CallOptions) -> Result<Arc<Ranges>> {
        match self.given_ranges(options)? {
            Ok(given) => Ok(given),
            Err(key) => self.calibrated(runner, key, options).await,
        }
    }

    /// Each dimension's range over the vectors of `texts` made with `options`' width and
    /// normalisation and the embedder's own prompt (the call's is left out, see the module's
    /// rule): what int8 and uint8 cut into 256 steps. Calibrate on texts like the ones you will
    /// embed; queries and documents must share the ranges ([`Ranges::write`] and
    /// [`Ranges::read`] keep them).
    pub fn calibrate<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions, source: &str) -> Result<Ranges> {
        ranges_of(&self.embed_with(texts, &calibration_call(options))?, source)
    }

    /// [`calibrate`](Self::calibrate) on [`SAMPLE_TEXTS`].
    pub fn calibrate_on_sample(&self, options: &CallOptions) -> Result<Ranges> {
        block_on(self.sample_body(self.blocking(), options))
    }

    /// [`calibrate_on_sample`](Self::calibrate_on_sample) as a future, as
    /// [`embed_async`](Self::embed_async) is (dropping it cancels the call).
    pub fn calibrate_on_sample_async(&self, options: &CallOptions) -> impl Future<Output = Result<Ranges>> + '_ {
        self.sample_body(self.queued(), options)
    }

    /// [`calibrate_on_sample`](Self::calibrate_on_sample)'s one body: the sample's work is made
    /// before the future, which borrows nothing of the caller's.
    fn sample_body<'a>(
        &'a self,
        runner: Runner<'a>,
        options: &CallOptions,
    ) -> impl Future<Output = Result<Ranges>> + 'a {
        let checked = self.engine.expect_kind(ModelKind::Embedder, "embed");
        let work = Work::Texts(owned(&SAMPLE_TEXTS.lines().collect::<Vec<_>>()), calibration_call(options));
        async move {
            checked?;
            ranges_of(&runner.run(work).await?, SAMPLE_SOURCE)
        }
    }

    /// The ranges this embedder was given and those it has calibrated so far.
    pub fn ranges_report(&self) -> RangesReport {
        RangesReport::of(&self.engine, &self.calibrated)
    }

    /// The call's precision and, for int8 and uint8, its ranges or what to calibrate; refuses
    /// what the options alone refuse before any text runs.
    fn compact_of(&self, options: &CallOptions) -> Result<Compact> {
        let precision = options.precision.or(self.engine.call_defaults.precision).unwrap_or_default();
        let dim = options.dimensions.unwrap_or(self.dimension());
        if !precision.needs_ranges() {
            check(precision, dim, None)?;
            return Ok(Compact { precision, ranges: Ok(None) });
        }
        let ranges = self.given_ranges(options)?.map(Some);
        if let Ok(Some(r)) = &ranges {
            check(precision, dim, Some(r))?;
        }
        Ok(Compact { precision, ranges })
    }

    /// Rule 1's ranges (checked against the call's width), else the key of rule 2.
    fn given_ranges(&self, options: &CallOptions) -> Result<Result<Arc<Ranges>, (usize, bool)>> {
        let plan = crate::call::prepare::plan_call(&self.engine, options)?;
        match options.ranges.as_ref().or(self.engine.call_defaults.ranges.as_ref()) {
            Some(r) => {
                r.check_width(plan.dim)?;
                Ok(Ok(Arc::clone(r)))
            }
            None => Ok(Err((plan.dim, plan.normalize))),
        }
    }

    /// The calibration kept for `key`, else one on the sample, kept.
    async fn calibrated(&self, runner: Runner<'_>, key: (usize, bool), options: &CallOptions) -> Result<Arc<Ranges>> {
        match self.kept(key) {
            Some(r) => Ok(r),
            None => Ok(self.keep(key, self.sample_body(runner, options).await?)),
        }
    }

    /// The calibration kept for `key`, if any.
    fn kept(&self, key: (usize, bool)) -> Option<Arc<Ranges>> {
        self.calibrated.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned()
    }

    /// Keeps `ranges` for `key`; a calibration that finished first for the same key wins, so
    /// every call of the embedder sees one set.
    fn keep(&self, key: (usize, bool), ranges: Ranges) -> Arc<Ranges> {
        let mut kept = self.calibrated.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(kept.entry(key).or_insert_with(|| Arc::new(ranges)))
    }
}

/// The call a calibration embeds with: `options`' width and normalisation, the embedder's own
/// prompt, no precision, no chunking, no cancel handle beyond the call's.
fn calibration_call(options: &CallOptions) -> CallOptions {
    let mut call = CallOptions::new();
    call.dimensions = options.dimensions;
    call.normalize = options.normalize;
    call.cancel = options.cancel.clone();
    call
}

/// The ranges of `rows`, their source said with their count and width.
fn ranges_of(rows: &Embeddings, source: &str) -> Result<Ranges> {
    let source = format!("{source} ({} texts, {} dimensions)", rows.len(), rows.dim());
    Ok(Ranges::of_rows(rows.rows(), source)?)
}

/// A call's texts, owned by its work.
fn owned<S: AsRef<str>>(texts: &[S]) -> Vec<String> {
    texts.iter().map(|t| t.as_ref().to_owned()).collect()
}
