//! A simulated AMD machine: a fake kfd tree and a stub libamdhip64.so.7 with the real soname.
//! Stands in for a real AMD GPU, which this machine does not have. Only with the `rocm` feature.
#![cfg(feature = "rocm")]

use nornir_test_support::stubs as support;

use nornir_gpu_probe::{ProbeContext, probe_with};
use support::*;

#[test]
fn available_with_driver_hip_and_a_device() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    amd_driver_tree(&root);
    let libs = t.path().join("rocm-libs");
    stub_hip(&libs, "libamdhip64.so.7", 1);
    let ctx = ProbeContext::with_root(&root).with_var("NORNIR_ROCM_LIBS", &libs);
    let r = probe_with(&ctx).rocm;
    assert!(r.compiled && r.driver_present, "{r:?}");
    assert_eq!(r.driver.gpus.len(), 1, "{:?}", r.driver.gpus);
    assert!(r.driver.gpus[0].contains("90010") && r.driver.gpus[0].contains("gfx90a"));
    assert!(r.available, "{}", r.summary);
    assert_eq!(r.device_count, Some(1));
    let hip = &r.libraries[0];
    assert_eq!(hip.path.as_deref(), Some(libs.join("libamdhip64.so.7").as_path()));
    assert!(hip.loaded);
    for var in ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"] {
        let r = probe_with(&ctx.clone().with_var(var, "-1")).rocm;
        assert!(!r.available && r.summary.contains(var), "{}", r.summary);
    }
}

#[test]
fn driver_absent_or_no_gpu_node() {
    let t = tempfile::tempdir().expect("tempdir");
    let libs = t.path().join("rocm-libs");
    stub_hip(&libs, "libamdhip64.so.6", 1);
    let r = probe_with(&ProbeContext::with_root(t.path().join("none")).with_var("NORNIR_ROCM_LIBS", &libs)).rocm;
    assert!(!r.driver_present && !r.available);
    assert!(r.summary.contains("/dev/kfd"), "{}", r.summary);

    let root = t.path().join("cpu-only");
    write(&root, "/dev/kfd", "");
    write(&root, "/sys/class/kfd/kfd/topology/nodes/0/properties", "gfx_target_version 0\n");
    let r = probe_with(&ProbeContext::with_root(&root).with_var("NORNIR_ROCM_LIBS", &libs)).rocm;
    assert!(!r.driver_present, "a kfd with only CPU nodes is no GPU");
    assert!(r.driver.problems.iter().any(|p| p.contains("non-zero gfx_target_version")), "{:?}", r.driver.problems);
}

#[test]
fn libraries_absent() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    amd_driver_tree(&root);
    let r = probe_with(&ProbeContext::with_root(&root)).rocm;
    assert!(r.driver_present && !r.available);
    assert!(r.summary.contains("libamdhip64 is missing"), "{}", r.summary);
}

#[test]
fn malformed_sysfs_is_reported_not_fatal() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    write(&root, "/dev/kfd", "");
    write(&root, "/sys/class/kfd/kfd/topology/nodes/0/properties", "gfx_target_version banana\n");
    write(&root, "/sys/class/kfd/kfd/topology/nodes/1/properties", "\u{0}\u{1}\u{2}");
    std::fs::create_dir_all(root.join("sys/class/kfd/kfd/topology/nodes/2")).expect("node without properties");
    let r = probe_with(&ProbeContext::with_root(&root)).rocm;
    assert!(!r.driver_present);
    let problems = r.driver.problems.join("\n");
    assert!(problems.contains("banana"), "{problems}");
    assert!(problems.contains("no gfx_target_version line"), "{problems}");
    assert!(problems.contains("nodes/2/properties"), "{problems}");
}
