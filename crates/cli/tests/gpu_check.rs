//! Dry run of `scripts/gpu-check.sh`, the CUDA check for a lent NVIDIA machine, on this machine
//! without a GPU: every step but the GPU itself.
//!
//! The bundle is the one `cargo xtask gpu-bundle` makes (here from the debug `nornir`, built by
//! `cargo xtask test` into `NORNIR_TEST_GPU_BUNDLE`), reassembled and verified by the script. The
//! NVIDIA machine is simulated: a driver tree under `NORNIR_PROBE_ROOT` with a stub
//! `libcuda.so.1` in its distribution folder, and stub CUDA 13 libraries (generated from the real
//! provider's imports) in a fake pip wheel folder `site/nvidia/cu13/lib` that stands in for the
//! machine's `nvidia-cuda-runtime`, `nvidia-cublas` and `nvidia-curand` wheels; the script finds
//! them through Python's `sys.path` (PYTHONPATH here), as it does there. The stub device faults
//! at its first kernel, so the real CUDA provider registers and builds its session, then fails:
//! the script must say that CUDA did not run the model, and still measure everything else.

#![cfg(feature = "embed-ort")]

mod common;
use nornir_test_support::stubs as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nornir_test_support::cuda_stubs::{CudaFault, cuda_stubs};
use nornir_test_support::{env_path, venv_site_packages};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu-check.sh")
}

