//! `cargo xtask public-api [--bless]`: the public API of the crates other code builds on (the
//! facade `nornir-vector` with everything it re-exports, `nornir-server`, `nornir-quantize`,
//! `nornir-convert`), with signatures, one line per item, sorted (`render.rs` says what a line
//! holds). It is checked in as `public-api.txt`, and `check-features` fails when the code no longer
//! matches it, so every public change, a parameter's type included, shows up in review as a change
//! of that file (`--bless` writes it).
//!
//! The signatures come from rustdoc's JSON, an unstable output that the pinned stable rustdoc
//! writes under `RUSTC_BOOTSTRAP=1`: one `cargo doc --no-deps` of the listed crates and of the
//! crates the facade re-exports from (`nornir-embed`, `nornir-options`, `nornir-gpu-probe`,
//! `nornir-ep-select`), every feature on, into the usual target folder's `doc/`
//! (`<crate>.json`). Its format moves only when the toolchain pin does.

mod render;
mod signature;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::process::{cargo, run_checked, workspace_root};

/// The crates whose public items are listed (as rustdoc names them).
const CRATES: &[&str] = &["nornir_vector", "nornir_server", "nornir_quantize", "nornir_convert"];
/// The crates the facade re-exports from, documented too so each re-export resolves to its item.
const UNDERLYING: &[&str] = &["nornir_embed", "nornir_options", "nornir_gpu_probe", "nornir_ep_select"];
/// Every feature of the listed crates (the facade's bring the rest).
const FEATURES: &str =
    "nornir-vector/embed-ort-rocm,nornir-vector/quantize,nornir-vector/convert,nornir-server/embed-ort-rocm";
/// The listing, at the repository's root.
const LISTING: &str = "public-api.txt";

/// Builds the API docs with every feature, as `check-features` does.
pub fn build_docs() -> Result<()> {
    run_checked(
        cargo()
            .args(["doc", "--quiet", "--no-deps", "--workspace", "--features", "nornir-cli/embed-ort-rocm"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )
}

/// `cargo xtask public-api [--bless]`: the JSON docs, then the comparison (or the listing written).
pub fn public_api(bless: bool) -> Result<()> {
    check(bless)
}

/// The cargo target folder: `CARGO_TARGET_DIR` (relative to the workspace) or `target`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// Writes every crate's rustdoc JSON with the pinned toolchain; returns them by crate name.
fn json_docs() -> Result<BTreeMap<String, serde_json::Value>> {
    let mut cmd = crate::process::cargo();
    cmd.current_dir(workspace_root())
        .args(["doc", "--quiet", "--no-deps", "--features", FEATURES])
        .args(CRATES.iter().chain(UNDERLYING).flat_map(|c| ["-p".to_owned(), c.replace('_', "-")]))
        .env("RUSTDOCFLAGS", "-Z unstable-options --output-format json")
        // rustdoc's JSON is unstable: the pinned stable rustdoc writes it when told this is a
        // bootstrap build, so the format (render::FORMAT_VERSION) moves only with the pin.
        .env("RUSTC_BOOTSTRAP", "1");
    crate::dev_null::empty_if_regular_file();
    run_checked(&mut cmd).context("rustdoc could not write the crates' JSON docs")?;
    let mut docs = BTreeMap::new();
    for krate in CRATES.iter().chain(UNDERLYING) {
        let path = target_dir().join("doc").join(format!("{krate}.json"));
        let text = std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        docs.insert(
            krate.to_string(),
            serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))?,
        );
    }
    Ok(docs)
}

/// The listing of the code as it is now.
fn listing() -> Result<BTreeSet<String>> {
    let docs = render::Docs::new(json_docs()?)?;
    let mut lines = BTreeSet::new();
    for krate in CRATES {
        lines.extend(docs.lines(krate, CRATES)?);
    }
    Ok(lines)
}

/// Compares the code's public API with the checked-in listing (or writes it, with `bless`).
pub fn check(bless: bool) -> Result<()> {
    let lines = listing()?;
    let now: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let path = workspace_root().join(LISTING);
    if bless {
        std::fs::write(&path, &now).with_context(|| format!("write {}", path.display()))?;
        eprintln!("xtask: public-api: wrote {} ({} lines)", path.display(), lines.len());
        return Ok(());
    }
    let before = std::fs::read_to_string(&path).unwrap_or_default();
    let diff = difference(&before, &lines);
    if diff.is_empty() {
        eprintln!("xtask: public-api: unchanged ({} lines)", lines.len());
        return Ok(());
    }
    bail!(
        "the public API changed:\n{diff}If that is intended, run `cargo xtask public-api --bless` and commit {LISTING}, so the change is reviewed"
    )
}

/// `+ line` for each line of `now` not in `before`, then `- line` for each one gone.
fn difference(before: &str, now: &BTreeSet<String>) -> String {
    let old: BTreeSet<&str> = before.lines().collect();
    let mut diff = String::new();
    for l in now.iter().filter(|l| !old.contains(l.as_str())) {
        diff.push_str(&format!("+ {l}\n"));
    }
    for l in old.iter().filter(|l| !now.contains(**l)) {
        diff.push_str(&format!("- {l}\n"));
    }
    diff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_signature_is_one_line_added_and_one_removed() {
        let before = "pub fn nornir_x::f(x: u32) -> bool\npub struct nornir_x::S\n";
        let now: BTreeSet<String> =
            ["pub fn nornir_x::f(x: u64) -> bool", "pub struct nornir_x::S"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            difference(before, &now),
            "+ pub fn nornir_x::f(x: u64) -> bool\n- pub fn nornir_x::f(x: u32) -> bool\n"
        );
        assert_eq!(difference("pub struct nornir_x::S\npub fn nornir_x::f(x: u64) -> bool\n", &now), "");
    }
}
