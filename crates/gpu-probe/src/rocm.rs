//! AMD: where the ROCm/HIP runtime lives, and how to count devices. Compiled only with `rocm`.

use crate::context::ProbeContext;
use crate::library::LibrarySpec;
use crate::paths::{SearchPath, versioned_dirs};
use crate::vendor::VendorSpec;

pub(crate) const SPEC: VendorSpec = VendorSpec {
    key: "rocm",
    label: "ROCm",
    libraries: &[
        LibrarySpec {
            name: "libamdhip64",
            sonames: &["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"],
            required: true,
        },
        LibrarySpec { name: "libMIOpen", sonames: &["libMIOpen.so.1"], required: false },
        LibrarySpec { name: "libmigraphx_c", sonames: &["libmigraphx_c.so.3"], required: false },
    ],
    count_library: "libamdhip64",
    init_symbol: None,
    count_symbol: "hipGetDeviceCount",
    visible_vars: &["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"],
};

/// `NORNIR_ROCM_LIBS`, `$ROCM_PATH`, `$HIP_PATH`, `/opt/nornir/rocm`, `/opt/rocm*/lib` (newest
/// first), the distribution's folder.
pub fn search_path(ctx: &ProbeContext) -> SearchPath {
    let mut sp = SearchPath::default();
    sp.push_env_list(ctx, "NORNIR_ROCM_LIBS");
    for var in ["ROCM_PATH", "HIP_PATH"] {
        sp.push_env_prefix(ctx, var, &["lib", "lib64"]);
    }
    sp.push(ctx.system_path("/opt/nornir/rocm"));
    for dir in versioned_dirs(&ctx.system_path("/opt"), "rocm") {
        sp.push(dir.join("lib"));
    }
    sp.push(ctx.system_path("/usr/lib/x86_64-linux-gnu"));
    sp
}
