//! Finding ONNX Runtime builds on disk, and which execution providers each can offer, without
//! loading any of them: a provider lives in `libonnxruntime_providers_<name>.so` beside the library.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::context::ProbeContext;
use crate::paths::{python_site_dirs, same_file, version_key};

/// One ONNX Runtime library found on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OrtCandidate {
    /// Absolute path of `libonnxruntime.so.<version>` (or `libonnxruntime.so`).
    pub path: PathBuf,
    /// From the file name, e.g. `1.31.1`; `None` when the name carries none.
    pub version: Option<String>,
    /// Provider short names from the `libonnxruntime_providers_<name>.so` files beside it
    /// (`cuda`, `tensorrt`, ...), sorted; `shared` is not a provider and is left out.
    pub providers: Vec<String>,
    /// Where it was found: `ORT_DYLIB_PATH`, `NORNIR_ORT_LIB`, `nornir cache`, `python`, `system`.
    pub source: String,
}

impl OrtCandidate {
    /// `(major, minor)` from the version, if known.
    pub fn major_minor(&self) -> Option<(u64, u64)> {
        let v = version_key(self.version.as_deref()?);
        Some((*v.first()?, *v.get(1)?))
    }

    /// Whether the user named this library explicitly (it then wins over any other).
    pub fn is_explicit(&self) -> bool {
        self.source == "ORT_DYLIB_PATH" || self.source == "NORNIR_ORT_LIB"
    }
}

/// Every candidate, in search order, and the places searched.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OrtDiscovery {
    pub candidates: Vec<OrtCandidate>,
    pub searched: Vec<PathBuf>,
    /// Explicit settings that pointed nowhere usable.
    pub problems: Vec<String>,
}

impl OrtDiscovery {
    /// When the user named a library (ORT_DYLIB_PATH, NORNIR_ORT_LIB, `--ort-lib`) and none of
    /// those names gave one: what was wrong with each. Using another library instead would
    /// silently replace the one asked for.
    pub fn explicit_unusable(&self) -> Option<String> {
        let named = self.problems.iter().any(|p| p.starts_with("ORT_DYLIB_PATH=") || p.starts_with("NORNIR_ORT_LIB="));
        (named && !self.candidates.iter().any(OrtCandidate::is_explicit)).then(|| self.problems.join("; "))
    }
}

/// The nornir cache: `$NORNIR_HOME`, else `$XDG_CACHE_HOME/nornir`, else `~/.cache/nornir`.
pub fn nornir_home(ctx: &ProbeContext) -> Option<PathBuf> {
    let abs = |v: &str| ctx.var(v).map(PathBuf::from).filter(|p| p.is_absolute());
    abs("NORNIR_HOME")
        .or_else(|| abs("XDG_CACHE_HOME").map(|p| p.join("nornir")))
        .or_else(|| ctx.home().map(|h| h.join(".cache/nornir")))
}

/// The default model's folder inside the nornir cache: all-MiniLM-L6-v2, float32, as
/// `cargo xtask fetch` and the Python package's `fetch_default_model()` put it there.
pub const DEFAULT_MODEL_SUBDIR: &str = "models/all-MiniLM-L6-v2";

/// The default model's folder: [`DEFAULT_MODEL_SUBDIR`] in [`nornir_home`] (it may not exist yet).
pub fn default_model_dir(ctx: &ProbeContext) -> Option<PathBuf> {
    nornir_home(ctx).map(|h| h.join(DEFAULT_MODEL_SUBDIR))
}

/// Why there is no default model to load; each surface says how to fetch it in its own words.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoDefaultModel {
    /// No nornir cache folder: `NORNIR_HOME`, `XDG_CACHE_HOME` and `HOME` are all unset.
    NoCache,
    /// The folder where it belongs has no `model.onnx`.
    Missing(PathBuf),
}

impl std::fmt::Display for NoDefaultModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoCache => f.write_str("no nornir cache folder (NORNIR_HOME, XDG_CACHE_HOME and HOME are unset)"),
            Self::Missing(dir) => write!(f, "the default model is not in {}", dir.display()),
        }
    }
}

impl std::error::Error for NoDefaultModel {}

/// The default model's folder where it is there to load (its `model.onnx` in place): every
/// surface's one check.
pub fn default_model(ctx: &ProbeContext) -> Result<PathBuf, NoDefaultModel> {
    let dir = default_model_dir(ctx).ok_or(NoDefaultModel::NoCache)?;
    if dir.join("model.onnx").is_file() { Ok(dir) } else { Err(NoDefaultModel::Missing(dir)) }
}

