//! The libraries a provider opens by name at run time, checked against the real provider
//! libraries of the pinned ONNX Runtime builds (`cargo xtask test` fetches them), so that the
//! probe's list cannot go stale unnoticed when a pin moves:
//! - the CUDA provider (onnxruntime-gpu 1.31.1) imports `dlopen`, and each library the probe
//!   lists for it is named in its bytes: whole, or as the two 8-byte immediates its code builds
//!   the name from (`libcudnn` + `dnn.so.9`);
//! - the MIGraphX (1.27.1) and ROCm (1.22.2) providers import no `dlopen`, so they open nothing
//!   at run time, and the probe lists nothing for them.
//!
//! And with stub libraries (compiled at test time, standing in for pip's cuDNN): a library the
//! provider opens at run time is found in a candidate folder and preloaded, and a missing one is
//! reported without failing the preload.

use std::path::Path;

use nornir_gpu_probe::{Opened, RequirementStatus, preload_provider, provider_requirements};
use nornir_test_support::env_path;
use nornir_test_support::stubs::stub_library;

fn imports_dlopen(lib: &Path) -> bool {
    let nm = std::process::Command::new("nm").args(["-D", "--undefined-only"]).arg(lib).output().expect("run nm");
    assert!(nm.status.success(), "nm {}", lib.display());
    String::from_utf8_lossy(&nm.stdout)
        .lines()
        .any(|l| l.split_whitespace().last().is_some_and(|s| s.starts_with("dlopen")))
}

/// Whether `lib` names `soname` in its bytes: whole, or as its first and last 8 bytes.
fn names(lib: &Path, soname: &str) -> bool {
    let has = |needle: &str| {
        let grep = std::process::Command::new("grep").args(["-q", "-a", "-F", needle]).arg(lib).status();
        grep.expect("run grep").success()
    };
    let n = soname.len();
    has(soname) || (n > 8 && has(&soname[..8]) && has(&soname[n - 8..]))
}

fn at_run_time(provider: &Path) -> Vec<String> {
    let r = provider_requirements(provider, &[]);
    assert!(r.error.is_none(), "{r:?}");
    r.requirements.iter().filter(|x| x.opened == Opened::AtRunTime).map(|x| x.soname.clone()).collect()
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn the_cuda_provider_opens_cudnn_cufft_and_nvrtc_at_run_time() {
    nornir_test_support::needs_assets!();
    let provider = env_path("NORNIR_TEST_ORT_GPU").with_file_name("libonnxruntime_providers_cuda.so");
    let listed = at_run_time(&provider);
    assert_eq!(listed, ["libcudnn.so.9", "libcufft.so.12", "libnvrtc.so.13"]);
    assert!(imports_dlopen(&provider));
    for soname in &listed {
        assert!(names(&provider, soname), "{soname} is not named in {}", provider.display());
    }
    let needed = nornir_gpu_probe::read_deps(&provider).expect("ELF").needed;
    assert!(listed.iter().all(|s| !needed.contains(s)), "a library opened at run time is NEEDED too: {needed:?}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn the_amd_providers_open_nothing_at_run_time() {
    nornir_test_support::needs_assets!();
    for (var, name) in [("NORNIR_TEST_ORT_MIGRAPHX", "migraphx"), ("NORNIR_TEST_ORT_1_22", "rocm")] {
        let provider = env_path(var).with_file_name(format!("libonnxruntime_providers_{name}.so"));
        assert!(!imports_dlopen(&provider), "{} imports dlopen: find what it opens", provider.display());
        assert!(at_run_time(&provider).is_empty());
    }
}

/// A stub `libonnxruntime_providers_cuda.so` linking a stub CUDA 13 runtime, and a stub
/// `libcudnn.so.9` in a folder of its own, as pip puts it in `site-packages/nvidia/cudnn/lib`.
#[test]
fn a_library_opened_at_run_time_is_preloaded_from_the_candidate_folders_and_a_missing_one_is_reported() {
    let t = tempfile::tempdir().expect("tempdir");
    let cudart =
        stub_library(&t.path().join("cu13"), "libcudart.so.13", "int nornir_stub_cudart(void) { return 13; }\n", &[]);
    let provider = stub_library(
        &t.path().join("ort"),
        "libonnxruntime_providers_cuda.so",
        "int nornir_stub_cudart(void);\nint nornir_stub_provider(void) { return nornir_stub_cudart(); }\n",
        &[&cudart],
    );
    let cudnn_dir = t.path().join("cudnn");
    let cudnn = stub_library(&cudnn_dir, "libcudnn.so.9", "int nornir_stub_cudnn(void) { return 9; }\n", &[]);
    let dirs = [t.path().join("cu13"), cudnn_dir];

    let before = provider_requirements(&provider, &dirs);
    let find = |r: &nornir_gpu_probe::ProviderRequirements, soname: &str| {
        r.requirements.iter().find(|x| x.soname == soname).cloned().unwrap_or_else(|| panic!("{soname} in {r:?}"))
    };
    let req = find(&before, "libcudnn.so.9");
    assert_eq!((req.opened, req.status), (Opened::AtRunTime, RequirementStatus::Found));
    assert!(before.missing().next().is_none(), "what is missing at run time does not block the provider");
    let summary = before.summary();
    assert!(
        summary.contains(
            "libcufft.so.12, libnvrtc.so.13 are missing, which libonnxruntime_providers_cuda.so opens by name at run time"
        ),
        "{summary}"
    );

    let after = preload_provider(&provider, &dirs);
    let req = find(&after, "libcudnn.so.9");
    assert_eq!(req.status, RequirementStatus::Loaded, "{req:?}");
    assert_eq!(req.path.as_deref(), Some(cudnn.as_path()));
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    assert!(maps.lines().any(|l| l.ends_with(&cudnn.display().to_string())), "the stub cuDNN is mapped");
    assert_eq!(find(&after, "libcufft.so.12").status, RequirementStatus::Missing);
    assert_eq!(find(&after, "libcudart.so.13").opened, Opened::Needed);
}
