//! The engine behind an [`Embedder`](crate::Embedder): its backend (ONNX Runtime's sessions, or
//! a static model's table), the queue and the model's facts that the callers and the workers
//! share, and running one batch with its GPU-to-CPU fallback. Opening it is `open.rs` (a static
//! model's `open_static.rs`); the worker threads `worker.rs`; the on-demand profile of which
//! provider ran each node `placement.rs`.

mod open;
mod open_static;
pub(crate) mod placement;
pub(crate) mod worker;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use nornir_ep_select::{Plan, Planned, Provider, Vendor};
use nornir_image::PixelTensor;
use ort::session::Session;

use crate::error::{EmbedError, Result, error_chain};
use crate::forward::graph_io::GraphIo;
use crate::forward::run::{Row, RowSettings, run_and_pool};
use crate::forward::vision::ImageTower;
use crate::load::runtime::OrtRuntime;
use crate::load::session::{self, SessionConfig, Slot, growth_since, resident_bytes};
use crate::load::tokenize::ModelTokenizer;
use crate::math::dense::DenseHead;
use crate::math::static_table::StaticTable;
use crate::schedule::scheduler::Scheduler;
use crate::schedule::stats::{Counters, EmbedStats};
use crate::values::{ModelInfo, SessionReport};
use nornir_options::ModelKind;
use nornir_options::QueueFull;

/// What runs a batch: ONNX Runtime's sessions of the graph, or a static model's table.
#[derive(Debug)]
pub(crate) enum Backend {
    Onnx(Box<Sessions>),
    /// A static model (Model2Vec): a mean of table rows, without ONNX Runtime.
    Static(StaticTable),
}

/// The graph's sessions. On the CPU every worker runs the first; on a GPU worker k runs session
/// k (see `slot_for`).
#[derive(Debug)]
pub(crate) struct Sessions {
    pub(crate) first: RwLock<Slot>,
    /// More sessions like the first for the other workers, built on first need; only on a GPU,
    /// whose sessions run one batch at a time.
    pub(crate) extra: OnceLock<Vec<RwLock<Slot>>>,
    pub(crate) runtime: Arc<OrtRuntime>,
    pub(crate) intra_threads: usize,
    /// The threads nornir's own kernels share (`load/kernels.rs`): the embedder's.
    pub(crate) kernel_threads: usize,
}

/// Everything the callers and the workers share.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) backend: Backend,
    /// Set once a GPU session failed at run time and was replaced by a CPU session.
    pub(crate) run_fallback: Mutex<Option<String>>,
    /// Workers running batches side by side (`EmbedderOptions::workers`).
    pub(crate) workers: usize,
    /// Resident memory growth while each session was built, in bytes (see `Memory`).
    pub(crate) session_growth: Mutex<Vec<u64>>,
    pub(crate) tokenizer: ModelTokenizer,
    /// The pooling config's `include_prompt`: false leaves a call's prompt tokens out.
    pub(crate) include_prompt: bool,
    /// `EmbedderOptions::call`, what a call gets for the options it leaves `None`: its width,
    /// precision and ranges, long-text choice (see `long_choice`) and `max_wait` are read from
    /// here; its prompt and normalisation were resolved with the folder into `info` at load.
    pub(crate) call_defaults: nornir_options::CallOptions,
    pub(crate) io: GraphIo,
    pub(crate) settings: RowSettings,
    /// The folder's Dense modules, applied to each pooled row (empty: none, or the graph's
    /// pooled output already holds them; see `check_with_a_first_run`).
    pub(crate) head: DenseHead,
    pub(crate) info: ModelInfo,
    pub(crate) report: SessionReport,
    pub(crate) counters: Counters,
    pub(crate) scheduler: Scheduler,
    pub(crate) queue_full: QueueFull,
    /// A dual encoder's vision graph and image processor (`None`: text only): the workers run
    /// batches of images on it.
    pub(crate) images: Option<ImageTower>,
}

