//! The engine behind an [`Embedder`](crate::Embedder): loading (probe, plan, ONNX Runtime,
//! sessions, checks), tokenizing, and running one batch on a session with the GPU-to-CPU fallback.
//! The session workers and the callers share it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use nornir_ep_select::{Plan, Provider, Vendor};
use ort::session::Session;
use serde::{Deserialize, Serialize};
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams};

use crate::call::{CallOptions, CallPrompt, Chunking, DocumentVector, Truncation};
use crate::chunk::{late_passes, windows};
use crate::embeddings::{Chunk, ChunkRows, Embeddings, TextTokens};
use crate::error::{EmbedError, InferenceKind, Result, error_chain};
use crate::graph_io::{GraphIo, Row, RowSettings, forward, graph_io, run_and_pool};
use crate::model::ModelFolder;
use crate::options::EmbedderOptions;
use crate::placement::parse_profile;
use crate::plan::plan_for_model;
use crate::pooling::{Pooling, normalize};
use crate::prompt::{PromptChoice, choose_prompt, named_prompt};
use crate::runtime::{OrtRuntime, load_runtime};
use crate::scheduler::{BatchPolicy, Item, QueueFull, Request, Scheduler};
use crate::session::{self, Placement, SessionConfig, SessionReport, resident_bytes};
use crate::stats::{Counters, EmbedStats};
use crate::tokenize::{prefix_for_tokens, suffix_for_tokens};
use crate::weights::{self, SharedWeights};

/// `text` with `prompt` before it; the text itself, not a copy, when there is no prompt (a text
/// can be a 10 MB line).
fn with_prompt<'a>(prompt: &str, text: &'a str) -> Cow<'a, str> {
    if prompt.is_empty() { Cow::Borrowed(text) } else { Cow::Owned(format!("{prompt}{text}")) }
}

/// Calls of at most this many texts are tokenized serially, in the thread that prepares the call.
const SERIAL_TOKENIZE: usize = 16;

/// Texts longer than this many bytes are not tokenized whole just to count their tokens for
/// [`EmbedError::TooLong`]: the count is then a lower bound.
const COUNT_WHOLE_BYTES: usize = 1 << 20;

/// A call on its way: the request its rows go to, its items until they are queued, and how to
/// lay its rows out again and finish them.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) request: Arc<Request>,
    pub(crate) items: Vec<Item>,
    /// For each text of the call, its row among the unique texts; `None` when all are unique.
    expand: Option<Vec<usize>>,
    /// Per unique text.
    tokens: Vec<TextTokens>,
    /// The call's width and normalisation, applied to the model's raw rows.
    dim: usize,
    normalize: bool,
    /// Per unique text, its chunks, when the call chunks long texts.
    chunked: Option<Chunked>,
    /// Refuse the call when the queue ahead of it would take longer (`CallOptions::max_wait`).
    pub(crate) max_wait: Option<std::time::Duration>,
}

/// How a chunking call's texts were cut.
#[derive(Debug)]
struct Chunked {
    /// Per unique text: its first row in the request and its chunks (a row each).
    texts: Vec<(usize, Vec<Chunk>)>,
    document: DocumentVector,
}

/// A call's options with the embedder's defaults filled in.
#[derive(Debug)]
struct CallPlan<'a> {
    /// The call's prompt, or the embedder's (borrowed: no copy per call).
    prompt: &'a str,
    /// Prompt tokens the pooling leaves out.
    skip: usize,
    normalize: bool,
    dim: usize,
    truncation: Truncation,
}

/// A session and the vendor it runs on; a GPU session that fails at run time is replaced here
/// by a CPU session, under the same lock, before the failed batch is run again.
#[derive(Debug)]
pub(crate) struct Slot {
    session: Session,
    vendor: Vendor,
}

/// The tokens of `prompt` as sentence-transformers counts them for `include_prompt: false`: the
/// prompt tokenized with the special tokens, less a special token at its end (the `[SEP]` or
/// end-of-text that closes it alone, not the text it goes before).
fn prompt_token_count(tokenizer: &Tokenizer, prompt: &str) -> tokenizers::Result<usize> {
    let enc = tokenizer.encode(prompt, true)?;
    let ends_special = enc.get_special_tokens_mask().last() == Some(&1);
    Ok(enc.len() - usize::from(ends_special))
}

/// One token of a text, as TEI's `/tokenize` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Token {
    /// Its id in the model's vocabulary.
    pub id: u32,
    /// The text it stands for (the token's own spelling for a special token).
    pub text: String,
    /// A special token (`[CLS]`, `[SEP]`, ...), not from the text.
    pub special: bool,
    /// Byte offsets in the text with its prompt: its first byte, and past its last.
    pub start: usize,
    /// See `start`.
    pub stop: usize,
}

/// Facts about the loaded model, for reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelInfo {
    /// What the folder holds and says.
    pub folder: ModelFolder,
    /// The width of the vectors returned: `model_dimension`, or `--dim` when given.
    pub dimension: usize,
    /// The width of the model's own output.
    pub model_dimension: usize,
    /// The most tokens of a text the model reads (longer ones are truncated or chunked).
    pub max_length: usize,
    /// How token vectors become one vector (for a graph that does not pool itself).
    pub pooling: Pooling,
    /// Tokens of the prompt left out of the pooling (`include_prompt: false`).
    pub pooling_skips_prompt_tokens: usize,
    /// Whether vectors are L2-normalised by default.
    pub normalize: bool,
    /// Why vectors are (or are not) normalised.
    pub normalize_reason: String,
    /// The prompt put before every text, and the task.
    pub prompt: PromptChoice,
    /// Texts are padded on the left (the tokenizer's padding side).
    pub left_padding: bool,
    /// The graph's inputs that nornir feeds.
    pub inputs: Vec<String>,
    /// The graph output read.
    pub output: String,
    /// That output is one vector per text (`sentence_embedding`), not per token.
    pub output_is_pooled: bool,
    /// Why this output was chosen.
    pub output_reason: String,
    /// Set when every text runs alone, without neighbours or padding, and why: the graph
    /// quantizes activations with one scale per batch, so batching would change the vectors.
    #[serde(default)]
    pub one_text_per_run: Option<String>,
}

