//! `cargo xtask check-features`: the feature promise, checked rather than assumed.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::process::{cargo, run_checked, workspace_root};

/// (label, cargo flags, whether the binary must contain the AMD path, whether `cargo xtask test`
/// already ran these packages' tests with the same features: the default build is `embed-ort`,
/// and its AMD build is `embed-ort-rocm`, which is also every feature there is).
const CONFIGS: &[(&str, &[&str], bool, bool)] = &[
    ("no default features", &["--no-default-features"], false, false),
    ("embed-ort", &["--no-default-features", "--features", "embed-ort"], false, true),
    // Without the defaults: the AMD feature alone must bring the whole embedder (the CLI's
    // server and commands included), not only the AMD ONNX Runtime behind "not compiled in".
    ("embed-ort-rocm alone", &["--no-default-features", "--features", "embed-ort-rocm"], true, true),
    ("all features", &["--all-features"], true, true),
];

/// Feature combinations a consumer's dependency graph can produce that no CLI feature set does;
/// they must compile too (the policy knowing a provider the embedder was built without).
const EMBED_COMBINATIONS: &[(&str, &[&str])] = &[
    ("nornir-embed with only nornir-ep-select/rocm", &["-p", "nornir-embed", "--features", "nornir-ep-select/rocm"]),
    ("nornir-embed without cuda", &["-p", "nornir-embed", "--no-default-features"]),
];

/// Strings only the AMD path's code puts into a binary: the AMD probe's libraries and its kfd
/// reader. (The provider names are in every build: `Provider` has its AMD variants everywhere.)
const AMD_MARKERS: &[&str] = &["libmigraphx_c.so", "libamdhip64.so", "gfx_target_version"];

/// The panic message of the embedder's fault injection, which only its tests compile in.
const TEST_HOOK_MARKER: &str = "fault injected";

/// `tests_ran`: `cargo xtask test` has just run every test of the default build and, in the AMD
/// build, every unit test and the suites the AMD feature changes (test.rs's AMD_BUILD_SUITES), so
/// the feature sets equal to those are not tested again (they are still linted and built).
pub fn check_features(test_env: &[(&str, std::path::PathBuf)], tests_ran: bool) -> Result<()> {
    let started = Instant::now();
    source_checks(&workspace_root())?;
    for (label, flags, amd, tested_by_xtask_test) in CONFIGS {
        eprintln!("xtask: check-features: {label}");
        let packages = ["-p", "nornir-vector", "-p", "nornir-cli"];
        run_checked(
            cargo()
                .args(["clippy", "--quiet", "--all-targets"])
                .args(packages)
                .args(*flags)
                .args(["--", "-D", "warnings"]),
        )?;
        if tests_ran && *tested_by_xtask_test {
            eprintln!("xtask: check-features: {label}: tests already run with these features by `cargo xtask test`");
        } else {
            run_checked(
                cargo()
                    .args(["test", "--quiet"])
                    .args(packages)
                    .args(*flags)
                    .args(crate::process::with_ignored(&[]))
                    .envs(test_env.iter().cloned()),
            )?;
        }
        run_checked(cargo().args(["build", "--quiet", "-p", "nornir-cli"]).args(*flags))?;
        let bin = workspace_root().join("target/debug/nornir");
        if contains(&bin, TEST_HOOK_MARKER)? {
            bail!(
                "{label}: the binary contains the embedder's test hooks ({TEST_HOOK_MARKER:?}); only its tests may enable `test-hooks`"
            );
        }
        let found: Vec<&str> = AMD_MARKERS.iter().copied().filter(|m| contains(&bin, m).unwrap_or(false)).collect();
        match (amd, found.is_empty()) {
            (true, true) => bail!("{label}: the binary lacks the AMD path ({AMD_MARKERS:?} not found)"),
            (false, false) => bail!("{label}: the binary contains AMD code: {found:?}"),
            _ => eprintln!(
                "xtask: check-features: {label}: AMD markers {}",
                if *amd { "present, as they must be" } else { "absent, as they must be" }
            ),
        }
    }
    for (label, flags) in EMBED_COMBINATIONS {
        eprintln!("xtask: check-features: {label}");
        run_checked(cargo().args(["clippy", "--quiet"]).args(*flags).args(["--", "-D", "warnings"]))?;
    }
    for pkg in [
        "nornir-gpu-probe",
        "nornir-ep-select",
        "nornir-options",
        "nornir-kernels",
        "nornir-quantize",
        "nornir-convert",
    ] {
        let out = cargo()
            .args(["tree", "--quiet", "--all-features", "-e", "normal", "-p", pkg])
            .output()
            .context("run cargo tree")?;
        let tree = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || tree.lines().any(|l| l.contains(" ort v") || l.contains(" ort-sys v")) {
            bail!("{pkg} depends on ort (or cargo tree failed):\n{tree}");
        }
        if matches!(pkg, "nornir-ep-select" | "nornir-options")
            && tree.lines().any(|l| l.contains("libloading") || l.contains("nornir-gpu-probe"))
        {
            bail!("{pkg} must do no I/O of the probe, but depends on:\n{tree}");
        }
    }
    facade_has_no_logic(&workspace_root().join("crates/vector/src/lib.rs"))?;
    eprintln!("xtask: check-features: the API docs, with their links checked, and the public API listing");
    crate::public_api::build_docs()?;
    crate::public_api::check(false)?;
    eprintln!("xtask: check-features passed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The checks that read the source as text: import cycles between files and folders, file and
/// function sizes, the code map and its `//!` lines. All run; it fails with every failure.
fn source_checks(root: &Path) -> Result<()> {
    let failures: Vec<String> = [crate::cycles::check(root), crate::sizes::check(root), crate::code_map::check(root)]
        .into_iter()
        .filter_map(|r| r.err().map(|e| format!("{e:#}")))
        .collect();
    if !failures.is_empty() {
        bail!("{}", failures.join("\n\n"));
    }
    Ok(())
}

fn contains(file: &Path, needle: &str) -> Result<bool> {
    let bytes = std::fs::read(file).with_context(|| format!("read {}", file.display()))?;
    Ok(bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

/// The facade may hold re-exports, constants and docs, nothing that computes.
fn facade_has_no_logic(lib: &Path) -> Result<()> {
    let text = std::fs::read_to_string(lib)?;
    for (i, line) in text.lines().enumerate() {
        let code = line.trim();
        // An inline `pub mod NAME {` groups re-exports (`diagnostics`); the rules below still hold
        // inside it.
        if code.starts_with("//") || (code.starts_with("pub mod ") && code.ends_with('{')) {
            continue;
        }
        if ["fn ", "impl ", "trait ", "macro_rules!", "mod "].iter().any(|k| code.contains(k)) {
            bail!("{}:{}: the facade must have no logic: {code}", lib.display(), i + 1);
        }
    }
    Ok(())
}
