//! Plugin execution providers: registering the libraries the probe found with ONNX Runtime
//! (`RegisterExecutionProviderLibrary`), reading its device list (`GetEpDevices`), and appending
//! one listed device to a session (`SessionOptionsAppendExecutionProvider_V2`).
//!
//! These three come from ONNX Runtime 1.22's C API, called through the `OrtApi` table as
//! `shared_run` calls `Run`: `ort`'s wrappers for them need its `api-22` feature, which also sets
//! an EP selection policy on every session that crashes ONNX Runtime 1.22.2 on the fallback path.
//! Every step fails into a line of the report, never into an error of the embedder. Each library
//! is registered first by a process of its own (plugin_trial.rs), and here only if that lived.

use std::ffi::{CStr, CString, c_char};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nornir_ep_select::{EpDevice, Hardware, PluginRef};
use nornir_gpu_probe::{PluginDiscovery, PluginSource};
use ort::AsPointer;
use ort::session::builder::SessionBuilder;

use crate::error::one_line;
use crate::values::{DeviceList, PluginReport};

type EpDevicePtr = *const ort::sys::OrtEpDevice;

pub(crate) fn status(st: ort::sys::OrtStatusPtr) -> Result<(), String> {
    // SAFETY: `st` is what an OrtApi call returned: null, or a status this call owns and frees.
    unsafe { ort::Error::result_from_status(st) }.map_err(|e| one_line(&e.to_string()))
}

fn c_text(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: ONNX Runtime returns NUL-terminated strings owned by the device, which outlives this.
    unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}

/// ONNX Runtime's device list, as the pointers it owns (valid while the environment lives).
fn raw_devices(rt: &Host<'_>) -> Result<Vec<EpDevicePtr>, String> {
    let mut list: *const EpDevicePtr = std::ptr::null();
    let mut n = 0usize;
    // SAFETY: the environment is alive; ONNX Runtime writes an array it owns and its length.
    status(unsafe { (ort::api().GetEpDevices)(rt.env.ptr(), &raw mut list, &raw mut n) })?;
    if list.is_null() || n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: `list` points to `n` device pointers, owned by the environment.
    Ok(unsafe { std::slice::from_raw_parts(list, n) }.to_vec())
}

/// One listed device as plain values.
fn read_device(d: EpDevicePtr, index: usize, library: Option<PluginRef>) -> EpDevice {
    let api = ort::api();
    // SAFETY: `d` is a device from `GetEpDevices`; each accessor reads a field of it, and the
    // hardware device it returns lives as long as the device.
    unsafe {
        let hw = (api.EpDevice_Device)(d);
        let hardware = match (api.HardwareDevice_Type)(hw) {
            ort::sys::OrtHardwareDeviceType::OrtHardwareDeviceType_GPU => Hardware::Gpu,
            ort::sys::OrtHardwareDeviceType::OrtHardwareDeviceType_NPU => Hardware::Npu,
            ort::sys::OrtHardwareDeviceType::OrtHardwareDeviceType_CPU => Hardware::Cpu,
        };
        EpDevice {
            provider: c_text((api.EpDevice_EpName)(d)),
            provider_vendor: c_text((api.EpDevice_EpVendor)(d)),
            hardware,
            pci_vendor_id: (api.HardwareDevice_VendorId)(hw),
            device_id: (api.HardwareDevice_DeviceId)(hw),
            hardware_vendor: c_text((api.HardwareDevice_Vendor)(hw)),
            library,
            index,
        }
    }
}

fn key(d: &EpDevice) -> (String, u32, u32, Hardware) {
    (d.provider.clone(), d.pci_vendor_id, d.device_id, d.hardware)
}

fn source_label(s: PluginSource) -> &'static str {
    match s {
        PluginSource::Explicit => "explicit",
        PluginSource::Python => "python",
        PluginSource::NornirHome => "nornir-home",
        _ => "other",
    }
}

/// The devices ONNX Runtime lists now, as plain values.
fn listed(rt: &Host<'_>) -> Result<Vec<EpDevice>, String> {
    Ok(raw_devices(rt)?.into_iter().enumerate().map(|(i, d)| read_device(d, i, None)).collect())
}

