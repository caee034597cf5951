//! A provider library's own NEEDED list, checked against what is loaded and what can be found.
//!
//! This turns "the CUDA provider failed" into "libcublasLt.so.13 is missing; searched: ...".
//! Beside the NEEDED list it checks the libraries a provider opens by name while it runs
//! (cuDNN for CUDA), which no ELF header names.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::elf;
use crate::library::{find_soname, loaded_path};
use crate::vendor::join_dirs;

/// Folders the system loader searches by default.
const SYSTEM_DIRS: &[&str] =
    &["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequirementStatus {
    /// Already mapped into this process.
    Loaded,
    /// In one of the candidate folders or beside the provider; the probe can preload it.
    Found,
    /// In a folder the system loader searches by itself.
    System,
    Missing,
}

/// How the provider reaches a library.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Opened {
    /// A NEEDED entry: the loader opens it with the library that needs it, or that load fails.
    #[default]
    Needed,
    /// Opened by name with `dlopen` while the provider runs, so in no NEEDED list: a missing one
    /// lets the provider register, and what needs it fails later.
    AtRunTime,
}

/// One library the provider needs: a NEEDED soname of the provider (or of a library it needs that
/// the probe found), or one the provider opens at run time.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Requirement {
    pub soname: String,
    /// The library whose NEEDED entry this is, or that opens it at run time.
    pub needed_by: String,
    #[serde(default)]
    pub opened: Opened,
    pub status: RequirementStatus,
    pub path: Option<PathBuf>,
    pub detail: Option<String>,
}

/// The preflight of one provider library.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProviderRequirements {
    pub provider_library: PathBuf,
    pub requirements: Vec<Requirement>,
    /// Folders searched, in order (candidate folders, the provider's folder, system folders).
    pub searched: Vec<PathBuf>,
    /// Set when the provider library itself could not be read.
    pub error: Option<String>,
}

impl ProviderRequirements {
    /// NEEDED libraries that are missing: the provider itself will not load.
    pub fn missing(&self) -> impl Iterator<Item = &Requirement> {
        self.requirements.iter().filter(|r| r.opened == Opened::Needed && r.status == RequirementStatus::Missing)
    }

    /// Libraries the provider opens at run time that are missing: it loads; what needs one fails later.
    pub fn missing_at_run_time(&self) -> impl Iterator<Item = &Requirement> {
        self.requirements.iter().filter(|r| r.opened == Opened::AtRunTime && r.status == RequirementStatus::Missing)
    }

    /// One line a person can act on.
    pub fn summary(&self) -> String {
        if let Some(e) = &self.error {
            return e.clone();
        }
        let provider = file_name(&self.provider_library);
        let missing: Vec<&Requirement> = self.missing().collect();
        let mut line = if missing.is_empty() {
            let needed = self.requirements.iter().filter(|r| r.opened == Opened::Needed).count();
            format!("all {needed} libraries {provider} needs are present")
        } else {
            let names: Vec<String> = missing
                .iter()
                .map(|m| {
                    let rejected = m.detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
                    if m.needed_by == provider {
                        format!("{}{rejected}", m.soname)
                    } else {
                        format!("{} (needed by {}){rejected}", m.soname, m.needed_by)
                    }
                })
                .collect();
            let verb = if names.len() == 1 { "is" } else { "are" };
            format!("{} {verb} missing", names.join(", "))
        };
        if let Some(run_time) = self.run_time_summary() {
            line = format!("{line}; {run_time}");
        }
        if missing.is_empty() && self.missing_at_run_time().next().is_none() {
            return line;
        }
        format!("{line}; searched: {}", self.searched_list())
    }

    /// The folders searched, in order, on one line.
    pub fn searched_list(&self) -> String {
        join_dirs(&self.searched)
    }

    /// What is missing of the libraries the provider opens at run time, if anything: a reason a
    /// provider that registered can still fail when it builds its session or runs a node.
    pub fn run_time_summary(&self) -> Option<String> {
        let names: Vec<&str> = self.missing_at_run_time().map(|r| r.soname.as_str()).collect();
        if names.is_empty() {
            return None;
        }
        let verb = if names.len() == 1 { "is" } else { "are" };
        Some(format!(
            "{} {verb} missing, which {} opens by name at run time (it registers without them; what needs one fails later)",
            names.join(", "),
            file_name(&self.provider_library)
        ))
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| p.display().to_string())
}