/// Searches, in order: `ORT_DYLIB_PATH`, `NORNIR_ORT_LIB` (file or folder), the Python
/// interpreter nornir runs in (`NORNIR_PYTHON_PREFIX`, which the Python package sets: the
/// onnxruntime its user installed beside it), the nornir cache (`<home>/ort/<flavor>/`, `cpu`
/// first), Python's `onnxruntime/capi` elsewhere, then system folders.
pub fn discover(ctx: &ProbeContext) -> OrtDiscovery {
    let mut d = OrtDiscovery::default();
    for var in ["ORT_DYLIB_PATH", "NORNIR_ORT_LIB"] {
        let Some(value) = ctx.var(var) else { continue };
        let path = PathBuf::from(value);
        if value.is_empty() || !path.is_absolute() {
            d.problems.push(format!("{var}={:?} ignored: give an absolute path", value));
            continue;
        }
        d.searched.push(path.clone());
        if path.is_dir() {
            let before = d.candidates.len();
            scan_dir(&path, var, &mut d);
            if d.candidates.len() == before {
                d.problems.push(format!("{var}={} is a folder with no libonnxruntime.so* in it", path.display()));
            }
        } else if path.is_file() {
            d.candidates.push(candidate(path, var));
        } else {
            d.problems.push(format!("{var}={} does not exist", path.display()));
        }
    }
    if let Some(prefix) = ctx.var("NORNIR_PYTHON_PREFIX").map(PathBuf::from).filter(|p| p.is_absolute()) {
        for site in crate::paths::site_dirs_of(&prefix) {
            let capi = site.join("onnxruntime/capi");
            d.searched.push(capi.clone());
            scan_dir(&capi, "this Python", &mut d);
        }
    }
    if let Some(home) = nornir_home(ctx) {
        let ort = home.join("ort");
        let mut flavors: Vec<PathBuf> = list_dir(&ort, &mut d)
            .map(|es| es.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        flavors.sort_by_key(|p| (p.file_name().is_none_or(|n| n != "cpu"), p.clone()));
        d.searched.push(ort);
        for f in flavors {
            scan_dir(&f, "nornir cache", &mut d);
        }
    }
    for site in python_site_dirs(ctx) {
        let capi = site.join("onnxruntime/capi");
        d.searched.push(capi.clone());
        scan_dir(&capi, "python", &mut d);
    }
    for sys in ["/usr/lib/x86_64-linux-gnu", "/usr/local/lib", "/usr/lib64", "/opt/onnxruntime/lib"] {
        let dir = ctx.system_path(sys);
        d.searched.push(dir.clone());
        scan_dir(&dir, "system", &mut d);
    }
    d
}

/// Adds the newest `libonnxruntime.so*` in `dir`, if any.
fn scan_dir(dir: &Path, source: &str, d: &mut OrtDiscovery) {
    let Some(entries) = list_dir(dir, d) else { return };
    let best = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix("libonnxruntime.so")?;
            (rest.is_empty() || rest.starts_with('.')).then(|| (version_key(rest), e.path()))
        })
        .filter(|(_, p)| p.is_file())
        .max_by(|a, b| a.0.cmp(&b.0));
    // The same file reached twice (lib64 -> lib) is listed once.
    if let Some((_, path)) = best
        && !d.candidates.iter().any(|c| same_file(&c.path, &path))
    {
        d.candidates.push(candidate(path, source));
    }
}

/// The entries of `dir`: none where it does not exist; a folder that exists and cannot be listed
/// is one of the discovery's problems, never read as empty in silence.
fn list_dir(dir: &Path, d: &mut OrtDiscovery) -> Option<std::fs::ReadDir> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Some(entries),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => None,
        Err(e) => {
            d.problems.push(format!("cannot list {}: {e}", dir.display()));
            None
        }
    }
}

fn candidate(path: PathBuf, source: &str) -> OrtCandidate {
    let resolved = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    let version = [&path, &resolved].iter().find_map(|p| {
        let name = p.file_name()?.to_str()?;
        let v = name.strip_prefix("libonnxruntime.so.")?;
        (!version_key(v).is_empty()).then(|| v.to_owned())
    });
    let providers = providers_beside(&path);
    OrtCandidate { path, version, providers, source: source.to_owned() }
}

