//! What `doctor` shows before a model loads: the plan and the ONNX Runtime library it would use;
//! and this binary as the library's probe of plugin libraries.

use anyhow::Result;
use nornir_vector::diagnostics::{
    EpDevice, MIN_ORT, ModelFolder, Plan, check_library, choose_library, device_list, plan_with,
};

use super::OrtChoice;
use super::load::{model_dir, options};
use crate::args::ModelArgs;

/// The plan for these arguments, with ONNX Runtime's `devices` once listed (empty before).
pub fn plan(m: &ModelArgs, devices: &[EpDevice]) -> Result<Option<Plan>> {
    // The model's own constraint (an int8 model for the CPU) is part of the plan when it can be read.
    let cpu_only =
        model_dir(m).ok().and_then(|d| ModelFolder::open(&d, m.model_file.as_deref()).ok()).and_then(|f| f.cpu_only());
    let providers = options(m)?.providers;
    Ok(Some(plan_with(m.device, cpu_only, devices, &providers)))
}

/// Which ONNX Runtime library the plan would load, and its real version, without creating a session.
pub fn ort_choice(plan: Option<&Plan>, m: &ModelArgs) -> OrtChoice {
    let mut c = ort_pick(plan, m);
    if let Some(path) = &c.path {
        match check_library(path) {
            Ok(v) => {
                if nornir_vector::cli_support::version_at_least(&v, MIN_ORT) == Some(false) {
                    c.error = Some(format!(
                        "ONNX Runtime {v} is older than {}.{}, the oldest nornir supports: `cargo xtask fetch` provides 1.31.1",
                        MIN_ORT.0, MIN_ORT.1
                    ));
                }
                c.version = Some(v);
            }
            Err(e) => c.error = Some(nornir_vector::error_chain(&e)),
        }
    }
    if c.error.is_none()
        && let Some(plan) = plan
    {
        match device_list(plan, m.ort_lib.as_deref(), &m.ep_libs) {
            Ok(d) => c.devices = Some(d),
            Err(e) => c.error = Some(nornir_vector::error_chain(&e)),
        }
    }
    c
}

/// The devices ONNX Runtime listed in `ort` (none when it was not loaded).
pub fn listed_devices(ort: &OrtChoice) -> Vec<EpDevice> {
    ort.devices.as_ref().map(|d| d.devices.clone()).unwrap_or_default()
}

/// Which ONNX Runtime library the plan would load, from file names alone: nothing is loaded.
pub fn ort_pick(plan: Option<&Plan>, m: &ModelArgs) -> OrtChoice {
    let Some(plan) = plan else { return OrtChoice::default() };
    let (d, choice) = choose_library(plan, m.ort_lib.as_deref());
    let mut c = OrtChoice { candidates: d.candidates.clone(), searched: d.searched.clone(), ..OrtChoice::default() };
    match choice {
        None => {
            c.error = Some(format!(
                "no ONNX Runtime library found: run `cargo xtask fetch` or set ORT_DYLIB_PATH {}",
                d.problems.join("; ")
            ));
        }
        Some((cand, why)) => {
            c.path = Some(cand.path.clone());
            c.providers = cand.providers.clone();
            c.reason = why;
        }
    }
    c
}

/// Names this binary as the program that tries plugin libraries in a process of their own.
pub fn offer_plugin_probe() {
    if let Ok(exe) = std::env::current_exe() {
        nornir_vector::diagnostics::set_plugin_probe(exe);
    }
}

/// `__probe-plugin`: registers the plugin in this process, for the library's trial.
pub fn probe_plugin(a: &crate::args::ProbePluginArgs) -> std::process::ExitCode {
    nornir_vector::diagnostics::run_plugin_probe(&a.ort_library, &a.name, &a.plugin).into()
}
