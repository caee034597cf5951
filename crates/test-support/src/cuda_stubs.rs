//! Stub CUDA libraries generated from the real CUDA provider's imports (onnxruntime-gpu 1.31.1's
//! `libonnxruntime_providers_cuda.so`), so that the real provider loads and registers on a
//! machine without a GPU, and a stub device that fails where a test wants it to.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the stub CUDA device fails.
#[derive(Clone, Copy, PartialEq)]
pub enum CudaFault {
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
pub fn cuda_stubs(dir: &Path, provider: &Path, fault: CudaFault) {
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
