//! The embedder: tokenize, pack by length under a token budget, run, pool, normalise.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nornir_ep_select::{Compiled, Device, Inputs, Plan, Preference, Provider, Vendor, VendorState, plan};
use nornir_gpu_probe::{VendorReport, probe};
use ort::session::Session;
use ort::value::{TensorElementType, TensorRef, ValueType};
use serde::Serialize;
use tokenizers::{Tokenizer, TruncationParams};

use crate::batch::{Batch, pack};
use crate::error::{EmbedError, Result};
use crate::model::ModelFolder;
use crate::placement::parse_profile;
use crate::pooling::{Pooling, normalize, pool_tokens};
use crate::runtime::{OrtRuntime, load_runtime};
use crate::session::{self, Placement, SessionConfig, SessionReport};

/// How to build an [`Embedder`]. `Default` is: GPU preferred, device auto, all cores, a
/// 256-token budget per batch, the model's own length limit and pooling, L2-normalised.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EmbedderOptions {
    pub prefer_gpu: bool,
    pub device: Device,
    /// Threads for the model in all; `None` = the machine's cores. On the CPU they are split
    /// over `sessions` sessions that run different batches side by side.
    pub threads: Option<usize>,
    /// ONNX Runtime sessions running batches side by side on the CPU, sharing `threads`;
    /// `None` = two on the CPU when there are two threads or more, else one (one on a GPU).
    /// On two cores two single-threaded sessions measured about 20% faster than one with two
    /// threads, at about 120 MB more; the second is built on the first call with several batches.
    pub sessions: Option<usize>,
    /// Most tokens (texts x longest length) in one batch.
    pub token_budget: usize,
    /// Truncation length; `None` = the model's `max_seq_length`, then the tokenizer's, then
    /// `max_position_embeddings`.
    pub max_length: Option<usize>,
    /// `None` = the model's pooling config, else mean.
    pub pooling: Option<Pooling>,
    pub normalize: bool,
    /// Model file name relative to the folder, instead of `model.onnx` / `onnx/model.onnx`.
    pub model_file: Option<PathBuf>,
    /// The ONNX Runtime library to load, instead of discovery (like `ORT_DYLIB_PATH`).
    pub ort_library: Option<PathBuf>,
}

impl Default for EmbedderOptions {
    fn default() -> Self {
        Self {
            prefer_gpu: true,
            device: Device::Auto,
            threads: None,
            sessions: None,
            token_budget: 256,
            max_length: None,
            pooling: None,
            normalize: true,
            model_file: None,
            ort_library: None,
        }
    }
}

impl EmbedderOptions {
    /// The defaults, with the device taken from `NORNIR_DEVICE` when set.
    pub fn from_env() -> Result<Self> {
        let mut o = Self::default();
        if let Ok(v) = std::env::var("NORNIR_DEVICE") {
            o.device = v.parse().map_err(|e| EmbedError::InvalidOption(format!("NORNIR_DEVICE: {e}")))?;
        }
        Ok(o)
    }

    /// Whether `Device::Auto` may pick a GPU (`false`: auto means the CPU).
    pub fn with_prefer_gpu(mut self, prefer_gpu: bool) -> Self {
        self.prefer_gpu = prefer_gpu;
        self
    }
    pub fn with_device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }
    /// Threads for the model in all (at least 1).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }
    /// Sessions running batches side by side (at least 1).
    pub fn with_sessions(mut self, sessions: usize) -> Self {
        self.sessions = Some(sessions);
        self
    }
    /// Most tokens in one batch (at least 1).
    pub fn with_token_budget(mut self, tokens: usize) -> Self {
        self.token_budget = tokens;
        self
    }
    /// Truncation length in tokens (at least 1).
    pub fn with_max_length(mut self, tokens: usize) -> Self {
        self.max_length = Some(tokens);
        self
    }
    pub fn with_pooling(mut self, pooling: Pooling) -> Self {
        self.pooling = Some(pooling);
        self
    }
    pub fn with_normalize(mut self, normalize: bool) -> Self {
        self.normalize = normalize;
        self
    }
    /// The model's file inside its folder, instead of `model.onnx` / `onnx/model.onnx`.
    pub fn with_model_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.model_file = Some(file.into());
        self
    }
    /// The ONNX Runtime library to load, instead of discovery.
    pub fn with_ort_library(mut self, library: impl Into<PathBuf>) -> Self {
        self.ort_library = Some(library.into());
        self
    }
}

