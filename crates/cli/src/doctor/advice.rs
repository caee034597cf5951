//! The doctor's last line: one sentence a person can act on.

use nornir_vector::diagnostics::{Plan, ProbeReport};

use super::SessionDoc;
use crate::commands::OrtChoice;

/// One sentence a person can act on.
pub(super) fn next_step(
    probe: &ProbeReport,
    plan: Option<&Plan>,
    ort: &OrtChoice,
    session: Option<&SessionDoc>,
) -> String {
    if ort.path.is_none() || ort.error.is_some() && ort.version.is_none() {
        let oldest = crate::commands::oldest_ort().map(|(major, minor)| format!(" ({major}.{minor} or newer)"));
        return format!(
            "get ONNX Runtime: run `cargo xtask fetch`, or set ORT_DYLIB_PATH (or --ort-lib) to a libonnxruntime.so{}",
            oldest.unwrap_or_default()
        );
    }
    match session {
        Some(SessionDoc::Failed(f)) if f.forced_vendor.is_some() => {
            return "install what the session error above names as missing, or use --device auto to run on the CPU"
                .to_owned();
        }
        Some(SessionDoc::Failed(_)) => {
            return "fix the session error above; `nornir vector doctor --model DIR -v` shows ONNX Runtime's own log"
                .to_owned();
        }
        #[cfg(feature = "embed-ort")]
        Some(SessionDoc::Running(r)) => {
            let s = &r.session;
            if let Some(why) = &r.unclaimed {
                return format!("{why}: name another provider, or run a model whose operators it has");
            }
            if let Some(f) = &s.fallback {
                return format!(
                    "the GPU failed, so the CPU runs the model; check the device and its driver ({})",
                    f.chars().take(120).collect::<String>()
                );
            }
            if s.active_provider != "CPUExecutionProvider" {
                return format!("nothing to do: the model runs on {}", s.active_provider);
            }
            if let Some((provider, error)) = s.registrations.iter().find_map(|r| Some((&r.provider, r.error()?))) {
                return format!("make {provider} work: {error}");
            }
        }
        None => {}
    }
    if let Some(p) = plan {
        if p.vendor.label() == "cpu" {
            if !probe.cuda.driver_present && !probe.rocm.driver_present {
                let amd = if probe.rocm.compiled {
                    ""
                } else {
                    " (this build has no AMD support: add --features embed-ort-rocm)"
                };
                return format!(
                    "no GPU driver found, so the CPU runs the model; on a GPU machine install the NVIDIA or AMD kernel driver{amd}"
                );
            }
            let gpu = if probe.cuda.driver_present { &probe.cuda } else { &probe.rocm };
            return format!("the {} driver is present but the GPU is not usable: {}", gpu.vendor, gpu.summary);
        }
        let missing: Vec<&str> = p
            .providers
            .iter()
            .filter_map(|x| x.builtin()?.library_name())
            .filter(|n| !ort.providers.iter().any(|o| o == n))
            .collect();
        if !missing.is_empty() {
            return format!(
                "the chosen ONNX Runtime has no {} provider: point ORT_DYLIB_PATH at a build that has it",
                missing.join("/")
            );
        }
        return "run `nornir vector doctor --model DIR` to see which provider really runs the model".to_owned();
    }
    "this build has no embedder: rebuild with --features embed-ort".to_owned()
}
