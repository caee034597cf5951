//! The probe against real vendor libraries on a machine without a GPU: PyPI's nvidia-cuda-runtime
//! (libcudart.so.13) and, with `rocm`, Debian 12's libamdhip64-5. `cargo xtask test` provides both,
//! without root (the Debian package is unpacked into the nornir cache).
//! Where a GPU is present, the inverse invariants are asserted instead.

use std::path::PathBuf;

use nornir_gpu_probe::{ProbeContext, probe_with};

fn cudart_dir() -> PathBuf {
    let dir = std::env::var_os("NORNIR_TEST_CUDART_DIR")
        .map(PathBuf::from)
        .expect("NORNIR_TEST_CUDART_DIR unset: run `cargo xtask test`");
    assert!(dir.join("libcudart.so.13").is_file(), "no libcudart.so.13 in {}: run `cargo xtask test`", dir.display());
    dir
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn real_cudart_is_found_and_reported_without_a_driver() {
    nornir_test_support::needs_assets!();
    let dir = cudart_dir();
    let ctx = ProbeContext::with_root("/").with_var("NORNIR_CUDA_LIBS", &dir);
    let r = probe_with(&ctx).cuda;
    let cudart = r.libraries.iter().find(|l| l.name == "libcudart").expect("libcudart entry");
    assert_eq!(cudart.path.as_deref(), Some(dir.join("libcudart.so.13").as_path()));
    assert_eq!(cudart.version.as_deref(), Some("13"));
    if r.driver_present {
        assert_eq!(r.available, r.device_count.is_some_and(|n| n > 0), "{}", r.summary);
    } else {
        assert!(!r.available);
        assert!(!cudart.loaded);
        assert!(r.summary.contains("no CUDA driver"), "{}", r.summary);
    }
}

#[cfg(feature = "rocm")]
#[test]
fn probe_degrades_to_cpu_without_rocm() {
    // Debian's package, unpacked by `cargo xtask test` into the nornir cache (no root needed).
    let dir = std::env::var_os("NORNIR_TEST_HIP_DIR")
        .map(PathBuf::from)
        .expect("NORNIR_TEST_HIP_DIR unset: run `cargo xtask test` (it unpacks libamdhip64-5)");
    let r = probe_with(&ProbeContext::with_root("/").with_var("NORNIR_ROCM_LIBS", &dir)).rocm;
    let hip = &r.libraries[0];
    assert_eq!(hip.path.as_deref(), Some(dir.join("libamdhip64.so.5").as_path()), "{hip:?}");
    assert!(hip.version.as_deref().is_some_and(|v| v.starts_with("5.")), "{hip:?}");
    if r.driver_present {
        assert_eq!(r.available, r.device_count.is_some_and(|n| n > 0));
    } else {
        assert!(!r.available, "{}", r.summary);
        assert!(r.summary.contains("no ROCm driver"), "{}", r.summary);
    }
}

#[cfg(not(feature = "rocm"))]
#[test]
fn default_build_says_amd_is_not_compiled() {
    let r = probe_with(&ProbeContext::with_root("/")).rocm;
    assert!(!r.compiled && !r.available && r.libraries.is_empty());
    assert!(r.summary.contains("--features embed-ort-rocm"), "{}", r.summary);
}
