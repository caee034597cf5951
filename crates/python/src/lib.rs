//! nornir's embedder for Python (`nornir_vector._nornir`, wrapped by the `nornir_vector`
//! package): a conversion layer over the facade and nothing more. Texts in, numpy arrays out;
//! each `EmbedError` a Python exception of its own kind with the same one-line message; the GIL
//! released while texts wait and run, so Python threads calling one `Embedder` share batches as
//! Rust callers do; Ctrl-C cancels a running call.
//!
//! It holds no policy: options map one to one onto `EmbedderOptions` and `CallOptions`.

mod convert;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use nornir_vector::{
    CallOptions, CancelHandle, Device, EmbedError, Embedder as RustEmbedder, EmbedderOptions, Embeddings, LongInputs,
    Pooling, Prompt, Truncation,
};

pyo3::create_exception!(_nornir, EmbedErrorPy, PyException, "Every error of nornir's embedder.");
pyo3::create_exception!(
    _nornir,
    InvalidOption,
    EmbedErrorPy,
    "An option no embedder or call can take; `.option` names it."
);
pyo3::create_exception!(
    _nornir,
    NoOrtLibrary,
    EmbedErrorPy,
    "No usable ONNX Runtime library: install onnxruntime beside nornir-vector, or pass ort_library."
);
pyo3::create_exception!(
    _nornir,
    OrtLoadError,
    EmbedErrorPy,
    "The ONNX Runtime library could not be loaded (not ONNX Runtime, too old, or another one is loaded)."
);
pyo3::create_exception!(
    _nornir,
    DeviceError,
    EmbedErrorPy,
    "The device asked for cannot run the model (refused, or a forced GPU that failed)."
);
pyo3::create_exception!(
    _nornir,
    ModelError,
    EmbedErrorPy,
    "The model folder, its tokenizer or its graph cannot be used."
);
pyo3::create_exception!(
    _nornir,
    TooLong,
    EmbedErrorPy,
    "A text is longer than the model reads and the call refuses to truncate; `.index`, `.tokens`, `.max_length`."
);
pyo3::create_exception!(
    _nornir,
    Overloaded,
    EmbedErrorPy,
    "The embedder's queue is full, or the wait would be too long: retry."
);
pyo3::create_exception!(_nornir, Cancelled, EmbedErrorPy, "The call was cancelled.");
pyo3::create_exception!(_nornir, InferenceError, EmbedErrorPy, "Running the model failed.");
pyo3::create_exception!(_nornir, EmbedderClosed, EmbedErrorPy, "The embedder was closed.");

/// The Python exception for `e`, with its attributes.
fn to_py(py: Python<'_>, e: &EmbedError) -> PyErr {
    let text = nornir_vector::error_chain(e);
    let err = match e {
        EmbedError::InvalidOption { .. } => InvalidOption::new_err(text),
        EmbedError::NoOrtLibrary { .. } | EmbedError::ExplicitOrtUnusable { .. } => NoOrtLibrary::new_err(text),
        EmbedError::OrtLoad { .. } | EmbedError::OrtTooOld { .. } | EmbedError::OrtAlreadyLoaded { .. } => {
            OrtLoadError::new_err(text)
        }
        EmbedError::DeviceRefused { .. } | EmbedError::ForcedDeviceFailed { .. } => DeviceError::new_err(text),
        EmbedError::Model { .. } | EmbedError::Tokenizer { .. } | EmbedError::Session { .. } => {
            ModelError::new_err(text)
        }
        EmbedError::TooLong { .. } => TooLong::new_err(text),
        EmbedError::Overloaded { .. } | EmbedError::WaitTooLong { .. } => Overloaded::new_err(text),
        EmbedError::Cancelled => Cancelled::new_err(text),
        _ => InferenceError::new_err(text),
    };
    let value = err.value(py);
    let _ = match e {
        EmbedError::InvalidOption { option, .. } => value.setattr("option", option.to_string()),
        EmbedError::TooLong { index, tokens, max_length, .. } => value
            .setattr("index", *index)
            .and_then(|()| value.setattr("tokens", *tokens))
            .and_then(|()| value.setattr("max_length", *max_length)),
        _ => Ok(()),
    };
    err
}

fn invalid(option: &str, reason: String) -> PyErr {
    Python::attach(|py| {
        let err = InvalidOption::new_err(format!("invalid `{option}`: {reason}"));
        let _ = err.value(py).setattr("option", option);
        err
    })
}

/// Runs `work` off the GIL on a thread of its own while this thread waits, checking for Ctrl-C
/// every 50 ms: a `KeyboardInterrupt` cancels the call and is raised once it has stopped.
fn run_cancellable<T: Send>(
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

/// `str` or a sequence of `str`; whether it was one string.
fn texts_of(texts: &Bound<'_, PyAny>) -> PyResult<(Vec<String>, bool)> {
    if let Ok(one) = texts.extract::<String>() {
        return Ok((vec![one], true));
    }
    texts
        .extract::<Vec<String>>()
        .map(|v| (v, false))
        .map_err(|_| PyTypeError::new_err("texts must be a str or a sequence of str"))
}

/// The embedder's rows as a float32 array of shape (n, d), or (d,) for one string.
fn to_array<'py>(py: Python<'py>, rows: Embeddings, one: bool) -> PyResult<Bound<'py, PyAny>> {
    let (n, d) = (rows.len(), rows.dim());
    let flat = PyArray1::from_vec(py, rows.into_vec());
    if one { Ok(flat.reshape([d])?.into_any()) } else { Ok(flat.reshape([n, d])?.into_any()) }
}

