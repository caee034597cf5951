//! Building an ONNX Runtime session from a plan, one provider at a time, and recording honestly
//! what each registration did and which provider ended up running the model.

use std::path::{Path, PathBuf};

use nornir_ep_select::{Plan, Planned, Provider, Vendor};
use nornir_gpu_probe::{GpuVendor, ProbeContext, preload_provider, search_path};
use ort::session::Session;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};

use crate::error::{EmbedError, Result, one_line};
use crate::load::kernels::committing;
use crate::load::runtime::OrtRuntime;
use crate::values::{Memory, Registration, RegistrationOutcome, SessionReport};

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

/// A session, and whether it runs on ONNX Runtime's own CPU provider alone. Such a session is
/// run by every worker at once, each holding the read lock (see `shared_run`); any other (a GPU,
/// a plugin provider) is run under the write lock, and when it fails at run time it is replaced
/// here by a CPU session before the failed batch runs again.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) session: Session,
    pub(crate) builtin_cpu: bool,
}

impl Slot {
    pub(crate) fn new(session: Session, report: &SessionReport) -> Self {
        Self { session, builtin_cpu: report.on_builtin_cpu() }
    }
}

/// How much the resident memory grew since `before` (taken with `resident_bytes`).
pub(crate) fn growth_since(before: Option<u64>) -> Option<u64> {
    Some(resident_bytes()?.saturating_sub(before?))
}

pub(crate) struct SessionConfig<'a> {
    pub model: &'a Path,
    pub intra_threads: usize,
    /// The threads nornir's own kernels may use between them (`kernels.rs`): the embedder's.
    pub kernel_threads: usize,
    pub profile_to: Option<&'a Path>,
}

/// Builds the session for `plan`. A GPU failure at registration or at commit falls through to CPU,
/// unless the plan is forced, in which case it is an error.
pub(crate) fn build(rt: &OrtRuntime, plan: &Plan, cfg: &SessionConfig<'_>) -> Result<(Session, SessionReport)> {
    if let Some(why) = &plan.refusal {
        return Err(EmbedError::DeviceRefused { reason: why.clone() });
    }
    let cpu_only = plan.providers.iter().all(Planned::is_builtin_cpu);
    let mut builder = base_builder(rt, cfg, cpu_only)?;
    let mut registrations = Vec::new();
    for p in &plan.providers {
        registrations.push(register(rt, p, &mut builder));
    }
    let chosen = plan.providers.iter().zip(&registrations).find(|(p, r)| r.registered() && !p.is_builtin_cpu());
    if plan.forced && chosen.is_none() {
        return Err(forced_failure(plan, &registrations));
    }
    if chosen.is_none() {
        builder = with_nornir_kernels(builder, cfg)?;
    }
    let cpu = Planned::Builtin(Provider::Cpu);
    let mut active: &Planned = chosen.map_or(&cpu, |(p, _)| p);
    let mut fallback = None;
    let session = match committing(|| builder.commit_from_file(cfg.model)) {
        Ok(s) => s,
        Err(e) if chosen.is_some() => {
            let why = format!(
                "creating the session with {active} failed: {}{}",
                one_line(&e.to_string()),
                run_time_hint(&registrations, active.ort_name())
            );
            if plan.forced {
                return Err(EmbedError::ForcedDeviceFailed { vendor: plan.vendor, details: why, registrations });
            }
            tracing::warn!("{why}; rebuilding it on CPU");
            let mut cpu_builder = with_nornir_kernels(base_builder(rt, cfg, true)?, cfg)?;
            let s = committing(|| cpu_builder.commit_from_file(cfg.model))
                .map_err(|e| EmbedError::session_because(cfg.model, e))?;
            fallback = Some(format!("{why}; rebuilt on CPUExecutionProvider"));
            active = &cpu;
            s
        }
        Err(e) => return Err(EmbedError::session_because(cfg.model, e)),
    };
    let gpu_vendor = active.vendor();
    let active_device = match active {
        Planned::Plugin(d) => Some(d.clone()),
        Planned::Builtin(_) => None,
    };
    let report = SessionReport {
        ort: rt.info.clone(),
        plan: plan.clone(),
        registrations,
        active_provider: active.ort_name().to_owned(),
        active_device,
        gpu_vendor,
        graph_optimization: if active.is_builtin_cpu() { "basic" } else { "all" }.to_owned(),
        devices: rt.devices(),
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

/// `b` with nornir's own operators (`kernels.rs`), for a session on ONNX Runtime's CPU provider:
/// a GPU session leaves them out, so ONNX Runtime runs their functions' standard bodies there
/// instead of copying each layer's tensors to the CPU and back.
fn with_nornir_kernels(b: SessionBuilder, cfg: &SessionConfig<'_>) -> Result<SessionBuilder> {
    let operators = crate::load::kernels::operators(cfg.kernel_threads.max(1), cfg.intra_threads)
        .map_err(|e| EmbedError::session_because(cfg.model, e))?;
    b.with_operators(operators).map_err(|e| EmbedError::session_because(cfg.model, e))
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
        Vendor::Amd => Some(GpuVendor::Amd),
        _ => None,
    }
}

fn register(rt: &OrtRuntime, planned: &Planned, builder: &mut SessionBuilder) -> Registration {
    let p = match planned {
        Planned::Builtin(p) => *p,
        Planned::Plugin(device) => {
            let outcome = match crate::load::plugins::append_device(&rt.plugin_host(), builder, device) {
                Ok(()) => RegistrationOutcome::Registered,
                Err(e) => RegistrationOutcome::Failed(e),
            };
            return Registration { provider: device.provider.clone(), outcome, preflight: None };
        }
    };
    let (Some(lib_name), Some(vendor)) = (p.library_name(), gpu_vendor_of(p)) else {
        // CPU is built into every ONNX Runtime and always registered last.
        return Registration {
            provider: p.ort_name().to_owned(),
            outcome: RegistrationOutcome::Registered,
            preflight: None,
        };
    };
    let lib = provider_library(rt, lib_name);
    if !lib.is_file()
        && p == Provider::Rocm
        && nornir_gpu_probe::version_at_least(&rt.info.version, (1, 23)) == Some(true)
    {
        return Registration::failed(p, ROCM_LEFT.to_owned());
    }
    if !lib.is_file() {
        return Registration::failed(
            p,
            format!(
                "not in this build of ONNX Runtime ({} has no {}); point ORT_DYLIB_PATH at a build that has it",
                rt.info.path.display(),
                lib.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
            ),
        );
    }
    let dirs = search_path(&ProbeContext::from_process(), vendor).dirs;
    let preflight = preload_provider(&lib, &dirs);
    let outcome = if let Some(damaged) = &preflight.error {
        // Handing a damaged library to the loader can kill the process (SIGBUS): not tried.
        RegistrationOutcome::Failed(format!("not loaded: {damaged}; reinstall this ONNX Runtime build"))
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

/// Why a request for ROCm cannot work on ONNX Runtime 1.23 or later.
pub(crate) const ROCM_LEFT: &str = "the ROCm provider left ONNX Runtime in 1.23 (the last build with it is 1.22.2, PyPI onnxruntime-rocm 1.22.2.post3); MIGraphX is AMD's provider from then on";

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