/// Why texts of this model must run one at a time, if they must: the graph quantizes its
/// activations with one scale per tensor (a third-party dynamic-int8 export, or
/// `nornir vector quantize --activations per-tensor`).
fn one_text_per_run(model: &[u8]) -> Option<String> {
    let ops = weights::per_tensor_activation_ops(model);
    if ops.is_empty() {
        return None;
    }
    let list: Vec<String> = ops.iter().map(|(op, n)| format!("{op} x{n}")).collect();
    Some(format!(
        "the graph quantizes activations with one scale per tensor ({}), so a text's vector would depend on the other texts and the padding of its batch; each text runs alone. `nornir vector quantize` of the float32 model writes per-token scales, which batch",
        list.join(", ")
    ))
}

/// A document's vector from its chunks' (`dim` each, finished as the call asks): their mean
/// weighted by each chunk's tokens, or their element-wise maximum.
fn combine(vectors: &[f32], dim: usize, spans: &[Chunk], how: DocumentVector) -> Vec<f32> {
    let mut out = vec![0f32; dim];
    match how {
        DocumentVector::Max => {
            out.fill(f32::NEG_INFINITY);
            for v in vectors.chunks_exact(dim.max(1)) {
                for (o, x) in out.iter_mut().zip(v) {
                    *o = o.max(*x);
                }
            }
        }
        _ => {
            let total: usize = spans.iter().map(|c| c.tokens.max(1)).sum();
            for (v, c) in vectors.chunks_exact(dim.max(1)).zip(spans) {
                let w = c.tokens.max(1) as f32 / total.max(1) as f32;
                for (o, x) in out.iter_mut().zip(v) {
                    *o += w * x;
                }
            }
        }
    }
    out
}

/// The number of CPU sessions from which they share one copy of the model's weights.
const SHARE_WEIGHTS_FROM: usize = 3;

/// How much the resident memory grew since `before` (taken with `resident_bytes`).
fn growth_since(before: Option<u64>) -> Option<u64> {
    Some(resident_bytes()?.saturating_sub(before?))
}

/// Everything the callers and the session workers share. `Session::run` needs `&mut`, so each
/// session sits behind a mutex; worker k runs session k.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) session: Mutex<Slot>,
    /// More sessions like the first, built on first need; empty on a GPU or when `sessions` is 1.
    extra_sessions: std::sync::OnceLock<Vec<Mutex<Slot>>>,
    /// Set once a GPU session failed at run time and was replaced by a CPU session.
    run_fallback: Mutex<Option<String>>,
    pub(crate) sessions: usize,
    prepacked: ort::session::builder::PrepackedWeights,
    /// The model's initializers, read once for three CPU sessions or more; `None` otherwise.
    weights: Option<SharedWeights>,
    /// Resident memory growth while each session was built, in bytes (see `Memory`).
    session_growth: Mutex<Vec<u64>>,
    /// Truncates on the right, to the model's length.
    pub(crate) tokenizer: Tokenizer,
    /// Truncates on the left; made at the first call that asks for it.
    left_tokenizer: std::sync::OnceLock<Tokenizer>,
    /// Does not truncate: counts a refused text's tokens, and tokenizes for `tokens`.
    whole_tokenizer: std::sync::OnceLock<Tokenizer>,
    /// The pooling config's `include_prompt`: false leaves a call's prompt tokens out.
    include_prompt: bool,
    /// `dim` of the options: the width of a call that does not choose one.
    default_dim: Option<usize>,
    io: GraphIo,
    settings: RowSettings,
    pub(crate) info: ModelInfo,
    report: SessionReport,
    runtime: Arc<OrtRuntime>,
    intra_threads: usize,
    pub(crate) counters: Counters,
    pub(crate) scheduler: Scheduler,
    pub(crate) queue_full: QueueFull,
}

