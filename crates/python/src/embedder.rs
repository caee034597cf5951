//! `Embedder`, the Python class: one loaded model, calls off the GIL, Ctrl-C cancelling.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use nornir_vector::{
    CancelHandle, Device, Embedder as RustEmbedder, EmbedderOptions, MultiVectorOptions, Outputs, Pooling, Precision,
    SparseOptions,
};

use crate::calls::{default_model, run_cancellable};
use crate::errors::*;
use crate::options::{call_options, one_prompt, pair_of, pair_options, rerank_options};
use crate::values::{compact_array, encoded_dict, json_to_py, ranges_of, texts_of, to_array};

/// One loaded model. `Embedder(model=None, *, device="auto", ...)`: see the package's docstrings.
#[pyclass(module = "nornir_vector._nornir", frozen)]
pub(crate) struct Embedder {
    inner: RwLock<Option<Arc<RustEmbedder>>>,
}

impl Embedder {
    pub(crate) fn get(&self) -> PyResult<Arc<RustEmbedder>> {
        let guard = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.clone().ok_or_else(|| EmbedderClosed::new_err("this Embedder was closed; make a new one"))
    }
}

/// One ranked document as Python gets it: `(index, score, chunk)`, `chunk` the `(number,
/// start, end)` of the chunk that scored, or None without chunking.
type RankedTuple = (usize, f32, Option<(usize, usize, usize)>);