/// Runs the script with `bundle`, results into `dir/out`; `env` on top of a clean environment.
fn gpu_check(dir: &Path, bundle: &Path, env: &[(&str, &Path)]) -> (Output, serde_json::Value) {
    let out = dir.join("out");
    let mut cmd = Command::new("bash");
    cmd.arg(script())
        .arg(&out)
        .env("NORNIR_GPU_BUNDLE", bundle)
        .env("NORNIR_GPU_CHECK_WORK", dir.join("work"))
        .env_remove("NORNIR_DEVICE")
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("NORNIR_ORT_LIB")
        .env_remove("NORNIR_CUDA_LIBS")
        .env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("run bash scripts/gpu-check.sh");
    let summary = std::fs::read(out.join("summary.json"))
        .unwrap_or_else(|e| panic!("no summary.json ({e}): {}", String::from_utf8_lossy(&o.stderr)));
    (o, serde_json::from_slice(&summary).expect("summary.json is JSON"))
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn dry_run_on_a_simulated_nvidia_machine_measures_everything_and_says_cuda_did_not_run() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    support::nvidia_driver_tree(&root);
    let wheel_libs = t.path().join("site/nvidia/cu13/lib");
    let provider = env_path("NORNIR_TEST_ORT_GPU").with_file_name("libonnxruntime_providers_cuda.so");
    cuda_stubs(&wheel_libs, &provider, CudaFault::AtFirstKernel);
    // The driver library comes with the kernel driver, not from pip.
    let system_libs = root.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(&system_libs).expect("mkdir");
    std::fs::rename(wheel_libs.join("libcuda.so.1"), system_libs.join("libcuda.so.1")).expect("move libcuda");
    let corpus = t.path().join("corpus.txt");
    let lines: Vec<String> = std::fs::read_to_string(env_path("NORNIR_TEST_CORPUS").join("corpus.txt"))
        .expect("corpus")
        .lines()
        .take(200)
        .map(str::to_owned)
        .collect();
    std::fs::write(&corpus, lines.join("\n") + "\n").expect("write corpus");
    // The real cuDNN as pip installs it, from the venv `cargo xtask test` makes, also on Python's path.
    let cudnn_site = venv_site_packages(&env_path("NORNIR_TEST_CUDA_VENV"));
    let site = std::ffi::OsString::from(format!("{}:{}", t.path().join("site").display(), cudnn_site.display()));
    let site = Path::new(&site);
    // The decoder step with a tiny Qwen3 (the real check writes Qwen3-Embedding-0.6B's shape).
    let env: [(&str, &Path); 4] = [
        ("NORNIR_PROBE_ROOT", &root),
        ("PYTHONPATH", site),
        ("NORNIR_GPU_CHECK_CORPUS", &corpus),
        ("NORNIR_GPU_CHECK_DECODER", Path::new("tiny")),
    ];

    let (o, sum) = gpu_check(t.path(), &env_path("NORNIR_TEST_GPU_BUNDLE"), &env);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "the check ran and CUDA did not run the model: {stderr}");
    assert_eq!(sum["status"], "fail", "{sum:#}");
    assert!(sum["driver"].as_str().is_some_and(|d| d.contains("580.95.05")), "{}", sum["driver"]);
    assert!(sum["nornir"].as_str().is_some_and(|v| v.starts_with("nornir ")), "{}", sum["nornir"]);

    // Found through Python, not a fixed path.
    assert_eq!(sum["cuda_libs"]["source"], "found with python3");
    let folders = sum["cuda_libs"]["folders"].as_str().unwrap_or_default();
    assert!(folders.split(':').any(|f| Path::new(f) == wheel_libs), "{folders}");
    let libs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.path().join("out/cuda-libs.json")).expect("cuda-libs.json"))
            .expect("JSON");
    assert!(libs["found"]["libcublasLt.so.13"].is_string(), "{libs:#}");
    let cudnn = cudnn_site.join("nvidia/cudnn/lib/libcudnn.so.9");
    assert_eq!(libs["found"]["libcudnn.so.9"], cudnn.display().to_string(), "{libs:#}");
    assert!(libs["missing"].as_array().is_some_and(|m| m.contains(&"libcufft.so.12".into())), "{libs:#}");

    // cuDNN, which the provider opens by name at run time, was loaded from there before the run.
    let run_time = sum["opened_at_run_time"].as_array().cloned().unwrap_or_default();
    let q = run_time.iter().find(|q| q["soname"] == "libcudnn.so.9").unwrap_or_else(|| panic!("{sum:#}"));
    assert_eq!((q["status"].as_str(), q["path"].as_str()), (Some("loaded"), cudnn.to_str()), "{q}");

    // CUDA was requested, registered, built its session and failed at its first kernel.
    assert_eq!(sum["cuda_ran_the_model"], false);
    assert_eq!(sum["active_provider"], "CPUExecutionProvider");
    let cuda = sum["registrations"]
        .as_array()
        .and_then(|r| r.iter().find(|x| x["provider"] == "CUDAExecutionProvider"))
        .unwrap_or_else(|| panic!("no CUDA registration: {sum:#}"));
    assert_eq!(cuda["ok"], true, "{cuda}");
    // The provider opens the real cuDNN when it builds its session, and cuDNN finds no real
    // device behind the stubs: that is the reason given.
    let fallback = sum["fallback"].as_str().unwrap_or_default();
    assert!(
        fallback.contains("creating the session with CUDAExecutionProvider failed") && fallback.contains("cudnnCreate"),
        "{fallback}"
    );
    assert_eq!(sum["cuda_libs"]["ld_library_path"], "no help");
    assert_eq!(sum["steps"]["doctor"]["exit"], 1);
    assert!(sum["steps"]["embed-cuda"]["error"].as_str().is_some_and(|e| e.contains("forced to cuda")), "{sum:#}");
    assert!(sum["parity"]["cuda"].is_null());
    assert_eq!(sum["steps"]["bench-cuda"]["exit"], 2);

    // Everything that does not need the GPU was measured.
    let cpu = &sum["parity"]["cpu"];
    assert_eq!(cpu["rows"], 99);
    assert!(cpu["min_cosine"].as_f64().is_some_and(|c| c >= 0.999), "{cpu}");
    assert_eq!(cpu["pass"], true);
    let cpu_bench = &sum["benches"]["cpu"];
    assert_eq!(cpu_bench["texts"], 200, "{cpu_bench}");
    assert!(sum["texts_per_second"]["nornir_cpu"].as_f64().is_some_and(|r| r > 0.0), "{sum:#}");
    assert!(sum["placement"]["nodes"]["CPUExecutionProvider"].as_u64().is_some_and(|n| n > 0), "{}", sum["placement"]);

    // The decoder was written, converted (float16 weights) and ran on CPU; CUDA did not run it.
    let decoder = &sum["decoder"];
    assert_eq!(decoder["shape"], "tiny", "{decoder:#}");
    assert_eq!(sum["steps"]["decoder-convert"]["exit"], 0, "{sum:#}");
    assert_eq!(sum["steps"]["decoder-embed-cpu"]["exit"], 0, "{sum:#}");
    assert_ne!(sum["steps"]["decoder-embed-cuda"]["exit"], 0, "{sum:#}");
    assert!(decoder["parity_cuda_vs_cpu"].is_null(), "{decoder:#}");
    assert!(decoder["texts_per_second"]["cpu"].as_f64().is_some_and(|r| r > 0.0), "{decoder:#}");

    // No GPU for torch here (and usually no torch): the peer says why it was skipped.
    let peer = &sum["sentence_transformers"];
    assert_eq!(peer["status"], "skipped", "{peer}");
    assert!(peer["reason"].as_str().is_some_and(|r| !r.is_empty()), "{peer}");

    let md = std::fs::read_to_string(t.path().join("out/summary.md")).expect("summary.md");
    assert!(md.contains("# nornir GPU check: fail") && md.contains("| nornir, CPU |"), "{md}");
    assert!(md.contains(&format!("- libcudnn.so.9 (opened at run time): loaded from {}", cudnn.display())), "{md}");

    // A rerun finds the bundle verified and unpacked, and does not unpack it again.
    let stamp = t.path().join("work/.verified");
    let before = std::fs::metadata(&stamp).and_then(|m| m.modified()).expect("stamp");
    let (o, _) = gpu_check(t.path(), &env_path("NORNIR_TEST_GPU_BUNDLE"), &env);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::metadata(&stamp).and_then(|m| m.modified()).expect("stamp"), before);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("checking the bundle's parts"));
}