/// Provider short names of the `libonnxruntime_providers_<name>.so` files in the library's folder.
pub fn providers_beside(lib: &Path) -> Vec<String> {
    let Some(dir) = lib.parent() else { return Vec::new() };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|es| {
            es.filter_map(Result::ok)
                .filter_map(|e| {
                    let n = e.file_name().into_string().ok()?;
                    let p = n.strip_prefix("libonnxruntime_providers_")?.strip_suffix(".so")?;
                    (p != "shared").then(|| p.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Picks the library for a plan: an explicit one always; else the first candidate at or above
/// `min` that offers any of `wanted` providers; else (or when `wanted` is empty) the first at or
/// above `min`. Returns the choice and why.
pub fn pick<'a>(d: &'a OrtDiscovery, wanted: &[&str], min: (u64, u64)) -> Option<(&'a OrtCandidate, String)> {
    if let Some(explicit) = d.candidates.iter().find(|c| c.is_explicit()) {
        return Some((explicit, format!("named by {}", explicit.source)));
    }
    let recent: Vec<&OrtCandidate> = d.candidates.iter().filter(|c| c.major_minor().is_none_or(|v| v >= min)).collect();
    if !wanted.is_empty()
        && let Some(c) = recent.iter().find(|c| c.providers.iter().any(|p| wanted.contains(&p.as_str())))
    {
        return Some((c, format!("first build found ({}) with the {} provider", c.source, wanted.join("/"))));
    }
    recent.first().map(|c| {
        let why = if wanted.is_empty() {
            format!("first build found ({})", c.source)
        } else {
            format!("no build with the {} provider was found; first build found ({})", wanted.join("/"), c.source)
        };
        (*c, why)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, b"\x7fELF").expect("write");
    }

    #[test]
    fn discovers_cache_flavors_and_providers_and_picks_by_vendor() {
        let t = tempfile::tempdir().expect("tempdir");
        let home = t.path().join("home");
        touch(&home.join("ort/gpu/libonnxruntime.so.1.31.1"));
        touch(&home.join("ort/gpu/libonnxruntime_providers_cuda.so"));
        touch(&home.join("ort/gpu/libonnxruntime_providers_shared.so"));
        touch(&home.join("ort/cpu/libonnxruntime.so.1.31.1"));
        touch(&home.join("ort/old/libonnxruntime.so.1.20.0"));
        touch(&home.join("ort/old/libonnxruntime.so.1.9.0"));
        let ctx = ProbeContext::with_root(t.path().join("root")).with_var("NORNIR_HOME", &home);
        let d = discover(&ctx);
        let flavors: Vec<String> = d
            .candidates
            .iter()
            .map(|c| c.path.parent().and_then(|p| p.file_name()).expect("flavor").to_string_lossy().into_owned())
            .collect();
        assert_eq!(flavors, ["cpu", "gpu", "old"]);
        assert_eq!(d.candidates[1].providers, ["cuda"]);
        assert_eq!(d.candidates[2].version.as_deref(), Some("1.20.0"), "newest file in a folder wins");
        let (cuda, why) = pick(&d, &["cuda"], (1, 22)).expect("pick cuda");
        assert!(cuda.path.ends_with("gpu/libonnxruntime.so.1.31.1"), "{why}");
        let (cpu, _) = pick(&d, &[], (1, 22)).expect("pick cpu");
        assert!(cpu.path.ends_with("cpu/libonnxruntime.so.1.31.1"));
        let (fallback, why) = pick(&d, &["migraphx"], (1, 22)).expect("fallback");
        assert!(fallback.path.ends_with("cpu/libonnxruntime.so.1.31.1"));
        assert!(why.contains("no build with the migraphx provider"), "{why}");
    }

    #[test]
    fn explicit_path_wins_and_bad_values_are_reported() {
        let t = tempfile::tempdir().expect("tempdir");
        let lib = t.path().join("x/libonnxruntime.so.1.22.2");
        touch(&lib);
        let ctx = ProbeContext::with_root(t.path())
            .with_var("ORT_DYLIB_PATH", &lib)
            .with_var("NORNIR_ORT_LIB", "relative.so");
        let d = discover(&ctx);
        let (c, why) = pick(&d, &["cuda"], (1, 22)).expect("explicit");
        assert_eq!(c.path, lib);
        assert!(why.contains("ORT_DYLIB_PATH"));
        assert!(d.problems.iter().any(|p| p.contains("NORNIR_ORT_LIB")), "{:?}", d.problems);
    }

    /// Every surface's one check of the default model: no cache, a folder without its graph,
    /// and the folder with `model.onnx` in place.
    /// A cache folder that exists and cannot be listed (here a link to itself: ELOOP, which
    /// root meets too, unlike a permission) is a problem line; a missing one is nothing.
    #[test]
    fn a_cache_folder_that_cannot_be_listed_is_said() {
        let t = tempfile::tempdir().expect("tempdir");
        let home = t.path().join("home");
        std::fs::create_dir_all(&home).expect("mkdir");
        let ctx = ProbeContext::with_root(t.path().join("root")).with_var("NORNIR_HOME", &home);
        assert!(discover(&ctx).problems.is_empty(), "no ort folder: nothing to say");
        std::os::unix::fs::symlink(home.join("ort"), home.join("ort")).expect("link");
        let d = discover(&ctx);
        assert!(d.problems.iter().any(|p| p.starts_with("cannot list") && p.contains("ort")), "{:?}", d.problems);
    }

    #[test]
    fn the_default_model_is_there_only_with_its_graph() {
        let t = tempfile::tempdir().expect("tempdir");
        let bare = ProbeContext::with_root(t.path().join("root"));
        assert_eq!(default_model(&bare), Err(NoDefaultModel::NoCache));
        let home = t.path().join("home");
        let ctx = ProbeContext::with_root(t.path().join("root")).with_var("NORNIR_HOME", &home);
        let dir = home.join(DEFAULT_MODEL_SUBDIR);
        std::fs::create_dir_all(&dir).expect("mkdir");
        assert_eq!(default_model(&ctx), Err(NoDefaultModel::Missing(dir.clone())));
        std::fs::write(dir.join("model.onnx"), b"graph").expect("write");
        assert_eq!(default_model(&ctx), Ok(dir));
    }
}