#[pymethods]
impl Embedder {
    #[new]
    #[pyo3(signature = (model=None, *, device="auto", threads=None, workers=None, prompt_name=None, prompt=None,
        dimensions=None, normalize=None, max_length=None, pooling=None, ort_library=None, providers=None, task=None))]
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
        task: Option<String>,
    ) -> PyResult<Self> {
        let device: Device = device.parse().map_err(|e: String| invalid("device", e))?;
        let mut o = EmbedderOptions::default().with_device(device);
        o.task = task;
        o.threads = threads;
        o.workers = workers;
        o.call.prompt = one_prompt(prompt_name, prompt)?;
        o.call.dimensions = dimensions;
        o.call.normalize = normalize;
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

    /// Vectors of `texts` (a str gives shape (d,), a sequence (n, d)): float32, or with
    /// `precision` int8, uint8 (d values) or binary, ubinary (d / 8 bytes), with `ranges` for the
    /// first two (a dict from `calibrate()`, or a ranges file; default: the library's rule,
    /// calibrated once per width on nornir's built-in sample, as the CLI and the server do).
    #[pyo3(signature = (texts, *, prompt_name=None, prompt=None, normalize=None, dimensions=None,
        truncation="right", long=None, window=None, overlap=None, precision=None, ranges=None))]
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
        precision: Option<&str>,
        ranges: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (texts, one) = texts_of(texts)?;
        let options = call_options(prompt_name, prompt, normalize, dimensions, truncation, long, window, overlap)?;
        let embedder = self.get()?;
        let cancel = CancelHandle::new();
        let mut options = options.with_cancel(&cancel);
        let precision: Precision =
            precision.unwrap_or("float32").parse().map_err(|e: String| invalid("precision", e))?;
        if let Some(r) = ranges {
            options = options.with_ranges(Arc::new(ranges_of(&r)?));
        }
        if precision == Precision::Float32 {
            let rows = run_cancellable(py, &cancel, || embedder.embed_with(&texts, &options))?;
            return to_array(py, rows, one);
        }
        let options = options.with_precision(precision);
        let v = run_cancellable(py, &cancel, || embedder.embed_compact(&texts, &options))?;
        compact_array(py, &v, one)
    }

    /// Each dimension's range over the vectors of `texts` (default: nornir's built-in sample of
    /// 99 texts) with these options: what `precision="int8"` and `"uint8"` cut into 256 steps.
    /// A dict (`min`, `max`, `source`) to pass as `ranges=`; queries and documents must share it.
    #[pyo3(signature = (texts=None, *, prompt_name=None, prompt=None, normalize=None, dimensions=None))]
    fn calibrate<'py>(
        &self,
        py: Python<'py>,
        texts: Option<Vec<String>>,
        prompt_name: Option<String>,
        prompt: Option<String>,
        normalize: Option<bool>,
        dimensions: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = call_options(prompt_name, prompt, normalize, dimensions, "right", None, None, None)?;
        let embedder = self.get()?;
        let cancel = CancelHandle::new();
        let options = options.with_cancel(&cancel);
        let ranges = run_cancellable(py, &cancel, || match &texts {
            Some(t) => embedder.calibrate(t, &options, "texts given to calibrate()"),
            // The library's rule: the same ranges the CLI, the server and embed(precision=) use.
            None => embedder.ranges_for(&options).map(|r| (*r).clone()),
        })?;
        json_to_py(py, &ranges)
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

    /// A sparse encoder's vectors: per text, `(indices, values)` as uint32 and float32 arrays,
    /// term ids ascending (`SparseEncoder.embed` wraps it).
    #[pyo3(signature = (texts, *, top_k=None, threshold=None, prompt_name=None, prompt=None, truncation="right"))]
    #[allow(clippy::too_many_arguments)]
    fn embed_sparse<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        top_k: Option<usize>,
        threshold: Option<f32>,
        prompt_name: Option<String>,
        prompt: Option<String>,
        truncation: &str,
    ) -> PyResult<Bound<'py, PyList>> {
        let (texts, _) = texts_of(texts)?;
        let cancel = CancelHandle::new();
        let call = call_options(prompt_name, prompt, None, None, truncation, None, None, None)?.with_cancel(&cancel);
        let mut options = SparseOptions::new().with_call(call);
        if let Some(k) = top_k {
            options = options.with_top_k(k);
        }
        if let Some(w) = threshold {
            options = options.with_threshold(w);
        }
        let embedder = self.get()?;
        let vectors = run_cancellable(py, &cancel, || embedder.embed_sparse(&texts, &options))?;
        let out = PyList::empty(py);
        for v in vectors.vectors {
            out.append((PyArray1::from_vec(py, v.indices), PyArray1::from_vec(py, v.values)))?;
        }
        Ok(out)
    }

    /// A cross-encoder's scores of `inputs` (each a `(query, document)` pair or a text alone):
    /// float32 of shape (n, labels) (`Reranker.predict` wraps it).
    #[pyo3(signature = (inputs, *, raw_scores=false, truncation="right"))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Bound<'py, PyAny>>,
        raw_scores: bool,
        truncation: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inputs = inputs.iter().map(pair_of).collect::<PyResult<Vec<_>>>()?;
        let cancel = CancelHandle::new();
        let options = pair_options(raw_scores, truncation, &cancel)?;
        let embedder = self.get()?;
        let rows = run_cancellable(py, &cancel, || embedder.score(&inputs, &options))?;
        to_array(py, rows, false)
    }

    /// `documents` ranked against `query`, best first: [`RankedTuple`]s `(index, score, chunk)`, `chunk` the
    /// `(number, start, end)` of the chunk that scored under `long="chunk"`, else None
    /// (`Reranker.rerank` wraps it).
    #[pyo3(signature = (query, documents, *, top_n=None, raw_scores=false, truncation="right", long=None, window=None, overlap=None))]
    #[allow(clippy::too_many_arguments)]
    fn rerank(
        &self,
        py: Python<'_>,
        query: String,
        documents: Vec<String>,
        top_n: Option<usize>,
        raw_scores: bool,
        truncation: &str,
        long: Option<&str>,
        window: Option<usize>,
        overlap: Option<usize>,
    ) -> PyResult<Vec<RankedTuple>> {
        let cancel = CancelHandle::new();
        let options = rerank_options(raw_scores, truncation, (long, window, overlap), &cancel)?;
        let embedder = self.get()?;
        let ranked = run_cancellable(py, &cancel, || embedder.rerank(&query, &documents, top_n, &options))?;
        Ok(ranked.ranked.into_iter().map(|r| (r.index, r.score, r.chunk.map(|c| (c.index, c.start, c.end)))).collect())
    }

    /// A late-interaction model's token vectors: per text, a float32 array of shape (tokens,
    /// dim), as queries (`is_query`) or documents (`MultiVectorEncoder.embed` wraps it).
    #[pyo3(signature = (texts, *, is_query=false, dimensions=None, prompt_name=None, prompt=None, truncation="right"))]
    #[allow(clippy::too_many_arguments)]
    fn embed_multi_vector<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        is_query: bool,
        dimensions: Option<usize>,
        prompt_name: Option<String>,
        prompt: Option<String>,
        truncation: &str,
    ) -> PyResult<Bound<'py, PyList>> {
        let encoded =
            self.encode(py, texts, false, false, true, is_query, dimensions, prompt_name, prompt, truncation)?;
        Ok(encoded
            .get_item("multi_vector")?
            .and_then(|v| v.cast_into::<PyList>().ok())
            .unwrap_or_else(|| PyList::empty(py)))
    }

    /// BGE-M3's outputs from one pass per text: a dict with "dense" (float32 (n, dim)),
    /// "sparse" (per text `(indices, values)`) and "multi_vector" (per text float32 (tokens,
    /// dim)), for those asked (`MultiVectorEncoder.encode` wraps it).
    #[pyo3(signature = (texts, *, dense=true, sparse=true, multi_vector=true, is_query=false, dimensions=None,
                        prompt_name=None, prompt=None, truncation="right"))]
    #[allow(clippy::too_many_arguments)]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        dense: bool,
        sparse: bool,
        multi_vector: bool,
        is_query: bool,
        dimensions: Option<usize>,
        prompt_name: Option<String>,
        prompt: Option<String>,
        truncation: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (texts, _) = texts_of(texts)?;
        let cancel = CancelHandle::new();
        let call =
            call_options(prompt_name, prompt, None, dimensions, truncation, None, None, None)?.with_cancel(&cancel);
        let options = MultiVectorOptions::new().with_query(is_query).with_call(call);
        let embedder = self.get()?;
        let outputs = Outputs::new(dense, sparse, multi_vector);
        let encoded = run_cancellable(py, &cancel, || embedder.encode(&texts, outputs, &options))?;
        encoded_dict(py, encoded)
    }

    /// Vectors of `images` in the space of the model's text vectors (an image-and-text model:
    /// CLIP, SigLIP): each a path, the bytes of an encoded image (JPEG, PNG, WebP, GIF) or a
    /// NumPy uint8 array (height, width, 3). One image gives shape (d,), a list or tuple (n, d).
    #[pyo3(signature = (images, *, normalize=None, dimensions=None))]
    fn embed_images<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        normalize: Option<bool>,
        dimensions: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::images::embed_images(py, &self.get()?, images, normalize, dimensions)
    }

    /// Whether the model embeds images too (an image-and-text model).
    #[getter]
    fn takes_images(&self) -> PyResult<bool> {
        Ok(self.get()?.takes_images())
    }

    /// The image processor's settings in one line; None for a text-only model.
    #[getter]
    fn image_settings(&self) -> PyResult<Option<String>> {
        Ok(self.get()?.image_settings())
    }

    /// Whether the model makes token vectors (a ColBERT model, BGE-M3).
    #[getter]
    fn multi_vector(&self) -> PyResult<bool> {
        Ok(self.get()?.model_info().folder.multi_vector.is_some())
    }

    /// The tokens of vocabulary term ids (a sparse vector's indices); "" outside the vocabulary.
    fn vocabulary_terms(&self, ids: Vec<u32>) -> PyResult<Vec<String>> {
        let e = self.get()?;
        Ok(ids.into_iter().map(|i| e.vocabulary_term(i).unwrap_or_default()).collect())
    }

    /// "embedder", "sparse-encoder" or "cross-encoder": what the model folder holds.
    #[getter]
    fn kind(&self) -> PyResult<&'static str> {
        Ok(self.get()?.model_info().folder.kind.kind.label())
    }

    /// A cross-encoder's labels, in the order of its scores (empty for the other kinds).
    #[getter]
    fn labels(&self) -> PyResult<Vec<String>> {
        Ok(self.get()?.model_info().folder.kind.labels.clone())
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