impl Engine {
    /// Loads the model folder `dir`: probe -> plan -> ONNX Runtime -> session -> checks.
    /// Every mismatch between the folder and the graph is an error here, not at the first embed.
    pub(crate) fn new(dir: &Path, options: &EmbedderOptions) -> Result<Self> {
        if options.token_budget == 0 {
            return Err(EmbedError::invalid("token_budget", "must be at least 1"));
        }
        if options.threads == Some(0) {
            return Err(EmbedError::invalid("threads", "must be at least 1 (or leave it unset for all cores)"));
        }
        if options.sessions == Some(0) {
            return Err(EmbedError::invalid("sessions", "must be at least 1 (or leave it unset)"));
        }
        if options.max_queued_texts == 0 {
            return Err(EmbedError::invalid("max_queued_texts", "must be at least 1"));
        }
        if options.dim == Some(0) {
            return Err(EmbedError::invalid("dim", "must be at least 1"));
        }
        let folder = ModelFolder::open(dir, options.model_file.as_deref())?;
        let prompt = choose_prompt(&folder, options)?;
        let mut tokenizer = Tokenizer::from_file(&folder.tokenizer_file)
            .map_err(|e| EmbedError::tokenizer_because(&folder.tokenizer_file, e))?;
        let max_length = options
            .max_length
            .or(folder.max_seq_length)
            .or_else(|| tokenizer.get_truncation().map(|t| t.max_length))
            .or(folder.max_position_embeddings)
            .unwrap_or(512);
        if max_length == 0 {
            return Err(EmbedError::invalid("max_length", "must be at least 1"));
        }
        let vocab = tokenizer.get_vocab_size(true);
        if let Some(rows) = folder.vocab_size
            && vocab > rows
        {
            return Err(EmbedError::tokenizer(
                &folder.tokenizer_file,
                format!(
                    "it has {vocab} tokens but config.json says the model has {rows} (vocab_size), so it is not this model's tokenizer"
                ),
            ));
        }
        let left_padding =
            tokenizer.get_padding().is_some_and(|p| matches!(p.direction, tokenizers::PaddingDirection::Left));
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length, ..TruncationParams::default() }))
            .map_err(|e| EmbedError::tokenizer_because(&folder.tokenizer_file, e))?;

        let plan = plan_for_model(options.device, folder.quantization.as_ref().and_then(|q| q.cpu_only()));
        if let Some(why) = &plan.refusal {
            return Err(EmbedError::DeviceRefused { reason: why.clone() });
        }
        let runtime = load_runtime(&plan, options.ort_library.as_deref())?;
        let threads = options.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        // Two CPU sessions side by side by default: small batches leave one session's threads idle.
        let default_sessions = if plan.vendor == Vendor::Cpu && threads >= 2 { 2 } else { 1 };
        let cpu_sessions = options.sessions.unwrap_or(default_sessions);
        let intra_threads = (threads / cpu_sessions).max(1);
        let prepacked = ort::session::builder::PrepackedWeights::new();
        let resident = resident_bytes();
        // From three CPU sessions on, they use one copy of the weights. With two, sharing only
        // swaps the second session's pre-packed copy for the shared original (measured: the
        // same peak, plus reading the file), so each session keeps its own.
        let share_weights = plan.vendor == Vendor::Cpu && cpu_sessions >= SHARE_WEIGHTS_FROM;
        let model_bytes = match std::fs::read(&folder.model_file) {
            Ok(b) => Some(b),
            Err(e) if share_weights => return Err(EmbedError::model_because(&folder.dir, "model.onnx", e)),
            // ONNX Runtime says what is wrong with a file that cannot be read.
            Err(_) => None,
        };
        let one_text_per_run = model_bytes.as_deref().and_then(one_text_per_run);
        let weights = model_bytes.filter(|_| share_weights).map(|b| weights::from_model_bytes(&b, &folder.model_file));
        let cfg = SessionConfig {
            model: &folder.model_file,
            intra_threads,
            profile_to: None,
            prepacked: Some(&prepacked),
            weights: weights.as_ref(),
        };
        let (session, report) = session::build(&runtime, &plan, &cfg)?;
        let session_growth = Mutex::new(growth_since(resident).into_iter().collect());
        let sessions = if report.gpu_vendor == Vendor::Cpu { cpu_sessions } else { options.sessions.unwrap_or(1) };
        let mut io = graph_io(&session, &folder, options.output_name.as_deref())?;
        match (&mut io.task, &prompt.task) {
            (Some(input), Some((_, index))) => input.value = *index,
            (Some(_), None) => {
                return Err(EmbedError::model(
                    &folder.dir,
                    "the graph takes a task_id input but config.json lists no lora_adaptations to choose it from",
                ));
            }
            (None, _) => {}
        }
        let pooling = options.pooling.or(folder.pooling.map(|p| p.mode)).unwrap_or(Pooling::Mean);
        let include_prompt = folder.pooling.is_none_or(|p| p.include_prompt);
        let skip = if include_prompt || prompt.text.is_empty() {
            0
        } else {
            prompt_token_count(&tokenizer, &prompt.text)
                .map_err(|e| EmbedError::tokenizer_because(&folder.tokenizer_file, e))?
        };
        let (normalize, normalize_reason) = match options.normalize {
            Some(n) => (n, "chosen by the caller".to_owned()),
            None => {
                let (n, why) = folder.normalize_default();
                (n, why.to_owned())
            }
        };
        let settings = RowSettings { pooling, left_padding };
        let info = ModelInfo {
            inputs: session.inputs().iter().map(|i| i.name().to_owned()).collect(),
            output: session.outputs()[io.output].name().to_owned(),
            output_is_pooled: io.pooled,
            output_reason: io.output_reason.clone(),
            dimension: 0,
            model_dimension: 0,
            max_length,
            pooling,
            pooling_skips_prompt_tokens: skip,
            normalize,
            normalize_reason,
            prompt,
            left_padding,
            one_text_per_run,
            folder,
        };
        let policy = if report.gpu_vendor == Vendor::Cpu { BatchPolicy::CPU } else { BatchPolicy::GPU };
        let info_alone = info.one_text_per_run.is_some();
        let mut engine = Self {
            session: Mutex::new(Slot { session, vendor: report.gpu_vendor }),
            extra_sessions: std::sync::OnceLock::new(),
            run_fallback: Mutex::new(None),
            sessions,
            prepacked,
            weights,
            session_growth,
            tokenizer,
            left_tokenizer: std::sync::OnceLock::new(),
            whole_tokenizer: std::sync::OnceLock::new(),
            include_prompt,
            default_dim: options.dim,
            io,
            settings,
            info,
            report,
            runtime,
            intra_threads,
            counters: Counters::default(),
            scheduler: Scheduler::new(
                sessions,
                if info_alone { 1 } else { options.token_budget },
                policy,
                options.max_queued_texts,
                options.batch_wait,
            ),
            queue_full: options.queue_full,
        };
        engine.check_with_a_first_run()?;
        tracing::info!(provider = %engine.report.active_provider, vendor = %engine.report.gpu_vendor, "embedder ready");
        Ok(engine)
    }

    /// Runs one short text: finds the output width, checks it against the configs, and makes a
    /// graph that fails on real input (wrong vocabulary, wrong inputs) fail at load time.
    fn check_with_a_first_run(&mut self) -> Result<()> {
        let vocab = self.tokenizer.get_vocab_size(true);
        let probe_text = "nornir checks the model";
        let enc = self
            .tokenizer
            .encode(probe_text, true)
            .map_err(|e| EmbedError::tokenizer_because(&self.info.folder.tokenizer_file, e))?;
        // The vocabulary's last id goes in too: a model with a smaller embedding table fails here.
        let mut ids = enc.get_ids().to_vec();
        let last = u32::try_from(vocab.saturating_sub(1)).unwrap_or(u32::MAX);
        ids.insert(ids.len().saturating_sub(1), last);
        let dim =
            self.run_batch(&self.session, &[Row { ids: &ids, skip: 0, spans: &[] }], |_, _| {}).map_err(
                |e| match e {
                    EmbedError::ForcedDeviceFailed { .. } => e,
                    e => EmbedError::Model {
                        dir: self.info.folder.dir.clone(),
                        reason: format!(
                            "the model fails on a first test text; is tokenizer.json ({vocab} tokens) the model's own?"
                        ),
                        source: Some(e.into()),
                    },
                },
            )?;
        if let Some(h) = self.info.folder.hidden_size
            && h != dim
        {
            return Err(EmbedError::model(
                &self.info.folder.dir,
                format!("the model's output has width {dim} but its config says hidden size {h}"),
            ));
        }
        if let Some(d) = self.default_dim
            && d > dim
        {
            return Err(EmbedError::invalid(
                "dim",
                format!("{d} is wider than the model's {dim}-dimensional vectors; give at most {dim}"),
            ));
        }
        self.info.model_dimension = dim;
        self.info.dimension = self.default_dim.unwrap_or(dim);
        self.reset_stats();
        Ok(())
    }

    /// Work done so far: texts, tokens, padding, time inside ONNX Runtime, batch sizes, queue.
    pub(crate) fn stats(&self) -> EmbedStats {
        let (queued, running) = self.scheduler.load();
        self.counters.read(queued, running)
    }

    pub(crate) fn reset_stats(&self) {
        self.counters.reset();
    }

    pub(crate) fn dimension(&self) -> usize {
        self.info.dimension
    }

    pub(crate) fn model_info(&self) -> &ModelInfo {
        &self.info
    }

    /// What the session build did (the plan, each provider's outcome) and what runs the model
    /// now: after a GPU failure at run time, the CPU, with the reason in `fallback`.
    pub(crate) fn report(&self) -> SessionReport {
        let mut r = self.report.clone();
        if let Some(why) = self.run_fallback().clone() {
            r.fallback = Some(why);
            r.active_provider = Provider::Cpu.ort_name().to_owned();
            r.gpu_vendor = Vendor::Cpu;
            r.graph_optimization = "basic".to_owned();
        }
        if let Some(w) = &self.weights {
            r.memory.shared_initializers = w.values.len();
            r.memory.shared_weight_bytes = w.bytes;
        }
        r.memory.session_growth_bytes = self.session_growth.lock().unwrap_or_else(PoisonError::into_inner).clone();
        r.memory.resident_bytes = resident_bytes();
        r
    }

    /// The vendor the plan aimed at.
    pub(crate) fn requested_vendor(&self) -> Vendor {
        self.report.plan.vendor
    }

    /// The vendor really running the model now: "rocm", "cuda" or "cpu".
    pub(crate) fn gpu_vendor(&self) -> &'static str {
        self.vendor().label()
    }

    /// Why a GPU session was replaced at run time, if one was.
    fn run_fallback(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.run_fallback.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the model really runs, typed: `gpu_vendor()` as a [`Vendor`].
    pub(crate) fn vendor(&self) -> Vendor {
        let fell_back = self.run_fallback().is_some();
        if fell_back { Vendor::Cpu } else { self.report.gpu_vendor }
    }

    /// True when an AMD provider is running the model.
    pub(crate) fn rocm_ready(&self) -> bool {
        self.vendor() == Vendor::Rocm
    }

    /// `options` with the embedder's defaults filled in, checked against the model.
    fn plan_call<'a>(&'a self, options: &'a CallOptions) -> Result<CallPlan<'a>> {
        let model = self.info.model_dimension;
        let dim = match options.dimensions {
            None => self.info.dimension,
            Some(d) if (1..=model).contains(&d) => d,
            Some(d) => {
                return Err(EmbedError::invalid(
                    "dimensions",
                    format!("must be between 1 and {model} for this model, not {d}"),
                ));
            }
        };
        let (prompt, skip) = match &options.prompt {
            None => (self.info.prompt.text.as_str(), self.info.pooling_skips_prompt_tokens),
            Some(p) => {
                let text = match p {
                    CallPrompt::Text(t) => t.as_str(),
                    CallPrompt::Name(n) => named_prompt(&self.info.folder, n)?,
                };
                let skip = if self.include_prompt || text.is_empty() {
                    0
                } else {
                    prompt_token_count(&self.tokenizer, text).map_err(|e| {
                        EmbedError::inference_because(InferenceKind::Tokenizer, "tokenizing the prompt failed", e)
                    })?
                };
                (text, skip)
            }
        };
        Ok(CallPlan {
            prompt,
            skip,
            normalize: options.normalize.unwrap_or(self.info.normalize),
            dim,
            truncation: options.truncation.unwrap_or_default(),
        })
    }

    /// A call's texts, tokenized as `options` say, as queue items with the request they fill.
    /// Identical texts are tokenized and run once.
    pub(crate) fn prepare<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions) -> Result<Call> {
        let mut call = self.prepare_texts(texts, options)?;
        call.max_wait = options.max_wait;
        if let Some(handle) = &options.cancel
            && !handle.watch(&call.request)
        {
            self.counters.cancelled_texts.fetch_add(call.items.len() as u64, Ordering::Relaxed);
            return Err(EmbedError::Cancelled);
        }
        Ok(call)
    }

    /// Takes the texts of a call that nobody waits for any more out of the queue, and counts them.
    pub(crate) fn cancel_queued(&self, request: &Arc<Request>) {
        let cancelled = self.scheduler.cancel(request);
        self.counters.cancelled_texts.fetch_add(cancelled as u64, Ordering::Relaxed);
    }

    fn prepare_texts<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions) -> Result<Call> {
        let plan = self.plan_call(options)?;
        let mut first: HashMap<&str, usize> = HashMap::with_capacity(texts.len());
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
        let expand = (unique.len() < texts.len()).then_some(slot);
        if let Some(chunking) = &options.chunking {
            return self.prepare_chunks(&unique, expand, &plan, chunking);
        }
        let slot = expand.as_deref();
        let encodings = if unique.is_empty() { Vec::new() } else { self.tokenize(&unique, &plan)? };
        if plan.truncation == Truncation::Refuse
            && let Some(u) = encodings.iter().position(|e| !e.get_overflowing().is_empty())
        {
            let index = slot.and_then(|slot| slot.iter().position(|&s| s == u)).unwrap_or(u);
            return Err(self.too_long(index, unique[u], plan.prompt));
        }
        let request = Request::new(unique.len(), self.info.model_dimension);
        let tokens = encodings
            .iter()
            .map(|e| TextTokens {
                count: u32::try_from(e.len()).unwrap_or(u32::MAX),
                truncated: !e.get_overflowing().is_empty(),
            })
            .collect();
        let items = encodings
            .into_iter()
            .enumerate()
            .map(|(index, e)| {
                // A prompt cut from the left is no longer whole at the start: pool every token.
                let cut_left = plan.truncation == Truncation::Left && !e.get_overflowing().is_empty();
                let skip = if cut_left { 0 } else { plan.skip };
                Item::new(e.get_ids().to_vec(), skip, Vec::new(), &request, index)
            })
            .collect();
        Ok(Call {
            request,
            items,
            expand,
            tokens,
            dim: plan.dim,
            normalize: plan.normalize,
            chunked: None,
            max_wait: None,
        })
    }

    /// A chunking call: each text's whole token ids cut into windows (see [`Chunking`]), a queue
    /// item per window, or per pass of the model for late chunking.
    fn prepare_chunks(
        &self,
        unique: &[&str],
        expand: Option<Vec<usize>>,
        plan: &CallPlan,
        chunking: &Chunking,
    ) -> Result<Call> {
        let max = self.info.max_length;
        let window = chunking.window.unwrap_or(max);
        if window > max {
            return Err(EmbedError::invalid(
                "chunking.window",
                format!("{window} is longer than the {max} tokens the model reads; give at most {max}"),
            ));
        }
        if chunking.late && self.io.pooled {
            return Err(EmbedError::invalid(
                "chunking.late",
                format!(
                    "late chunking pools token vectors, but the model's output {:?} is one vector per text",
                    self.info.output
                ),
            ));
        }
        let fail =
            |e: tokenizers::Error| EmbedError::inference_because(InferenceKind::Tokenizer, "tokenization failed", e);
        // Each queue item to be: its ids, the spans it pools (late chunking), its first row.
        struct Piece(Vec<u32>, Vec<(usize, usize)>, usize);
        let mut pieces: Vec<Piece> = Vec::new();
        let mut chunked = Vec::with_capacity(unique.len());
        let mut tokens = Vec::with_capacity(unique.len());
        let mut rows = 0;
        for text in unique {
            let prompted = with_prompt(plan.prompt, text);
            let enc = self.whole_tokenizer().encode(prompted.as_ref(), true).map_err(fail)?;
            let (ids, mask, offsets) = (enc.get_ids(), enc.get_special_tokens_mask(), enc.get_offsets());
            let lead = mask.iter().take_while(|&&m| m == 1).count();
            let trail = mask[lead..].iter().rev().take_while(|&&m| m == 1).count();
            let end = ids.len() - trail;
            let prompt_bytes = plan.prompt.len();
            let head = lead + (lead..end).take_while(|&i| offsets[i].0 < prompt_bytes).count();
            let capacity = window.saturating_sub(head + trail);
            if capacity <= chunking.overlap {
                return Err(EmbedError::invalid(
                    "chunking.window",
                    format!(
                        "a window of {window} tokens leaves {capacity} for a text's own tokens after the prompt and special tokens, no more than the overlap of {}: give a longer window or a shorter overlap",
                        chunking.overlap
                    ),
                ));
            }
            let content = &ids[head..end];
            let cuts = windows(&enc.get_word_ids()[head..end], capacity, chunking.overlap);
            let span = |&(a, b): &(usize, usize)| Chunk {
                start: offsets[head + a].0.saturating_sub(prompt_bytes),
                end: offsets[head + b - 1].1.saturating_sub(prompt_bytes),
                tokens: b - a,
            };
            let piece = |from: usize, to: usize| -> Vec<u32> {
                ids[..head].iter().chain(&content[from..to]).chain(&ids[end..]).copied().collect()
            };
            let first = rows;
            let before = pieces.len();
            match cuts.len() {
                // No tokens of its own, or few enough for one window: the text as it is.
                0 | 1 => pieces.push(Piece(ids.to_vec(), Vec::new(), rows)),
                _ if !chunking.late => {
                    for (k, &(a, b)) in cuts.iter().enumerate() {
                        pieces.push(Piece(piece(a, b), Vec::new(), rows + k));
                    }
                }
                _ => {
                    for (from, to, range) in late_passes(&cuts, content.len(), max - head - trail, chunking.overlap) {
                        let spans =
                            cuts[range.clone()].iter().map(|&(a, b)| (head + a - from, head + b - from)).collect();
                        pieces.push(Piece(piece(from, to), spans, rows + range.start));
                    }
                }
            }
            let spans: Vec<Chunk> = if cuts.is_empty() {
                vec![Chunk { start: 0, end: text.len(), tokens: 0 }]
            } else {
                cuts.iter().map(span).collect()
            };
            rows += spans.len();
            let read: usize = pieces[before..].iter().map(|p| p.0.len()).sum();
            tokens.push(TextTokens { count: u32::try_from(read).unwrap_or(u32::MAX), truncated: false });
            chunked.push((first, spans));
        }
        let request = Request::new(rows, self.info.model_dimension);
        let items = pieces
            .into_iter()
            .map(|Piece(ids, spans, index)| Item::new(ids, plan.skip, spans, &request, index))
            .collect();
        Ok(Call {
            request,
            items,
            expand,
            tokens,
            dim: plan.dim,
            normalize: plan.normalize,
            chunked: Some(Chunked { texts: chunked, document: chunking.document }),
            max_wait: None,
        })
    }

    /// The error for text `index` of a call that refuses truncation, with its token count.
    fn too_long(&self, index: usize, text: &str, prompt: &str) -> EmbedError {
        let max_length = self.info.max_length;
        let counted = (text.len() <= COUNT_WHOLE_BYTES)
            .then(|| self.whole_tokenizer().encode(with_prompt(prompt, text).as_ref(), true).ok().map(|e| e.len()))
            .flatten();
        EmbedError::TooLong { index, tokens: counted.unwrap_or(max_length), exact: counted.is_some(), max_length }
    }

    /// The call's embeddings from its request's rows, in the call's order, duplicates expanded,
    /// each cut to the call's width and normalised if it asks.
    pub(crate) fn finish(&self, mut call: Call, rows: Vec<f32>) -> Embeddings {
        let (width, dim) = (self.info.model_dimension, call.dim);
        let chunked = call.chunked.take();
        // Text i's row among the unique texts (the same when the call had no duplicates).
        let texts = call.expand.as_ref().map_or(call.tokens.len(), Vec::len);
        let unique = |i: usize| call.expand.as_ref().map_or(i, |slot| slot[i]);
        self.counters.texts.fetch_add(texts as u64, Ordering::Relaxed);
        let tokens = (0..texts).map(|i| call.tokens[unique(i)]).collect();
        let finish_row = |out: &mut Vec<f32>, raw: &[f32]| {
            let start = out.len();
            out.extend_from_slice(&raw[..dim]);
            if call.normalize {
                normalize(&mut out[start..]);
            }
        };
        if let Some(chunked) = chunked {
            let mut chunks = ChunkRows::default();
            let mut data = Vec::with_capacity(texts * dim);
            for u in (0..texts).map(unique) {
                let (first, spans) = &chunked.texts[u];
                let from = chunks.spans.len();
                for (j, span) in spans.iter().enumerate() {
                    let row = first + j;
                    finish_row(&mut chunks.data, &rows[row * width..(row + 1) * width]);
                    chunks.spans.push(*span);
                }
                chunks.ranges.push(from..chunks.spans.len());
                let vectors = &chunks.data[from * dim..];
                if spans.len() == 1 {
                    data.extend_from_slice(vectors);
                } else {
                    finish_row(&mut data, &combine(vectors, dim, spans, chunked.document));
                }
            }
            return Embeddings::from_whole_rows(data, dim, tokens).with_chunks(chunks);
        }
        let data = if call.expand.is_none() && dim == width {
            let mut rows = rows;
            if call.normalize {
                rows.chunks_exact_mut(width.max(1)).for_each(normalize);
            }
            rows
        } else {
            let mut data = Vec::with_capacity(texts * dim);
            for u in (0..texts).map(unique) {
                finish_row(&mut data, &rows[u * width..(u + 1) * width]);
            }
            data
        };
        Embeddings::from_whole_rows(data, dim, tokens)
    }

    /// Runs a batch of queue items on `slot` and hands each row to its request, after the
    /// batch is counted in the stats. When the batch fails, each text runs again alone, so one
    /// text (one caller's bad input) fails only its own call; a panic while running fails the
    /// batch's texts, and a panic anywhere else fails them as they drop (see `Item`).
    pub(crate) fn run_items(&self, slot: &Mutex<Slot>, items: &mut [Item]) {
        let run = |batch: &[Item]| -> Result<Vec<f32>> {
            let rows: Vec<Row<'_>> = batch.iter().map(|i| Row { ids: &i.ids, skip: i.skip, spans: &i.spans }).collect();
            let mut out = Vec::with_capacity(batch.len() * self.info.model_dimension);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::fault::hit(crate::fault::Stage::Run);
                self.run_batch(slot, &rows, |_, v| out.extend_from_slice(v))
            }))
            .unwrap_or_else(|_| {
                Err(EmbedError::inference(InferenceKind::WorkerFailed, "a session worker panicked running this batch"))
            })?;
            Ok(out)
        };
        // The batch's vectors in order: each item's rows, one after another.
        let hand_over = |batch: &mut [Item], rows: Vec<f32>| {
            crate::fault::hit(crate::fault::Stage::HandOver);
            let dim = rows.len() / batch.iter().map(Item::rows).sum::<usize>().max(1);
            let mut at = 0;
            for item in batch {
                let n = item.rows() * dim;
                item.finish(&rows[at..at + n]);
                at += n;
            }
        };
        match run(items) {
            Ok(rows) => hand_over(items, rows),
            Err(e) if items.len() == 1 => items[0].fail(e),
            Err(e) => {
                tracing::warn!("a batch of {} texts failed ({}); running each alone", items.len(), error_chain(&e));
                for k in 0..items.len() {
                    match run(&items[k..=k]) {
                        Ok(rows) => hand_over(&mut items[k..=k], rows),
                        Err(e) => items[k].fail(e),
                    }
                }
            }
        }
    }

    /// Token ids of each text with the call's prompt, truncated to the model's length on the side
    /// the call says (`Refuse` truncates on the right; the caller refuses what was cut). A very
    /// long text is tokenized from the part that is kept, cut at whitespace (a 10 MB line would
    /// otherwise cost seconds and a gigabyte); when that part yields fewer tokens than the limit,
    /// the whole text is tokenized instead, so the ids are always those of the whole text.
    fn tokenize(&self, texts: &[&str], plan: &CallPlan) -> Result<Vec<tokenizers::Encoding>> {
        let fail =
            |e: tokenizers::Error| EmbedError::inference_because(InferenceKind::Tokenizer, "tokenization failed", e);
        let max_length = self.info.max_length;
        let prompt = plan.prompt;
        let (tokenizer, part): (&Tokenizer, fn(&str, usize) -> &str) = match plan.truncation {
            Truncation::Left => (self.left_tokenizer(), suffix_for_tokens),
            Truncation::Right | Truncation::Refuse => (&self.tokenizer, prefix_for_tokens),
        };
        let parts: Vec<&str> = texts.iter().map(|t| part(t, max_length)).collect();
        let inputs: Vec<Cow<'_, str>> = parts.iter().map(|t| with_prompt(prompt, t)).collect();
        // A few texts are tokenized right here: the tokenizer's parallel batch would wake a thread
        // pool for microseconds of work, and many concurrent callers would fight over it.
        let mut encodings = if inputs.len() <= SERIAL_TOKENIZE {
            inputs.iter().map(|t| tokenizer.encode(t.as_ref(), true)).collect::<tokenizers::Result<Vec<_>>>()
        } else {
            tokenizer.encode_batch(inputs.iter().map(|t| t.as_ref()).collect(), true)
        }
        .map_err(fail)?;
        for (i, enc) in encodings.iter_mut().enumerate() {
            if parts[i].len() < texts[i].len() && enc.len() < max_length {
                *enc = tokenizer.encode(with_prompt(prompt, texts[i]).as_ref(), true).map_err(fail)?;
            }
        }
        Ok(encodings)
    }

    /// Every token of `text` with the call's prompt, not cut to the model's length (TEI's
    /// `/tokenize`), special tokens included when `special`. Offsets are bytes of the prompted text.
    pub(crate) fn tokens(&self, text: &str, options: &CallOptions, special: bool) -> Result<Vec<Token>> {
        let plan = self.plan_call(options)?;
        let prompted = with_prompt(plan.prompt, text);
        let enc = self
            .whole_tokenizer()
            .encode(prompted.as_ref(), special)
            .map_err(|e| EmbedError::inference_because(InferenceKind::Tokenizer, "tokenization failed", e))?;
        let mask = enc.get_special_tokens_mask();
        Ok(enc
            .get_ids()
            .iter()
            .zip(enc.get_tokens())
            .zip(enc.get_offsets())
            .enumerate()
            .map(|(k, ((&id, token), &(start, stop)))| {
                let special = mask.get(k) == Some(&1);
                let text = match prompted.get(start..stop) {
                    Some(t) if !special => t.to_owned(),
                    _ => token.clone(),
                };
                Token { id, text, special, start, stop }
            })
            .collect())
    }

    /// The model's token vectors for one text (TEI's `/embed_all`): `tokens x width`, raw, with
    /// the call's prompt and truncation. Runs on the first session, outside the queue.
    pub(crate) fn token_vectors(&self, text: &str, options: &CallOptions) -> Result<(Vec<f32>, usize)> {
        if self.io.pooled {
            return Err(EmbedError::invalid(
                "output_name",
                format!("the model's output {:?} is one vector per text, so it has no token vectors", self.info.output),
            ));
        }
        let plan = self.plan_call(options)?;
        let enc = self.tokenize(&[text], &plan)?.remove(0);
        if plan.truncation == Truncation::Refuse && !enc.get_overflowing().is_empty() {
            return Err(self.too_long(0, text, plan.prompt));
        }
        let rows = [Row { ids: enc.get_ids(), skip: 0, spans: &[] }];
        let mut out = Vec::new();
        let width = self.run_on(&self.session, &rows, |session| {
            out.clear();
            forward(session, &self.io, self.settings, &rows, &self.counters.ort_nanos, |_, v, _| {
                out.extend_from_slice(v)
            })
        })?;
        Ok((out, width))
    }

    /// The text of token ids, special tokens left out when `skip_special`.
    pub(crate) fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let vocab = self.tokenizer.get_vocab_size(true);
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(EmbedError::invalid(
                "ids",
                format!("token id {id} is not in the model's vocabulary of {vocab} tokens"),
            ));
        }
        self.tokenizer
            .decode(ids, skip_special)
            .map_err(|e| EmbedError::inference_because(InferenceKind::Tokenizer, "decoding failed", e))
    }

    /// The tokenizer that does not truncate, made on first use.
    fn whole_tokenizer(&self) -> &Tokenizer {
        self.whole_tokenizer.get_or_init(|| {
            let mut t = self.tokenizer.clone();
            let _ = t.with_truncation(None);
            t
        })
    }

    /// The tokenizer that truncates on the left, made on first use.
    fn left_tokenizer(&self) -> &Tokenizer {
        self.left_tokenizer.get_or_init(|| {
            let mut t = self.tokenizer.clone();
            let params = TruncationParams {
                max_length: self.info.max_length,
                direction: TruncationDirection::Left,
                ..TruncationParams::default()
            };
            // Only a stride of max_length or more is refused, and the stride is 0.
            let _ = t.with_truncation(Some(params));
            t
        })
    }

    /// The sessions beyond the first, built on first use with the plan that is really running
    /// (CPU only, if the first session fell back). A failure to build them leaves one session.
    pub(crate) fn extra_sessions(&self) -> &[Mutex<Slot>] {
        self.extra_sessions.get_or_init(|| {
            let plan = self.running_plan();
            let cfg = self.pooled_config();
            let mut extra = Vec::new();
            for _ in 1..self.sessions {
                crate::fault::hit(crate::fault::Stage::Build);
                let resident = resident_bytes();
                match session::build(&self.runtime, &plan, &cfg) {
                    Ok((session, r)) => {
                        if let Some(grew) = growth_since(resident) {
                            self.session_growth.lock().unwrap_or_else(PoisonError::into_inner).push(grew);
                        }
                        extra.push(Mutex::new(Slot { session, vendor: r.gpu_vendor }));
                    }
                    Err(e) => {
                        tracing::warn!(
                            "running with {} session(s): another could not be built: {}",
                            extra.len() + 1,
                            error_chain(&e)
                        );
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
            weights: self.weights.as_ref(),
        }
    }

    /// How many sessions embed in parallel (on a GPU, one).
    pub(crate) fn sessions(&self) -> usize {
        self.sessions
    }

    /// Runs one batch on `slot` (locked for the run only). When a GPU session fails, and the
    /// device was not forced, the slot's session is replaced by a CPU session and the same batch
    /// runs again: `emit` sees each text once, from the run that succeeded.
    pub(crate) fn run_batch(
        &self,
        slot: &Mutex<Slot>,
        rows: &[Row<'_>],
        mut emit: impl FnMut(usize, &[f32]),
    ) -> Result<usize> {
        let (settings, nanos) = (self.settings, &self.counters.ort_nanos);
        self.run_on(slot, rows, |session| run_and_pool(session, &self.io, settings, rows, nanos, &mut emit))
    }

    /// Runs `run` on the slot's session, and when a GPU session fails (and the device was not
    /// forced), replaces it with a CPU session under the same lock and runs again there; then
    /// counts the batch of `rows`. Pooled rows and token vectors both go this way.
    fn run_on(
        &self,
        slot: &Mutex<Slot>,
        rows: &[Row<'_>],
        mut run: impl FnMut(&mut Session) -> Result<usize>,
    ) -> Result<usize> {
        let mut slot = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let dim = match run(&mut slot.session) {
            Ok(dim) => dim,
            Err(e) if slot.vendor != Vendor::Cpu => {
                let e = error_chain(&e);
                let active = &self.report.active_provider;
                let hint = session::run_time_hint(&self.report.registrations, active);
                let why = format!("running a batch on {active} failed: {e}{hint}");
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
                run(&mut slot.session)?
            }
            Err(e) => return Err(e),
        };
        let c = &self.counters;
        let longest = rows.iter().map(|r| r.ids.len()).max().unwrap_or(0).max(1);
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.count_batch(rows.len());
        c.tokens.fetch_add(rows.iter().map(|r| r.ids.len() as u64).sum(), Ordering::Relaxed);
        c.padded_tokens.fetch_add((rows.len() * longest) as u64, Ordering::Relaxed);
        Ok(dim)
    }

    /// A CPU session like the others, to replace a GPU session that failed at run time.
    fn cpu_session(&self) -> Result<Session> {
        Ok(session::build(&self.runtime, &self.cpu_plan(), &self.pooled_config())?.0)
    }

    /// Which provider ran each node, from ONNX Runtime's profiling output of one run of a fresh
    /// session built the same way. Costs a session build; call it on demand (`doctor`).
    pub(crate) fn placement(&self) -> Placement {
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
            let row = Row { ids: &ids, skip: 0, spans: &[] };
            run_and_pool(&mut session, &self.io, self.settings, &[row], &AtomicU64::new(0), |_, _| {})?;
            let file = session
                .end_profiling()
                .map_err(|e| EmbedError::inference_because(InferenceKind::Runtime, "ending the profile", e))?;
            let text = std::fs::read_to_string(&file)
                .map_err(|e| EmbedError::inference_because(InferenceKind::Runtime, &file, e))?;
            Ok(parse_profile(&text))
        })();
        result.unwrap_or_else(|e| Placement::Unknown { reason: error_chain(&e) })
    }
}
