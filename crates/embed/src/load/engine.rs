//! The engine behind an [`Embedder`](crate::Embedder), and loading it: probe, plan, ONNX Runtime,
//! sessions, checks. The callers and the workers share it; a call's stages live in the
//! modules a text meets in order: `prepare` (plan, dedup, tokenize), `scheduler` (the queue),
//! `worker` (the run with its GPU-to-CPU fallback), `graph_io` (feed, run, widen, pool), and back
//! in `prepare` (each call's own cut and normalisation).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use nornir_ep_select::{Plan, Planned, Provider, Vendor};
use ort::session::Session;

use crate::call::tokenize::ModelTokenizer;
use crate::error::{EmbedError, Result, error_chain};
use crate::forward::graph_io::{GraphIo, Row, RowSettings, graph_io, run_and_pool};
use crate::kinds::dense::DenseHead;
use crate::load::dense::load_head;
use crate::load::graph_scan::one_text_per_run;
use crate::load::kind;
use crate::load::multi_vector::{SparseHead, TokenRules};
use crate::load::plan::plan_with;
use crate::load::prompt::choose_prompt;
use crate::load::runtime::{OrtRuntime, list_devices, load_runtime};
use crate::load::session::{self, SessionConfig, Slot, growth_since, resident_bytes};
use crate::report::values::{ModelFolder, ModelInfo, SessionReport};
use crate::schedule::queue::BatchPolicy;
use crate::schedule::scheduler::Scheduler;
use crate::schedule::stats::{Counters, EmbedStats};
use nornir_options::ModelKind;
use nornir_options::Pooling;
use nornir_options::{EmbedderOptions, QueueFull, default_cpu_workers, intra_threads};

/// Everything the callers and the workers share. On the CPU every worker runs the one
/// session; on a GPU worker k runs session k (see `slot_for`).
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) session: RwLock<Slot>,
    /// More sessions like the first for the other workers, built on first need; only on a GPU,
    /// whose sessions run one batch at a time.
    pub(crate) extra_sessions: std::sync::OnceLock<Vec<RwLock<Slot>>>,
    /// Set once a GPU session failed at run time and was replaced by a CPU session.
    pub(crate) run_fallback: Mutex<Option<String>>,
    /// Workers running batches side by side (`EmbedderOptions::workers`).
    pub(crate) workers: usize,
    /// Resident memory growth while each session was built, in bytes (see `Memory`).
    pub(crate) session_growth: Mutex<Vec<u64>>,
    pub(crate) tokenizer: ModelTokenizer,
    /// The pooling config's `include_prompt`: false leaves a call's prompt tokens out.
    pub(crate) include_prompt: bool,
    pub(crate) calibrated: Mutex<std::collections::BTreeMap<(usize, bool), Arc<nornir_options::Ranges>>>,
    /// `EmbedderOptions::call`, what a call gets for the options it leaves `None`: its width,
    /// precision and ranges, long-text choice (see `long_choice`) and `max_wait` are read from
    /// here; its prompt and normalisation were resolved with the folder into `info` at load.
    pub(crate) call_defaults: nornir_options::CallOptions,
    pub(crate) io: GraphIo,
    pub(crate) settings: RowSettings,
    /// The folder's Dense modules, applied to each pooled row (empty: none, or the graph's
    /// pooled output already holds them; see `check_with_a_first_run`).
    pub(crate) head: DenseHead,
    /// How the model makes token vectors (a ColBERT model, BGE-M3); `None`: it makes none.
    pub(crate) token_rules: Option<TokenRules>,
    /// BGE-M3's term weights from the same pass.
    pub(crate) sparse_head: Option<SparseHead>,
    pub(crate) info: ModelInfo,
    pub(crate) report: SessionReport,
    pub(crate) runtime: Arc<OrtRuntime>,
    pub(crate) intra_threads: usize,
    pub(crate) counters: Counters,
    pub(crate) scheduler: Scheduler,
    pub(crate) queue_full: QueueFull,
}