/// What the CUDA provider of a CUDA 13 build opens at run time. Read off onnxruntime-gpu 1.31.1's
/// `libonnxruntime_providers_cuda.so`, whose NEEDED list has none of them: it imports `dlopen`;
/// `strings` shows `libnvrtc.so.13` in its read-only data, and `libcudnn` + `dnn.so.9` and
/// `libcufft` + `ft.so.12` as immediates its code assembles into `libcudnn.so.9` and
/// `libcufft.so.12`. ONNX Runtime's own Python `preload_dlls()` preloads the same three on Linux
/// (cuDNN's main library only: it opens its sub-libraries from its own folder through its RPATH
/// `$ORIGIN`). crates/gpu-probe/tests/run_time_libraries.rs checks these strings in the pinned build.
const CUDA_13: &[&str] = &["libcudnn.so.9", "libcufft.so.12", "libnvrtc.so.13"];

/// The same for a CUDA 12 build, by `preload_dlls()`'s table for CUDA 12 (cuFFT 11, NVRTC 12).
/// Builds that list cuDNN as NEEDED have it checked there and not again here.
const CUDA_12: &[&str] = &["libcudnn.so.9", "libcufft.so.11", "libnvrtc.so.12"];

/// The libraries `provider` opens at run time, chosen by its file name and the CUDA runtime it
/// links. The MIGraphX (1.27.1) and ROCm (1.22.2) provider libraries import no `dlopen` at all,
/// so they open nothing at run time themselves (checked in crates/gpu-probe/tests/run_time_libraries.rs).
fn opened_at_run_time(provider: &Path, needed: &[String]) -> &'static [&'static str] {
    if file_name(provider) != "libonnxruntime_providers_cuda.so" {
        return &[];
    }
    if needed.iter().any(|n| n == "libcudart.so.13") {
        CUDA_13
    } else if needed.iter().any(|n| n == "libcudart.so.12") {
        CUDA_12
    } else {
        &[]
    }
}

/// Checks every NEEDED entry of `provider` (and, one level at a time, of the libraries found for
/// it in `candidate_dirs`), then the libraries it opens at run time, without loading anything.
pub fn provider_requirements(provider: &Path, candidate_dirs: &[PathBuf]) -> ProviderRequirements {
    let mut searched: Vec<PathBuf> = candidate_dirs.to_vec();
    if let Some(own) = provider.parent().map(Path::to_path_buf)
        && !searched.contains(&own)
    {
        searched.push(own);
    }
    let system: Vec<PathBuf> = SYSTEM_DIRS.iter().map(PathBuf::from).filter(|d| d.is_dir()).collect();
    let mut out = ProviderRequirements {
        provider_library: provider.to_path_buf(),
        requirements: Vec::new(),
        searched: searched.clone(),
        error: None,
    };
    for d in &system {
        if !out.searched.contains(d) {
            out.searched.push(d.clone());
        }
    }
    let provider_needed = match elf::read_deps(provider) {
        Ok(d) => d.needed,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    let mut queue: Vec<(String, Vec<String>)> = vec![(file_name(provider), provider_needed.clone())];
    let mut seen: Vec<String> = Vec::new();
    while let Some((lib_name, needed)) = queue.pop() {
        for soname in needed {
            if seen.contains(&soname) {
                continue;
            }
            seen.push(soname.clone());
            let req = locate(&soname, &lib_name, Opened::Needed, &searched, &system);
            if req.status == RequirementStatus::Found
                && let Some(deps) = req.path.as_deref().and_then(|p| elf::read_deps(p).ok())
            {
                queue.push((soname.clone(), deps.needed));
            }
            out.requirements.push(req);
        }
    }
    for &soname in opened_at_run_time(provider, &provider_needed) {
        if !seen.iter().any(|s| s == soname) {
            out.requirements.push(locate(soname, &file_name(provider), Opened::AtRunTime, &searched, &system));
        }
    }
    out
}

/// Where `soname` is: loaded already, in a candidate folder, in a system folder, or missing.
fn locate(soname: &str, needed_by: &str, opened: Opened, searched: &[PathBuf], system: &[PathBuf]) -> Requirement {
    let mut req = Requirement {
        soname: soname.to_owned(),
        needed_by: needed_by.to_owned(),
        opened,
        status: RequirementStatus::Missing,
        path: None,
        detail: None,
    };
    if let Some(p) = loaded_path(soname) {
        req.status = RequirementStatus::Loaded;
        req.path = Some(p);
        return req;
    }
    let (found, rejected) = find_soname(soname, searched);
    if let Some(p) = found {
        req.status = RequirementStatus::Found;
        req.path = Some(p);
    } else if let (Some(p), _) = find_soname(soname, system) {
        req.status = RequirementStatus::System;
        req.path = Some(p);
    } else if !rejected.is_empty() {
        req.detail = Some(rejected.join("; "));
    }
    req
}