/// Embeddings as one contiguous row-major block: `len()` rows of `dim` floats, row i for text i.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Embeddings {
    data: Vec<f32>,
    dim: usize,
}

impl Embeddings {
    /// `data` holds whole rows of `dim` floats (`dim` 0 only with no data); else `None`.
    pub fn new(data: Vec<f32>, dim: usize) -> Option<Self> {
        let whole = if dim == 0 { data.is_empty() } else { data.len().is_multiple_of(dim) };
        whole.then_some(Self { data, dim })
    }
    /// The width of every row.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// All rows, one after another.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }
    /// The rows as one block, `len() * dim()` floats.
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
    pub fn rows(&self) -> std::slice::ChunksExact<'_, f32> {
        self.data.chunks_exact(self.dim.max(1))
    }
}

/// Counters since the embedder was built (or since [`Embedder::reset_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct EmbedStats {
    pub texts: u64,
    pub batches: u64,
    /// Real tokens, after truncation.
    pub tokens: u64,
    /// Tokens fed to the model, padding included.
    pub padded_tokens: u64,
    /// Seconds spent inside `Session::run`.
    pub ort_seconds: f64,
}

#[derive(Debug, Default)]
struct Counters {
    texts: AtomicU64,
    batches: AtomicU64,
    tokens: AtomicU64,
    padded_tokens: AtomicU64,
    ort_nanos: AtomicU64,
}

/// A session and the vendor it runs on; a GPU session that fails at run time is replaced here
/// by a CPU session, under the same lock, before the failed batch is run again.
#[derive(Debug)]
struct Slot {
    session: Session,
    vendor: Vendor,
}

/// One finished batch from a worker: its index in the packing and its rows, in batch order.
type BatchRows = (usize, Vec<f32>);

/// What the model's graph expects, read from the session at load time.
#[derive(Debug, Clone)]
struct GraphIo {
    ids: String,
    mask: Option<String>,
    type_ids: Option<String>,
    int32: bool,
    output: usize,
    /// The output is already one vector per text (`sentence_embedding`).
    pooled: bool,
}

/// Facts about the loaded model, for reports.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ModelInfo {
    pub folder: ModelFolder,
    pub dimension: usize,
    pub max_length: usize,
    pub pooling: Pooling,
    pub normalize: bool,
    pub inputs: Vec<String>,
    pub output: String,
    pub output_is_pooled: bool,
}

/// A sentence embedder over a small pool of ONNX Runtime sessions. `Send + Sync`: share it with `Arc`.
///
/// `Session::run` needs `&mut`, so each session sits behind a mutex. With `sessions > 1` one call's
/// batches run on several sessions side by side, splitting the threads between them (see
/// ARCHITECTURE.md). The extra sessions are built on the first call that has more than one batch,
/// so a one-text call pays for one session only.
#[derive(Debug)]
pub struct Embedder {
    session: Mutex<Slot>,
    /// More sessions like the first, built on first need; empty on a GPU or when `sessions` is 1.
    extra_sessions: std::sync::OnceLock<Vec<Mutex<Slot>>>,
    /// Set once a GPU session failed at run time and was replaced by a CPU session.
    run_fallback: Mutex<Option<String>>,
    sessions: usize,
    prepacked: ort::session::builder::PrepackedWeights,
    tokenizer: Tokenizer,
    io: GraphIo,
    info: ModelInfo,
    report: SessionReport,
    runtime: Arc<OrtRuntime>,
    token_budget: usize,
    intra_threads: usize,
    counters: Counters,
}

/// The probe's verdict, as the policy needs it.
fn vendor_state(r: &VendorReport) -> VendorState {
    VendorState { available: r.available, summary: r.summary.clone() }
}

/// The plan this process would use with these preferences (probe + policy, no ONNX Runtime).
pub fn plan_for(prefer_gpu: bool, device: Device) -> Plan {
    plan_for_model(prefer_gpu, device, None)
}