impl Engine {
    /// Loads the model folder `dir`: probe -> plan -> ONNX Runtime -> session -> checks.
    /// Every mismatch between the folder and the graph is an error here, not at the first embed.
    pub(crate) fn new(dir: &Path, options: &EmbedderOptions) -> Result<Self> {
        options.validate()?;
        let mut folder = ModelFolder::open(dir, options.model_file.as_deref())?;
        let head = load_head(&folder.dir, &folder.dense)?;
        let prompt = choose_prompt(&folder, options)?;
        let tokenizer = ModelTokenizer::load(&folder, options.max_length)?;
        let token_rules = match &folder.multi_vector {
            Some(spec) => Some(TokenRules::resolve(&folder, spec, &tokenizer, folder.hidden_size)?),
            None => None,
        };
        let sparse_head = match (&folder.sparse_head, folder.hidden_size) {
            (Some(file), Some(hidden)) => Some(SparseHead::load(&folder, file, &tokenizer, hidden)?),
            (Some(file), None) => {
                return Err(EmbedError::model(&folder.dir, format!("{file} needs config.json's hidden_size")));
            }
            (None, _) => None,
        };
        let (max_length, left_padding) = (tokenizer.max_length(), tokenizer.left_padding());
        let cpu_only = folder.quantization.as_ref().and_then(|q| q.cpu_only());
        let first = plan_with(options.device, cpu_only.clone(), &[], &options.providers);
        if let Some(why) = &first.refusal {
            return Err(EmbedError::DeviceRefused { reason: why.clone() });
        }
        let runtime = load_runtime(&first, options.ort_library.as_deref())?;
        // ONNX Runtime's device list (with the plugins registered) joins the plan.
        let devices = list_devices(&runtime, &options.ep_libraries);
        let plan = plan_with(options.device, cpu_only, &devices.devices, &options.providers);
        let threads = options.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        let default_workers =
            if plan.providers.iter().all(Planned::is_builtin_cpu) { default_cpu_workers(threads) } else { 1 };
        let cpu_workers = options.workers.unwrap_or(default_workers);
        let intra_threads = intra_threads(threads, cpu_workers);
        let resident = resident_bytes();
        // ONNX Runtime says what is wrong with a file that cannot be read.
        let one_text_per_run = std::fs::read(&folder.model_file).ok().as_deref().and_then(one_text_per_run);
        let cfg = SessionConfig { model: &folder.model_file, intra_threads, profile_to: None };
        let (session, report) = session::build(&runtime, &plan, &cfg)?;
        let session_growth = Mutex::new(growth_since(resident).into_iter().collect());
        let workers = if report.on_builtin_cpu() { cpu_workers } else { options.workers.unwrap_or(1) };
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
        let output = session.outputs()[io.output].name().to_owned();
        folder.kind = kind::with_graph(std::mem::take(&mut folder.kind), &output, io.pooled)
            .map_err(|e| EmbedError::model(&folder.dir, e))?;
        if !matches!(folder.kind.kind, ModelKind::Embedder | ModelKind::MultiVector)
            && options.call.dimensions.is_some()
        {
            return Err(EmbedError::invalid(
                "dimensions",
                format!("cuts dense vectors; this model is a {}", folder.kind.kind),
            ));
        }
        if folder.decoder
            && folder.kind.kind == ModelKind::Embedder
            && options.pooling.is_none()
            && folder.pooling.is_none()
        {
            return Err(EmbedError::model(
                &folder.dir,
                "it is a decoder, whose embedder needs a pooling rule, and it has none: add 1_Pooling/config.json with \
                 \"pooling_mode_lasttoken\": true (as Qwen3-Embedding ships it), or choose the pooling (--pooling last)",
            ));
        }
        let pooling =
            options.pooling.or(folder.kind.pooling).or(folder.pooling.map(|p| p.mode)).unwrap_or(Pooling::Mean);
        let include_prompt = folder.pooling.is_none_or(|p| p.include_prompt);
        let skip = if include_prompt || prompt.text.is_empty() {
            0
        } else {
            tokenizer
                .prompt_token_count(&prompt.text)
                .map_err(|e| EmbedError::tokenizer_because(&folder.tokenizer_file, e))?
        };
        let (normalize, normalize_reason) = match options.call.normalize {
            Some(n) => (n, "chosen by the caller".to_owned()),
            None => {
                let (n, why) = folder.normalize_default();
                (n, why.to_owned())
            }
        };
        let settings = RowSettings { pooling, left_padding };
        let info = ModelInfo {
            inputs: session.inputs().iter().map(|i| i.name().to_owned()).collect(),
            output,
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
            dense_reason: None,
            folder,
        };
        let policy = if report.gpu_vendor == Vendor::Cpu { BatchPolicy::CPU } else { BatchPolicy::GPU };
        let info_alone = info.one_text_per_run.is_some();
        let kind = info.folder.kind.kind;
        let vocab = tokenizer.truncating().get_vocab_size(true);
        let mut engine = Self {
            session: RwLock::new(Slot::new(session, &report)),
            extra_sessions: std::sync::OnceLock::new(),
            run_fallback: Mutex::new(None),
            workers,
            session_growth,
            tokenizer,
            include_prompt,
            calibrated: Mutex::default(),
            call_defaults: options.call.clone(),
            io,
            settings,
            head: DenseHead::default(),
            token_rules,
            sparse_head,
            info,
            report,
            runtime,
            intra_threads,
            counters: Counters::default(),
            scheduler: Scheduler::new(
                workers,
                if info_alone { 1 } else { kind::token_budget(kind, vocab, options.token_budget) },
                policy,
                options.max_queued_texts,
                options.batch_wait,
            ),
            queue_full: options.queue_full,
        };
        engine.check_with_a_first_run(head)?;
        tracing::info!(provider = %engine.report.active_provider, vendor = %engine.report.gpu_vendor, "embedder ready");
        Ok(engine)
    }

