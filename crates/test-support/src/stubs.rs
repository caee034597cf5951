//! Test fixtures built at test time: stub shared libraries compiled with the system C compiler,
//! carrying the real sonames, and fake `/proc`, `/sys`, `/dev` trees.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `c_source` into `<dir>/<soname>` with that SONAME, linking `needed` (absolute paths
/// of other stubs) by soname only, with no rpath: the loader must find them some other way.
pub fn stub_library(dir: &Path, soname: &str, c_source: &str, needed: &[&Path]) -> PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    let src = dir.join(format!("{soname}.c"));
    std::fs::write(&src, c_source).expect("write C source");
    let out = dir.join(soname);
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".to_owned()));
    cmd.args(["-shared", "-fPIC", "-o"]).arg(&out).arg(&src).arg(format!("-Wl,-soname,{soname}"));
    for lib in needed {
        cmd.arg(format!("-L{}", lib.parent().expect("parent").display()));
        cmd.arg(format!("-l:{}", lib.file_name().expect("name").to_string_lossy()));
    }
    let status = cmd.status().expect("run cc (the tests need a C compiler)");
    assert!(status.success(), "cc failed for {soname}");
    std::fs::remove_file(&src).expect("rm source");
    out
}

/// Writes `contents` at `root/<relative>`, creating folders.
pub fn write(root: &Path, relative: &str, contents: &str) {
    let p = root.join(relative.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, contents).expect("write");
}

/// A fake root where the amdgpu driver is loaded: `/dev/kfd` and a kfd topology with one CPU
/// node and one GPU node (gfx90a).
pub fn amd_driver_tree(root: &Path) {
    write(root, "/dev/kfd", "");
    write(root, "/sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 16\ngfx_target_version 0\n");
    write(
        root,
        "/sys/class/kfd/kfd/topology/nodes/1/properties",
        "cpu_cores_count 0\nsimd_count 440\ngfx_target_version 90010\n",
    );
    write(root, "/sys/class/kfd/kfd/topology/nodes/1/name", "gfx90a\n");
}

/// A fake root where the NVIDIA kernel driver is loaded.
pub fn nvidia_driver_tree(root: &Path) {
    write(
        root,
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu Sep 25 2025\n",
    );
    write(root, "/dev/nvidiactl", "");
}

/// A simulated NVIDIA machine under `dir`: the driver tree at `dir/root` and stub
/// libcuda.so.1 (one device) and libcudart.so.13 in `dir/cuda-libs`. Returns (root, libs).
pub fn simulated_nvidia_machine(dir: &Path) -> (PathBuf, PathBuf) {
    let root = dir.join("root");
    nvidia_driver_tree(&root);
    let libs = dir.join("cuda-libs");
    stub_libcuda(&libs, 1);
    stub_cudart(&libs);
    (root, libs)
}

/// A stub HIP runtime (stands in for libamdhip64.so.7) that counts `n` devices.
pub fn stub_hip(dir: &Path, soname: &str, n: i32) -> PathBuf {
    let src = format!(
        "int hipGetDeviceCount(int* c) {{ *c = {n}; return 0; }}\nint hipRuntimeGetVersion(int* v) {{ *v = 70000000; return 0; }}\n"
    );
    stub_library(dir, soname, &src, &[])
}

/// A stub CUDA driver library (stands in for libcuda.so.1) that counts `n` devices.
pub fn stub_libcuda(dir: &Path, n: i32) -> PathBuf {
    let src = format!(
        "int cuInit(unsigned f) {{ (void)f; return 0; }}\nint cuDeviceGetCount(int* c) {{ *c = {n}; return 0; }}\n"
    );
    stub_library(dir, "libcuda.so.1", &src, &[])
}

/// A stub CUDA runtime (stands in for libcudart.so.13).
pub fn stub_cudart(dir: &Path) -> PathBuf {
    stub_library(dir, "libcudart.so.13", "int cudaRuntimeGetVersion(int* v) { *v = 13000; return 0; }\n", &[])
}
