//! Every fallback on real ONNX Runtime builds (fetched, pinned and verified by `cargo xtask test`),
//! each in its own `nornir` process since a process can load only one ONNX Runtime:
//!
//! | build | on this machine (no GPU) |
//! | --- | --- |
//! | onnxruntime 1.31.1 (CPU) | CPU; a forced GPU is "not in this build" |
//! | onnxruntime-gpu 1.31.1 | CUDA fails naming libcublasLt.so.13; CPU runs |
//! | onnxruntime-migraphx 1.27.1 | MIGraphX fails naming a missing AMD library; CPU runs |
//! | onnxruntime-rocm 1.22.2 | (see crates/embed/tests/ort_1_22.rs) |
//!
//! Simulated GPU machines (`NORNIR_PROBE_ROOT` pointing at a fake driver tree, stub vendor
//! libraries with the real sonames, compiled at test time) make `auto` request the GPU: the real
//! provider then fails to register, or (with stub CUDA libraries that carry every symbol the real
//! provider imports) registers and fails when the session is created or at its first kernel; the
//! model runs on CPU, and every report says so.

#![cfg(feature = "embed-ort")]

mod common;
use nornir_test_support::stubs as support;

use common::{model, s};
use nornir_test_support::cuda_stubs::{CudaFault, cuda_stubs};
use nornir_test_support::env_path;

use std::path::Path;
use std::process::Output;

fn nornir(args: &[&str], env: &[(&str, &Path)]) -> Output {
    common::nornir_with(args, env)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn doctor(ort: &Path, device: &str, env: &[(&str, &Path)]) -> serde_json::Value {
    doctor_with(ort, device, env, &[])
}

fn doctor_with(ort: &Path, device: &str, env: &[(&str, &Path)], extra: &[&str]) -> serde_json::Value {
    let m = model();
    let mut args = vec!["vector", "doctor", "--json", "--model", s(&m), "--ort-lib", s(ort), "--device", device];
    args.extend_from_slice(extra);
    let o = nornir(&args, env);
    assert!(o.status.success(), "{}: {}", o.status, text(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("doctor JSON")
}

/// Embeds the parity sample and checks it against the reference (cosine >= 0.9999).
fn assert_parity(ort: &Path, env: &[(&str, &Path)]) {
    let reference = std::fs::read(env_path("NORNIR_TEST_CORPUS").join("parity-sample.f32")).expect("reference");
    let (got, want) = (common::embed_parity_sample(ort, &[], env), common::f32_rows(&reference));
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.len(), 384, "row {i}");
        let cos: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        assert!(cos >= 0.9999, "{}: row {i} cosine {cos}", ort.display());
    }
}

fn registration<'a>(d: &'a serde_json::Value, provider: &str) -> &'a serde_json::Value {
    d["session"]["registrations"]
        .as_array()
        .and_then(|r| r.iter().find(|x| x["provider"] == provider))
        .unwrap_or_else(|| panic!("no {provider} registration in {d}"))
}