    /// Runs one short text: finds the output width, checks it against the configs, and makes a
    /// graph that fails on real input (wrong vocabulary, wrong inputs) fail at load time. Then
    /// the Dense modules (`head`) join the engine, unless the graph's pooled output holds them.
    pub(crate) fn check_with_a_first_run(&mut self, head: DenseHead) -> Result<()> {
        let vocab = self.tokenizer.truncating().get_vocab_size(true);
        let probe_text = "nornir checks the model";
        let enc = self
            .tokenizer
            .truncating()
            .encode(probe_text, true)
            .map_err(|e| EmbedError::tokenizer_because(&self.info.folder.tokenizer_file, e))?;
        // The vocabulary's last id goes in too: a model with a smaller embedding table fails here.
        let mut ids = enc.get_ids().to_vec();
        let last = u32::try_from(vocab.saturating_sub(1)).unwrap_or(u32::MAX);
        ids.insert(ids.len().saturating_sub(1), last);
        let dim = self.run_batch(&self.session, &[Row::text(&ids)], |_, _| {}).map_err(|e| match e {
            EmbedError::ForcedDeviceFailed { .. } => e,
            e => EmbedError::Model {
                dir: self.info.folder.dir.clone(),
                reason: format!(
                    "the model fails on a first test text; is tokenizer.json ({vocab} tokens) the model's own?"
                ),
                source: Some(e.into()),
            },
        })?;
        let (dim, dense_reason) = self.place_dense(head, dim)?;
        self.info.dense_reason = dense_reason;
        let folder = &self.info.folder;
        let expected = match folder.kind.kind {
            ModelKind::Embedder | ModelKind::MultiVector if !self.head.is_empty() => {
                self.head.out_features().map(|o| (o, "last Dense module's out_features"))
            }
            ModelKind::Embedder | ModelKind::MultiVector if !folder.dense.is_empty() => {
                folder.dense.last().map(|d| (d.out_features, "last Dense module's out_features"))
            }
            ModelKind::Embedder | ModelKind::MultiVector => folder.hidden_size.map(|h| (h, "hidden size")),
            ModelKind::SparseEncoder => folder.vocab_size.map(|v| (v, "vocabulary size")),
            ModelKind::CrossEncoder => Some((folder.kind.labels.len(), "number of labels")),
        };
        if let Some((want, what)) = expected
            && want != dim
        {
            return Err(EmbedError::model(
                &folder.dir,
                format!("the model's output has width {dim} but its config says {what} {want}"),
            ));
        }
        if let Some(d) = self.call_defaults.dimensions
            && d > dim
        {
            return Err(EmbedError::invalid(
                "dimensions",
                format!("{d} is wider than the model's {dim}-dimensional vectors; give at most {dim}"),
            ));
        }
        self.info.model_dimension = dim;
        self.info.dimension = self.call_defaults.dimensions.unwrap_or(dim);
        if self.info.folder.kind.kind != ModelKind::Embedder && self.call_defaults.chunking.is_some() {
            return Err(EmbedError::invalid(
                "chunking",
                format!(
                    "makes an embedder's dense document vectors, and this model is {}: truncate or refuse long texts",
                    self.info.folder.kind.kind.with_article()
                ),
            ));
        }
        // The embedder's own int8 ranges must fit the vectors its calls get by default.
        if let Some(r) = &self.call_defaults.ranges
            && self.info.folder.kind.kind == ModelKind::Embedder
        {
            r.check_width(self.info.dimension)?;
        }
        self.reset_stats();
        Ok(())
    }