/// [`plan_for`] for a model that may run well only on the CPU (`model_cpu_only`: why, as
/// [`Quantization::cpu_only`](crate::model::Quantization::cpu_only) says).
pub fn plan_for_model(prefer_gpu: bool, device: Device, model_cpu_only: Option<String>) -> Plan {
    let p = probe();
    plan(&Inputs {
        compiled: Compiled::new(cfg!(feature = "cuda"), cfg!(feature = "rocm")),
        cuda: vendor_state(&p.cuda),
        rocm: vendor_state(&p.rocm),
        preference: Preference { prefer_gpu, device },
        model_cpu_only,
    })
}

impl Embedder {
    /// Loads the model folder `dir`: probe -> plan -> ONNX Runtime -> session -> checks.
    /// Every mismatch between the folder and the graph is an error here, not at the first embed.
    pub fn new(dir: &Path, options: &EmbedderOptions) -> Result<Self> {
        if options.token_budget == 0 {
            return Err(EmbedError::InvalidOption("token budget must be at least 1".to_owned()));
        }
        if options.threads == Some(0) {
            return Err(EmbedError::InvalidOption(
                "threads must be at least 1 (or leave it unset for all cores)".to_owned(),
            ));
        }
        if options.sessions == Some(0) {
            return Err(EmbedError::InvalidOption("sessions must be at least 1 (or leave it unset)".to_owned()));
        }
        let folder = ModelFolder::open(dir, options.model_file.as_deref())?;
        let mut tokenizer = Tokenizer::from_file(&folder.tokenizer_file)
            .map_err(|e| EmbedError::Tokenizer { path: folder.tokenizer_file.clone(), reason: e.to_string() })?;
        let max_length = options
            .max_length
            .or(folder.max_seq_length)
            .or_else(|| tokenizer.get_truncation().map(|t| t.max_length))
            .or(folder.max_position_embeddings)
            .unwrap_or(512);
        if max_length == 0 {
            return Err(EmbedError::InvalidOption("max length must be at least 1".to_owned()));
        }
        let vocab = tokenizer.get_vocab_size(true);
        if let Some(rows) = folder.vocab_size
            && vocab > rows
        {
            return Err(EmbedError::Tokenizer {
                path: folder.tokenizer_file.clone(),
                reason: format!(
                    "it has {vocab} tokens but config.json says the model has {rows} (vocab_size), so it is not this model's tokenizer"
                ),
            });
        }
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length, ..TruncationParams::default() }))
            .map_err(|e| EmbedError::Tokenizer { path: folder.tokenizer_file.clone(), reason: e.to_string() })?;

        let plan =
            plan_for_model(options.prefer_gpu, options.device, folder.quantization.as_ref().and_then(|q| q.cpu_only()));
        if let Some(why) = &plan.refusal {
            return Err(EmbedError::DeviceRefused(why.clone()));
        }
        let runtime = load_runtime(&plan, options.ort_library.as_deref())?;
        let threads = options.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        // Two CPU sessions side by side by default: small batches leave one session's threads idle.
        let default_sessions = if plan.vendor == Vendor::Cpu && threads >= 2 { 2 } else { 1 };
        let cpu_sessions = options.sessions.unwrap_or(default_sessions);
        let intra_threads = (threads / cpu_sessions).max(1);
        let prepacked = ort::session::builder::PrepackedWeights::new();
        let cfg =
            SessionConfig { model: &folder.model_file, intra_threads, profile_to: None, prepacked: Some(&prepacked) };
        let (session, report) = session::build(&runtime, &plan, &cfg)?;
        let sessions = if report.gpu_vendor == Vendor::Cpu { cpu_sessions } else { options.sessions.unwrap_or(1) };
        let io = graph_io(&session, &folder)?;
        let pooling = options.pooling.or(folder.pooling).unwrap_or(Pooling::Mean);
        let info = ModelInfo {
            inputs: session.inputs().iter().map(|i| i.name().to_owned()).collect(),
            output: session.outputs()[io.output].name().to_owned(),
            output_is_pooled: io.pooled,
            dimension: 0,
            max_length,
            pooling,
            normalize: options.normalize,
            folder,
        };
        let mut embedder = Self {
            session: Mutex::new(Slot { session, vendor: report.gpu_vendor }),
            extra_sessions: std::sync::OnceLock::new(),
            run_fallback: Mutex::new(None),
            sessions,
            prepacked,
            tokenizer,
            io,
            info,
            report,
            runtime,
            token_budget: options.token_budget,
            intra_threads,
            counters: Counters::default(),
        };
        embedder.check_with_a_first_run()?;
        tracing::info!(provider = %embedder.report.active_provider, vendor = %embedder.report.gpu_vendor, "embedder ready");
        Ok(embedder)
    }

    /// Runs one short text: finds the output width, checks it against the configs, and makes a
    /// graph that fails on real input (wrong vocabulary, wrong inputs) fail at load time.
    fn check_with_a_first_run(&mut self) -> Result<()> {
        let vocab = self.tokenizer.get_vocab_size(true);
        let probe_text = "nornir checks the model";
        let enc = self.tokenizer.encode(probe_text, true).map_err(|e| EmbedError::Tokenizer {
            path: self.info.folder.tokenizer_file.clone(),
            reason: e.to_string(),
        })?;
        // The vocabulary's last id goes in too: a model with a smaller embedding table fails here.
        let mut ids = enc.get_ids().to_vec();
        let last = u32::try_from(vocab.saturating_sub(1)).unwrap_or(u32::MAX);
        ids.insert(ids.len().saturating_sub(1), last);
        let dim = self.run_batch(&self.session, &[ids.as_slice()], |_, _| {}).map_err(|e| match e {
            EmbedError::ForcedDeviceFailed { .. } => e,
            e => EmbedError::Model {
                dir: self.info.folder.dir.clone(),
                reason: format!(
                    "the model fails on a first test text ({e}); is tokenizer.json ({vocab} tokens) the model's own?"
                ),
            },
        })?;
        if let Some(h) = self.info.folder.hidden_size
            && h != dim
        {
            return Err(EmbedError::Model {
                dir: self.info.folder.dir.clone(),
                reason: format!("the model's output has width {dim} but its config says hidden size {h}"),
            });
        }
        self.info.dimension = dim;
        self.reset_stats();
        Ok(())
    }

    /// Work done so far: texts, tokens, padding, time inside ONNX Runtime.
    pub fn stats(&self) -> EmbedStats {
        let c = &self.counters;
        EmbedStats {
            texts: c.texts.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            tokens: c.tokens.load(Ordering::Relaxed),
            padded_tokens: c.padded_tokens.load(Ordering::Relaxed),
            ort_seconds: c.ort_nanos.load(Ordering::Relaxed) as f64 * 1e-9,
        }
    }

    pub fn reset_stats(&self) {
        let c = &self.counters;
        for a in [&c.texts, &c.batches, &c.tokens, &c.padded_tokens, &c.ort_nanos] {
            a.store(0, Ordering::Relaxed);
        }
    }

    pub fn dimension(&self) -> usize {
        self.info.dimension
    }

    pub fn model_info(&self) -> &ModelInfo {
        &self.info
    }

    /// What the session build did (the plan, each provider's outcome) and what runs the model
    /// now: after a GPU failure at run time, the CPU, with the reason in `fallback`.
    pub fn report(&self) -> SessionReport {
        let mut r = self.report.clone();
        if let Some(why) = self.run_fallback().clone() {
            r.fallback = Some(why);
            r.active_provider = Provider::Cpu.ort_name().to_owned();
            r.gpu_vendor = Vendor::Cpu;
        }
        r
    }

    /// The vendor the plan aimed at.
    pub fn requested_vendor(&self) -> Vendor {
        self.report.plan.vendor
    }

    /// The vendor really running the model now: "rocm", "cuda" or "cpu".
    pub fn gpu_vendor(&self) -> &'static str {
        self.vendor().label()
    }

    /// Why a GPU session was replaced at run time, if one was.
    fn run_fallback(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.run_fallback.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the model really runs, typed: `gpu_vendor()` as a [`Vendor`].
    pub fn vendor(&self) -> Vendor {
        let fell_back = self.run_fallback().is_some();
        if fell_back { Vendor::Cpu } else { self.report.gpu_vendor }
    }

    /// True when an AMD provider is running the model.
    pub fn rocm_ready(&self) -> bool {
        self.vendor() == Vendor::Rocm
    }

    /// Embeds `texts`; row i of the result is text i. Identical texts are embedded once.
    pub fn embed<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Result<Embeddings> {
        let dim = self.info.dimension;
        let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::with_capacity(texts.len());
        let mut unique: Vec<&str> = Vec::with_capacity(texts.len());
        let slot: Vec<usize> = texts
            .iter()
            .map(|t| {
                *first.entry(t.as_ref()).or_insert_with(|| {
                    unique.push(t.as_ref());
                    unique.len() - 1
                })
            })
            .collect();
        let rows = self.embed_unique(&unique)?;
        self.counters.texts.fetch_add(texts.len() as u64, Ordering::Relaxed);
        if unique.len() == texts.len() {
            return Ok(rows);
        }
        let mut data = Vec::with_capacity(texts.len() * dim);
        for &u in &slot {
            data.extend_from_slice(rows.row(u));
        }
        Ok(Embeddings { data, dim })
    }

    /// Token ids of each text, truncated to the model's length. A very long text is tokenized
    /// from a prefix cut at whitespace (a 10 MB line would otherwise cost seconds and a gigabyte);
    /// when the prefix yields fewer tokens than the limit, the whole text is tokenized instead,
    /// so the ids are always those of the whole text.
    fn tokenize(&self, texts: &[&str]) -> Result<Vec<tokenizers::Encoding>> {
        let fail = |e: tokenizers::Error| EmbedError::Inference(format!("tokenization failed: {e}"));
        let max_length = self.info.max_length;
        let prefixes: Vec<&str> = texts.iter().map(|t| prefix_for_tokens(t, max_length)).collect();
        let mut encodings = self.tokenizer.encode_batch(prefixes.clone(), true).map_err(fail)?;
        for (i, enc) in encodings.iter_mut().enumerate() {
            if prefixes[i].len() < texts[i].len() && enc.len() < max_length {
                *enc = self.tokenizer.encode(texts[i], true).map_err(fail)?;
            }
        }
        Ok(encodings)
    }

    fn embed_unique(&self, texts: &[&str]) -> Result<Embeddings> {
        let dim = self.info.dimension;
        if texts.is_empty() {
            return Ok(Embeddings { data: Vec::new(), dim });
        }
        let encodings = self.tokenize(texts)?;
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        let lengths: Vec<usize> = ids.iter().map(|i| i.len()).collect();
        let mut data = vec![0f32; texts.len() * dim];
        let batches = pack(&lengths, self.token_budget);
        let rows_of = |b: &Batch| -> Vec<&[u32]> { b.indices.iter().map(|&i| ids[i]).collect() };
        let sessions: Vec<&Mutex<Slot>> = if batches.len() > 1 {
            std::iter::once(&self.session).chain(self.extra_sessions().iter()).collect()
        } else {
            vec![&self.session]
        };
        if sessions.len() == 1 {
            for batch in &batches {
                self.run_batch(&self.session, &rows_of(batch), |k, v| {
                    let i = batch.indices[k];
                    data[i * dim..(i + 1) * dim].copy_from_slice(v);
                })?;
            }
            return Ok(Embeddings { data, dim });
        }
        // Each worker owns one session and takes the next batch until none is left.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done: Vec<Result<Vec<BatchRows>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = sessions
                .iter()
                .take(batches.len())
                .map(|session| {
                    let (next, batches, rows_of) = (&next, &batches, &rows_of);
                    scope.spawn(move || -> Result<Vec<BatchRows>> {
                        let mut out = Vec::new();
                        loop {
                            let b = next.fetch_add(1, Ordering::Relaxed);
                            let Some(batch) = batches.get(b) else { return Ok(out) };
                            let mut rows = vec![0f32; batch.indices.len() * dim];
                            self.run_batch(session, &rows_of(batch), |k, v| {
                                rows[k * dim..(k + 1) * dim].copy_from_slice(v)
                            })?;
                            out.push((b, rows));
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join().unwrap_or_else(|_| Err(EmbedError::Inference("an inference worker panicked".to_owned())))
                })
                .collect()
        });
        for worker in done {
            for (b, rows) in worker? {
                for (k, &i) in batches[b].indices.iter().enumerate() {
                    data[i * dim..(i + 1) * dim].copy_from_slice(&rows[k * dim..(k + 1) * dim]);
                }
            }
        }
        Ok(Embeddings { data, dim })
    }

    /// The sessions beyond the first, built on first use with the plan that is really running
    /// (CPU only, if the first session fell back). A failure to build them leaves one session.
    fn extra_sessions(&self) -> &[Mutex<Slot>] {
        self.extra_sessions.get_or_init(|| {
            let plan = self.running_plan();
            let cfg = self.pooled_config();
            let mut extra = Vec::new();
            for _ in 1..self.sessions {
                match session::build(&self.runtime, &plan, &cfg) {
                    Ok((session, r)) => extra.push(Mutex::new(Slot { session, vendor: r.gpu_vendor })),
                    Err(e) => {
                        tracing::warn!("running with {} session(s): another could not be built: {e}", extra.len() + 1);
                        break;
                    }
                }
            }
            extra
        })
    }

    /// The plan as it really ran: CPU only when the first session ended on the CPU, so that a
    /// further session is built the same way instead of trying the GPU again.
    fn running_plan(&self) -> Plan {
        if self.vendor() == Vendor::Cpu { self.cpu_plan() } else { self.report.plan.clone() }
    }

    /// The plan without its GPU providers: what a CPU session is built from.
    fn cpu_plan(&self) -> Plan {
        let mut plan = self.report.plan.clone();
        plan.providers.retain(|p| p.vendor() == Vendor::Cpu);
        plan.forced = false;
        plan
    }

    /// How every session of the pool is built: the same threads, one set of pre-packed weights.
    fn pooled_config(&self) -> SessionConfig<'_> {
        SessionConfig {
            model: &self.info.folder.model_file,
            intra_threads: self.intra_threads,
            profile_to: None,
            prepacked: Some(&self.prepacked),
        }
    }

    /// How many sessions embed in parallel (on a GPU, one).
    pub fn sessions(&self) -> usize {
        self.sessions
    }

    /// Embeds a stream of texts `chunk` at a time, yielding each chunk's rows in input order.
    /// Memory stays bounded by the chunk size, whatever the length of the stream.
    pub fn embed_chunks<'a, I>(&'a self, texts: I, chunk: usize) -> impl Iterator<Item = Result<Embeddings>> + 'a
    where
        I: IntoIterator<Item = String>,
        I::IntoIter: 'a,
    {
        let mut it = texts.into_iter();
        let chunk = chunk.max(1);
        std::iter::from_fn(move || {
            let part: Vec<String> = it.by_ref().take(chunk).collect();
            (!part.is_empty()).then(|| self.embed(&part))
        })
    }

    /// Runs one batch on `slot` (locked for the run only). When a GPU session fails, and the
    /// device was not forced, the slot's session is replaced by a CPU session and the same batch
    /// runs again: `emit` sees each text once, from the run that succeeded.
    fn run_batch(&self, slot: &Mutex<Slot>, rows: &[&[u32]], mut emit: impl FnMut(usize, &[f32])) -> Result<usize> {
        let mut slot = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (pooling, normalize_rows, nanos) = (self.info.pooling, self.info.normalize, &self.counters.ort_nanos);
        let dim = match run_batch(&mut slot.session, &self.io, pooling, normalize_rows, rows, nanos, &mut emit) {
            Ok(dim) => dim,
            Err(e) if slot.vendor != Vendor::Cpu => {
                let e = match e {
                    EmbedError::Inference(text) => text,
                    e => e.to_string(),
                };
                let why = format!("running a batch on {} failed: {e}", self.report.active_provider);
                if self.report.plan.forced {
                    return Err(EmbedError::ForcedDeviceFailed {
                        vendor: self.report.plan.vendor,
                        details: why,
                        registrations: Vec::new(),
                    });
                }
                tracing::warn!("{why}; running it and the rest on CPU");
                slot.session = self.cpu_session()?;
                slot.vendor = Vendor::Cpu;
                self.run_fallback()
                    .get_or_insert_with(|| format!("{why}; rebuilt on CPUExecutionProvider and ran that batch again"));
                run_batch(&mut slot.session, &self.io, pooling, normalize_rows, rows, nanos, &mut emit)?
            }
            Err(e) => return Err(e),
        };
        let c = &self.counters;
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0).max(1);
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.tokens.fetch_add(rows.iter().map(|r| r.len() as u64).sum(), Ordering::Relaxed);
        c.padded_tokens.fetch_add((rows.len() * longest) as u64, Ordering::Relaxed);
        Ok(dim)
    }

    /// A CPU session like the others, to replace a GPU session that failed at run time.
    fn cpu_session(&self) -> Result<Session> {
        Ok(session::build(&self.runtime, &self.cpu_plan(), &self.pooled_config())?.0)
    }

    /// Which provider ran each node, from ONNX Runtime's profiling output of one run of a fresh
    /// session built the same way. Costs a session build; call it on demand (`doctor`).
    pub fn placement(&self) -> Placement {
        // A private folder with an unpredictable name, removed when `dir` drops.
        let dir = match tempfile::Builder::new().prefix("nornir-placement-").tempdir() {
            Ok(d) => d,
            Err(e) => return Placement::Unknown { reason: format!("no temporary folder for the profile: {e}") },
        };
        let prefix = dir.path().join("nornir-placement");
        let cfg = SessionConfig { profile_to: Some(&prefix), prepacked: None, ..self.pooled_config() };
        let plan = self.running_plan();
        let result = (|| -> Result<Placement> {
            let (mut session, _) = session::build(&self.runtime, &plan, &cfg)?;
            let ids = self
                .tokenizer
                .encode("where does this run?", true)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_else(|_| vec![0, 0]);
            run_batch(
                &mut session,
                &self.io,
                self.info.pooling,
                self.info.normalize,
                &[ids.as_slice()],
                &AtomicU64::new(0),
                |_, _| {},
            )?;
            let file = session.end_profiling().map_err(|e| EmbedError::Inference(e.to_string()))?;
            let text = std::fs::read_to_string(&file).map_err(|e| EmbedError::Inference(format!("{file}: {e}")))?;
            Ok(parse_profile(&text))
        })();
        result.unwrap_or_else(|e| Placement::Unknown { reason: e.to_string() })
    }
}