/// A JSON value (from serde) as a Python object, through Python's own `json`.
fn json_to_py<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value).map_err(|e| PyValueError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// One loaded model. `Embedder(model=None, *, device="auto", ...)`: see the package's docstrings.
#[pyclass(module = "nornir_vector._nornir", frozen)]
struct Embedder {
    inner: RwLock<Option<Arc<RustEmbedder>>>,
}

impl Embedder {
    fn get(&self) -> PyResult<Arc<RustEmbedder>> {
        let guard = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.clone().ok_or_else(|| EmbedderClosed::new_err("this Embedder was closed; make a new one"))
    }
}

/// The prompt of `prompt_name=` or `prompt=`, which an embedder and a call both take; both at
/// once is an error.
fn one_prompt(prompt_name: Option<String>, prompt: Option<String>) -> PyResult<Option<Prompt>> {
    match (prompt_name, prompt) {
        (Some(_), Some(_)) => Err(invalid("prompt", "give prompt or prompt_name, not both".to_owned())),
        (Some(name), None) => Ok(Some(Prompt::Name(name))),
        (None, text) => Ok(text.map(Prompt::Text)),
    }
}

#[allow(clippy::too_many_arguments)]
fn call_options(
    prompt_name: Option<String>,
    prompt: Option<String>,
    normalize: Option<bool>,
    dimensions: Option<usize>,
    truncation: &str,
    long: Option<&str>,
    window: Option<usize>,
    overlap: Option<usize>,
) -> PyResult<CallOptions> {
    let truncation: Truncation = truncation.parse().map_err(|e| invalid("truncation", e))?;
    let policy = match long {
        None if window.is_some() || overlap.is_some() => {
            return Err(invalid("window", "window and overlap need long=\"chunk\" or long=\"late\"".to_owned()));
        }
        None => LongInputs::Truncate,
        Some(name) => {
            name.parse::<LongInputs>().and_then(|p| p.with_window(window, overlap)).map_err(|e| invalid("long", e))?
        }
    };
    // `truncation` says which end a truncating policy keeps.
    let mut o = match policy {
        LongInputs::Truncate => CallOptions::new().with_truncation(truncation),
        other => other.call_options(),
    };
    o.prompt = one_prompt(prompt_name, prompt)?;
    if let Some(n) = normalize {
        o = o.with_normalize(n);
    }
    if let Some(d) = dimensions {
        o = o.with_dimensions(d);
    }
    Ok(o)
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

/// `(gpu_ready, report)`: the seed's preflight, from the probe alone.
#[pyfunction]
fn preflight() -> (bool, String) {
    nornir_vector::preflight()
}

/// What `nornir vector doctor --json` says without a model: the probe (`cuda`, `rocm`), the
/// plan, and the ONNX Runtime library it would load.
#[pyfunction]
#[pyo3(signature = (device="auto"))]
fn doctor<'py>(py: Python<'py>, device: &str) -> PyResult<Bound<'py, PyAny>> {
    let device: Device = device.parse().map_err(|e: String| invalid("device", e))?;
    let probe = nornir_vector::probe();
    let plan = nornir_vector::diagnostics::plan_for(device);
    let (discovery, choice) = nornir_vector::diagnostics::choose_library(&plan, None);
    let doc = serde_json::json!({
        "cuda": probe.cuda,
        "rocm": probe.rocm,
        "plan": plan,
        "ort": {
            "path": choice.as_ref().map(|(c, _)| c.path.clone()),
            "reason": choice.as_ref().map(|(_, why)| why.clone()),
            "candidates": discovery.candidates,
            "searched": discovery.searched,
        },
    });
    json_to_py(py, &doc)
}

#[pymodule]
fn _nornir(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Embedder>()?;
    m.add_function(wrap_pyfunction!(preflight, m)?)?;
    m.add("DEFAULT_MODEL_SUBDIR", nornir_vector::diagnostics::DEFAULT_MODEL_SUBDIR)?;
    m.add_function(wrap_pyfunction!(doctor, m)?)?;
    m.add_function(wrap_pyfunction!(convert::convert, m)?)?;
    m.add("ConvertError", py.get_type::<convert::ConvertError>())?;
    m.add("EmbedError", py.get_type::<EmbedErrorPy>())?;
    m.add("InvalidOption", py.get_type::<InvalidOption>())?;
    m.add("NoOrtLibrary", py.get_type::<NoOrtLibrary>())?;
    m.add("OrtLoadError", py.get_type::<OrtLoadError>())?;
    m.add("DeviceError", py.get_type::<DeviceError>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add("TooLong", py.get_type::<TooLong>())?;
    m.add("Overloaded", py.get_type::<Overloaded>())?;
    m.add("Cancelled", py.get_type::<Cancelled>())?;
    m.add("InferenceError", py.get_type::<InferenceError>())?;
    m.add("EmbedderClosed", py.get_type::<EmbedderClosed>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
