//! Building an ONNX Runtime session from a plan, one provider at a time, and recording honestly
//! what each registration did and which provider ended up running the model.

use std::path::{Path, PathBuf};

use nornir_ep_select::{Plan, Provider, Vendor};
use nornir_gpu_probe::{GpuVendor, ProbeContext, ProviderRequirements, preload_provider, search_path};
use ort::session::Session;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use serde::{Deserialize, Serialize};

use crate::error::{EmbedError, Result, one_line};
use crate::runtime::{OrtInfo, OrtRuntime};

/// What registering one provider did. In JSON: `{"provider", "ok", "error", "preflight"}`, with
/// `error` only when `ok` is false.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(into = "RegistrationJson", from = "RegistrationJson")]
#[non_exhaustive]
pub struct Registration {
    /// As ONNX Runtime names it (`CUDAExecutionProvider`).
    pub provider: String,
    /// Registered, or why not.
    pub outcome: RegistrationOutcome,
    /// The provider library's NEEDED list checked against this machine.
    pub preflight: Option<ProviderRequirements>,
}

/// Whether a provider registered, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistrationOutcome {
    /// ONNX Runtime accepted it (which does not yet mean it runs the model: see the report's
    /// active provider).
    Registered,
    /// ONNX Runtime's error text, with the preflight's finding where it explains it.
    Failed(String),
}

impl Registration {
    fn failed(provider: Provider, why: String) -> Self {
        Self { provider: provider.ort_name().to_owned(), outcome: RegistrationOutcome::Failed(why), preflight: None }
    }

    /// Whether ONNX Runtime accepted it.
    pub fn registered(&self) -> bool {
        self.outcome == RegistrationOutcome::Registered
    }

    /// Why it did not register.
    pub fn error(&self) -> Option<&str> {
        match &self.outcome {
            RegistrationOutcome::Registered => None,
            RegistrationOutcome::Failed(why) => Some(why),
        }
    }
}

/// [`Registration`] as JSON has always had it.
#[derive(Serialize, Deserialize)]
struct RegistrationJson {
    provider: String,
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    preflight: Option<ProviderRequirements>,
}

impl From<Registration> for RegistrationJson {
    fn from(r: Registration) -> Self {
        let (ok, error) = match r.outcome {
            RegistrationOutcome::Registered => (true, None),
            RegistrationOutcome::Failed(why) => (false, Some(why)),
        };
        Self { provider: r.provider, ok, error, preflight: r.preflight }
    }
}

impl From<RegistrationJson> for Registration {
    fn from(j: RegistrationJson) -> Self {
        let outcome = if j.ok {
            RegistrationOutcome::Registered
        } else {
            RegistrationOutcome::Failed(j.error.unwrap_or_else(|| "failed".to_owned()))
        };
        Self { provider: j.provider, outcome, preflight: j.preflight }
    }
}

/// Which provider ran each node of the graph, from ONNX Runtime's own profiling record
/// ([`Embedder::placement`](crate::Embedder::placement), on demand: it costs a session build).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
#[non_exhaustive]
pub enum Placement {
    /// From the profile of one run.
    Known {
        /// Nodes run, by provider.
        nodes: std::collections::BTreeMap<String, usize>,
    },
    /// The profile could not be read.
    Unknown {
        /// Why.
        reason: String,
    },
}

/// What the model's sessions hold in memory, so that an operator can size a process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Memory {
    /// How many workers run each ONNX Runtime session at once. On the CPU every worker
    /// (`EmbedderOptions::sessions`) runs the model's one session, so its weights and the
    /// kernels' pre-packed forms of them are in memory once; each further worker adds only the
    /// activations of the batch it runs. A GPU session runs one batch at a time.
    pub workers_per_session: usize,
    /// How much the process's resident memory grew while each session was built, in build order,
    /// in bytes: the weights as the session holds them (an int8-stored model's are folded to
    /// float32 at load), their pre-packed forms, and the graph. One entry on the CPU. Further GPU
    /// sessions are built at their first work (or `Embedder::warm_up`). Read from
    /// `/proc/self/status`, so other threads' allocations at the same moment count as well.
    pub session_growth_bytes: Vec<u64>,
    /// The process's resident memory when the report was made, in bytes.
    pub resident_bytes: Option<u64>,
    /// The most resident memory the process has held so far (`VmHWM`), in bytes: the model with
    /// the activations and ONNX Runtime's arena of the largest batches run so far.
    #[serde(default)]
    pub peak_resident_bytes: Option<u64>,
}

/// The process's resident memory in bytes (`VmRSS`), where `/proc` tells it.
pub(crate) fn resident_bytes() -> Option<u64> {
    proc_status_bytes("VmRSS:")
}

/// The process's peak resident memory in bytes (`VmHWM`), where `/proc` tells it.
pub(crate) fn peak_resident_bytes() -> Option<u64> {
    proc_status_bytes("VmHWM:")
}

fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status.lines().find_map(|l| l.strip_prefix(field))?.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// What really happened when the session was built.
///
/// ```no_run
/// # use nornir_embed::{Embedder, EmbedderOptions};
/// let embedder = Embedder::new("models/all-MiniLM-L6-v2".as_ref(), &EmbedderOptions::default())?;
/// let report = embedder.report();
/// for r in &report.registrations {
///     match r.error() {
///         None => println!("{}: registered", r.provider),
///         Some(why) => println!("{}: failed: {why}", r.provider),
///     }
/// }
/// // What runs, not what was asked for; and why the CPU took over, if it did.
/// println!("running on {} ({:?})", report.active_provider, report.fallback);
/// # Ok::<(), nornir_embed::EmbedError>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionReport {
    /// The ONNX Runtime library loaded.
    pub ort: OrtInfo,
    /// What the policy asked for, and why.
    pub plan: Plan,
    /// Each provider tried, in order.
    pub registrations: Vec<Registration>,
    /// The provider running the model, as ONNX Runtime names it.
    pub active_provider: String,
    /// `cpu`, `cuda` or `rocm`: where the model really runs.
    pub gpu_vendor: Vendor,
    /// Set when the session had to be rebuilt on CPU after a GPU session failed to build or run.
    pub fallback: Option<String>,
    /// What the sessions hold in memory.
    #[serde(default)]
    pub memory: Memory,
    /// ONNX Runtime's graph optimisation level for the session: `basic` on the CPU, `all` with
    /// a GPU provider (see `base_builder`).
    #[serde(default)]
    pub graph_optimization: String,
}

pub(crate) struct SessionConfig<'a> {
    pub model: &'a Path,
    pub intra_threads: usize,
    pub profile_to: Option<&'a Path>,
}

/// Builds the session for `plan`. A GPU failure at registration or at commit falls through to CPU,
/// unless the plan is forced, in which case it is an error.
pub(crate) fn build(rt: &OrtRuntime, plan: &Plan, cfg: &SessionConfig<'_>) -> Result<(Session, SessionReport)> {
    if let Some(why) = &plan.refusal {
        return Err(EmbedError::DeviceRefused { reason: why.clone() });
    }
    let cpu_only = plan.providers.iter().all(|p| p.vendor() == Vendor::Cpu);
    let mut builder = base_builder(rt, cfg, cpu_only)?;
    let mut registrations = Vec::new();
    for &p in &plan.providers {
        registrations.push(register(rt, p, &mut builder));
    }
    let gpu_ok: Option<&Registration> =
        registrations.iter().find(|r| r.registered() && r.provider != Provider::Cpu.ort_name());
    if plan.forced && gpu_ok.is_none() {
        return Err(forced_failure(plan, &registrations));
    }
    let mut active = gpu_ok.map_or(Provider::Cpu.ort_name().to_owned(), |r| r.provider.clone());
    let mut fallback = None;
    let session = match builder.commit_from_file(cfg.model) {
        Ok(s) => s,
        Err(e) if gpu_ok.is_some() => {
            let why = format!(
                "creating the session with {active} failed: {}{}",
                one_line(&e.to_string()),
                run_time_hint(&registrations, &active)
            );
            if plan.forced {
                return Err(EmbedError::ForcedDeviceFailed { vendor: plan.vendor, details: why, registrations });
            }
            tracing::warn!("{why}; rebuilding it on CPU");
            let s = base_builder(rt, cfg, true)?
                .commit_from_file(cfg.model)
                .map_err(|e| EmbedError::session_because(cfg.model, e))?;
            fallback = Some(format!("{why}; rebuilt on CPUExecutionProvider"));
            active = Provider::Cpu.ort_name().to_owned();
            s
        }
        Err(e) => return Err(EmbedError::session_because(cfg.model, e)),
    };
    let gpu_vendor = Provider::from_ort_name(&active).map_or(Vendor::Cpu, Provider::vendor);
    let report = SessionReport {
        ort: rt.info.clone(),
        plan: plan.clone(),
        registrations,
        active_provider: active,
        gpu_vendor,
        graph_optimization: if gpu_vendor == Vendor::Cpu { "basic" } else { "all" }.to_owned(),
        fallback,
        memory: Memory::default(),
    };
    Ok((session, report))
}

/// Session options. On the CPU, basic graph optimisation (level 1): the extended fusions measured
/// no faster there and cost about 40 MB per session; GPU providers get every level, their fused
/// kernels live there. Memory patterns are off everywhere: they are planned per input shape, and
/// batches come in many shapes, so they cost about 70 MB and saved no time.
fn base_builder(rt: &OrtRuntime, cfg: &SessionConfig<'_>, cpu_only: bool) -> Result<SessionBuilder> {
    let model = cfg.model;
    let level = if cpu_only { GraphOptimizationLevel::Level1 } else { GraphOptimizationLevel::All };
    let mut b = Session::builder(&rt.env)
        .map_err(|e| EmbedError::session_because(model, e))?
        .with_optimization_level(level)
        .map_err(|e| EmbedError::session_because(model, e))?
        .with_memory_pattern(false)
        .map_err(|e| EmbedError::session_because(model, e))?
        .with_intra_threads(cfg.intra_threads)
        .map_err(|e| EmbedError::session_because(model, e))?
        .with_log_level(ort::logging::LogLevel::Warning)
        .map_err(|e| EmbedError::session_because(model, e))?;
    if let Some(p) = cfg.profile_to {
        b = b.with_profiling(p).map_err(|e| EmbedError::session_because(model, e))?;
    }
    Ok(b)
}