/// Runs one padded batch and hands each text's finished vector to `emit(k, vector)`.
/// Returns the vector width.
fn run_batch(
    session: &mut Session,
    io: &GraphIo,
    pooling: Pooling,
    normalize_rows: bool,
    rows: &[&[u32]],
    ort_nanos: &AtomicU64,
    mut emit: impl FnMut(usize, &[f32]),
) -> Result<usize> {
    let b = rows.len();
    let l = rows.iter().map(|r| r.len()).max().unwrap_or(0).max(1);
    let fail = |e: ort::Error| EmbedError::Inference(e.to_string());
    let (wide, narrow);
    let feed = if io.int32 {
        narrow = PaddedInputs::<i32>::new(rows, l);
        narrow.feed(io, [b, l]).map_err(fail)?
    } else {
        wide = PaddedInputs::<i64>::new(rows, l);
        wide.feed(io, [b, l]).map_err(fail)?
    };
    let started = Instant::now();
    let outputs = session.run(feed).map_err(fail)?;
    ort_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    let (shape, values) = outputs[io.output].try_extract_tensor::<f32>().map_err(fail)?;
    let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    let dim = *dims.last().unwrap_or(&0);
    let expect_rank = if io.pooled { 2 } else { 3 };
    if dims.len() != expect_rank || dims[0] != b || dim == 0 {
        return Err(EmbedError::Inference(format!(
            "the model returned shape {dims:?}; expected {expect_rank} dimensions starting with {b}"
        )));
    }
    let mut v = vec![0f32; dim];
    for (k, r) in rows.iter().enumerate() {
        if io.pooled {
            v.copy_from_slice(&values[k * dim..(k + 1) * dim]);
        } else {
            let seq = dims[1];
            let hidden = &values[k * seq * dim..(k + 1) * seq * dim];
            pool_tokens(hidden, r.len().min(seq), dim, pooling, &mut v);
        }
        if normalize_rows {
            normalize(&mut v);
        }
        emit(k, &v);
    }
    Ok(dim)
}

