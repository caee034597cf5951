//! Faults injected by tests at each stage of a worker, to prove that a panic anywhere
//! fails the texts the worker holds, keeps every caller from waiting, and leaves the embedder
//! working. One fault at a time, for the whole process, taken by the first worker that reaches
//! its stage; nothing is injected unless a test asks. Only a build with the `test-hooks` feature
//! (this crate's own tests) can inject one; in every other build `hit` does nothing.

/// Where a worker can be made to panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stage {
    /// Building a session beyond the first (on a GPU, where each worker has its own).
    Build = 1,
    /// Running a batch on ONNX Runtime.
    Run = 2,
    /// Handing a batch's rows to their calls.
    HandOver = 3,
    /// Taking the next batch from the queue.
    Scheduler = 4,
}

#[cfg(feature = "test-hooks")]
pub use injector::{hit, inject, pending};

/// Without the test hooks a stage is only a name.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn hit(_: Stage) {}

#[cfg(feature = "test-hooks")]
mod injector {
    use std::sync::atomic::{AtomicU8, Ordering};

    use super::Stage;
    static PENDING: AtomicU8 = AtomicU8::new(0);

    /// The next worker to reach `stage` panics there (once).
    pub fn inject(stage: Stage) {
        PENDING.store(stage as u8, Ordering::SeqCst);
    }

    /// Whether an injected fault is still waiting for its stage.
    pub fn pending() -> bool {
        PENDING.load(Ordering::SeqCst) != 0
    }

    /// Panics if a fault waits for `stage`, taking it.
    pub fn hit(stage: Stage) {
        if PENDING.load(Ordering::Relaxed) == stage as u8
            && PENDING.compare_exchange(stage as u8, 0, Ordering::SeqCst, Ordering::SeqCst).is_ok()
        {
            panic!("fault injected at {stage:?}");
        }
    }
}
