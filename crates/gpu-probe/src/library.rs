//! Finding shared libraries by versioned soname in candidate folders, and loading them for the
//! life of the process so that a provider library loaded later finds its NEEDED sonames resident.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

/// glibc's `RTLD_NOLOAD`: answer whether an object is mapped, load nothing.
const RTLD_NOLOAD: i32 = 0x4;
use serde::{Deserialize, Serialize};

use crate::elf;
use crate::paths::version_key;

/// One library a vendor runtime needs, as versioned sonames, newest first.
#[derive(Debug, Clone, Copy)]
pub struct LibrarySpec {
    pub name: &'static str,
    pub sonames: &'static [&'static str],
    /// Whether the vendor counts as available without it.
    pub required: bool,
}

/// What the probe learned about one library.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LibraryReport {
    pub name: String,
    pub required: bool,
    /// The soname that matched, if any.
    pub soname: Option<String>,
    /// Absolute path of the file found.
    pub path: Option<PathBuf>,
    /// From the resolved file name (`libamdhip64.so.5.2.21153` -> `5.2.21153`), else the soname's major.
    pub version: Option<String>,
    pub loaded: bool,
    /// Why it was not found or not loaded.
    pub error: Option<String>,
    /// Files that had the right name but could not be used, and why.
    pub rejected: Vec<String>,
    /// Every folder searched, in order.
    pub searched: Vec<PathBuf>,
}

struct Resident {
    soname: String,
    path: PathBuf,
    _lib: Library,
}

/// Libraries this process loaded through the probe. Never unloaded.
static RESIDENT: Mutex<Vec<Resident>> = Mutex::new(Vec::new());

fn lock_resident() -> std::sync::MutexGuard<'static, Vec<Resident>> {
    RESIDENT.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where `soname` is loaded in this process, if it is (by the probe or by anyone else).
pub fn loaded_path(soname: &str) -> Option<PathBuf> {
    if let Some(r) = lock_resident().iter().find(|r| r.soname == soname) {
        return Some(r.path.clone());
    }
    // RTLD_NOLOAD only answers whether an object of that name is already mapped; it loads nothing.
    // SAFETY: with RTLD_NOLOAD no initialiser runs.
    let lib = unsafe { Library::open(Some(soname), RTLD_NOW | RTLD_NOLOAD) }.ok()?;
    drop(lib);
    Some(PathBuf::from(soname))
}

/// Looks for `soname` in `dirs` (in order). Returns the first usable file, plus every file with the
/// right name that was refused (not ELF, unreadable, symlink loop) with the reason.
pub fn find_soname(soname: &str, dirs: &[PathBuf]) -> (Option<PathBuf>, Vec<String>) {
    let mut rejected = Vec::new();
    for dir in dirs {
        let candidate = dir.join(soname);
        if std::fs::symlink_metadata(&candidate).is_err() {
            continue;
        }
        match std::fs::metadata(&candidate) {
            Err(e) => rejected.push(format!("{}: {e}", candidate.display())),
            Ok(m) if !m.is_file() => rejected.push(format!("{}: not a regular file", candidate.display())),
            Ok(_) => match elf::looks_like_elf(&candidate) {
                Ok(true) => return (Some(candidate), rejected),
                Ok(false) => rejected.push(format!("{}: not an ELF shared library", candidate.display())),
                Err(e) => rejected.push(format!("{}: {e}", candidate.display())),
            },
        }
    }
    (None, rejected)
}

/// Finds the newest soname of `spec` in `dirs`, without loading it.
pub fn find(spec: &LibrarySpec, dirs: &[PathBuf]) -> LibraryReport {
    let mut report = LibraryReport {
        name: spec.name.to_owned(),
        required: spec.required,
        searched: dirs.to_vec(),
        ..LibraryReport::default()
    };
    for soname in spec.sonames {
        let (found, rejected) = find_soname(soname, dirs);
        report.rejected.extend(rejected);
        if let Some(path) = found {
            report.version = Some(file_version(&path, soname));
            report.soname = Some((*soname).to_owned());
            report.path = Some(path);
            return report;
        }
    }
    report.error = Some(format!("none of {} found", spec.sonames.join(", ")));
    report
}

