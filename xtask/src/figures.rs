//! The figures that tests standing in for benchmarks record (`nornir_test_support::record_figures`):
//! those tests assert only what holds on any machine, and the benchmarks that run them read the
//! figures back here and report whether their targets were met.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::process::workspace_root;

/// `target/NAME-figures.jsonl`, emptied: where the tests of one benchmark run append their figures.
pub(crate) fn file(name: &str) -> Result<PathBuf> {
    let path = workspace_root().join(format!("target/{name}-figures.jsonl"));
    let _ = std::fs::remove_file(&path);
    Ok(path)
}

/// The last figures that `test` recorded in `path`.
pub(crate) fn read(path: &Path, test: &str) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}: no figures recorded", path.display()))?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["test"] == test)
        .map(|v| v["figures"].clone())
        .with_context(|| format!("{}: no figures from the test {test:?}", path.display()))
}

/// A figure as a number; a missing one fails the benchmark (the test and this reader disagree).
pub(crate) fn number(figures: &Value, key: &str) -> Result<f64> {
    figures[key].as_f64().with_context(|| format!("no number {key:?} in the figures {figures}"))
}

/// Prints whether a target was met, and returns it.
pub(crate) fn target(what: &str, met: bool) -> bool {
    eprintln!("xtask: target: {what}: {}", if met { "met" } else { "NOT met" });
    met
}
