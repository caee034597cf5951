//! What the `Embedder` class's methods share outside the class: a call run off the GIL with
//! Ctrl-C cancelling it, and the default model's folder.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::prelude::*;

use nornir_vector::{CancelHandle, EmbedError};

use crate::errors::*;

/// Runs `work` off the GIL on a thread of its own while this thread waits, checking for Ctrl-C
/// every 50 ms: a `KeyboardInterrupt` cancels the call and is raised once it has stopped.
pub(crate) fn run_cancellable<T: Send>(
    py: Python<'_>,
    cancel: &CancelHandle,
    work: impl FnOnce() -> Result<T, EmbedError> + Send,
) -> PyResult<T> {
    let (out, interrupted) = py.detach(|| {
        std::thread::scope(|scope| {
            let job = scope.spawn(work);
            let mut interrupted = None;
            while !job.is_finished() {
                std::thread::sleep(Duration::from_millis(50));
                if interrupted.is_none()
                    && let Err(e) = Python::attach(|py| py.check_signals())
                {
                    cancel.cancel();
                    interrupted = Some(e);
                }
            }
            // A panic is a bug that names itself, never a cancellation.
            let out = job.join().unwrap_or_else(|panic| Err(EmbedError::from_panic(&*panic)));
            (out, interrupted)
        })
    });
    if let Some(e) = interrupted {
        return Err(e);
    }
    out.map_err(|e| to_py(py, &e))
}

/// The default model in the nornir cache (`fetch_default_model()` puts it there).
pub(crate) fn default_model() -> PyResult<PathBuf> {
    use nornir_vector::diagnostics::{NoDefaultModel, ProbeContext, default_model};
    default_model(&ProbeContext::from_process()).map_err(|e| match e {
        NoDefaultModel::NoCache => ModelError::new_err(format!("{e}: set NORNIR_HOME, or pass model=DIR")),
        _ => ModelError::new_err(format!("{e}: run nornir_vector.fetch_default_model(), or pass model=DIR")),
    })
}
