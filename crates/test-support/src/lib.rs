//! What several crates' tests share, built at test time in temporary folders: stub shared
//! libraries with the real sonames and fake `/proc`, `/sys`, `/dev` trees (`stubs`), stub CUDA
//! libraries generated from the real CUDA provider's imports (`cuda_stubs`), tiny ONNX models
//! written byte by byte (`fixtures`), sentence-transformers Dense folders (`dense`), and a local
//! HTTP server of an image and of answers that misbehave on purpose (`http`). A dev-dependency
//! only: no product crate depends on it.
//! Its helpers panic on failure, as test code does.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_debug_implementations)]

pub mod cuda_stubs;
pub mod dense;
pub mod fixtures;
pub mod http;
pub mod stubs;

use std::path::PathBuf;

/// Whether the assets `cargo xtask test` fetches are here: it sets `NORNIR_TEST_ORT_CPU` (with
/// the default model and the rest beside it). A plain `cargo test` on a fresh clone has none.
pub fn assets_fetched() -> bool {
    std::env::var_os("NORNIR_TEST_ORT_CPU").is_some_and(|p| std::path::Path::new(&p).exists())
}

/// The reason every test that needs the fetched assets carries in its `#[ignore = "..."]` (an
/// attribute takes only a literal, so each test writes it out). `cargo xtask test` runs every
/// ignored test, so this crate's test `every_ignore_is_for_the_assets` allows no other reason.
pub const IGNORE_REASON: &str = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches";

/// Fails the calling test, naming `cargo xtask test`, when the fetched assets are not here.
///
/// Such a test is `#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test`
/// fetches"]`: a plain `cargo test` (the fast tier) lists it as ignored, never as passed, and
/// `cargo xtask test` runs it with `--include-ignored` after setting the `NORNIR_TEST_*`
/// variables. Run without them (`cargo test -- --include-ignored` on a fresh clone), it fails
/// here with this message rather than passing without having run.
pub fn require_assets(module: &str) {
    // libtest names each test's thread after the test; `module` where it does not.
    let current = std::thread::current();
    let test = current.name().filter(|n| *n != "main").unwrap_or(module);
    assert!(
        assets_fetched(),
        "{test}: needs the ONNX Runtime builds, models and test libraries that `cargo xtask test` fetches, \
         and NORNIR_TEST_ORT_CPU is unset or missing: run `cargo xtask test` (it fetches them, sets the \
         NORNIR_TEST_* variables and runs the ignored tests)"
    );
}

/// The first line of a test that needs the fetched assets: see [`require_assets`].
#[macro_export]
macro_rules! needs_assets {
    () => {
        $crate::require_assets(module_path!())
    };
}

/// The variable that names the file where a test standing in for a benchmark appends its figures
/// (one JSON object a line: `{"test": ..., "figures": {...}}`). The test asserts only what holds
/// on any machine and prints its figures; `cargo xtask soak` and `cargo xtask serve-bench
/// --load-tests` set this, read the figures back and report whether their targets (memory that
/// stays flat, an overload that is partly refused) were met.
pub const FIGURES_VAR: &str = "NORNIR_BENCH_FIGURES";

/// Appends `figures` under `test`'s name to the file that [`FIGURES_VAR`] names; nothing when unset.
pub fn record_figures(test: &str, figures: serde_json::Value) {
    let Some(path) = std::env::var_os(FIGURES_VAR) else { return };
    let line = serde_json::json!({ "test": test, "figures": figures }).to_string() + "\n";
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", std::path::Path::new(&path).display()));
    std::io::Write::write_all(&mut file, line.as_bytes()).expect("write the figures");
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every `#[ignore]` in the workspace's Rust sources is for the fetched assets, with
    /// [`super::IGNORE_REASON`]: `cargo xtask test` runs the ignored tests, so a test ignored for
    /// another reason (slow, broken, manual) would start running there. And every test that calls
    /// `needs_assets!()` is ignored so, or the fast tier would fail it.
    #[test]
    fn every_ignore_is_for_the_assets() {
        let want = format!("#[ignore = {:?}]", super::IGNORE_REASON);
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut stack = vec![root.join("crates"), root.join("xtask")];
        let (mut seen, mut wrong) = (0, Vec::new());
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    // A test that needs the assets and is not ignored fails the fast tier.
                    let calls = text.lines().filter(|l| l.trim() == "nornir_test_support::needs_assets!();").count();
                    let ignores = text.lines().filter(|l| l.trim() == want).count();
                    if calls > ignores {
                        wrong.push(format!(
                            "{}: {calls} tests call needs_assets!() and {ignores} are ignored",
                            path.display()
                        ));
                    }
                    for (i, line) in text.lines().enumerate() {
                        let line = line.trim();
                        // The attribute itself, not this test's own mentions of it.
                        if line.starts_with("#[ignore") {
                            seen += 1;
                            if line != want {
                                wrong.push(format!("{}:{}: {line}", path.display(), i + 1));
                            }
                        }
                    }
                }
            }
        }
        assert!(seen > 0, "no #[ignore] found under {}", root.display());
        assert!(
            wrong.is_empty(),
            "ignored for another reason, or worded otherwise (want {want}):\n{}",
            wrong.join("\n")
        );
    }
}