/// Bytes of text per token kept when cutting a long text before tokenizing: far more than any
/// tokenizer needs (an English token is about 4 bytes; a word piece never spans whitespace).
const PREFIX_BYTES_PER_TOKEN: usize = 64;

/// The start of `text` that is enough for `max_length` tokens, cut at whitespace so that its
/// tokens are the first tokens of the whole text; the whole text when it is short.
fn prefix_for_tokens(text: &str, max_length: usize) -> &str {
    let limit = max_length.saturating_mul(PREFIX_BYTES_PER_TOKEN).max(4096);
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    // Without whitespace there is no safe cut: a word piece depends on the whole word.
    match text[..end].rfind(char::is_whitespace) {
        Some(i) if i > 0 => &text[..i],
        _ => text,
    }
}

/// Reads the graph's inputs and outputs and checks them against what a text embedder needs.
fn graph_io(session: &Session, folder: &ModelFolder) -> Result<GraphIo> {
    let err = |reason: String| EmbedError::Model { dir: folder.dir.clone(), reason };
    let mut ids = None;
    let mut mask = None;
    let mut type_ids = None;
    let mut int32 = None;
    for input in session.inputs() {
        let name = input.name();
        let ty = match input.dtype() {
            ValueType::Tensor { ty, .. } => *ty,
            other => {
                return Err(err(format!(
                    "input {name:?} is {other}, not a tensor; this is not a text-embedding model"
                )));
            }
        };
        let is32 = match ty {
            TensorElementType::Int64 => false,
            TensorElementType::Int32 => true,
            other => {
                return Err(err(format!(
                    "input {name:?} takes {other:?}; a text model takes int64 or int32 token ids (is this an image or audio model?)"
                )));
            }
        };
        if int32.is_some_and(|v| v != is32) {
            return Err(err("inputs mix int32 and int64; nornir feeds one integer type".to_owned()));
        }
        int32 = Some(is32);
        match name {
            "input_ids" => ids = Some(name.to_owned()),
            "attention_mask" => mask = Some(name.to_owned()),
            "token_type_ids" => type_ids = Some(name.to_owned()),
            other => {
                return Err(err(format!(
                    "unexpected model input {other:?}; nornir feeds input_ids, attention_mask and token_type_ids"
                )));
            }
        }
    }
    let ids =
        ids.ok_or_else(|| err("the model has no input_ids input; this is not a text-embedding model".to_owned()))?;
    let outputs = session.outputs();
    if outputs.is_empty() {
        return Err(err("the model has no outputs".to_owned()));
    }
    let rank = |i: usize| match outputs[i].dtype() {
        ValueType::Tensor { ty: TensorElementType::Float32, shape, .. } => Some(shape.len()),
        _ => None,
    };
    let (output, pooled) = match outputs.iter().position(|o| o.name() == "sentence_embedding") {
        Some(i) if rank(i) == Some(2) => (i, true),
        _ => match rank(0) {
            Some(3) => (0, false),
            Some(2) => (0, true),
            _ => {
                return Err(err(format!(
                    "output {:?} is {}; nornir needs float32 [batch, tokens, width] or [batch, width]",
                    outputs[0].name(),
                    outputs[0].dtype()
                )));
            }
        },
    };
    Ok(GraphIo { ids, mask, type_ids, int32: int32.unwrap_or(false), output, pooled })
}