impl Engine {
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
        matches!(self.backend, Backend::Static(_)) || self.report.on_builtin_cpu()
    }

    /// The graph's sessions; `None` for a static model.
    pub(crate) fn sessions(&self) -> Option<&Sessions> {
        match &self.backend {
            Backend::Onnx(s) => Some(s),
            Backend::Static(_) => None,
        }
    }

    /// The session worker `k` runs: on the CPU the first, for every worker at once; on a GPU
    /// session `k`, or the first when the others could not be built.
    fn slot_for<'s>(&'s self, sessions: &'s Sessions, k: usize) -> &'s RwLock<Slot> {
        if k == 0 || self.workers_share_session() {
            return &sessions.first;
        }
        self.extra_sessions().get(k - 1).unwrap_or(&sessions.first)
    }

    /// The sessions beyond the first, for the other workers on a GPU, built on first use with
    /// the plan that is really running. None on the CPU, where the workers share the first, or
    /// for a static model. A failure to build them leaves one session.
    pub(crate) fn extra_sessions(&self) -> &[RwLock<Slot>] {
        let Some(sessions) = self.sessions() else { return &[] };
        sessions.extra.get_or_init(|| {
            if self.workers_share_session() {
                return Vec::new();
            }
            let plan = self.running_plan();
            let cfg = self.pooled_config(sessions);
            let mut extra = Vec::new();
            for _ in 1..self.workers {
                crate::forward::fault::hit(crate::forward::fault::Stage::Build);
                let resident = resident_bytes();
                match session::build(&sessions.runtime, &plan, &cfg) {
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
    pub(crate) fn pooled_config<'s>(&'s self, sessions: &Sessions) -> SessionConfig<'s> {
        SessionConfig {
            model: &self.info.folder.model_file,
            intra_threads: sessions.intra_threads,
            kernel_threads: sessions.kernel_threads,
            profile_to: None,
        }
    }

    /// A CPU session like the others, to replace a GPU session that failed at run time.
    pub(crate) fn cpu_session(&self, sessions: &Sessions) -> Result<Session> {
        Ok(session::build(&sessions.runtime, &self.cpu_plan(), &self.pooled_config(sessions))?.0)
    }

    /// Runs one batch as worker `k`: on its session, or a static model's table. When a GPU
    /// session fails, and the device was not forced, the slot's session is replaced by a CPU
    /// session and the same batch runs again: `emit` sees each text once, from the run that
    /// succeeded.
    pub(crate) fn run_batch(&self, k: usize, rows: &[Row<'_>], mut emit: impl FnMut(usize, &[f32])) -> Result<usize> {
        if self.head.is_empty() {
            return self.run_rows(k, rows, &mut emit);
        }
        // Pooled rows go through the Dense modules before anything else sees them; their width
        // was checked against the graph's at load. Raw token rows do not.
        let mut scratch = Default::default();
        let mut apply =
            |k: usize, v: &[f32]| if rows[k].raw { emit(k, v) } else { emit(k, self.head.apply(v, &mut scratch)) };
        self.run_rows(k, rows, &mut apply)?;
        Ok(self.head.out_features().unwrap_or_default())
    }

    /// Each row's pooled vectors (or a raw row's token vectors) at the model's width, then the
    /// batch counted.
    fn run_rows(&self, k: usize, rows: &[Row<'_>], emit: &mut impl FnMut(usize, &[f32])) -> Result<usize> {
        let (settings, nanos) = (self.settings, &self.counters.ort_nanos);
        let dim = match &self.backend {
            Backend::Static(table) => crate::forward::static_run::pool(table, rows, emit),
            Backend::Onnx(sessions) => self.run_on(self.slot_for(sessions, k), sessions, |session| {
                run_and_pool(session, &self.io, settings, rows, nanos, &mut *emit)
            })?,
        };
        self.count_batch(rows, matches!(self.backend, Backend::Onnx(_)));
        Ok(dim)
    }

    /// Runs `run` on the slot's session. A CPU session runs under the read lock, beside the
    /// other workers' runs; a GPU session under the write lock (see `run_exclusive`).
    fn run_on(
        &self,
        slot: &RwLock<Slot>,
        sessions: &Sessions,
        mut run: impl FnMut(&Session) -> Result<usize>,
    ) -> Result<usize> {
        let shared = slot.read().unwrap_or_else(PoisonError::into_inner);
        if shared.builtin_cpu {
            return run(&shared.session);
        }
        drop(shared);
        self.run_exclusive(slot, sessions, &mut run)
    }

    /// Runs a batch of preprocessed images of one size on the vision graph: their vectors at the
    /// model's width, row after row, then the batch counted.
    pub(crate) fn run_images(&self, pixels: &[&PixelTensor]) -> Result<Vec<f32>> {
        let tower = self.images.as_ref().ok_or_else(|| EmbedError::Internal {
            reason: "an image reached the queue of a model without a vision graph".to_owned(),
        })?;
        let size = pixels.first().map_or((0, 0), |p| (p.height, p.width));
        let mut flat = Vec::with_capacity(pixels.iter().map(|p| p.values.len()).sum());
        for p in pixels {
            flat.extend_from_slice(&p.values);
        }
        let started = std::time::Instant::now();
        let rows = tower.run(&flat, pixels.len(), size)?;
        let c = &self.counters;
        c.ort_nanos.fetch_add(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.count_batch(pixels.len());
        Ok(rows)
    }

    /// Counts a batch of `rows` in the stats, `padded` to its longest (a static model's are not).
    fn count_batch(&self, rows: &[Row<'_>], padded: bool) {
        let c = &self.counters;
        let longest = rows.iter().map(|r| r.ids.len()).max().unwrap_or(0).max(1);
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.count_batch(rows.len());
        c.tokens.fetch_add(rows.iter().map(|r| r.ids.len() as u64).sum(), Ordering::Relaxed);
        let fed = if padded { rows.len() * longest } else { rows.iter().map(|r| r.ids.len()).sum() };
        c.padded_tokens.fetch_add(fed as u64, Ordering::Relaxed);
    }

    /// Runs `run` on the slot's session alone, and when a GPU session fails (and the device was
    /// not forced), replaces it with a CPU session under the same lock and runs again there.
    fn run_exclusive(
        &self,
        slot: &RwLock<Slot>,
        sessions: &Sessions,
        run: &mut impl FnMut(&Session) -> Result<usize>,
    ) -> Result<usize> {
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
                slot.session = self.cpu_session(sessions)?;
                slot.builtin_cpu = true;
                self.run_fallback()
                    .get_or_insert_with(|| format!("{why}; rebuilt on CPUExecutionProvider and ran that batch again"));
                run(&slot.session)
            }
            other => other,
        }
    }
}
