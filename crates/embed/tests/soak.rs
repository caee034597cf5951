//! One `Embedder` shared by 8 threads, each making calls of mixed sizes from the corpus: every row
//! equals the single-threaded result for its text (cosine >= 0.99999) and nothing deadlocks (a
//! watchdog fails the test). It prints calls/s and resident memory after warm-up, at the end and
//! at its peak, and asserts neither: both depend on the machine and its load.
//!
//! The suite runs 8 x 48 calls (45 s in a debug build on 2 cores). `cargo xtask soak` runs 8 x 500
//! calls in a release build (`NORNIR_SOAK_CALLS=500`), reads the figures back
//! (`nornir_test_support::record_figures`) and reports whether memory stayed flat: at most 10% +
//! 32 MiB over the figure after warm-up, which a leak of about 20 KiB per call or more misses.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{cosine, model_dir, status_kib, testdata};
use nornir_embed::{Embedder, EmbedderOptions};
use nornir_ep_select::Device;

const THREADS: usize = 8;
/// Texts per call, cycled: single texts, small and large batches.
const SIZES: [usize; 6] = [1, 3, 8, 1, 32, 64];

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn eight_threads_share_one_embedder() {
    nornir_test_support::needs_assets!();
    let calls: usize = std::env::var("NORNIR_SOAK_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(48);
    let corpus = std::fs::read_to_string(testdata("corpus.txt")).expect("corpus");
    let pool: Vec<String> = corpus.lines().take(600).map(str::to_owned).collect();
    let embedder =
        Arc::new(Embedder::new(&model_dir(), &EmbedderOptions::default().with_device(Device::Cpu)).expect("load"));
    let reference = Arc::new(embedder.embed(&pool).expect("single-threaded reference"));
    let pool = Arc::new(pool);
    // Warm-up: every call size once per thread, or a tenth of the calls.
    let warm_up = (calls / 10).max(SIZES.len()).min(calls);
    let barrier = Arc::new(std::sync::Barrier::new(THREADS + 1));
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<usize, String>>();
    let started = Instant::now();
    for t in 0..THREADS {
        let (embedder, reference, pool, barrier, done) =
            (embedder.clone(), reference.clone(), pool.clone(), barrier.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let mut texts_done = 0usize;
            let mut result = Ok(());
            for call in 0..calls {
                if call == warm_up {
                    barrier.wait();
                }
                if result.is_err() {
                    continue;
                }
                let size = SIZES[(call + t) % SIZES.len()];
                // A different window of the pool for every thread and call.
                let start = (t * 7919 + call * 104_729) % (pool.len() - size);
                let texts = &pool[start..start + size];
                result = match embedder.embed(texts) {
                    Err(e) => Err(format!("thread {t} call {call}: {e}")),
                    Ok(got) => (0..size)
                        .map(|k| (k, cosine(got.row(k), reference.row(start + k))))
                        .find(|&(_, c)| c < 0.99999)
                        .map_or(Ok(()), |(k, c)| Err(format!("thread {t} call {call} text {}: cosine {c}", start + k))),
                };
                texts_done += size;
            }
            if calls <= warm_up {
                barrier.wait();
            }
            let _ = done.send(result.map(|()| texts_done));
        });
    }
    drop(done_tx);
    barrier.wait();
    let warm_rss = status_kib("VmRSS:");
    let deadline = Duration::from_secs(60 + calls as u64 * 2);
    let mut texts = 0usize;
    for _ in 0..THREADS {
        match done_rx.recv_timeout(deadline.saturating_sub(started.elapsed())) {
            Ok(Ok(n)) => texts += n,
            Ok(Err(e)) => panic!("{e}"),
            Err(_) => panic!("the threads did not finish within {deadline:?}: a deadlock?"),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let end_rss = status_kib("VmRSS:");
    let peak = status_kib("VmHWM:");
    println!(
        "soak: {THREADS} threads x {calls} calls = {} calls, {texts} texts in {seconds:.1} s: {:.1} calls/s, {:.1} texts/s; \
         RSS after warm-up {} MiB, at the end {} MiB, peak {} MiB",
        THREADS * calls,
        (THREADS * calls) as f64 / seconds,
        texts as f64 / seconds,
        warm_rss / 1024,
        end_rss / 1024,
        peak / 1024
    );
    // Stands in for the memory bound, which `cargo xtask soak` checks on these figures.
    nornir_test_support::record_figures(
        "soak",
        serde_json::json!({
            "calls": THREADS * calls,
            "calls_per_second": (THREADS * calls) as f64 / seconds,
            "warm_rss_kib": warm_rss,
            "end_rss_kib": end_rss,
            "peak_rss_kib": peak,
        }),
    );
}
