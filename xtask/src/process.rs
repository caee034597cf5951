//! Running commands from the workspace: cargo (with `/dev/null` readied), checked commands, timed stages.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::dev_null;

pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

/// A cargo command run in the workspace root, with `/dev/null` made fit for its compiler probe.
pub(crate) fn cargo() -> Command {
    dev_null::empty_if_regular_file();
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(workspace_root());
    c
}

pub(crate) fn run_checked(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

/// Runs one stage of `cargo xtask test` and says how long it took, so the costly ones show.
pub(crate) fn stage<T>(name: &str, run: impl FnOnce() -> Result<T>) -> Result<T> {
    let started = std::time::Instant::now();
    let result = run();
    eprintln!(
        "xtask: stage {name}: {:.0} s{}",
        started.elapsed().as_secs_f64(),
        if result.is_err() { " (failed)" } else { "" }
    );
    result
}

/// `cargo test`'s arguments `extra`, with `--include-ignored` for the test binaries: the tests
/// that need the fetched assets are `#[ignore]`d so that a plain `cargo test` lists them as
/// ignored (see `nornir_test_support::needs_assets!`), and this is where they run. It goes after
/// the `--` that `extra` may already have (`cargo xtask test serve -- --nocapture`).
pub(crate) fn with_ignored(extra: &[String]) -> Vec<String> {
    let mut args = extra.to_vec();
    match args.iter().position(|a| a == "--") {
        Some(i) => args.insert(i + 1, "--include-ignored".to_owned()),
        None => args.extend(["--".to_owned(), "--include-ignored".to_owned()]),
    }
    args
}