/// Parts that did not arrive or arrived damaged: exit 3, and summary.json names each of them, so
/// the session knows what to send again; nothing is run.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn an_incomplete_or_damaged_bundle_names_the_parts_to_send_again() {
    nornir_test_support::needs_assets!();
    let full = env_path("NORNIR_TEST_GPU_BUNDLE");
    let manifest = std::fs::read_to_string(full.join("MANIFEST")).expect("MANIFEST");
    let parts: Vec<&str> =
        manifest.lines().filter_map(|l| l.strip_prefix("part ")).filter_map(|l| l.split(' ').next()).collect();
    assert!(parts.len() >= 2, "the bundle is cut into parts: {manifest}");
    let t = tempfile::tempdir().expect("tempdir");
    let bundle = t.path().join("bundle");
    std::fs::create_dir_all(&bundle).expect("mkdir");
    std::fs::write(bundle.join("MANIFEST"), &manifest).expect("write");
    std::fs::write(bundle.join(parts[0]), b"not the first part").expect("write");
    for p in &parts[1..parts.len() - 1] {
        std::os::unix::fs::symlink(full.join(p), bundle.join(p)).expect("symlink");
    }
    let (o, sum) = gpu_check(t.path(), &bundle, &[]);
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(sum["status"], "incomplete bundle");
    let reason = sum["reason"].as_str().unwrap_or_default();
    let last = parts[parts.len() - 1];
    assert!(
        reason.contains(&format!("{} (damaged", parts[0])) && reason.contains(&format!("{last} (missing)")),
        "{reason}"
    );
    assert!(!t.path().join("work").exists(), "nothing unpacked from an incomplete bundle");

    std::fs::remove_file(bundle.join("MANIFEST")).expect("rm");
    let (o, sum) = gpu_check(t.path(), &bundle, &[]);
    assert_eq!(o.status.code(), Some(3));
    assert!(sum["reason"].as_str().is_some_and(|r| r.contains("no MANIFEST")), "{sum}");
}

/// The peer's measuring code, run against stand-ins for torch and sentence-transformers (a CUDA
/// device that is "available", a model that returns one fixed vector), so that a typo in it shows
/// here and not first on the lent GPU machine.
#[test]
fn the_peer_measures_with_stand_ins_for_torch_and_sentence_transformers() {
    let t = tempfile::tempdir().expect("tempdir");
    let fakes = t.path().join("fakes");
    support::write(
        &fakes,
        "torch/__init__.py",
        "__version__ = '0.0-stand-in'\nclass cuda:\n    is_available = staticmethod(lambda: True)\n    synchronize = staticmethod(lambda: None)\n    get_device_name = staticmethod(lambda i: 'stand-in GPU')\n",
    );
    support::write(
        &fakes,
        "sentence_transformers/__init__.py",
        "__version__ = '0.0-stand-in'\n\
         class _Rows:\n    def __init__(self, n): self.values = [1.0] + [0.0] * 383; self.n = n\n    def astype(self, t): return self\n    def ravel(self): return self\n    def tolist(self): return self.values * self.n\n\
         class _P:\n    dtype = 'torch.float32'\n\
         class SentenceTransformer:\n    def __init__(self, path, device): assert device == 'cuda'\n    def parameters(self): return iter([_P()])\n    def encode(self, texts, convert_to_numpy=True): return _Rows(len(texts))\n",
    );
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    let out = t.path().join("st-peer.json");
    let o = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu_check.py"))
        .args(["st-peer", "--model", "unused", "--corpus"])
        .arg(testdata.join("parity-sample.txt"))
        .arg("--parity-input")
        .arg(testdata.join("parity-sample.txt"))
        .arg("--parity-reference")
        .arg(testdata.join("parity-sample.f32"))
        .arg("--out")
        .arg(&out)
        .env("PYTHONPATH", &fakes)
        .output()
        .expect("run python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let peer: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).expect("st-peer.json")).expect("JSON");
    assert_eq!(peer["status"], "ran", "{peer}");
    assert_eq!(peer["device"], "stand-in GPU");
    assert_eq!(peer["texts"], 99);
    assert!(peer["texts_per_second"].as_f64().is_some_and(|r| r > 0.0), "{peer}");
    assert_eq!(peer["cosine_to_int8_reference"]["rows"], 99, "{peer}");
}