fn missing_in_preflight(reg: &serde_json::Value) -> Vec<String> {
    reg["preflight"]["requirements"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["status"] == "missing")
        .map(|r| r["soname"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn cpu_build_runs_on_cpu_and_a_forced_gpu_is_not_in_this_build() {
    nornir_test_support::needs_assets!();
    let ort = env_path("NORNIR_TEST_ORT_CPU");
    let d = doctor(&ort, "auto", &[]);
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
    assert_eq!(d["ort"]["version"], "1.31.1");
    assert_parity(&ort, &[]);
    let m = model();
    let o = nornir(&["vector", "embed", "--model", s(&m), "--ort-lib", s(&ort), "--device", "cuda", "x"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("CUDAExecutionProvider: not in this build of ONNX Runtime"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn cuda_build_forced_is_an_error_naming_libcublaslt_and_auto_falls_back() {
    nornir_test_support::needs_assets!();
    if common::skip_on_a_gpu_machine("cuda_build_forced_is_an_error_naming_libcublaslt_and_auto_falls_back") {
        return;
    }
    let ort = env_path("NORNIR_TEST_ORT_GPU");
    let m = model();
    let o = nornir(&["vector", "embed", "--model", s(&m), "--ort-lib", s(&ort), "--device", "cuda", "x"], &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("forced to cuda") && err.contains("libcublasLt.so.13: cannot open shared object file"),
        "{err}"
    );
    assert!(err.contains("preflight: libcublasLt.so.13"), "the preflight agrees: {err}");
    // doctor --json keeps each provider's outcome and preflight next to the session error.
    let forced = doctor(&ort, "cuda", &[]);
    assert!(forced["session"]["error"].as_str().is_some_and(|e| e.contains("forced to cuda")), "{forced}");
    assert_eq!(forced["session"]["forced_vendor"], "cuda", "{forced}");
    let cuda = registration(&forced, "CUDAExecutionProvider");
    assert_eq!(cuda["ok"], false);
    assert!(missing_in_preflight(cuda).contains(&"libcublasLt.so.13".to_owned()), "{cuda}");
    assert!(forced["next_step"].as_str().is_some_and(|n| n.contains("install what the session error")), "{forced}");
    // The same through a child process: the child's typed report is read back whole.
    let isolated = doctor_with(&ort, "cuda", &[], &["--isolate"]);
    assert_eq!(isolated["session"], forced["session"]);
    assert_eq!(isolated["next_step"], forced["next_step"]);
    let d = doctor(&ort, "auto", &[]);
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
    assert_eq!(d["plan"]["vendor"], "cpu", "no driver: auto does not even request CUDA");
    assert_parity(&ort, &[]);
}

/// NVIDIA simulated: driver tree + stub libcuda.so.1 (one device) and libcudart.so.13.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn simulated_nvidia_machine_requests_cuda_which_fails_and_cpu_runs() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let (root, libs) = support::simulated_nvidia_machine(t.path());
    let env: [(&str, &Path); 2] = [("NORNIR_PROBE_ROOT", &root), ("NORNIR_CUDA_LIBS", &libs)];
    let ort = env_path("NORNIR_TEST_ORT_GPU");
    let d = doctor(&ort, "auto", &env);
    assert_eq!(d["cuda"]["available"], true, "{}", d["cuda"]);
    assert_eq!(d["plan"]["vendor"], "cuda");
    assert_eq!(d["plan"]["providers"], serde_json::json!(["Cuda", "Cpu"]));
    let cuda = registration(&d, "CUDAExecutionProvider");
    assert_eq!(cuda["ok"], false);
    let error = cuda["error"].as_str().unwrap_or_default();
    assert!(error.contains("libcublasLt.so.13"), "{error}");
    let missing = missing_in_preflight(cuda);
    assert!(missing.contains(&"libcublasLt.so.13".to_owned()), "{missing:?}");
    assert!(
        !missing.contains(&"libcuda.so.1".to_owned()) && !missing.contains(&"libcudart.so.13".to_owned()),
        "the stubs were preloaded: {missing:?}"
    );
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
    assert_eq!(d["session"]["placement"]["status"], "known");
    assert!(d["session"]["placement"]["nodes"].get("CUDAExecutionProvider").is_none());
    assert_parity(&ort, &env);
}

/// AMD simulated: kfd tree + stub libamdhip64.so.7 (one device) and a stub libmigraphx_c.so.3
/// that lacks every symbol the real provider needs, with the real onnxruntime-migraphx build.
#[cfg(feature = "embed-ort-rocm")]
#[test]
fn simulated_amd_machine_requests_migraphx_which_fails_and_cpu_runs() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    support::amd_driver_tree(&root);
    let libs = t.path().join("rocm-libs");
    let hip = support::stub_hip(&libs, "libamdhip64.so.7", 1);
    support::stub_library(&libs, "libmigraphx_c.so.3", "int nornir_stub_has_no_migraphx_api = 1;\n", &[&hip]);
    let env: [(&str, &Path); 2] = [("NORNIR_PROBE_ROOT", &root), ("NORNIR_ROCM_LIBS", &libs)];
    let ort = env_path("NORNIR_TEST_ORT_MIGRAPHX");
    let d = doctor(&ort, "auto", &env);
    assert_eq!(d["rocm"]["available"], true, "{}", d["rocm"]);
    assert_eq!(d["plan"]["vendor"], "rocm");
    let mig = registration(&d, "MIGraphXExecutionProvider");
    assert_eq!(mig["ok"], false);
    assert!(mig["error"].as_str().is_some_and(|e| !e.is_empty()), "{mig}");
    // ONNX Runtime 1.27.1 has no ROCm provider: the report says it left in 1.23, and the way on.
    let rocm = registration(&d, "ROCMExecutionProvider");
    let why = rocm["error"].as_str().unwrap_or_default();
    assert!(why.contains("left ONNX Runtime in 1.23") && why.contains("1.22.2") && why.contains("MIGraphX"), "{rocm}");
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
    assert_parity(&ort, &env);

    // Forced on the same machine: an error, never a silent CPU run.
    let m = model();
    let o = nornir(&["vector", "embed", "--model", s(&m), "--ort-lib", s(&ort), "--device", "rocm", "x"], &env);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("forced to rocm"));
}

/// The real MIGraphX build on this machine with no AMD driver at all: forced is an error that
/// names a missing AMD library; auto runs on CPU.
#[cfg(feature = "embed-ort-rocm")]
#[test]
fn migraphx_build_forced_names_the_missing_library() {
    if common::skip_on_a_gpu_machine("migraphx_build_forced_names_the_missing_library") {
        return;
    }
    let ort = env_path("NORNIR_TEST_ORT_MIGRAPHX");
    let m = model();
    let o = nornir(&["vector", "embed", "--model", s(&m), "--ort-lib", s(&ort), "--device", "rocm", "x"], &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("libmigraphx_c.so.3") || err.contains("libamdhip64.so.7"), "{err}");
    let d = doctor(&ort, "auto", &[]);
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
}

/// A simulated NVIDIA machine whose stub CUDA device fails as `fault` says, with the real GPU
/// build: `auto` requests CUDA, registration succeeds, the model ends on CPU with a `fallback` that
/// contains every one of `reason`, and the parity sample still matches; forced, it is an error
/// that names the first part of the reason.
fn assert_cuda_fault_falls_back_to_cpu(fault: CudaFault, reason: &[&str]) {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    support::nvidia_driver_tree(&root);
    let libs = t.path().join("cuda-libs");
    let ort = env_path("NORNIR_TEST_ORT_GPU");
    cuda_stubs(&libs, &ort.with_file_name("libonnxruntime_providers_cuda.so"), fault);
    let env: [(&str, &Path); 2] = [("NORNIR_PROBE_ROOT", &root), ("NORNIR_CUDA_LIBS", &libs)];
    let d = doctor(&ort, "auto", &env);
    assert_eq!(d["plan"]["vendor"], "cuda", "{}", d["cuda"]);
    let cuda = registration(&d, "CUDAExecutionProvider");
    assert_eq!(cuda["ok"], true, "registration succeeds: {cuda}");
    let fallback =
        d["session"]["fallback"].as_str().unwrap_or_else(|| panic!("no fallback recorded: {}", d["session"]));
    assert!(reason.iter().all(|part| fallback.contains(part)), "{reason:?} in {fallback}");
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
    assert_eq!(d["session"]["gpu_vendor"], "cpu");
    assert_parity(&ort, &env);

    let m = model();
    let o = nornir(&["vector", "embed", "--model", s(&m), "--ort-lib", s(&ort), "--device", "cuda", "x"], &env);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("forced to cuda") && err.contains(reason[0]), "{err}");
}

/// A GPU provider that registers but fails when the session is created: the session is rebuilt
/// on CPU.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn cuda_registers_but_session_creation_fails_then_cpu_runs() {
    nornir_test_support::needs_assets!();
    assert_cuda_fault_falls_back_to_cpu(
        CudaFault::AtSessionCreation,
        &["creating the session with CUDAExecutionProvider failed", "rebuilt on CPUExecutionProvider"],
    );
}

/// A GPU that builds the session and then faults at its first kernel: the failed batch runs again
/// on a CPU session, every text once, in order.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn cuda_fails_at_run_time_and_the_batch_runs_again_on_cpu() {
    nornir_test_support::needs_assets!();
    assert_cuda_fault_falls_back_to_cpu(
        CudaFault::AtFirstKernel,
        &["running a batch on CUDAExecutionProvider failed", "illegal memory access", "ran that batch again"],
    );
}

/// CUDA libraries as pip installs them, in a venv (`NORNIR_TEST_CUDA_VENV`: nvidia-cudnn-cu13 and
/// nvidia-cuda-runtime from their pinned wheels), on a simulated NVIDIA machine whose stub CUDA
/// libraries let the real provider register: doctor lists cuDNN, which the provider opens by name
/// at run time, as loaded from the venv, beside the NEEDED libraries; cuFFT and NVRTC, which the
/// venv lacks, are listed as missing, and the provider still registers.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn doctor_lists_cudnn_from_a_pip_venv_as_opened_at_run_time() {
    nornir_test_support::needs_assets!();
    let venv = env_path("NORNIR_TEST_CUDA_VENV");
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    support::nvidia_driver_tree(&root);
    let libs = t.path().join("cuda-libs");
    let ort = env_path("NORNIR_TEST_ORT_GPU");
    cuda_stubs(&libs, &ort.with_file_name("libonnxruntime_providers_cuda.so"), CudaFault::AtFirstKernel);
    let env: [(&str, &Path); 3] = [("NORNIR_PROBE_ROOT", &root), ("NORNIR_CUDA_LIBS", &libs), ("VIRTUAL_ENV", &venv)];
    let d = doctor(&ort, "auto", &env);
    let cuda = registration(&d, "CUDAExecutionProvider");
    assert_eq!(cuda["ok"], true, "{cuda}");
    let requirement = |soname: &str| -> serde_json::Value {
        cuda["preflight"]["requirements"]
            .as_array()
            .and_then(|r| r.iter().find(|x| x["soname"] == soname))
            .unwrap_or_else(|| panic!("no {soname} in {cuda}"))
            .clone()
    };
    let cudnn = requirement("libcudnn.so.9");
    assert_eq!(cudnn["opened"], "at_run_time", "{cudnn}");
    assert_eq!(cudnn["status"], "loaded", "{cudnn}");
    let path = cudnn["path"].as_str().unwrap_or_default();
    assert!(path.starts_with(s(&venv)) && path.ends_with("site-packages/nvidia/cudnn/lib/libcudnn.so.9"), "{path}");
    for soname in ["libcufft.so.12", "libnvrtc.so.13"] {
        let r = requirement(soname);
        assert_eq!((r["opened"].as_str(), r["status"].as_str()), (Some("at_run_time"), Some("missing")), "{r}");
    }
    assert_eq!(requirement("libcublasLt.so.13")["opened"], "needed");

    let m = model();
    let o = nornir(&["vector", "doctor", "--model", s(&m), "--ort-lib", s(&ort), "--device", "auto"], &env);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        out.contains(&format!(
            "libcudnn.so.9, opened at run time by libonnxruntime_providers_cuda.so: loaded ({path})"
        )),
        "{out}"
    );
    assert!(out.contains("libcufft.so.12, opened at run time by libonnxruntime_providers_cuda.so: missing"), "{out}");
    assert!(out.contains("libcublasLt.so.13, needed by libonnxruntime_providers_cuda.so: loaded"), "{out}");
}
