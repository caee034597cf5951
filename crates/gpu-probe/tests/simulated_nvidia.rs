//! A simulated NVIDIA machine: a fake driver tree and stub libcuda.so.1 / libcudart.so.13 with
//! the real sonames. Stands in for a real GPU, which this machine does not have.

use nornir_test_support::stubs as support;

use nornir_gpu_probe::{ProbeContext, probe_with};
use support::*;

#[test]
fn available_with_driver_libraries_and_a_device() {
    let t = tempfile::tempdir().expect("tempdir");
    let (root, libs) = simulated_nvidia_machine(t.path());
    let ctx = ProbeContext::with_root(&root).with_var("NORNIR_CUDA_LIBS", &libs);
    let r = probe_with(&ctx).cuda;
    assert!(r.driver_present, "{r:?}");
    assert_eq!(r.driver.version.as_deref(), Some("580.95.05"));
    assert!(r.available, "{}", r.summary);
    assert_eq!(r.device_count, Some(1));
    for lib in &r.libraries {
        assert_eq!(lib.path.as_deref().and_then(|p| p.parent()), Some(libs.as_path()), "{lib:?}");
        assert!(lib.loaded, "{lib:?}");
    }
    assert!(r.summary.contains("available: 1 device"), "{}", r.summary);

    // The same machine with every device hidden.
    for hidden in ["", "-1"] {
        let r = probe_with(&ctx.clone().with_var("CUDA_VISIBLE_DEVICES", hidden)).cuda;
        assert!(!r.available);
        assert!(r.summary.contains("CUDA_VISIBLE_DEVICES"), "{}", r.summary);
    }
}

#[test]
fn driver_absent_means_not_available_and_nothing_loaded() {
    let t = tempfile::tempdir().expect("tempdir");
    let libs = t.path().join("cuda-libs");
    stub_cudart(&libs);
    let ctx = ProbeContext::with_root(t.path().join("empty-root")).with_var("NORNIR_CUDA_LIBS", &libs);
    let r = probe_with(&ctx).cuda;
    assert!(!r.driver_present && !r.available);
    assert!(r.summary.contains("no CUDA driver") && r.summary.contains("/proc/driver/nvidia/version"), "{}", r.summary);
    let cudart = r.libraries.iter().find(|l| l.name == "libcudart").expect("cudart");
    assert_eq!(cudart.path.as_deref(), Some(libs.join("libcudart.so.13").as_path()), "found, even without a driver");
    assert!(!cudart.loaded, "no vendor library is loaded without its driver");
}

#[test]
fn libraries_absent_names_the_missing_file_and_the_folders() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    nvidia_driver_tree(&root);
    let empty = t.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let r = probe_with(&ProbeContext::with_root(&root).with_var("NORNIR_CUDA_LIBS", &empty)).cuda;
    assert!(r.driver_present && !r.available);
    assert!(r.summary.contains("libcuda is missing"), "{}", r.summary);
    assert!(r.summary.contains(&empty.display().to_string()), "{}", r.summary);
}

#[test]
fn a_file_that_is_not_elf_and_a_symlink_loop_are_refused_with_reasons() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    nvidia_driver_tree(&root);
    let libs = t.path().join("bad-libs");
    write(&libs, "libcuda.so.1", "this is a text file, not a library");
    std::os::unix::fs::symlink("libcudart.so.13", libs.join("libcudart.so.13")).expect("symlink loop");
    let r = probe_with(&ProbeContext::with_root(&root).with_var("NORNIR_CUDA_LIBS", &libs)).cuda;
    assert!(!r.available);
    let refused: Vec<&String> = r.libraries.iter().flat_map(|l| &l.rejected).collect();
    assert!(refused.iter().any(|x| x.contains("libcuda.so.1") && x.contains("not an ELF")), "{refused:?}");
    assert!(refused.iter().any(|x| x.contains("libcudart.so.13") && x.contains("symbolic links")), "{refused:?}");
    let text = probe_with(&ProbeContext::with_root(&root).with_var("NORNIR_CUDA_LIBS", &libs)).to_string();
    assert!(text.contains("refused") && text.contains("not an ELF"), "{text}");
}

#[test]
fn empty_relative_and_missing_entries_are_ignored_and_reported() {
    let t = tempfile::tempdir().expect("tempdir");
    let ctx = ProbeContext::with_root(t.path())
        .with_var("NORNIR_CUDA_LIBS", "::lib:/does/not/exist")
        .with_var("CUDA_HOME", "cuda");
    let r = probe_with(&ctx).cuda;
    let entries: Vec<(&str, &str)> =
        r.rejected_entries.iter().map(|e| (e.variable.as_str(), e.entry.as_str())).collect();
    assert_eq!(
        entries,
        [
            ("NORNIR_CUDA_LIBS", ""),
            ("NORNIR_CUDA_LIBS", ""),
            ("NORNIR_CUDA_LIBS", "lib"),
            ("NORNIR_CUDA_LIBS", "/does/not/exist"),
            ("CUDA_HOME", "cuda")
        ]
    );
    let cwd = std::env::current_dir().expect("cwd");
    assert!(!r.search_path.contains(&cwd), "the working folder is never searched");
}
