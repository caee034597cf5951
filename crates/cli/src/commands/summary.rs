//! What every `embed` run says when it is done, whatever the model's kind (dense, compact,
//! sparse, token vectors): `--json`'s one-line summary on stderr (texts, truncated, chunks,
//! tokens, seconds, max_length, provider, and the kind's own keys), the notice of the texts that
//! were cut, and `--verbose`'s speed and memory line.

use std::time::Instant;

use nornir_vector::diagnostics::Memory;
use nornir_vector::{Embedder, Usage};

use super::EmbedJob;

/// A run's counts, added to batch by batch.
pub(super) struct RunSummary {
    texts: usize,
    usage: Usage,
    chunks: usize,
    started: Instant,
    /// Whether `--long chunk` would have kept the cut texts' tokens (an embedder's dense vectors).
    chunkable: bool,
    /// The kind's own keys (precision, ranges, query...).
    extra: serde_json::Map<String, serde_json::Value>,
}

impl RunSummary {
    /// A run whose model can (`chunkable`) or cannot chunk long texts instead of cutting them.
    pub(super) fn start(chunkable: bool) -> Self {
        let (texts, usage, chunks, started) = (0, Usage::default(), 0, Instant::now());
        Self { texts, usage, chunks, started, chunkable, extra: serde_json::Map::new() }
    }

    /// A batch of `texts` texts and what the model read for them.
    pub(super) fn add(&mut self, texts: usize, usage: Usage) {
        self.texts += texts;
        self.usage += usage;
    }

    /// Texts done so far (for errors and the progress bar).
    pub(super) fn texts(&self) -> usize {
        self.texts
    }

    pub(super) fn started(&self) -> Instant {
        self.started
    }

    pub(super) fn add_chunks(&mut self, chunks: usize) {
        self.chunks += chunks;
    }

    /// A key of this kind's run for the JSON summary.
    pub(super) fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    /// The summary on stderr: JSON with `--json`; otherwise how many texts were cut, if any; with
    /// `--verbose`, the speed and memory too.
    pub(super) fn report(&self, job: &EmbedJob, embedder: &Embedder) {
        let (done, truncated, chunks) = (self.texts, self.usage.truncated, self.chunks);
        let seconds = self.started.elapsed().as_secs_f64();
        let max_length = embedder.model_info().max_length;
        let provider = &embedder.report().active_provider;
        if job.json {
            let mut summary = serde_json::json!({
                "texts": done,
                "truncated": truncated,
                "chunks": chunks,
                "tokens": self.usage.tokens,
                "seconds": seconds,
                "max_length": max_length,
                "provider": provider,
            });
            if let Some(o) = summary.as_object_mut() {
                o.extend(self.extra.clone());
            }
            eprintln!("{summary}");
        } else if truncated > 0 {
            let hint = if self.chunkable { "; --long chunk keeps every token" } else { "; --long refuse names them" };
            eprintln!(
                "nornir: {truncated} of {done} texts were longer than the model's {max_length} tokens and were truncated to them{hint}"
            );
        }
        if job.verbose {
            let chunked = if chunks > 0 { format!(", {chunks} chunks") } else { String::new() };
            eprintln!(
                "nornir: {done} texts{chunked} in {seconds:.2} s ({:.1} texts/s) on {provider}; {truncated} truncated; peak RSS {:.0} MiB",
                done as f64 / seconds.max(1e-9),
                peak_rss_mib(&embedder.report().memory).unwrap_or(f64::NAN)
            );
        }
    }
}

/// The process's peak resident memory in MiB, as the embedder's memory report gives it.
pub(super) fn peak_rss_mib(memory: &Memory) -> Option<f64> {
    memory.peak_resident_bytes.map(|b| b as f64 / (1024.0 * 1024.0))
}
