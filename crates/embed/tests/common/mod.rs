//! Shared by the integration tests: where `cargo xtask test` put the default model.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// The default model folder. `cargo xtask test` fetches it and sets `NORNIR_TEST_MODEL`; without
/// it the nornir cache is tried, and a missing model fails the test with what to run.
#[allow(dead_code)]
pub fn model_dir() -> PathBuf {
    let dir = std::env::var_os("NORNIR_TEST_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        let home = std::env::var_os("NORNIR_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/nornir"));
        home.join("models/all-MiniLM-L6-v2-int8")
    });
    assert!(
        dir.join("model.onnx").is_file(),
        "default model missing at {}: run `cargo xtask test` (it fetches it)",
        dir.display()
    );
    dir
}

/// A memory field of `/proc/self/status` (`"VmRSS:"`, `"VmHWM:"`), in KiB.
#[allow(dead_code)]
pub fn status_kib(field: &str) -> u64 {
    nornir_test_support::status_kib(None, field)
}

#[allow(dead_code)]
pub fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(name)
}

#[allow(unused_imports)]
pub use nornir_test_support::cosine;

/// The parity sample's texts and the default model's reference rows (raw little-endian float32,
/// 384 per row).
#[allow(dead_code)]
pub fn parity_sample() -> (Vec<String>, Vec<f32>) {
    parity_sample_with("parity-sample.f32")
}

/// The parity sample's texts and the reference rows in `reference` (under testdata).
#[allow(dead_code)]
pub fn parity_sample_with(reference: &str) -> (Vec<String>, Vec<f32>) {
    let texts = std::fs::read_to_string(testdata("parity-sample.txt"))
        .expect("parity-sample.txt")
        .lines()
        .map(str::to_owned)
        .collect();
    let reference = std::fs::read(testdata(reference))
        .unwrap_or_else(|e| panic!("{reference}: {e}"))
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (texts, reference)
}

/// Wakes the test thread: the smallest executor there is.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls every future on this thread until all are ready.
#[allow(dead_code)]
pub fn join_all<F: Future + Unpin>(mut futures: Vec<F>) -> Vec<F::Output> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut out: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while out.iter().any(Option::is_none) {
        for (f, slot) in futures.iter_mut().zip(out.iter_mut()) {
            if slot.is_none()
                && let Poll::Ready(v) = std::pin::Pin::new(f).poll(&mut cx)
            {
                *slot = Some(v);
            }
        }
        assert!(Instant::now() < deadline, "futures still pending after 2 minutes");
        std::thread::park_timeout(Duration::from_millis(50));
    }
    out.into_iter().flatten().collect()
}
