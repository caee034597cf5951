//! AMD: where the ROCm/HIP runtime lives, and how to count devices. Compiled only with `rocm`.

use crate::context::ProbeContext;
use crate::driver::DriverReport;
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

/// AMD: `/dev/kfd` and at least one kfd topology node with a non-zero `gfx_target_version`.
pub(crate) fn driver(ctx: &ProbeContext) -> DriverReport {
    let mut r = DriverReport::default();
    let kfd = ctx.system_path("/dev/kfd");
    let has_kfd = kfd.exists();
    if has_kfd {
        r.evidence.push(format!("{} exists", kfd.display()));
    } else {
        r.problems.push(format!("{} does not exist (amdgpu kernel driver not loaded?)", kfd.display()));
    }
    let nodes = ctx.system_path("/sys/class/kfd/kfd/topology/nodes");
    match std::fs::read_dir(&nodes) {
        Err(e) => r.problems.push(format!("{}: {e}", nodes.display())),
        Ok(entries) => {
            let mut dirs: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
            dirs.sort();
            for node in dirs {
                let props = node.join("properties");
                match std::fs::read_to_string(&props) {
                    Err(e) => r.problems.push(format!("{}: {e}", props.display())),
                    Ok(text) => match gfx_target_version(&text) {
                        Err(why) => r.problems.push(format!("{}: {why}", props.display())),
                        Ok(0) => {} // a CPU node
                        Ok(gfx) => {
                            let name = std::fs::read_to_string(node.join("name")).unwrap_or_default();
                            let name = name.trim();
                            r.gpus.push(format!(
                                "node {}: gfx_target_version {gfx}{}{}",
                                node_id(&node),
                                if name.is_empty() { "" } else { ", " },
                                name
                            ));
                        }
                    },
                }
            }
            if r.gpus.is_empty() {
                r.problems.push(format!("no node under {} has a non-zero gfx_target_version", nodes.display()));
            } else {
                r.evidence.push(format!("{} GPU node(s) under {}", r.gpus.len(), nodes.display()));
            }
        }
    }
    r.present = has_kfd && !r.gpus.is_empty();
    r
}

fn node_id(node: &std::path::Path) -> String {
    node.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Reads `gfx_target_version N` from a kfd node's `properties` file.
fn gfx_target_version(properties: &str) -> Result<u64, String> {
    let line = properties
        .lines()
        .find(|l| l.split_whitespace().next() == Some("gfx_target_version"))
        .ok_or("no gfx_target_version line")?;
    let value = line.split_whitespace().nth(1).ok_or("gfx_target_version has no value")?;
    value.parse().map_err(|_| format!("gfx_target_version {value:?} is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx_parse() {
        assert_eq!(gfx_target_version("cpu_cores_count 0\ngfx_target_version 90010\n"), Ok(90010));
        assert_eq!(gfx_target_version("gfx_target_version 0\n"), Ok(0));
        assert!(gfx_target_version("gfx_target_version banana\n").is_err());
        assert!(gfx_target_version("\u{0}\u{1}binary").is_err());
    }
}