/// Registers every usable library of `found` not registered before in this process. The devices
/// a library adds are the ones that appear in ONNX Runtime's list when it registers.
pub(crate) fn register_new(rt: &Host<'_>, found: &PluginDiscovery) {
    let mut state = rt.plugins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for lib in &found.libraries {
        if state.reports.iter().any(|r| r.path == lib.path && r.error.is_none()) {
            continue;
        }
        let mut report = PluginReport {
            name: lib.name.clone(),
            path: lib.path.clone(),
            source: source_label(lib.source).to_owned(),
            error: lib.problem.clone(),
            devices: Vec::new(),
            trial: None,
        };
        if report.error.is_none() {
            let before = listed(rt);
            let (how, outcome) = crate::load::plugin_trial::trial(
                crate::load::plugin_trial::OrtLibrary { ort_path: rt.ort_path, ort_version: rt.ort_version },
                &lib.name,
                &lib.path,
            );
            report.trial = Some(how);
            match outcome.and_then(|()| register(rt, &lib.name, &lib.path)) {
                Ok(()) => match (before, listed(rt)) {
                    (Ok(before), Ok(after)) => {
                        let plugin = PluginRef { name: lib.name.clone(), path: lib.path.display().to_string() };
                        for d in after.into_iter().filter(|d| !before.iter().any(|b| key(b) == key(d))) {
                            let hardware = d.hardware.label().to_ascii_uppercase();
                            report.devices.push(format!("{} on {} {hardware}", d.provider, d.hardware_vendor));
                            state.origins.push((key(&d), plugin.clone()));
                        }
                        if report.devices.is_empty() {
                            tracing::info!(plugin = %lib.name, "registered, but it lists no device on this machine");
                        }
                    }
                    // The device list's own error says so too; no device is credited to it.
                    (Err(e), _) | (_, Err(e)) => tracing::warn!(
                        plugin = %lib.name,
                        "registered, but which devices it added is unknown: ONNX Runtime could not list its devices: {e}"
                    ),
                },
                Err(e) => report.error = Some(explain(&e, rt.ort_version)),
            }
        }
        state.reports.retain(|r| r.path != report.path);
        state.reports.push(report);
    }
}

/// ONNX Runtime's device list as it stands, each plugin device with its library, and every
/// plugin library tried so far in this process.
pub(crate) fn device_list(rt: &Host<'_>) -> DeviceList {
    let state = rt.plugins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (devices, error) = match raw_devices(rt) {
        Ok(list) => {
            let devices = list
                .into_iter()
                .enumerate()
                .map(|(i, d)| {
                    let mut dev = read_device(d, i, None);
                    dev.library = state.origins.iter().find(|(k, _)| *k == key(&dev)).map(|(_, p)| p.clone());
                    dev
                })
                .collect();
            (devices, None)
        }
        Err(e) => (Vec::new(), Some(format!("ONNX Runtime could not list its devices: {e}"))),
    };
    DeviceList { plugins: state.reports.clone(), devices, error }
}

fn register(rt: &Host<'_>, name: &str, path: &Path) -> Result<(), String> {
    let name = CString::new(name).map_err(|_| "a plugin name with a NUL byte".to_owned())?;
    let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| "a plugin path with a NUL byte".to_owned())?;
    tracing::debug!(plugin = ?name, path = ?path, "registering a plugin execution provider");
    // SAFETY: the environment is alive and the two strings outlive the call. ONNX Runtime loads
    // the library and calls its `CreateEpFactories`: the probe checked that it exports it, and
    // the trial (plugin_trial.rs) that registering it did not end a process of its own.
    status(unsafe {
        (ort::api().RegisterExecutionProviderLibrary)(rt.env.ptr().cast_mut(), name.as_ptr(), path.as_ptr())
    })
}

/// A registration error with what it most likely means.
fn explain(error: &str, ort_version: &str) -> String {
    let lower = error.to_ascii_lowercase();
    if lower.contains("newer onnx runtime") {
        return error.to_owned();
    }
    if lower.contains("version") || lower.contains("api") && lower.contains("not") {
        return format!(
            "{error}: the plugin needs a newer ONNX Runtime than the {ort_version} loaded; load a newer one (--ort-lib, ORT_DYLIB_PATH)"
        );
    }
    error.to_owned()
}

/// Appends the plugin provider on `device` to the session being built.
pub(crate) fn append_device(rt: &Host<'_>, builder: &mut SessionBuilder, device: &EpDevice) -> Result<(), String> {
    let list = raw_devices(rt)?;
    let Some(&d) = list.get(device.index).filter(|&&d| read_device(d, device.index, None).provider == device.provider)
    else {
        return Err(format!("ONNX Runtime no longer lists {} at position {}", device.provider, device.index));
    };
    let devices = [d];
    // SAFETY: the session options and the environment are alive; `devices` holds one device
    // from this environment's list; no provider options are passed.
    status(unsafe {
        (ort::api().SessionOptionsAppendExecutionProvider_V2)(
            builder.ptr().cast_mut(),
            rt.env.ptr().cast_mut(),
            devices.as_ptr(),
            devices.len(),
            std::ptr::null(),
            std::ptr::null(),
            0,
        )
    })
}

/// What the plugin calls need of the loaded ONNX Runtime (runtime.rs lends it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Host<'a> {
    pub env: &'a ort::environment::Environment,
    /// The library file, which a plugin's trial loads in a process of its own.
    pub ort_path: &'a Path,
    pub ort_version: &'a str,
    pub plugins: &'a std::sync::Mutex<PluginState>,
}

/// What registering plugins remembers for the life of the process.
#[derive(Debug, Default)]
pub(crate) struct PluginState {
    reports: Vec<PluginReport>,
    origins: Vec<((String, u32, u32, Hardware), PluginRef)>,
}
