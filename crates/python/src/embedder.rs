//! `Embedder`, the Python class: one loaded model, calls off the GIL, Ctrl-C cancelling.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use nornir_vector::{CancelHandle, Device, EmbedError, Embedder as RustEmbedder, EmbedderOptions, Pooling};

use crate::errors::*;
use crate::options::{call_options, one_prompt};
use crate::values::{json_to_py, texts_of, to_array};

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
            let out = job.join().unwrap_or(Err(EmbedError::Cancelled));
            (out, interrupted)
        })
    });
    if let Some(e) = interrupted {
        return Err(e);
    }
    out.map_err(|e| to_py(py, &e))
}

/// One loaded model. `Embedder(model=None, *, device="auto", ...)`: see the package's docstrings.
#[pyclass(module = "nornir_vector._nornir", frozen)]
pub(crate) struct Embedder {
    inner: RwLock<Option<Arc<RustEmbedder>>>,
}

impl Embedder {
    fn get(&self) -> PyResult<Arc<RustEmbedder>> {
        let guard = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.clone().ok_or_else(|| EmbedderClosed::new_err("this Embedder was closed; make a new one"))
    }
}

#[pymethods]
impl Embedder {
    #[new]
    #[pyo3(signature = (model=None, *, device="auto", threads=None, workers=None, prompt_name=None, prompt=None,
        dimensions=None, normalize=None, max_length=None, pooling=None, ort_library=None, providers=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: Option<PathBuf>,
        device: &str,
        threads: Option<usize>,
        workers: Option<usize>,
        prompt_name: Option<String>,
        prompt: Option<String>,
        dimensions: Option<usize>,
        normalize: Option<bool>,
        max_length: Option<usize>,
        pooling: Option<&str>,
        ort_library: Option<PathBuf>,
        providers: Option<Vec<String>>,
    ) -> PyResult<Self> {
        let device: Device = device.parse().map_err(|e: String| invalid("device", e))?;
        let mut o = EmbedderOptions::default().with_device(device);
        o.threads = threads;
        o.workers = workers;
        o.prompt = one_prompt(prompt_name, prompt)?;
        o.dimensions = dimensions;
        o.normalize = normalize;
        o.max_length = max_length;
        if let Some(p) = pooling {
            o.pooling = Some(p.parse::<Pooling>().map_err(|e: String| invalid("pooling", e))?);
        }
        o.ort_library = ort_library;
        o.providers = providers.unwrap_or_default();
        let dir = match model {
            Some(m) => m,
            None => default_model()?,
        };
        let loaded = py.detach(|| RustEmbedder::new(&dir, &o)).map_err(|e| to_py(py, &e))?;
        Ok(Self { inner: RwLock::new(Some(Arc::new(loaded))) })
    }

    /// Vectors of `texts` (a str gives shape (d,), a sequence (n, d)), float32.
    #[pyo3(signature = (texts, *, prompt_name=None, prompt=None, normalize=None, dimensions=None,
        truncation="right", long=None, window=None, overlap=None))]
    #[allow(clippy::too_many_arguments)]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        prompt_name: Option<String>,
        prompt: Option<String>,
        normalize: Option<bool>,
        dimensions: Option<usize>,
        truncation: &str,
        long: Option<&str>,
        window: Option<usize>,
        overlap: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (texts, one) = texts_of(texts)?;
        let options = call_options(prompt_name, prompt, normalize, dimensions, truncation, long, window, overlap)?;
        let embedder = self.get()?;
        let cancel = CancelHandle::new();
        let options = options.with_cancel(&cancel);
        let rows = run_cancellable(py, &cancel, || embedder.embed_with(&texts, &options))?;
        to_array(py, rows, one)
    }

    /// Long documents: per text, `{"embedding": array, "chunks": [{"start", "end", "tokens",
    /// "embedding"}]}`, spans in characters.
    #[pyo3(signature = (texts, *, window=None, overlap=None, late=false, prompt_name=None, prompt=None,
        normalize=None, dimensions=None))]
    #[allow(clippy::too_many_arguments)]
    fn embed_chunks<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        window: Option<usize>,
        overlap: Option<usize>,
        late: bool,
        prompt_name: Option<String>,
        prompt: Option<String>,
        normalize: Option<bool>,
        dimensions: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let (texts, _) = texts_of(texts)?;
        let long = if late { "late" } else { "chunk" };
        let options = call_options(prompt_name, prompt, normalize, dimensions, "right", Some(long), window, overlap)?;
        let embedder = self.get()?;
        let cancel = CancelHandle::new();
        let options = options.with_cancel(&cancel);
        let rows = run_cancellable(py, &cancel, || embedder.embed_with(&texts, &options))?;
        let out = PyList::empty(py);
        for (i, text) in texts.iter().enumerate() {
            let doc = PyDict::new(py);
            doc.set_item("embedding", PyArray1::from_slice(py, rows.row(i)))?;
            let chunks = PyList::empty(py);
            for c in rows.char_chunks(i, text) {
                let d = PyDict::new(py);
                d.set_item("start", c.start)?;
                d.set_item("end", c.end)?;
                d.set_item("tokens", c.tokens)?;
                d.set_item("embedding", PyArray1::from_slice(py, c.embedding))?;
                chunks.append(d)?;
            }
            doc.set_item("chunks", chunks)?;
            out.append(doc)?;
        }
        Ok(out)
    }

    /// Every token of `text` (not cut to the model's length): dicts with `id`, `text`,
    /// `special`, `start`, `stop` (byte offsets in the text with its prompt).
    #[pyo3(signature = (text, *, add_special_tokens=true, prompt_name=None, prompt=None))]
    fn tokenize<'py>(
        &self,
        py: Python<'py>,
        text: String,
        add_special_tokens: bool,
        prompt_name: Option<String>,
        prompt: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = call_options(prompt_name, prompt, None, None, "right", None, None, None)?;
        let embedder = self.get()?;
        let tokens = py.detach(|| embedder.tokenize(&text, &options, add_special_tokens)).map_err(|e| to_py(py, &e))?;
        json_to_py(py, &tokens)
    }

    /// What really runs the model and why: the plan, each provider's registration, ONNX
    /// Runtime's library and device list, memory (the keys of `nornir vector doctor --json`'s
    /// session).
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let e = self.get()?;
        let doc =
            serde_json::to_value(e.describe()).map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
        json_to_py(py, &doc)
    }

    /// What the embedder has done since it was built: texts, batches, tokens, seconds inside ONNX
    /// Runtime, texts queued, running and cancelled (the library's `EmbedStats`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stats = serde_json::to_value(self.get()?.stats())
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
        json_to_py(py, &stats)
    }

    /// "rocm" (an AMD GPU), "cuda", "cpu" or "other" (a plugin provider's device of another
    /// vendor): where the model really runs now.
    fn gpu_vendor(&self) -> PyResult<&'static str> {
        Ok(self.get()?.gpu_vendor())
    }

    /// True when an AMD GPU is ready: an AMD provider runs the model now.
    fn rocm_ready(&self) -> PyResult<bool> {
        Ok(self.get()?.rocm_ready())
    }

    /// The width of the vectors returned.
    #[getter]
    fn dimension(&self) -> PyResult<usize> {
        Ok(self.get()?.dimension())
    }

    /// Batches run side by side.
    #[getter]
    fn workers(&self) -> PyResult<usize> {
        Ok(self.get()?.workers())
    }

    /// Frees the model; calls after this raise `EmbedderClosed`. Calls running finish first.
    fn close(&self) {
        self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, _kind: Py<PyAny>, _value: Py<PyAny>, _traceback: Py<PyAny>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        match self.get() {
            Ok(e) => format!(
                "Embedder(model={:?}, dimension={}, provider={:?})",
                e.model_info().folder.dir.display().to_string(),
                e.dimension(),
                e.report().active_provider
            ),
            Err(_) => "Embedder(closed)".to_owned(),
        }
    }
}

/// The default model in the nornir cache (`fetch_default_model()` puts it there).
fn default_model() -> PyResult<PathBuf> {
    let ctx = nornir_vector::diagnostics::ProbeContext::from_process();
    let dir = nornir_vector::diagnostics::default_model_dir(&ctx)
        .ok_or_else(|| ModelError::new_err("no nornir cache folder: set NORNIR_HOME, or pass model=DIR"))?;
    if !dir.join("model.onnx").is_file() {
        return Err(ModelError::new_err(format!(
            "the default model is not in {}: run nornir_vector.fetch_default_model(), or pass model=DIR",
            dir.display()
        )));
    }
    Ok(dir)
}
