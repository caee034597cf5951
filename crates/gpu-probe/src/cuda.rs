//! NVIDIA: where the CUDA driver library and runtime live, and how to count devices.

use crate::context::ProbeContext;
use crate::library::LibrarySpec;
use crate::paths::{SearchPath, python_site_dirs, versioned_dirs};
use crate::vendor::VendorSpec;

pub(crate) const SPEC: VendorSpec = VendorSpec {
    key: "cuda",
    label: "CUDA",
    libraries: &[
        LibrarySpec { name: "libcuda", sonames: &["libcuda.so.1"], required: true },
        LibrarySpec { name: "libcudart", sonames: &["libcudart.so.13", "libcudart.so.12"], required: true },
    ],
    count_library: "libcuda",
    init_symbol: Some("cuInit"),
    count_symbol: "cuDeviceGetCount",
    visible_vars: &["CUDA_VISIBLE_DEVICES"],
};

/// `NORNIR_CUDA_LIBS`, `$CUDA_PATH`, `$CUDA_HOME`, `/opt/nornir/cuda`, `/usr/local/cuda*`, pip's
/// `site-packages/nvidia/*/lib`, the distribution's folders, WSL's.
pub fn search_path(ctx: &ProbeContext) -> SearchPath {
    let mut sp = SearchPath::default();
    sp.push_env_list(ctx, "NORNIR_CUDA_LIBS");
    for var in ["CUDA_PATH", "CUDA_HOME"] {
        sp.push_env_prefix(ctx, var, &["lib64", "lib", "targets/x86_64-linux/lib"]);
    }
    sp.push(ctx.system_path("/opt/nornir/cuda"));
    for dir in versioned_dirs(&ctx.system_path("/usr/local"), "cuda") {
        sp.push(dir.join("lib64"));
    }
    for site in python_site_dirs(ctx) {
        for pkg in versioned_dirs(&site.join("nvidia"), "") {
            sp.push(pkg.join("lib"));
        }
    }
    sp.push(ctx.system_path("/usr/lib/x86_64-linux-gnu"));
    sp.push(ctx.system_path("/usr/lib/x86_64-linux-gnu/nvidia/current"));
    sp.push(ctx.system_path("/usr/lib/wsl/lib"));
    sp
}
