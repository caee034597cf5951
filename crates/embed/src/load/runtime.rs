//! Loading the one ONNX Runtime library this process will use, chosen for the plan's vendor.

use std::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nornir_ep_select::Plan;
use nornir_gpu_probe::{OrtCandidate, OrtDiscovery, ProbeContext, discover_ort, discover_plugins, pick_ort, same_file};

use crate::error::{EmbedError, Result};
use crate::load::plugins::{Host, PluginState};
use crate::values::{DeviceList, MIN_ORT, OrtInfo};

/// The ONNX Runtime library loaded in this process.
#[derive(Debug)]
pub struct OrtRuntime {
    pub info: OrtInfo,
    pub(crate) env: ort::environment::Environment,
    /// The plugin libraries registered in this process, and which devices each added.
    pub(crate) plugins: Mutex<PluginState>,
}

impl OrtRuntime {
    /// ONNX Runtime's device list as it stands, with the plugins registered so far.
    pub(crate) fn devices(&self) -> DeviceList {
        crate::load::plugins::device_list(&self.plugin_host())
    }

    /// What plugins.rs needs of this runtime to register and append plugin devices.
    pub(crate) fn plugin_host(&self) -> Host<'_> {
        Host { env: &self.env, ort_path: &self.info.path, ort_version: &self.info.version, plugins: &self.plugins }
    }
}

/// Loads ONNX Runtime for `plan` (as [`load_runtime`]) and returns [`list_devices`]: what
/// `doctor` shows beside the probe, without a model.
pub fn device_list(plan: &Plan, ort_library: Option<&Path>, ep_libraries: &[(String, PathBuf)]) -> Result<DeviceList> {
    let rt = load_runtime(plan, ort_library)?;
    Ok(list_devices(&rt, ep_libraries))
}

/// Finds the plugin execution-provider libraries (`explicit` ones first, then `NORNIR_EP_LIBS`,
/// pip packages and `$NORNIR_HOME/ep`), registers those not registered before in this process
/// with `rt`, and returns ONNX Runtime's device list. Failures are lines of the list, never errors.
pub fn list_devices(rt: &OrtRuntime, explicit: &[(String, PathBuf)]) -> DeviceList {
    crate::load::plugins::register_new(&rt.plugin_host(), &discover_plugins(&ProbeContext::from_process(), explicit));
    rt.devices()
}

static LOADED: Mutex<Option<Arc<OrtRuntime>>> = Mutex::new(None);

/// Loads ONNX Runtime for `plan` (once per process: a later call gets the same library back).
/// `explicit` (`--ort-lib`) wins over discovery, like `ORT_DYLIB_PATH`.
pub fn load_runtime(plan: &Plan, explicit: Option<&Path>) -> Result<Arc<OrtRuntime>> {
    let mut loaded = LOADED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(rt) = loaded.as_ref() {
        if let Some(requested) = explicit
            && !same_file(requested, &rt.info.path)
        {
            return Err(EmbedError::OrtAlreadyLoaded {
                loaded: rt.info.path.clone(),
                requested: requested.to_path_buf(),
            });
        }
        return Ok(rt.clone());
    }
    let (discovery, choice) = choose_library(plan, explicit);
    if let Some(why) = discovery.explicit_unusable() {
        return Err(EmbedError::ExplicitOrtUnusable { reason: why });
    }
    let Some((candidate, reason)) = choice else {
        return Err(EmbedError::NoOrtLibrary {
            searched: discovery.searched.clone(),
            problems: discovery.problems.clone(),
        });
    };
    let path = candidate.path.clone();
    let version = check_library(&path)?;
    if nornir_gpu_probe::version_at_least(&version, MIN_ORT).is_some_and(|ok| !ok) {
        return Err(EmbedError::OrtTooOld { path, version });
    }
    let env = ort::init_from(&path)
        .map_err(|e| EmbedError::ort_load_because(&path, "initialising it failed", e))?
        .with_name("nornir")
        .with_telemetry(false)
        .with_logger(Arc::new(forward_ort_log))
        .build()
        .map_err(|e| EmbedError::ort_load_because(&path, "making its environment failed", e))?;
    tracing::debug!(path = %path.display(), %version, "loaded ONNX Runtime");
    let info = OrtInfo { path, version, providers: candidate.providers.clone(), reason };
    let rt = Arc::new(OrtRuntime { info, env, plugins: Mutex::new(PluginState::default()) });
    *loaded = Some(rt.clone());
    Ok(rt)
}