/// The version in the resolved file name after `.so.`, else the soname's own suffix.
fn file_version(path: &Path, soname: &str) -> String {
    let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let name = resolved.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let from = |n: &str| n.split_once(".so.").map(|(_, v)| v.to_owned()).filter(|v| !version_key(v).is_empty());
    from(&name).or_else(|| from(soname)).unwrap_or_else(|| "unknown".to_owned())
}

/// Loads the library at `path` for the life of the process (RTLD_NOW | RTLD_GLOBAL), first loading
/// any of its NEEDED libraries that sit in `dirs` and are not yet resident, so that a dependency in
/// a folder the loader does not search (e.g. a pip wheel's `lib`) still resolves.
pub fn load_with_deps(path: &Path, soname: &str, dirs: &[PathBuf]) -> Result<(), String> {
    load_recursive(path, soname, dirs, 0)
}

fn load_recursive(path: &Path, soname: &str, dirs: &[PathBuf], depth: usize) -> Result<(), String> {
    if lock_resident().iter().any(|r| r.soname == soname) {
        return Ok(());
    }
    if depth < 8
        && let Ok(deps) = elf::read_deps(path)
    {
        for needed in &deps.needed {
            if loaded_path(needed).is_some() {
                continue;
            }
            if let (Some(dep_path), _) = find_soname(needed, dirs) {
                // A failure here shows again, with its cause, when the library itself is loaded.
                let _ = load_recursive(&dep_path, needed, dirs, depth + 1);
            }
        }
    }
    // SAFETY: loading a shared library runs its initialisers; the probe only loads vendor runtime
    // libraries found by absolute path in folders the user or the system designated.
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| describe_dl_error(&e))?;
    tracing::debug!(path = %path.display(), soname, "loaded library");
    lock_resident().push(Resident { soname: soname.to_owned(), path: path.to_path_buf(), _lib: lib });
    Ok(())
}

/// The loader's own message for a libloading error (its `Display` alone says only "dlopen failed").
pub fn describe_dl_error(e: &libloading::Error) -> String {
    use std::error::Error as _;
    match e.source() {
        Some(src) => src.to_string(),
        None => e.to_string(),
    }
}

/// Calls `int fn(int*)` (hipGetDeviceCount, cuDeviceGetCount) in a resident library.
pub(crate) fn call_count(soname: &str, symbol: &str) -> Result<i32, String> {
    let guard = lock_resident();
    let resident = guard.iter().find(|r| r.soname == soname).ok_or_else(|| format!("{soname} is not loaded"))?;
    // SAFETY: the symbol is declared `int f(int*)` in the vendor's public header.
    unsafe {
        let f = resident
            ._lib
            .get::<unsafe extern "C" fn(*mut i32) -> i32>(symbol)
            .map_err(|e| format!("{symbol} not found in {soname}: {}", describe_dl_error(&e)))?;
        let mut count = 0i32;
        let status = f(&mut count);
        if status != 0 {
            return Err(format!("{symbol} returned error code {status}"));
        }
        Ok(count)
    }
}

/// Calls `int fn(unsigned)` (cuInit) in a resident library.
pub(crate) fn call_init(soname: &str, symbol: &str) -> Result<(), String> {
    let guard = lock_resident();
    let resident = guard.iter().find(|r| r.soname == soname).ok_or_else(|| format!("{soname} is not loaded"))?;
    // SAFETY: the symbol is declared `int f(unsigned int)` in the vendor's public header.
    unsafe {
        let f = resident
            ._lib
            .get::<unsafe extern "C" fn(u32) -> i32>(symbol)
            .map_err(|e| format!("{symbol} not found in {soname}: {}", describe_dl_error(&e)))?;
        match f(0) {
            0 => Ok(()),
            status => Err(format!("{symbol} returned error code {status}")),
        }
    }
}
