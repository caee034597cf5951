//! Discovery only: finds GPU kernel drivers, GPU runtime libraries (CUDA, and with the `rocm`
//! feature ROCm/HIP), ONNX Runtime builds and plugin execution-provider libraries on this
//! machine, loads the vendor runtimes (never a plugin) for the life of the process, and says what
//! it found in a report a person can act on.
//!
//! It is not the embedder and knows nothing of ONNX Runtime's API: it never links or calls ONNX
//! Runtime, it only reads file names and ELF headers. It never decides which provider to use
//! (that is `nornir-ep-select`). Nothing here panics on bad files; every problem ends up in a report.

mod context;
mod cuda;
mod driver;
mod elf;
mod library;
mod ort_lib;
mod paths;
mod plugins;
mod report;
mod requirements;
#[cfg(feature = "rocm")]
mod rocm;
mod vendor;

use std::sync::LazyLock;
use std::time::Instant;

pub use context::ProbeContext;
pub use driver::DriverReport;
pub use elf::{ElfDeps, ElfError, ElfExport, parse_deps, parse_export, read_deps, read_export};
pub use library::{LibraryReport, LibrarySpec, describe_dl_error, find_soname, load_with_deps, loaded_path};
pub use ort_lib::{
    DEFAULT_MODEL_SUBDIR, NoDefaultModel, OrtCandidate, OrtDiscovery, default_model, default_model_dir,
    discover as discover_ort, nornir_home, pick as pick_ort, providers_beside,
};
pub use paths::{RejectedEntry, SearchPath, python_site_dirs, same_file};
pub use plugins::{PLUGIN_ENTRY, PluginDiscovery, PluginLibrary, PluginSource, discover_plugins, parse_plugin_entry};
pub use report::ProbeReport;
pub use requirements::{Opened, ProviderRequirements, Requirement, RequirementStatus, provider_requirements};
pub use vendor::{VendorReport, VisibleDevices};

/// What a default build says about AMD.
pub const ROCM_NOT_COMPILED: &str =
    "AMD GPU support is not compiled into this build; rebuild with `--features embed-ort-rocm` to add it";

/// Whether dotted `version` is at least `min` (major, minor); `None` if it has no two numbers.
pub fn version_at_least(version: &str, min: (u64, u64)) -> Option<bool> {
    let v = paths::version_key(version);
    Some((*v.first()?, *v.get(1)?) >= min)
}

/// Vendors a GPU can come from: NVIDIA (its CUDA stack) and AMD (its ROCm stack).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuVendor {
    Cuda,
    Amd,
}

/// Probes with `ctx`, uncached. Loads vendor libraries only where that vendor's driver is present.
pub fn probe_with(ctx: &ProbeContext) -> ProbeReport {
    let start = Instant::now();
    let cuda = vendor::probe_vendor(ctx, &cuda::SPEC, cuda::search_path(ctx), driver::nvidia(ctx));
    let rocm = probe_rocm(ctx);
    ProbeReport { cuda, rocm, probe_micros: start.elapsed().as_micros() as u64 }
}

#[cfg(feature = "rocm")]
fn probe_rocm(ctx: &ProbeContext) -> VendorReport {
    vendor::probe_vendor(ctx, &rocm::SPEC, rocm::search_path(ctx), rocm::driver(ctx))
}

#[cfg(not(feature = "rocm"))]
fn probe_rocm(_: &ProbeContext) -> VendorReport {
    VendorReport::not_compiled("rocm", ROCM_NOT_COMPILED)
}

static PROBE: LazyLock<ProbeReport> = LazyLock::new(|| probe_with(&ProbeContext::from_process()));

/// The probe of this process's machine and environment, run once and cached.
pub fn probe() -> &'static ProbeReport {
    &PROBE
}

/// `(gpu_ready, human_report)` for this machine (cached probe).
pub fn preflight() -> (bool, String) {
    probe().preflight()
}

/// Candidate folders for a vendor's libraries (the same the probe searched).
pub fn search_path(ctx: &ProbeContext, vendor: GpuVendor) -> SearchPath {
    match vendor {
        GpuVendor::Cuda => cuda::search_path(ctx),
        GpuVendor::Amd => rocm_search_path(ctx),
    }
}

#[cfg(feature = "rocm")]
fn rocm_search_path(ctx: &ProbeContext) -> SearchPath {
    rocm::search_path(ctx)
}

#[cfg(not(feature = "rocm"))]
fn rocm_search_path(_: &ProbeContext) -> SearchPath {
    SearchPath::default()
}

/// Loads every library `provider` needs that sits in `dirs` (the vendor's candidate folders or the
/// provider's own), each after its own dependencies and with `RTLD_GLOBAL`, so that ONNX Runtime's
/// later `dlopen` of the provider resolves, and so does the provider's own `dlopen` by name of a
/// library it opens at run time (cuDNN from pip's `site-packages/nvidia/cudnn/lib`, which the
/// loader's path, fixed at process start, does not hold). A missing one is reported, not fatal.
/// Returns the preflight as it stands after loading.
pub fn preload_provider(provider: &std::path::Path, dirs: &[std::path::PathBuf]) -> ProviderRequirements {
    let before = provider_requirements(provider, dirs);
    for req in before.requirements.iter().filter(|r| r.status == RequirementStatus::Found) {
        if let Some(path) = &req.path
            && let Err(e) = load_with_deps(path, &req.soname, dirs)
        {
            tracing::debug!(soname = %req.soname, error = %e, "preload failed");
        }
    }
    provider_requirements(provider, dirs)
}