    /// Where the Dense modules apply, given the width `raw` of the graph's first output: after
    /// nornir pools, or (a pooled output already as wide as their output and not their input:
    /// an export of the whole sentence-transformers model) nowhere. Returns the rows' width.
    fn place_dense(&mut self, head: DenseHead, raw: usize) -> Result<(usize, Option<String>)> {
        let (Some(takes), Some(gives)) = (head.in_features(), head.out_features()) else { return Ok((raw, None)) };
        let n = self.info.folder.dense.len();
        let output = &self.info.output;
        if self.io.pooled && raw == gives && raw != takes {
            return Ok((raw, Some(format!("already in the graph's pooled output {output:?} ({raw} wide)"))));
        }
        if self.io.pooled && takes == gives {
            return Err(EmbedError::model(
                &self.info.folder.dir,
                format!(
                    "the graph's output {output:?} is pooled and the Dense modules take and give {raw}, so nornir cannot \
                     tell whether the graph applied them: choose its token output with `output_name`"
                ),
            ));
        }
        if raw != takes {
            return Err(EmbedError::model(
                &self.info.folder.dir,
                format!("the pooled vectors are {raw} wide but the first Dense module takes in_features {takes}"),
            ));
        }
        self.head = head;
        Ok((gives, Some(format!("{n} Dense module(s) applied by nornir after pooling: {takes} -> {gives}"))))
    }

    /// A call's truncation and chunking: its own when it makes either choice, else the
    /// embedder's (one long-text choice replaces the other whole: a call that says "refuse" is
    /// not chunked by a chunking default).
    pub(crate) fn long_choice(
        &self,
        options: &nornir_options::CallOptions,
    ) -> (Option<nornir_options::Truncation>, Option<nornir_options::Chunking>) {
        if options.truncation.is_some() || options.chunking.is_some() {
            (options.truncation, options.chunking)
        } else {
            (self.call_defaults.truncation, self.call_defaults.chunking)
        }
    }

    /// A call's `max_wait`, else the embedder's.
    pub(crate) fn max_wait(&self, options: &nornir_options::CallOptions) -> Option<std::time::Duration> {
        options.max_wait.or(self.call_defaults.max_wait)
    }

