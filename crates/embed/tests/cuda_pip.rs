//! CUDA as people install it: `pip install nvidia-cudnn-cu13 nvidia-cuda-runtime` into a venv
//! (`cargo xtask test` makes that venv from the pinned wheels and sets `NORNIR_TEST_CUDA_VENV`).
//! The CUDA provider of onnxruntime-gpu 1.31.1 does not list cuDNN as NEEDED: it `dlopen`s
//! `libcudnn.so.9` by name when it runs, and the loader's path, fixed at process start, does not
//! hold the venv. So nornir must find cuDNN in the venv and load it before the session is built.
//!
//! The machine is simulated: a fake NVIDIA driver tree (`NORNIR_PROBE_ROOT`) and stub CUDA
//! libraries with every symbol the real provider imports (stand-ins for the driver, cuBLAS and
//! cuRAND, which a machine without a GPU cannot run), so that the real provider registers and
//! the session is built on it. cuDNN and the CUDA runtime in the venv are the real pip files.
//!
//! The test runs itself again as a child process with that environment from the start, as a
//! user's process would have it; the child checks its own `/proc/self/maps`.

#![cfg(feature = "cuda")]

mod common;

use std::path::{Path, PathBuf};

use nornir_embed::{Embedder, EmbedderOptions};
use nornir_gpu_probe::{Opened, RequirementStatus};
use nornir_test_support::cuda_stubs::{CudaFault, cuda_stubs};
use nornir_test_support::stubs::nvidia_driver_tree;
use nornir_test_support::{env_path, venv_site_packages};

const TEST: &str = "cudnn_from_a_pip_venv_is_resident_once_a_cuda_embedder_is_built";
const CHILD: &str = "NORNIR_TEST_CUDA_PIP_CHILD";

/// The venv's cuDNN main library, as pip lays it out.
fn venv_cudnn(venv: &Path) -> PathBuf {
    venv_site_packages(venv).join("nvidia/cudnn/lib/libcudnn.so.9")
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn cudnn_from_a_pip_venv_is_resident_once_a_cuda_embedder_is_built() {
    nornir_test_support::needs_assets!();
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let venv = env_path("NORNIR_TEST_CUDA_VENV");
    assert!(venv_cudnn(&venv).is_file(), "no cuDNN in {}: run `cargo xtask test`", venv.display());
    let ort = env_path("NORNIR_TEST_ORT_GPU");
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    nvidia_driver_tree(&root);
    let stubs = t.path().join("cuda-stubs");
    cuda_stubs(&stubs, &ort.with_file_name("libonnxruntime_providers_cuda.so"), CudaFault::AtFirstKernel);
    let out = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", TEST, "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("NORNIR_PROBE_ROOT", &root)
        .env("NORNIR_CUDA_LIBS", &stubs)
        .env("VIRTUAL_ENV", &venv)
        .env_remove("NORNIR_DEVICE")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run the child");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child failed ({}):\n{text}", out.status);
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

fn child() {
    let venv = env_path("NORNIR_TEST_CUDA_VENV");
    let cudnn = venv_cudnn(&venv);
    let maps = || std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    assert!(!maps().contains("libcudnn"), "cuDNN is mapped before anything asked for it");

    let options = EmbedderOptions::default().with_ort_library(env_path("NORNIR_TEST_ORT_GPU")).with_threads(2);
    let e = Embedder::new(&common::model_dir(), &options).expect("auto falls back to the CPU at worst");
    let report = e.report();
    let cuda = report
        .registrations
        .iter()
        .find(|r| r.provider == "CUDAExecutionProvider")
        .expect("a simulated NVIDIA machine plans CUDA");
    assert!(cuda.registered(), "the real provider registers against the stubs: {:?}", cuda.error());
    let preflight = cuda.preflight.as_ref().expect("the CUDA registration carries its preflight");
    let req = preflight.requirements.iter().find(|r| r.soname == "libcudnn.so.9").expect("cuDNN in the preflight");
    assert_eq!(req.opened, Opened::AtRunTime);
    assert_eq!(req.status, RequirementStatus::Loaded, "{req:?}");
    assert_eq!(req.path.as_deref(), Some(cudnn.as_path()));

    let cudnn = cudnn.display().to_string();
    assert!(maps().lines().any(|l| l.ends_with(&cudnn)), "{cudnn} is not mapped into this process");
    // The venv has no cuFFT or NVRTC: reported as missing, never fatal.
    for soname in ["libcufft.so.12", "libnvrtc.so.13"] {
        let r = preflight.requirements.iter().find(|r| r.soname == soname).expect(soname);
        assert_eq!((r.opened, r.status), (Opened::AtRunTime, RequirementStatus::Missing), "{r:?}");
    }
}
