//! Finding ONNX Runtime plugin execution-provider libraries as files: a shared library that
//! exports `CreateEpFactories`. Nothing here loads them; the embedder registers them with ONNX
//! Runtime, which then lists the devices each can use.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::context::ProbeContext;
use crate::elf::read_export;
use crate::ort_lib::nornir_home;
use crate::paths::{python_site_dirs, same_file};

/// The symbol every plugin execution provider exports (ONNX Runtime's `OrtEpApi`).
pub const PLUGIN_ENTRY: &str = "CreateEpFactories";

/// Where a plugin library was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PluginSource {
    /// `--ep-lib`, `NORNIR_EP_LIBS` or the library's options.
    Explicit,
    /// A pip-installed package in a Python `site-packages` folder.
    Python,
    /// `$NORNIR_HOME/ep/`.
    NornirHome,
}

/// One plugin library found, or named, and what the probe thinks of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PluginLibrary {
    /// The name it is registered under with ONNX Runtime: the user's, the pip package's folder
    /// (`onnxruntime_ep_webgpu`) or the file's stem.
    pub name: String,
    pub path: PathBuf,
    pub source: PluginSource,
    /// Why it will not be loaded (not a plugin, truncated, missing); `None` when it will be.
    pub problem: Option<String>,
}

impl PluginLibrary {
    pub fn usable(&self) -> bool {
        self.problem.is_none()
    }
}

/// Every plugin library found and the folders searched.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PluginDiscovery {
    pub libraries: Vec<PluginLibrary>,
    pub searched: Vec<PathBuf>,
}

impl PluginDiscovery {
    pub fn usable(&self) -> impl Iterator<Item = &PluginLibrary> {
        self.libraries.iter().filter(|l| l.usable())
    }
}

/// Parses one `NAME=PATH` (or a bare `PATH`, named after its file) plugin entry.
pub fn parse_plugin_entry(entry: &str) -> Result<(String, PathBuf), String> {
    let entry = entry.trim();
    let (name, path) = match entry.split_once('=') {
        Some((n, p)) => (n.trim().to_owned(), PathBuf::from(p.trim())),
        None => (String::new(), PathBuf::from(entry)),
    };
    if path.as_os_str().is_empty() {
        return Err(format!("plugin entry {entry:?} names no file: write NAME=/path/to/libplugin.so"));
    }
    let name = if name.is_empty() { stem(&path) } else { name };
    if name.is_empty() || name.contains(['\0', ',']) {
        return Err(format!("plugin entry {entry:?} has no usable name: write NAME=/path/to/libplugin.so"));
    }
    Ok((name, path))
}

/// `libonnxruntime_providers_webgpu.so` -> `onnxruntime_providers_webgpu`.
fn stem(path: &Path) -> String {
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let base = file.split(".so").next().unwrap_or(&file);
    base.strip_prefix("lib").unwrap_or(base).to_owned()
}

/// What reading the file says: `None` when it is a loadable plugin, else why not.
fn check(path: &Path) -> Option<String> {
    if !path.is_file() {
        return Some("no such file".to_owned());
    }
    match read_export(path, PLUGIN_ENTRY) {
        Ok(e) if e.exported => None,
        Ok(_) => Some(format!("not a plugin execution provider: it does not export {PLUGIN_ENTRY}")),
        Err(e) => Some(format!("not loaded: {e}")),
    }
}

