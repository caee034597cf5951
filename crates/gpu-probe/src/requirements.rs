//! A provider library's own NEEDED list, checked against what is loaded and what can be found.
//!
//! This turns "the CUDA provider failed" into "libcublasLt.so.13 is missing; searched: ...".

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

/// One NEEDED soname of the provider (or of a library it needs that the probe found).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Requirement {
    pub soname: String,
    /// The library whose NEEDED entry this is.
    pub needed_by: String,
    pub status: RequirementStatus,
    pub path: Option<PathBuf>,
    pub detail: Option<String>,
}

/// The preflight of one provider library.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProviderRequirements {
    pub provider_library: PathBuf,
    pub requirements: Vec<Requirement>,
    /// Folders searched, in order (candidate folders, the provider's folder, system folders).
    pub searched: Vec<PathBuf>,
    /// Set when the provider library itself could not be read.
    pub error: Option<String>,
}

impl ProviderRequirements {
    pub fn missing(&self) -> impl Iterator<Item = &Requirement> {
        self.requirements.iter().filter(|r| r.status == RequirementStatus::Missing)
    }

    /// One line a person can act on.
    pub fn summary(&self) -> String {
        if let Some(e) = &self.error {
            return e.clone();
        }
        let missing: Vec<&Requirement> = self.missing().collect();
        if missing.is_empty() {
            return format!(
                "all {} libraries {} needs are present",
                self.requirements.len(),
                file_name(&self.provider_library)
            );
        }
        let names: Vec<String> = missing
            .iter()
            .map(|m| {
                let rejected = m.detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
                if m.needed_by == file_name(&self.provider_library) {
                    format!("{}{rejected}", m.soname)
                } else {
                    format!("{} (needed by {}){rejected}", m.soname, m.needed_by)
                }
            })
            .collect();
        let verb = if names.len() == 1 { "is" } else { "are" };
        format!("{} {verb} missing; searched: {}", names.join(", "), join_dirs(&self.searched))
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| p.display().to_string())
}

/// Checks every NEEDED entry of `provider` (and, one level at a time, of the libraries found for
/// it in `candidate_dirs`) without loading anything.
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
    let mut queue: Vec<(PathBuf, String)> = vec![(provider.to_path_buf(), file_name(provider))];
    let mut seen: Vec<String> = Vec::new();
    while let Some((lib, lib_name)) = queue.pop() {
        let deps = match elf::read_deps(&lib) {
            Ok(d) => d,
            Err(e) if lib == provider => {
                out.error = Some(e.to_string());
                return out;
            }
            Err(_) => continue,
        };
        for soname in deps.needed {
            if seen.contains(&soname) {
                continue;
            }
            seen.push(soname.clone());
            let mut req = Requirement {
                soname: soname.clone(),
                needed_by: lib_name.clone(),
                status: RequirementStatus::Missing,
                path: None,
                detail: None,
            };
            if let Some(p) = loaded_path(&soname) {
                req.status = RequirementStatus::Loaded;
                req.path = Some(p);
            } else {
                let (found, rejected) = find_soname(&soname, &searched);
                if let Some(p) = found {
                    req.status = RequirementStatus::Found;
                    queue.push((p.clone(), soname.clone()));
                    req.path = Some(p);
                } else if let (Some(p), _) = find_soname(&soname, &system) {
                    req.status = RequirementStatus::System;
                    req.path = Some(p);
                } else if !rejected.is_empty() {
                    req.detail = Some(rejected.join("; "));
                }
            }
            out.requirements.push(req);
        }
    }
    out
}
