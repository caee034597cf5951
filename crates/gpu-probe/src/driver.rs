//! Kernel-driver presence, read from the filesystem alone (no vendor library is touched).

use serde::{Deserialize, Serialize};

use crate::context::ProbeContext;

/// What the filesystem says about one vendor's kernel driver.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
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
pub(crate) fn nvidia(ctx: &ProbeContext) -> DriverReport {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_version_line() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\nGCC version:  gcc 12\n";
        assert_eq!(parse_nvidia_version(text).as_deref(), Some("550.54.14"));
        assert_eq!(parse_nvidia_version("garbage"), None);
    }
}