/// A batch's ids, attention mask and token type ids, padded to `l`, in the graph's integer type.
struct PaddedInputs<T> {
    ids: Vec<T>,
    mask: Vec<T>,
    types: Vec<T>,
}

impl<T: ort::value::PrimitiveTensorElementType + From<u16> + TryFrom<u32> + Copy + std::fmt::Debug + 'static>
    PaddedInputs<T>
{
    fn new(rows: &[&[u32]], l: usize) -> Self {
        let zero = T::from(0u16);
        let mut ids = vec![zero; rows.len() * l];
        let mut mask = vec![zero; rows.len() * l];
        for (k, r) in rows.iter().enumerate() {
            for (j, &t) in r.iter().enumerate() {
                // Token ids come from the tokenizer's vocabulary, far below i32::MAX.
                ids[k * l + j] = T::try_from(t).unwrap_or(zero);
                mask[k * l + j] = T::from(1u16);
            }
        }
        Self { ids, mask, types: vec![zero; rows.len() * l] }
    }

    /// The inputs the graph declares, viewing this batch's buffers without copying them.
    fn feed(&self, io: &GraphIo, shape: [usize; 2]) -> ort::Result<Vec<(String, ort::session::SessionInputValue<'_>)>> {
        let mut feed = Vec::with_capacity(3);
        feed.push((io.ids.clone(), TensorRef::from_array_view((shape, self.ids.as_slice()))?.into()));
        if let Some(m) = &io.mask {
            feed.push((m.clone(), TensorRef::from_array_view((shape, self.mask.as_slice()))?.into()));
        }
        if let Some(t) = &io.type_ids {
            feed.push((t.clone(), TensorRef::from_array_view((shape, self.types.as_slice()))?.into()));
        }
        Ok(feed)
    }
}