/// The library [`load_runtime`] would load for `plan` (an `explicit` path wins, like
/// `ORT_DYLIB_PATH`), with the whole discovery, without loading anything.
pub fn choose_library(plan: &Plan, explicit: Option<&Path>) -> (OrtDiscovery, Option<(OrtCandidate, String)>) {
    let mut ctx = ProbeContext::from_process();
    if let Some(p) = explicit {
        let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        ctx = ctx.with_var("ORT_DYLIB_PATH", abs);
    }
    let discovery = discover_ort(&ctx);
    let wanted: Vec<&str> = plan.providers.iter().filter_map(|p| p.builtin()?.library_name()).collect();
    let choice = pick_ort(&discovery, &wanted, MIN_ORT).map(|(c, why)| (c.clone(), why));
    (discovery, choice)
}

/// ONNX Runtime's own log lines, forwarded to `tracing` (only the binary prints them).
fn forward_ort_log(level: ort::logging::LogLevel, category: &str, _id: &str, location: &str, message: &str) {
    use ort::logging::LogLevel;
    match level {
        LogLevel::Fatal | LogLevel::Error => {
            tracing::debug!(target: "onnxruntime", %category, %location, "error: {message}")
        }
        LogLevel::Warning => tracing::debug!(target: "onnxruntime", %category, %location, "warning: {message}"),
        LogLevel::Info | LogLevel::Verbose => tracing::trace!(target: "onnxruntime", %category, %location, "{message}"),
    }
}

/// ONNX Runtime's `struct OrtApiBase` (onnxruntime_c_api.h): two function pointers, `GetApi`
/// then `GetVersionString`, in C layout. The C API promises this struct never changes (it is how
/// every version is asked for its API), so it is the same in 1.22 and later.
#[repr(C)]
struct OrtApiBase {
    get_api: unsafe extern "C" fn(u32) -> *const std::ffi::c_void,
    get_version_string: unsafe extern "C" fn() -> *const c_char,
}

/// Opens `path` and asks it for its version through `OrtGetApiBase`, so a file that is not ONNX
/// Runtime is a clear error before `ort` touches it.
pub fn check_library(path: &Path) -> Result<String> {
    let fail = |reason: String| EmbedError::ort_load(path, reason);
    if !path.is_file() {
        return Err(fail("no such file".to_owned()));
    }
    // SAFETY: loading runs the library's initialisers; the user or the discovery named this file
    // as ONNX Runtime, and `ort` is about to load it anyway.
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| fail(format!("not a loadable shared library ({})", nornir_gpu_probe::describe_dl_error(&e))))?;
    tracing::debug!(path = %path.display(), "loaded to check that it is ONNX Runtime");
    // SAFETY: `OrtGetApiBase` is `const OrtApiBase* OrtGetApiBase(void)` in ONNX Runtime's C API,
    // and the pointer it returns (checked for null) points to a static `OrtApiBase`, whose layout
    // the C API fixes for every version and `OrtApiBase` above mirrors with `repr(C)`; the
    // version string it returns (checked for null) is a static, NUL-terminated C string.
    let version = unsafe {
        let get_base = lib
            .get::<unsafe extern "C" fn() -> *const OrtApiBase>("OrtGetApiBase")
            .map_err(|_| fail("it does not export OrtGetApiBase, so it is not ONNX Runtime".to_owned()))?;
        let base = get_base();
        if base.is_null() {
            return Err(fail("OrtGetApiBase returned null".to_owned()));
        }
        let s = ((*base).get_version_string)();
        if s.is_null() {
            return Err(fail("it reports no version".to_owned()));
        }
        CStr::from_ptr(s).to_string_lossy().into_owned()
    };
    // Kept loaded: `ort` loads the same file next, and unloading ONNX Runtime is never safe.
    std::mem::forget(lib);
    Ok(version)
}
