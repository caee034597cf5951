//! Kernel-driver presence, read from the filesystem alone (no vendor library is touched).

use serde::Serialize;

use crate::context::ProbeContext;

/// What the filesystem says about one vendor's kernel driver.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DriverReport {
    pub present: bool,
    /// Kernel driver version, where the driver publishes it.
    pub version: Option<String>,
    /// Files that were found, as facts a person can check (`/dev/kfd exists`).
    pub evidence: Vec<String>,
    /// Files that were missing, unreadable or malformed.
    pub problems: Vec<String>,
    /// GPU nodes or devices the driver lists (AMD kfd nodes with a gfx target).
    pub gpus: Vec<String>,
}

/// NVIDIA: `/proc/driver/nvidia/version` and `/dev/nvidiactl`, or WSL's `/dev/dxg`.
pub fn nvidia(ctx: &ProbeContext) -> DriverReport {
    let mut r = DriverReport::default();
    let version_file = ctx.system_path("/proc/driver/nvidia/version");
    match std::fs::read_to_string(&version_file) {
        Ok(text) => {
            r.evidence.push(format!("{} is readable", version_file.display()));
            r.version = parse_nvidia_version(&text);
        }
        Err(e) => r.problems.push(format!("{}: {e}", version_file.display())),
    }
    let ctl = ctx.system_path("/dev/nvidiactl");
    let has_ctl = ctl.exists();
    if has_ctl {
        r.evidence.push(format!("{} exists", ctl.display()));
    } else {
        r.problems.push(format!("{} does not exist", ctl.display()));
    }
    let dxg = ctx.system_path("/dev/dxg");
    let wsl = dxg.exists();
    if wsl {
        r.evidence.push(format!("{} exists (WSL GPU)", dxg.display()));
    }
    r.present = (has_ctl && r.version.is_some()) || wsl;
    r
}

/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 ...` -> `550.54.14`.
fn parse_nvidia_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    line.split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_owned)
}

/// AMD: `/dev/kfd` and at least one kfd topology node with a non-zero `gfx_target_version`.
#[cfg(feature = "rocm")]
pub fn amd(ctx: &ProbeContext) -> DriverReport {
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

#[cfg(feature = "rocm")]
fn node_id(node: &std::path::Path) -> String {
    node.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Reads `gfx_target_version N` from a kfd node's `properties` file.
#[cfg(feature = "rocm")]
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
    fn nvidia_version_line() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\nGCC version:  gcc 12\n";
        assert_eq!(parse_nvidia_version(text).as_deref(), Some("550.54.14"));
        assert_eq!(parse_nvidia_version("garbage"), None);
    }

    #[cfg(feature = "rocm")]
    #[test]
    fn gfx_parse() {
        assert_eq!(gfx_target_version("cpu_cores_count 0\ngfx_target_version 90010\n"), Ok(90010));
        assert_eq!(gfx_target_version("gfx_target_version 0\n"), Ok(0));
        assert!(gfx_target_version("gfx_target_version banana\n").is_err());
        assert!(gfx_target_version("\u{0}\u{1}binary").is_err());
    }
}
