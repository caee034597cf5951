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

#[path = "../../gpu-probe/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn env_path(var: &str) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| panic!("{var} unset: run `cargo xtask test`"));
    assert!(p.exists(), "{} missing: run `cargo xtask test`", p.display());
    p
}

fn model() -> PathBuf {
    env_path("NORNIR_TEST_MODEL")
}

fn nornir(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nornir"));
    cmd.args(args)
        .env_remove("NORNIR_DEVICE")
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("NORNIR_CUDA_LIBS")
        .env_remove("NORNIR_ROCM_LIBS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run nornir")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn doctor(ort: &Path, device: &str, env: &[(&str, &Path)]) -> serde_json::Value {
    let m = model();
    let o = nornir(&["vector", "doctor", "--json", "--model", s(&m), "--ort-lib", s(ort), "--device", device], env);
    assert!(o.status.success(), "{}: {}", o.status, text(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("doctor JSON")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Embeds the parity sample and checks it against the reference (cosine >= 0.9999).
fn assert_parity(ort: &Path, env: &[(&str, &Path)]) {
    let sample = env_path("NORNIR_TEST_CORPUS").join("parity-sample.txt");
    let reference = std::fs::read(env_path("NORNIR_TEST_CORPUS").join("parity-sample.f32")).expect("reference");
    let m = model();
    let o = nornir(
        &[
            "vector",
            "embed",
            "--quiet",
            "--format",
            "f32",
            "--model",
            s(&m),
            "--ort-lib",
            s(ort),
            "--input",
            s(&sample),
        ],
        env,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(o.stdout.len(), reference.len());
    let f =
        |b: &[u8]| -> Vec<f32> { b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
    let (got, want) = (f(&o.stdout), f(&reference));
    for (i, (a, b)) in got.chunks_exact(384).zip(want.chunks_exact(384)).enumerate() {
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
fn cpu_build_runs_on_cpu_and_a_forced_gpu_is_not_in_this_build() {
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
fn cuda_build_forced_is_an_error_naming_libcublaslt_and_auto_falls_back() {
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
    let d = doctor(&ort, "auto", &[]);
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
    assert_eq!(d["plan"]["vendor"], "cpu", "no driver: auto does not even request CUDA");
    assert_parity(&ort, &[]);
}

/// NVIDIA simulated: driver tree + stub libcuda.so.1 (one device) and libcudart.so.13.
#[test]
fn simulated_nvidia_machine_requests_cuda_which_fails_and_cpu_runs() {
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
    let rocm = registration(&d, "ROCMExecutionProvider");
    assert!(rocm["error"].as_str().is_some_and(|e| e.contains("not in this build")), "{rocm}");
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
    let ort = env_path("NORNIR_TEST_ORT_MIGRAPHX");
    let m = model();
    let o = nornir(&["vector", "embed", "--model", s(&m), "--ort-lib", s(&ort), "--device", "rocm", "x"], &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("libmigraphx_c.so.3") || err.contains("libamdhip64.so.7"), "{err}");
    let d = doctor(&ort, "auto", &[]);
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
}

/// Where the stub CUDA device fails.
#[derive(Clone, Copy, PartialEq)]
enum CudaFault {
    /// `cudaGetDeviceProperties` fails, which ONNX Runtime calls only when it creates the
    /// provider for a session: a device error that shows only then.
    AtSessionCreation,
    /// Host memory stands in for device memory, so the session builds and the weights are
    /// copied; the first kernel launch faults the device, and from then on every call returns
    /// "illegal memory access", as a real GPU does after an Xid fault: a failure at run time.
    AtFirstKernel,
}

/// Stub CUDA libraries with every symbol the real CUDA provider imports, so that the provider
/// loads and registers; they report one device that fails as `fault` says.
fn cuda_stubs(dir: &Path, provider: &Path, fault: CudaFault) {
    let nm = Command::new("nm").args(["-D", "--undefined-only"]).arg(provider).output().expect("run nm (binutils)");
    assert!(nm.status.success());
    let mut by_lib: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
    for line in String::from_utf8_lossy(&nm.stdout).lines() {
        let Some(sym) = line.split_whitespace().last() else { continue };
        match sym.split_once('@') {
            // Versioned: the version node is the library's soname (cudart, cublas, cublasLt).
            Some((name, version)) if version.trim_start_matches('@').starts_with("libcu") => {
                by_lib.entry(version.trim_start_matches('@').to_owned()).or_default().push(name.to_owned());
            }
            // Unversioned driver API (cuTensorMapEncodeTiled); Provider_GetHost and the like
            // belong to ONNX Runtime's own shared library and must not be stubbed.
            None if sym.starts_with("cu") => by_lib.entry("libcuda.so.1".to_owned()).or_default().push(sym.to_owned()),
            _ => {}
        }
    }
    by_lib.entry("libcurand.so.10".to_owned()).or_default();
    // What the probe calls in the driver library to count devices.
    by_lib.entry("libcuda.so.1".to_owned()).or_default().extend(["cuInit".to_owned(), "cuDeviceGetCount".to_owned()]);
    let common = |name: &str| -> Option<String> {
        Some(match name {
            "cudaGetDeviceCount" => "int cudaGetDeviceCount(int* n) { *n = 1; return 0; }".to_owned(),
            "cuDeviceGetCount" => "int cuDeviceGetCount(int* n) { *n = 1; return 0; }".to_owned(),
            // The provider's static initialisers register their kernels and keep the handle.
            "__cudaRegisterFatBinary" => "static void* nornir_fatbin_slot[64]; void** __cudaRegisterFatBinary(void* f) { (void)f; return nornir_fatbin_slot; }".to_owned(),
            _ => return None,
        })
    };
    let at_creation = |name: &str| -> Option<String> {
        Some(match name {
            "cudaGetDeviceProperties" => {
                "int cudaGetDeviceProperties(void* p, int d) { (void)p; (void)d; return 100; }".to_owned()
            }
            "cudaGetErrorString" | "cudaGetErrorName" => format!(
                "const char* {name}(int e) {{ (void)e; return \"no CUDA-capable device is detected (nornir test stub)\"; }}"
            ),
            "cudaMalloc" => "int cudaMalloc(void** p, unsigned long n) { (void)n; *p = 0; return 2; }".to_owned(),
            _ => return None,
        })
    };
    // After the first kernel launch every call that touches the device returns 700.
    let at_kernel = |name: &str| -> Option<String> {
        let fault = "nornir_fault = 700; return 700;";
        let sticky = "return nornir_fault;";
        let alloc = "*p = calloc(1, n ? n : 1); return *p ? 0 : 2;";
        Some(match name {
            "cudaGetDeviceProperties" => "int cudaGetDeviceProperties(void* p, int d) { (void)d; memset(p, 0, 512); strcpy((char*)p, \"nornir stub GPU\"); return 0; }".to_owned(),
            "cudaGetErrorString" | "cudaGetErrorName" => format!("const char* {name}(int e) {{ return e == 700 ? \"an illegal memory access was encountered (nornir test stub)\" : \"nornir test stub error\"; }}"),
            "cudaMalloc" => format!("int cudaMalloc(void** p, size_t n) {{ {alloc} }}"),
            "cudaMallocHost" => format!("int cudaMallocHost(void** p, size_t n) {{ {alloc} }}"),
            "cudaHostAlloc" => format!("int cudaHostAlloc(void** p, size_t n, unsigned f) {{ (void)f; {alloc} }}"),
            "cudaMallocFromPoolAsync" => format!("int cudaMallocFromPoolAsync(void** p, size_t n, void* pool, void* s) {{ (void)pool; (void)s; {alloc} }}"),
            "cudaFree" | "cudaFreeHost" => format!("int {name}(void* p) {{ free(p); return 0; }}"),
            "cudaFreeAsync" => "int cudaFreeAsync(void* p, void* s) { (void)s; free(p); return 0; }".to_owned(),
            "cudaMemcpy" => format!("int cudaMemcpy(void* d, const void* s, size_t n, int k) {{ (void)k; if (nornir_fault) {sticky} memcpy(d, s, n); return 0; }}"),
            "cudaMemcpyAsync" => format!("int cudaMemcpyAsync(void* d, const void* s, size_t n, int k, void* st) {{ (void)k; (void)st; if (nornir_fault) {sticky} memcpy(d, s, n); return 0; }}"),
            "cudaMemcpy2DAsync" => format!("int cudaMemcpy2DAsync(char* d, size_t dp, const char* s, size_t sp, size_t w, size_t h, int k, void* st) {{ (void)k; (void)st; if (nornir_fault) {sticky} for (size_t r = 0; r < h; r++) memcpy(d + r * dp, s + r * sp, w); return 0; }}"),
            "cudaMemcpyFromSymbol" => format!("int cudaMemcpyFromSymbol(void* d, const char* sym, size_t n, size_t off, int k) {{ (void)k; if (nornir_fault) {sticky} memcpy(d, sym + off, n); return 0; }}"),
            "cudaMemset" => format!("int cudaMemset(void* p, int v, size_t n) {{ if (nornir_fault) {sticky} memset(p, v, n); return 0; }}"),
            "cudaMemsetAsync" => format!("int cudaMemsetAsync(void* p, int v, size_t n, void* s) {{ (void)s; if (nornir_fault) {sticky} memset(p, v, n); return 0; }}"),
            "cudaGetDevice" => "int cudaGetDevice(int* d) { *d = 0; return 0; }".to_owned(),
            "cudaDeviceGetAttribute" => "int cudaDeviceGetAttribute(int* v, int a, int d) { (void)a; (void)d; *v = 1; return 0; }".to_owned(),
            "cudaDriverGetVersion" | "cudaRuntimeGetVersion" => format!("int {name}(int* v) {{ *v = 13000; return 0; }}"),
            "cudaMemGetInfo" => "int cudaMemGetInfo(size_t* f, size_t* t) { *f = *t = (size_t)16 << 30; return 0; }".to_owned(),
            "cudaStreamCreate" | "cudaEventCreate" | "cublasCreate_v2" | "cublasLtCreate" => format!("int {name}(void** h) {{ *h = calloc(1, 64); return 0; }}"),
            "cudaStreamCreateWithFlags" | "cudaEventCreateWithFlags" => format!("int {name}(void** h, unsigned f) {{ (void)f; *h = calloc(1, 64); return 0; }}"),
            "cudaStreamIsCapturing" => "int cudaStreamIsCapturing(void* s, int* c) { (void)s; *c = 0; return 0; }".to_owned(),
            "cudaPointerGetAttributes" => "int cudaPointerGetAttributes(void* a, const void* p) { (void)p; memset(a, 0, 24); return 0; }".to_owned(),
            "cudaFuncGetAttributes" => "int cudaFuncGetAttributes(void* a, const void* f) { (void)f; memset(a, 0, 48); return 0; }".to_owned(),
            "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags" => format!("int {name}(int* n) {{ *n = 1; return 0; }}"),
            "cudaGetDriverEntryPointByVersion" => "int cudaGetDriverEntryPointByVersion(const char* s, void** f, unsigned v, unsigned long long fl, int* st) { (void)s; (void)v; (void)fl; *f = 0; if (st) *st = 1; return 500; }".to_owned(),
            "cudaLaunchKernel" | "__cudaLaunchKernel" | "cudaLaunchKernelExC" | "cudaLaunchCooperativeKernel" | "cudaGraphLaunch" => format!("int {name}() {{ {fault} }}"),
            "cudaGetLastError" | "cudaPeekAtLastError" | "cudaStreamSynchronize" | "cudaDeviceSynchronize" | "cudaEventSynchronize" | "cudaStreamWaitEvent" | "cudaEventRecord" | "cudaEventRecordWithFlags" => format!("int {name}() {{ {sticky} }}"),
            n if n.starts_with("cublas") => format!("int {n}() {{ return nornir_fault ? 13 : 0; }}"),
            _ => return None,
        })
    };
    let prelude = match fault {
        CudaFault::AtSessionCreation => String::new(),
        CudaFault::AtFirstKernel => {
            "#include <stdlib.h>\n#include <string.h>\n__attribute__((weak)) int nornir_fault = 0;\n".to_owned()
        }
    };
    let special = |name: &str| -> Option<String> {
        common(name).or_else(|| match fault {
            CudaFault::AtSessionCreation => at_creation(name),
            CudaFault::AtFirstKernel => at_kernel(name),
        })
    };
    let mut built: Vec<PathBuf> = Vec::new();
    for (lib, syms) in &by_lib {
        let mut src = prelude.clone();
        for s in syms {
            src.push_str(&special(s).unwrap_or_else(|| format!("long {s}(void) {{ return 0; }}")));
            src.push('\n');
        }
        if syms.is_empty() {
            src.push_str("int nornir_stub_placeholder;\n");
        }
        let script = dir.join(format!("{lib}.map"));
        let versioned = lib != "libcuda.so.1" && !syms.is_empty();
        if versioned {
            std::fs::create_dir_all(dir).expect("mkdir");
            std::fs::write(&script, format!("{lib} {{ global: {}; local: *; }};\n", syms.join("; ")))
                .expect("version script");
        }
        let c = dir.join(format!("{lib}.c"));
        std::fs::create_dir_all(dir).expect("mkdir");
        std::fs::write(&c, src).expect("source");
        let out = dir.join(lib);
        let mut cmd = Command::new("cc");
        cmd.args(["-shared", "-fPIC", "-w", "-o"]).arg(&out).arg(&c).arg(format!("-Wl,-soname,{lib}"));
        if versioned {
            cmd.arg(format!("-Wl,--version-script={}", script.display()));
        }
        assert!(cmd.status().expect("cc").success(), "stub {lib}");
        built.push(out);
    }
    assert!(built.iter().any(|p| p.ends_with("libcublasLt.so.13")), "{by_lib:?}");
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
fn cuda_registers_but_session_creation_fails_then_cpu_runs() {
    assert_cuda_fault_falls_back_to_cpu(
        CudaFault::AtSessionCreation,
        &["creating the session with CUDAExecutionProvider failed", "rebuilt on CPUExecutionProvider"],
    );
}

/// A GPU that builds the session and then faults at its first kernel: the failed batch runs again
/// on a CPU session, every text once, in order.
#[test]
fn cuda_fails_at_run_time_and_the_batch_runs_again_on_cpu() {
    assert_cuda_fault_falls_back_to_cpu(
        CudaFault::AtFirstKernel,
        &["running a batch on CUDAExecutionProvider failed", "illegal memory access", "ran that batch again"],
    );
}
