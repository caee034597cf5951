//! `nornir vector bench --concurrency N --per-call K`: N threads share one embedder, each making
//! calls of K texts until the input is used up, as a search server's queries do; beside it, in the
//! same run, the same texts as one bulk job. Reports texts/s, latency percentiles and the ratio.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Result, bail};
use nornir_vector::Embedder;

/// What N concurrent callers got, beside one bulk job over the same texts.
#[derive(Debug, serde::Serialize)]
pub struct ConcurrencyReport {
    pub callers: usize,
    pub per_call: usize,
    pub calls: usize,
    pub texts_per_second: f64,
    pub bulk_texts_per_second: f64,
    pub ratio_to_bulk: f64,
    pub latency_ms: Percentiles,
    /// Batches the concurrent calls ran in, and their mean size in texts.
    pub batches: u64,
    pub mean_batch_texts: f64,
    /// Padding as a share of the tokens fed, in the concurrent run.
    pub padding: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

/// The value below which `q` of the sorted `values` lie (nearest rank).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Texts per second of `texts` embedded as one job, `chunk` texts per call.
pub fn bulk(embedder: &Embedder, texts: &[String], chunk: usize) -> Result<f64> {
    let started = Instant::now();
    for part in texts.chunks(chunk) {
        embedder.embed(part)?;
    }
    Ok(texts.len() as f64 / started.elapsed().as_secs_f64())
}

/// `callers` threads embedding `texts`, `per_call` per call, each call timed.
pub fn concurrent(embedder: &Embedder, texts: &[String], callers: usize, per_call: usize) -> Result<(f64, Vec<f64>)> {
    if callers == 0 || per_call == 0 {
        bail!("--concurrency and --per-call must be at least 1");
    }
    let calls: Vec<&[String]> = texts.chunks(per_call).collect();
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let latencies: Vec<Result<Vec<f64>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..callers)
            .map(|_| {
                scope.spawn(|| -> Result<Vec<f64>> {
                    let mut mine = Vec::new();
                    while let Some(call) = calls.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let t = Instant::now();
                        embedder.embed(call)?;
                        mine.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    Ok(mine)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| bail!("a caller thread panicked"))).collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut all = Vec::with_capacity(calls.len());
    for l in latencies {
        all.extend(l?);
    }
    all.sort_by(f64::total_cmp);
    Ok((texts.len() as f64 / seconds, all))
}

/// Bulk first (it also builds every session), then the concurrent callers.
pub fn measure(
    embedder: &Embedder,
    texts: &[String],
    callers: usize,
    per_call: usize,
    chunk: usize,
) -> Result<ConcurrencyReport> {
    let bulk_tps = bulk(embedder, texts, chunk)?;
    embedder.reset_stats();
    let (tps, latencies) = concurrent(embedder, texts, callers, per_call)?;
    let s = embedder.stats();
    Ok(ConcurrencyReport {
        callers,
        per_call,
        calls: latencies.len(),
        texts_per_second: tps,
        bulk_texts_per_second: bulk_tps,
        ratio_to_bulk: tps / bulk_tps,
        latency_ms: Percentiles {
            p50: percentile(&latencies, 0.50),
            p95: percentile(&latencies, 0.95),
            p99: percentile(&latencies, 0.99),
            max: latencies.last().copied().unwrap_or(f64::NAN),
        },
        batches: s.batches,
        mean_batch_texts: s.batched_texts as f64 / s.batches.max(1) as f64,
        padding: 1.0 - s.tokens as f64 / s.padded_tokens.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((percentile(&v, 0.5), percentile(&v, 0.95), percentile(&v, 0.99)), (50.0, 95.0, 99.0));
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
