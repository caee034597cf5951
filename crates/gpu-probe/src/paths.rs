//! Candidate folders built from environment variables and fixed system locations.
//!
//! Security rule: an empty or relative entry is never searched (to the dynamic loader an empty
//! entry means the working folder); it is reported instead. The working folder is never searched.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::context::ProbeContext;

/// An environment-list entry that was not searched, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RejectedEntry {
    pub variable: String,
    pub entry: String,
    pub reason: String,
}

/// Ordered, de-duplicated folders to search, plus what was refused on the way.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SearchPath {
    pub dirs: Vec<PathBuf>,
    pub rejected: Vec<RejectedEntry>,
}

impl SearchPath {
    /// Adds `dir` unless it is already listed or is not an existing folder.
    pub(crate) fn push(&mut self, dir: PathBuf) {
        if dir.is_dir() && !self.dirs.contains(&dir) {
            self.dirs.push(dir);
        }
    }

    /// Adds every entry of a colon-separated list variable, rejecting empty, relative and missing ones.
    pub(crate) fn push_env_list(&mut self, ctx: &ProbeContext, variable: &str) {
        let Some(value) = ctx.var(variable) else { return };
        let value = value.to_string_lossy();
        for entry in value.split(':') {
            let reject = |reason: &str| RejectedEntry {
                variable: variable.to_owned(),
                entry: entry.to_owned(),
                reason: reason.to_owned(),
            };
            let path = Path::new(entry);
            if entry.is_empty() {
                self.rejected.push(reject("empty entry ignored (the loader would read it as the working folder)"));
            } else if !path.is_absolute() {
                self.rejected.push(reject("relative entry ignored: give an absolute path"));
            } else if !path.is_dir() {
                self.rejected.push(reject("not an existing folder"));
            } else {
                self.push(path.to_path_buf());
            }
        }
    }

    /// Adds `$variable/<sub>` for each sub-folder, when the variable holds an absolute path.
    pub(crate) fn push_env_prefix(&mut self, ctx: &ProbeContext, variable: &str, subdirs: &[&str]) {
        let Some(value) = ctx.var(variable) else { return };
        let base = PathBuf::from(value);
        if value.is_empty() || !base.is_absolute() {
            self.rejected.push(RejectedEntry {
                variable: variable.to_owned(),
                entry: value.to_string_lossy().into_owned(),
                reason: "ignored: not an absolute path".to_owned(),
            });
            return;
        }
        for sub in subdirs {
            self.push(base.join(sub));
        }
    }
}

/// Folders `<parent>/<prefix>*`, versioned names newest first, the unversioned name last.
pub fn versioned_dirs(parent: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else { return Vec::new() };
    let mut found: Vec<(Vec<u64>, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix(prefix)?;
            Some((version_key(rest), e.path()))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().map(|(_, p)| p).collect()
}

/// Numbers in `text` in order (`-6.2.1` -> [6, 2, 1]); an unversioned name sorts lowest.
pub fn version_key(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).filter_map(|s| s.parse().ok()).collect()
}

/// Python `site-packages` / `dist-packages` folders where pip wheels (CUDA libraries, onnxruntime) live.
pub fn python_site_dirs(ctx: &ProbeContext) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    // NORNIR_PYTHON_PREFIX: the Python package sets it to its interpreter's `sys.prefix`, so
    // the onnxruntime beside it is found in a venv that was never activated.
    for var in ["NORNIR_PYTHON_PREFIX", "VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = ctx.var(var).map(PathBuf::from).filter(|p| p.is_absolute()) {
            prefixes.push(v);
        }
    }
    if let Some(home) = ctx.home() {
        prefixes.push(home.join(".local"));
        prefixes.extend(versioned_dirs(&home.join(".pyenv/versions"), ""));
    }
    prefixes.push(ctx.system_path("/usr/local"));
    prefixes.push(ctx.system_path("/usr"));
    let mut out = Vec::new();
    for prefix in prefixes {
        for d in site_dirs_of(&prefix) {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// Whether two paths name the same existing file or folder (symbolic links and `lib64 -> lib`
/// resolved); `false` when either cannot be resolved.
pub fn same_file(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// The `site-packages` / `dist-packages` folders under one Python prefix.
pub(crate) fn site_dirs_of(prefix: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        for py in versioned_dirs(&prefix.join(lib), "python3") {
            for kind in ["site-packages", "dist-packages"] {
                let d = py.join(kind);
                if d.is_dir() && !out.contains(&d) {
                    out.push(d);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_list_rejects_empty_relative_and_missing_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = dir.path().display().to_string();
        let ctx = ProbeContext::with_root("/nonexistent")
            .with_var("LIST", format!(":{good}:relative/lib:/no/such/folder:{good}"));
        let mut sp = SearchPath::default();
        sp.push_env_list(&ctx, "LIST");
        assert_eq!(sp.dirs, vec![dir.path().to_path_buf()]);
        let reasons: Vec<&str> = sp.rejected.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(sp.rejected.len(), 3, "{reasons:?}");
        assert!(reasons[0].contains("working folder"));
        assert!(reasons[1].contains("relative"));
        assert!(reasons[2].contains("not an existing folder"));
    }

    #[test]
    fn versioned_dirs_newest_first_plain_last() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["rocm", "rocm-5.7.1", "rocm-6.10.0", "rocm-6.2.0", "other"] {
            std::fs::create_dir(dir.path().join(name)).expect("mkdir");
        }
        let names: Vec<String> = versioned_dirs(dir.path(), "rocm")
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["rocm-6.10.0", "rocm-6.2.0", "rocm-5.7.1", "rocm"]);
    }
}