/// Finds plugin libraries: `explicit` ones (the caller's, then `NORNIR_EP_LIBS`, a comma-separated
/// list of `NAME=PATH`), pip packages in the Python folders the ONNX Runtime search reads
/// (`onnxruntime_ep_*`, and any package with a library exporting `CreateEpFactories` at its top),
/// and `$NORNIR_HOME/ep/`. Explicit entries are reported even when unusable; a file found twice
/// is listed once, under the first name.
pub fn discover_plugins(ctx: &ProbeContext, explicit: &[(String, PathBuf)]) -> PluginDiscovery {
    let mut d = PluginDiscovery::default();
    let mut named: Vec<(String, PathBuf)> = explicit.to_vec();
    if let Some(list) = ctx.var_str("NORNIR_EP_LIBS") {
        for entry in list.split(',').filter(|e| !e.trim().is_empty()) {
            match parse_plugin_entry(entry) {
                Ok(e) => named.push(e),
                Err(problem) => d.libraries.push(PluginLibrary {
                    name: entry.trim().to_owned(),
                    path: PathBuf::new(),
                    source: PluginSource::Explicit,
                    problem: Some(format!("NORNIR_EP_LIBS: {problem}")),
                }),
            }
        }
    }
    for (name, path) in named {
        let path = std::path::absolute(&path).unwrap_or(path);
        let problem = check(&path);
        d.push(PluginLibrary { name, path, source: PluginSource::Explicit, problem });
    }
    for site in python_site_dirs(ctx) {
        d.searched.push(site.clone());
        for (package, dir) in sorted_dirs(&site) {
            if package.ends_with(".dist-info") || package.starts_with('_') || package == "onnxruntime" {
                continue;
            }
            let dedicated = package.starts_with("onnxruntime_ep_");
            let found = first_plugin(&dir);
            match found {
                Some(path) => {
                    d.push(PluginLibrary { name: package, path, source: PluginSource::Python, problem: None })
                }
                None if dedicated => d.push(PluginLibrary {
                    name: package,
                    path: dir,
                    source: PluginSource::Python,
                    problem: Some(format!("no library in this package exports {PLUGIN_ENTRY}; reinstall it")),
                }),
                None => {}
            }
        }
    }
    if let Some(home) = nornir_home(ctx) {
        let dir = home.join("ep");
        d.searched.push(dir.clone());
        for path in libraries_in(&dir) {
            let problem = check(&path);
            d.push(PluginLibrary { name: stem(&path), path, source: PluginSource::NornirHome, problem });
        }
    }
    d
}

impl PluginDiscovery {
    fn push(&mut self, lib: PluginLibrary) {
        if lib.usable() && self.libraries.iter().any(|l| l.usable() && same_file(&l.path, &lib.path)) {
            return;
        }
        self.libraries.push(lib);
    }
}

fn sorted_dirs(parent: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(parent) else { return Vec::new() };
    let mut out: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    out.sort();
    out
}

/// Shared libraries directly in `dir`, by name.
fn libraries_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n.to_string_lossy().contains(".so")))
        .collect();
    out.sort();
    out
}

/// The first library at the top of a package that exports `CreateEpFactories`. Names that look
/// like a provider are read first (a plugin package also carries its runtime's large libraries),
/// and of several names for one library the shortest (`lib.so` before `lib.so.1`).
fn first_plugin(dir: &Path) -> Option<PathBuf> {
    let mut libs = libraries_in(dir);
    let likely = |p: &PathBuf| {
        let n = p.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        !(n.contains("ep") || n.contains("provider") || n.contains("plugin"))
    };
    libs.sort_by_key(|p| (likely(p), p.as_os_str().len()));
    libs.into_iter().find(|p| read_export(p, PLUGIN_ENTRY).is_ok_and(|e| e.exported))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_take_a_name_or_the_file_stem() {
        assert_eq!(
            parse_plugin_entry("cpu=/opt/ep/libcpu.so").expect("ok"),
            ("cpu".to_owned(), PathBuf::from("/opt/ep/libcpu.so"))
        );
        assert_eq!(
            parse_plugin_entry(" /x/libonnxruntime_providers_webgpu.so.1 ").expect("ok").0,
            "onnxruntime_providers_webgpu"
        );
        assert!(parse_plugin_entry("name=").is_err());
        assert!(parse_plugin_entry("").is_err());
    }

    #[test]
    fn a_file_that_is_not_a_plugin_is_reported_not_loaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = dir.path().join("libtext.so");
        std::fs::write(&text, "not a library").expect("write");
        let exe = std::env::current_exe().expect("exe");
        let ctx = ProbeContext::with_root("/nonexistent").with_var("NORNIR_EP_LIBS", format!("own={}", exe.display()));
        let d = discover_plugins(&ctx, &[("text".to_owned(), text), ("gone".to_owned(), dir.path().join("none.so"))]);
        let problems: Vec<(&str, &str)> =
            d.libraries.iter().map(|l| (l.name.as_str(), l.problem.as_deref().unwrap_or(""))).collect();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].1.contains("not a valid ELF"), "{problems:?}");
        assert_eq!(problems[1].1, "no such file");
        assert!(problems[2].1.contains("does not export CreateEpFactories"), "{problems:?}");
        assert_eq!(d.usable().count(), 0);
    }
}