/// The preflight's word on what `provider` opens at run time and is missing, as ` (preflight: ...)`,
/// or nothing: the likely cause when a provider that registered fails later.
pub(crate) fn run_time_hint(registrations: &[Registration], provider: &str) -> String {
    registrations
        .iter()
        .filter(|r| r.provider == provider)
        .find_map(|r| r.preflight.as_ref()?.run_time_summary())
        .map(|s| format!(" (preflight: {s})"))
        .unwrap_or_default()
}

fn forced_failure(plan: &Plan, regs: &[Registration]) -> EmbedError {
    let details: Vec<String> = regs.iter().filter_map(|r| Some(format!("{}: {}", r.provider, r.error()?))).collect();
    EmbedError::ForcedDeviceFailed { vendor: plan.vendor, details: details.join("; "), registrations: regs.to_vec() }
}

/// The provider library's folder-mates: where ONNX Runtime will look for it.
fn provider_library(rt: &OrtRuntime, name: &str) -> PathBuf {
    let dir = rt.info.path.parent().map(Path::to_path_buf).unwrap_or_default();
    dir.join(format!("libonnxruntime_providers_{name}.so"))
}

fn gpu_vendor_of(p: Provider) -> Option<GpuVendor> {
    match p.vendor() {
        Vendor::Cuda => Some(GpuVendor::Cuda),
        Vendor::Rocm => Some(GpuVendor::Rocm),
        _ => None,
    }
}

fn register(rt: &OrtRuntime, p: Provider, builder: &mut SessionBuilder) -> Registration {
    let (Some(lib_name), Some(vendor)) = (p.library_name(), gpu_vendor_of(p)) else {
        // CPU is built into every ONNX Runtime and always registered last.
        return Registration {
            provider: p.ort_name().to_owned(),
            outcome: RegistrationOutcome::Registered,
            preflight: None,
        };
    };
    let lib = provider_library(rt, lib_name);
    if !lib.is_file() {
        return Registration::failed(
            p,
            format!(
                "not in this build of ONNX Runtime ({} has no {}); use a build with it (`cargo xtask fetch` lists them) via ORT_DYLIB_PATH",
                rt.info.path.display(),
                lib.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
            ),
        );
    }
    let dirs = search_path(&ProbeContext::from_process(), vendor).dirs;
    let preflight = preload_provider(&lib, &dirs);
    let outcome = if let Some(damaged) = &preflight.error {
        // Handing a damaged library to the loader can kill the process (SIGBUS): not tried.
        RegistrationOutcome::Failed(format!(
            "not loaded: {damaged}; reinstall this ONNX Runtime build (`cargo xtask fetch` verifies its files)"
        ))
    } else {
        match append(p, builder) {
            Ok(()) => RegistrationOutcome::Registered,
            Err(e) => {
                let mut text = one_line(&e.to_string());
                if preflight.missing().next().is_some() {
                    text = format!("{text} (preflight: {})", preflight.summary());
                }
                RegistrationOutcome::Failed(text)
            }
        }
    };
    Registration { provider: p.ort_name().to_owned(), outcome, preflight: Some(preflight) }
}

fn append(p: Provider, builder: &mut SessionBuilder) -> ort::Result<()> {
    match p {
        Provider::Cuda => cuda_ep(builder),
        #[cfg(feature = "rocm")]
        Provider::MiGraphX => ort::ep::ExecutionProvider::register(&ort::ep::MIGraphX::default(), builder),
        #[cfg(feature = "rocm")]
        Provider::Rocm => ort::ep::ExecutionProvider::register(&ort::ep::ROCm::default(), builder),
        // The policy never plans them in such a build; a caller that asks anyway is told why.
        #[cfg(not(feature = "rocm"))]
        Provider::MiGraphX | Provider::Rocm => Err(ort::Error::new(format!(
            "{} is not compiled into this build of nornir's embedder (feature rocm)",
            p.ort_name()
        ))),
        Provider::Cpu => Ok(()),
    }
}

#[cfg(feature = "cuda")]
fn cuda_ep(builder: &mut SessionBuilder) -> ort::Result<()> {
    use ort::ep::ExecutionProvider;
    ort::ep::CUDA::default().register(builder)
}

#[cfg(not(feature = "cuda"))]
fn cuda_ep(_: &mut SessionBuilder) -> ort::Result<()> {
    Err(ort::Error::new("the CUDA provider is not compiled into this build of nornir (feature `cuda`)"))
}