    /// An error unless the model is of kind `wanted` (`call` names the refused call).
    pub(crate) fn expect_kind(&self, wanted: ModelKind, call: &'static str) -> Result<()> {
        let kind = self.info.folder.kind.kind;
        if kind == wanted {
            return Ok(());
        }
        Err(EmbedError::WrongKind { call, wanted, kind })
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
        r.memory.workers_per_session = if self.workers_share_session() { self.workers } else { 1 };
        r.memory.session_growth_bytes = self.session_growth.lock().unwrap_or_else(PoisonError::into_inner).clone();
        r.memory.resident_bytes = resident_bytes();
        r.memory.peak_resident_bytes = session::peak_resident_bytes();
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
    pub(crate) fn run_fallback(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.run_fallback.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the model really runs, typed: `gpu_vendor()` as a [`Vendor`].
    pub(crate) fn vendor(&self) -> Vendor {
        let fell_back = self.run_fallback().is_some();
        if fell_back { Vendor::Cpu } else { self.report.gpu_vendor }
    }

    /// True when an AMD provider is running the model.
    pub(crate) fn rocm_ready(&self) -> bool {
        self.vendor() == Vendor::Amd
    }

    /// The first session was built on ONNX Runtime's CPU provider alone, so every worker runs
    /// it; otherwise (a GPU, a plugin provider) each worker has a session of its own, which
    /// falls back to the CPU on its own.
    fn workers_share_session(&self) -> bool {
        self.report.on_builtin_cpu()
    }

    /// The worker `k` runs: on the CPU the first, for every worker at once; on a GPU
    /// session `k`, or the first when the others could not be built.
    pub(crate) fn slot_for(&self, k: usize) -> &RwLock<Slot> {
        if k == 0 || self.workers_share_session() {
            return &self.session;
        }
        self.extra_sessions().get(k - 1).unwrap_or(&self.session)
    }

    /// The sessions beyond the first, for the other workers on a GPU, built on first use with
    /// the plan that is really running. None on the CPU, where the workers share the first. A
    /// failure to build them leaves one session.
    pub(crate) fn extra_sessions(&self) -> &[RwLock<Slot>] {
        self.extra_sessions.get_or_init(|| {
            if self.workers_share_session() {
                return Vec::new();
            }
            let plan = self.running_plan();
            let cfg = self.pooled_config();
            let mut extra = Vec::new();
            for _ in 1..self.workers {
                crate::forward::fault::hit(crate::forward::fault::Stage::Build);
                let resident = resident_bytes();
                match session::build(&self.runtime, &plan, &cfg) {
                    Ok((session, r)) => {
                        if let Some(grew) = growth_since(resident) {
                            self.session_growth.lock().unwrap_or_else(PoisonError::into_inner).push(grew);
                        }
                        extra.push(RwLock::new(Slot::new(session, &r)));
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
    pub(crate) fn running_plan(&self) -> Plan {
        let on_cpu = self.run_fallback().is_some() || self.workers_share_session();
        if on_cpu { self.cpu_plan() } else { self.report.plan.clone() }
    }

    /// The plan without its GPU providers: what a CPU session is built from.
    pub(crate) fn cpu_plan(&self) -> Plan {
        let mut plan = self.report.plan.clone();
        plan.providers.retain(Planned::is_builtin_cpu);
        plan.forced = false;
        plan
    }

    /// How every session of the model is built.
    pub(crate) fn pooled_config(&self) -> SessionConfig<'_> {
        SessionConfig { model: &self.info.folder.model_file, intra_threads: self.intra_threads, profile_to: None }
    }

    /// A CPU session like the others, to replace a GPU session that failed at run time.
    pub(crate) fn cpu_session(&self) -> Result<Session> {
        Ok(session::build(&self.runtime, &self.cpu_plan(), &self.pooled_config())?.0)
    }

    /// Runs one batch on `slot`. When a GPU session fails, and the device was not forced, the
    /// slot's session is replaced by a CPU session and the same batch runs again: `emit` sees
    /// each text once, from the run that succeeded.
    pub(crate) fn run_batch(
        &self,
        slot: &RwLock<Slot>,
        rows: &[Row<'_>],
        mut emit: impl FnMut(usize, &[f32]),
    ) -> Result<usize> {
        let (settings, nanos) = (self.settings, &self.counters.ort_nanos);
        if self.head.is_empty() {
            return self
                .run_on(slot, rows, |session| run_and_pool(session, &self.io, settings, rows, nanos, &mut emit));
        }
        // Pooled rows go through the Dense modules before anything else sees them; their width
        // was checked against the graph's at load. Raw token rows do not.
        let mut scratch = Default::default();
        let mut apply =
            |k: usize, v: &[f32]| if rows[k].raw { emit(k, v) } else { emit(k, self.head.apply(v, &mut scratch)) };
        self.run_on(slot, rows, |session| run_and_pool(session, &self.io, settings, rows, nanos, &mut apply))?;
        Ok(self.head.out_features().unwrap_or_default())
    }

    /// Runs `run` on the slot's session, then counts the batch of `rows`. Pooled rows and token
    /// vectors both go this way. A CPU session runs under the read lock, beside the other
    /// workers' runs; a GPU session under the write lock (see `run_exclusive`).
    pub(crate) fn run_on(
        &self,
        slot: &RwLock<Slot>,
        rows: &[Row<'_>],
        mut run: impl FnMut(&Session) -> Result<usize>,
    ) -> Result<usize> {
        let shared = slot.read().unwrap_or_else(PoisonError::into_inner);
        let dim = if shared.builtin_cpu {
            run(&shared.session)?
        } else {
            drop(shared);
            self.run_exclusive(slot, &mut run)?
        };
        let c = &self.counters;
        let longest = rows.iter().map(|r| r.ids.len()).max().unwrap_or(0).max(1);
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.count_batch(rows.len());
        c.tokens.fetch_add(rows.iter().map(|r| r.ids.len() as u64).sum(), Ordering::Relaxed);
        c.padded_tokens.fetch_add((rows.len() * longest) as u64, Ordering::Relaxed);
        Ok(dim)
    }

    /// Runs `run` on the slot's session alone, and when a GPU session fails (and the device was
    /// not forced), replaces it with a CPU session under the same lock and runs again there.
    fn run_exclusive(&self, slot: &RwLock<Slot>, run: &mut impl FnMut(&Session) -> Result<usize>) -> Result<usize> {
        let mut slot = slot.write().unwrap_or_else(PoisonError::into_inner);
        match run(&slot.session) {
            Err(e) if !slot.builtin_cpu => {
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
                slot.builtin_cpu = true;
                self.run_fallback()
                    .get_or_insert_with(|| format!("{why}; rebuilt on CPUExecutionProvider and ran that batch again"));
                run(&slot.session)
            }
            other => other,
        }
    }
}
