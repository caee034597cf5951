//! Where the probe looks: a filesystem root and a snapshot of the environment.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The inputs of a probe. `from_process()` reads the real machine; tests build fake ones.
///
/// `root` prefixes every fixed system path (`/proc`, `/sys`, `/dev`, `/opt`, `/usr`), so a test can
/// point the probe at a fake tree. Paths taken from environment variables are used as they are.
#[derive(Debug, Clone)]
pub struct ProbeContext {
    root: PathBuf,
    vars: BTreeMap<OsString, OsString>,
}

impl ProbeContext {
    /// The running machine: the process environment as it is now, and root `/`, or
    /// `$NORNIR_PROBE_ROOT` when that is an absolute path (a simulated machine, for tests).
    pub fn from_process() -> Self {
        let vars: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        let root = vars
            .get(OsStr::new("NORNIR_PROBE_ROOT"))
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| PathBuf::from("/"));
        Self { root, vars }
    }

    /// An empty environment over `root`; add variables with [`ProbeContext::with_var`].
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), vars: BTreeMap::new() }
    }

    /// Returns the context with `name` set to `value`.
    pub fn with_var(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.vars.insert(name.into(), value.into());
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `absolute` re-rooted under the context's root (`/dev/kfd` -> `<root>/dev/kfd`).
    pub fn system_path(&self, absolute: &str) -> PathBuf {
        self.root.join(absolute.trim_start_matches('/'))
    }

    pub fn var(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(name)).map(OsString::as_os_str)
    }

    /// The variable as UTF-8 text, if set and valid.
    pub fn var_str(&self, name: &str) -> Option<&str> {
        self.var(name).and_then(OsStr::to_str)
    }

    /// The home folder from `$HOME`, if it is an absolute path.
    pub fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from).filter(|p| p.is_absolute())
    }
}
