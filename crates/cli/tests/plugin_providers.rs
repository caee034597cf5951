//! Plugin execution providers, with real plugins from PyPI pip-installed beside onnxruntime
//! 1.31.1 in a venv that `cargo xtask test` makes (`NORNIR_TEST_EP_VENV`):
//!
//! | plugin | here (a machine without a GPU) |
//! | --- | --- |
//! | nxrt-ep-cpu 0.1.0.dev6 (`cpu_ep`) | lists the CPU; `--providers cpu_ep` runs the model on it |
//! | onnxruntime-ep-webgpu 0.4.0 | registers, lists no device (it needs a DRM GPU) |
//! | onnxruntime-ep-openvino 1.8.1 | registers; lists no device on an AMD CPU, one on an Intel CPU |
//!
//! and bad ones: a truncated copy, a library without `CreateEpFactories`, plugins that need a
//! newer ONNX Runtime than the 1.22.2 loaded (one refuses, one crashes it), and a stub compiled
//! here whose loading kills the process (standing in for a broken vendor plugin).

#![cfg(feature = "embed-ort")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{model, s};
use nornir_test_support::{cosine, env_path};

fn nornir(args: &[&str], env: &[(&str, &Path)]) -> Output {
    common::nornir_with(args, env)
}

fn ok(o: &Output) -> &[u8] {
    assert!(o.status.success(), "{}: {}", o.status, String::from_utf8_lossy(&o.stderr));
    &o.stdout
}

fn site_packages() -> PathBuf {
    let lib = env_path("NORNIR_TEST_EP_VENV").join("lib");
    let py = std::fs::read_dir(&lib)
        .expect("venv lib")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .expect("a python3.x folder");
    py.path().join("site-packages")
}

fn cpu_plugin() -> PathBuf {
    site_packages().join("nxrt_ep_cpu/libonnx_runtime_ep_cpu_plugin.so")
}

fn doctor(extra: &[&str], env: &[(&str, &Path)]) -> serde_json::Value {
    let mut args = vec!["vector", "doctor", "--json"];
    args.extend_from_slice(extra);
    serde_json::from_slice(ok(&nornir(&args, env))).expect("doctor JSON")
}

fn plugin<'a>(d: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    d["ort"]["devices"]["plugins"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no plugin {name} in {}", d["ort"]["devices"]))
}

fn intel_cpu() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains("GenuineIntel"))
}

