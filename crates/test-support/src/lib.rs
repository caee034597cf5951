//! What several crates' tests share, built at test time in temporary folders: stub shared
//! libraries with the real sonames and fake `/proc`, `/sys`, `/dev` trees (`stubs`), stub CUDA
//! libraries generated from the real CUDA provider's imports (`cuda_stubs`), and tiny ONNX models
//! written byte by byte (`fixtures`). A dev-dependency only: no product crate depends on it.
//! Its helpers panic on failure, as test code does.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_debug_implementations)]

pub mod cuda_stubs;
pub mod fixtures;
pub mod stubs;

use std::path::PathBuf;

/// Whether the assets `cargo xtask test` fetches are here: it sets `NORNIR_TEST_ORT_CPU` (with
/// the default model and the rest beside it). A plain `cargo test` on a fresh clone has none.
pub fn assets_fetched() -> bool {
    std::env::var_os("NORNIR_TEST_ORT_CPU").is_some_and(|p| std::path::Path::new(&p).exists())
}

/// The line a test prints when it skips for want of the fetched assets (libtest names each test's
/// thread after the test; `module` where it does not).
pub fn skip_without_assets(module: &str) {
    let current = std::thread::current();
    let test = current.name().filter(|n| *n != "main").unwrap_or(module);
    // Straight to the file descriptor: libtest captures `println!`, and a skip must show.
    let line = format!(
        "{test}: skipped: it needs the ONNX Runtime builds, models and test libraries that `cargo xtask test` fetches\n"
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

/// Returns from the calling test, after one line naming `cargo xtask test`, when the fetched
/// assets are not here: the tier that `cargo test` on a fresh clone runs (see README.md).
#[macro_export]
macro_rules! needs_assets {
    () => {
        if !$crate::assets_fetched() {
            $crate::skip_without_assets(module_path!());
            return;
        }
    };
}

/// The cosine of two vectors (1 for the same direction, 0 when either is zero), summed in f64.
/// The one cosine of the tests and of xtask's quality figures.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let (na, nb) = (norm(a), norm(b));
    if na > 0.0 && nb > 0.0 { (dot / (na * nb)) as f32 } else { 0.0 }
}

/// The `q`-quantile (0 to 1) of `sorted` by the nearest-rank method; NaN for an empty list.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// A memory field (`"VmRSS:"`, `"VmHWM:"`) of `/proc/PID/status` (`None`: this process), in KiB.
pub fn status_kib(pid: Option<u32>, field: &str) -> u64 {
    let path = pid.map_or_else(|| "/proc/self/status".to_owned(), |p| format!("/proc/{p}/status"));
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {path}"))
}

/// `v` scaled to length 1.
pub fn unit(v: &[f32]) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

/// A JSON array of numbers (a vector in an HTTP answer) as floats; anything else fails the test.
pub fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("not a number: {x}")) as f32)
        .collect()
}

/// A path the test set-up (`cargo xtask test`) provides in `var`, which must exist.
pub fn env_path(var: &str) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| panic!("{var} unset: run `cargo xtask test`"));
    assert!(p.exists(), "{} missing: run `cargo xtask test`", p.display());
    p
}

/// The `site-packages` folder of the Python virtual environment at `venv` (`lib/python3.*/`).
pub fn venv_site_packages(venv: &std::path::Path) -> PathBuf {
    let lib = venv.join("lib");
    let python = std::fs::read_dir(&lib)
        .unwrap_or_else(|e| panic!("{}: {e}", lib.display()))
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .unwrap_or_else(|| panic!("no python3.* in {}", lib.display()));
    python.path().join("site-packages")
}