/// Embeds the parity sample as float32 rows of 384 on the CPU build of ONNX Runtime.
fn embed_sample(extra: &[&str], env: &[(&str, &Path)]) -> Vec<Vec<f32>> {
    common::embed_parity_sample(&env_path("NORNIR_TEST_ORT_CPU"), extra, env)
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_pip_installed_cpu_plugin_is_found_listed_and_runs_the_model_like_the_cpu() {
    nornir_test_support::needs_assets!();
    let venv = env_path("NORNIR_TEST_EP_VENV");
    let ort = env_path("NORNIR_TEST_ORT_CPU");
    let env: [(&str, &Path); 1] = [("VIRTUAL_ENV", &venv)];
    let d = doctor(&["--ort-lib", s(&ort)], &env);
    let devices = d["ort"]["devices"]["devices"].as_array().expect("device list");
    let cpu_ep = devices.iter().find(|x| x["provider"] == "cpu_ep").unwrap_or_else(|| panic!("{devices:?}"));
    assert_eq!(cpu_ep["hardware"], "cpu");
    assert_eq!(cpu_ep["library"]["name"], "nxrt_ep_cpu", "found by its CreateEpFactories export: {cpu_ep}");
    assert!(devices.iter().any(|x| x["provider"] == "CPUExecutionProvider" && x["library"].is_null()));
    assert_eq!(plugin(&d, "nxrt_ep_cpu")["source"], "python");
    // The two real plugins that find nothing to run on here: registered, no device, no error.
    let webgpu = plugin(&d, "onnxruntime_ep_webgpu");
    assert!(webgpu["error"].is_null(), "{webgpu}");
    assert_eq!(webgpu["devices"], serde_json::json!([]), "no DRM GPU here: {webgpu}");
    let openvino = plugin(&d, "onnxruntime_ep_openvino");
    assert!(openvino["error"].is_null(), "{openvino}");
    if intel_cpu() {
        eprintln!("OpenVINO lists {} on this Intel CPU", openvino["devices"]);
    } else {
        assert_eq!(openvino["devices"], serde_json::json!([]), "an AMD CPU: {openvino}");
    }
    // Auto never picks a CPU plugin on its own, and says how to ask for it.
    assert_eq!(d["plan"]["providers"], serde_json::json!(["Cpu"]));
    let reasons = d["plan"]["reasons"].to_string();
    assert!(reasons.contains("--providers cpu_ep"), "{reasons}");
    assert!(d["witnesses"]["disagreements"].as_array().is_some_and(Vec::is_empty), "{}", d["witnesses"]);

    // Asked for by name on the float32 model, whose nodes it claims some of: it is the active
    // provider, with its library and device.
    let fp32 = env_path("NORNIR_TEST_PARAPHRASE_MODEL");
    let d = doctor(&["--ort-lib", s(&ort), "--model", s(&fp32), "--providers", "cpu_ep"], &env);
    let session = &d["session"];
    assert_eq!(session["active_provider"], "cpu_ep", "{session}");
    assert_eq!(session["active_device"]["library"]["name"], "nxrt_ep_cpu");
    assert_eq!(session["active_device"]["hardware"], "cpu");
    let nodes = &session["placement"]["nodes"];
    assert!(nodes["cpu_ep"].as_u64().is_some_and(|n| n > 0), "{nodes}");
    // On the int8 model it claims none: the report names the CPU provider, and says why.
    let m = model();
    let d = doctor(&["--ort-lib", s(&ort), "--model", s(&m), "--providers", "cpu_ep"], &env);
    let session = &d["session"];
    if session["placement"]["nodes"]["cpu_ep"].is_null() {
        assert_eq!(session["active_provider"], "CPUExecutionProvider", "{session}");
        let why = session["fallback"].as_str().unwrap_or_default();
        assert!(why.contains("cpu_ep registered, but ONNX Runtime gave it none"), "{why}");
    }

    // Its vectors are the CPU provider's.
    let cpu = embed_sample(&[], &env);
    let plugin_rows = embed_sample(&["--providers", "cpu_ep"], &env);
    assert_eq!(cpu.len(), 99);
    assert_eq!(plugin_rows.len(), cpu.len());
    let worst = cpu.iter().zip(&plugin_rows).map(|(a, b)| cosine(a, b)).fold(1.0f32, f32::min);
    assert!(worst >= 0.9999, "lowest cosine {worst}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn an_explicit_plugin_library_needs_no_pip() {
    nornir_test_support::needs_assets!();
    let ort = env_path("NORNIR_TEST_ORT_CPU");
    let lib = cpu_plugin();
    let entry = format!("mycpu={}", lib.display());
    let d = doctor(&["--ort-lib", s(&ort), "--ep-lib", &entry], &[]);
    assert_eq!(plugin(&d, "mycpu")["source"], "explicit");
    let listed = d["ort"]["devices"]["devices"].to_string();
    assert!(listed.contains("\"mycpu\""), "{listed}");
    // The same through the environment, with the text report.
    let o = nornir(&["vector", "doctor", "--ort-lib", s(&ort)], &[("NORNIR_EP_LIBS", Path::new(&entry))]);
    let text = String::from_utf8_lossy(ok(&o)).into_owned();
    assert!(text.contains("ONNX Runtime devices (GetEpDevices)"), "{text}");
    assert!(text.contains("cpu_ep on AMD CPU") || text.contains("cpu_ep on Intel"), "{text}");
    assert!(text.contains("plugin mycpu ("), "{text}");
    assert!(text.contains("witnesses: agree"), "{text}");
    // A provider nobody lists is a reason line, and the CPU answers.
    let m = model();
    let o = nornir(
        &["vector", "doctor", "--json", "--ort-lib", s(&ort), "--model", s(&m), "--providers", "no_such_ep"],
        &[],
    );
    let d: serde_json::Value = serde_json::from_slice(ok(&o)).expect("JSON");
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
    assert!(d["plan"]["reasons"].to_string().contains("no_such_ep: skipped: ONNX Runtime lists no device"));
}

/// A library that kills the process as it is loaded, exporting `CreateEpFactories` as a plugin
/// does: it stands in for a vendor plugin broken on this machine.
fn crashing_plugin(dir: &Path) -> PathBuf {
    nornir_test_support::stubs::stub_library(
        dir,
        "libcrash_ep.so",
        "void* CreateEpFactories(void) { return 0; }\n\
         void ReleaseEpFactory(void) {}\n\
         __attribute__((constructor)) static void crash(void) { *(volatile int*)0 = 0; }\n",
        &[],
    )
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn bad_plugins_are_report_lines_and_the_cpu_answers() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let good = std::fs::read(cpu_plugin()).expect("read the plugin");
    let truncated = t.path().join("libtruncated.so");
    std::fs::write(&truncated, &good[..good.len() / 3]).expect("write");
    let not_a_plugin = site_packages().join("onnxruntime_ep_openvino/libhwloc.so.15");
    let crash = crashing_plugin(t.path());
    let openvino = site_packages().join("onnxruntime_ep_openvino/libonnxruntime_providers_openvino_plugin.so");
    let entries = [
        format!("truncated={}", truncated.display()),
        format!("hwloc={}", not_a_plugin.display()),
        format!("crash={}", crash.display()),
        format!("openvino={}", openvino.display()),
        format!("nxrt={}", cpu_plugin().display()),
    ];
    let ort_1_22 = env_path("NORNIR_TEST_ORT_1_22");
    let m = model();
    let mut args = vec!["--ort-lib", s(&ort_1_22), "--model", s(&m), "--providers", "cpu_ep"];
    for e in &entries {
        args.extend(["--ep-lib", e.as_str()]);
    }
    for isolate in [false, true] {
        let mut a = args.clone();
        if isolate {
            a.push("--isolate");
        }
        let d = doctor(&a, &[]);
        let error = |name: &str| plugin(&d, name)["error"].as_str().unwrap_or_default().to_owned();
        assert!(error("truncated").contains("truncated"), "{}", error("truncated"));
        assert!(error("hwloc").contains("does not export CreateEpFactories"), "{}", error("hwloc"));
        assert!(error("crash").contains("crashes ONNX Runtime 1.22.2"), "{}", error("crash"));
        // Tried by a fresh nornir process (`__probe-plugin`), not a fork of this one.
        let trial = plugin(&d, "crash")["trial"].as_str().unwrap_or_default().to_owned();
        assert!(trial.starts_with("tried first in a process of its own, by "), "{trial}");
        let ov = error("openvino");
        assert!(ov.contains("1.22.2") && ov.contains("newer ONNX Runtime"), "{ov}");
        let nx = error("nxrt");
        assert!(nx.contains("crashes ONNX Runtime 1.22.2") && nx.contains("newer ONNX Runtime"), "{nx}");
        assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider", "isolate {isolate}: {}", d["session"]);
    }
    // Embedding with all of them named still answers, on the CPU.
    let mut a =
        vec!["vector", "embed", "--quiet", "--ort-lib", s(&ort_1_22), "--model", s(&m), "--providers", "cpu_ep"];
    for e in &entries {
        a.extend(["--ep-lib", e.as_str()]);
    }
    a.push("one text");
    let out = String::from_utf8_lossy(ok(&nornir(&a, &[]))).into_owned();
    assert_eq!(out.lines().count(), 1, "{out}");
}
