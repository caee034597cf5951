//! `cargo xtask public-api [--bless]`: the public API of the crates other code builds on (the
//! facade `nornir-vector` with everything it re-exports, `nornir-server`, `nornir-quantize`,
//! `nornir-convert`), read from rustdoc's HTML: every item, and each of its methods, fields and
//! variants (trait implementations left out), one per line, sorted. It is checked in as `public-api.txt`, and
//! `check-features` fails when the code no longer matches it, so every public change shows up in
//! review as a change of that file (`--bless` writes it). Stable rustdoc has no JSON output, so the
//! listing holds names, not signatures.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::process::{cargo, run_checked, workspace_root};

/// The crates whose public items are listed (as rustdoc names their folders).
const CRATES: &[&str] = &["nornir_vector", "nornir_server", "nornir_quantize", "nornir_convert"];
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

pub fn public_api(bless: bool) -> Result<()> {
    build_docs()?;
    check(bless)
}

/// Compares the docs already built with the checked-in listing (or writes it, with `bless`).
pub fn check(bless: bool) -> Result<()> {
    let doc = workspace_root().join("target/doc");
    let mut lines = BTreeSet::new();
    for krate in CRATES {
        list_crate(&doc, krate, &mut lines)?;
    }
    let now: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let path = workspace_root().join(LISTING);
    if bless {
        std::fs::write(&path, &now).with_context(|| format!("write {}", path.display()))?;
        eprintln!("xtask: public-api: wrote {} ({} lines)", path.display(), lines.len());
        return Ok(());
    }
    let before = std::fs::read_to_string(&path).unwrap_or_default();
    let old: BTreeSet<&str> = before.lines().collect();
    let added: Vec<&String> = lines.iter().filter(|l| !old.contains(l.as_str())).collect();
    let removed: Vec<&&str> = old.iter().filter(|l| !lines.contains(**l)).collect();
    if added.is_empty() && removed.is_empty() {
        eprintln!("xtask: public-api: unchanged ({} lines)", lines.len());
        return Ok(());
    }
    let mut diff = String::new();
    for l in &added {
        diff.push_str(&format!("+ {l}\n"));
    }
    for l in &removed {
        diff.push_str(&format!("- {l}\n"));
    }
    bail!(
        "the public API changed:\n{diff}If that is intended, run `cargo xtask public-api --bless` and commit {LISTING}, so the change is reviewed"
    )
}

fn list_crate(doc: &Path, krate: &str, lines: &mut BTreeSet<String>) -> Result<()> {
    let all = doc.join(krate).join("all.html");
    let html =
        std::fs::read_to_string(&all).with_context(|| format!("read {} (build the docs first)", all.display()))?;
    for href in attribute_values(&html, "href=\"") {
        let (folder, file) = href.rsplit_once('/').unwrap_or(("", href));
        let Some((kind, rest)) = file.split_once('.') else { continue };
        let Some(name) = rest.strip_suffix(".html") else { continue };
        if !["struct", "enum", "trait", "fn", "constant", "type", "macro", "union", "static"].contains(&kind) {
            continue;
        }
        let module =
            if folder.is_empty() { krate.to_owned() } else { format!("{krate}::{}", folder.replace('/', "::")) };
        let item = format!("{module}::{name} ({kind})");
        if ["struct", "enum", "trait", "union"].contains(&kind) {
            let page = doc.join(krate).join(href);
            let page = std::fs::read_to_string(&page).with_context(|| format!("read {}", page.display()))?;
            // Inherent items only: what follows belongs to trait implementations.
            let own =
                ["id=\"trait-implementations\"", "id=\"synthetic-implementations\"", "id=\"blanket-implementations\""]
                    .iter()
                    .filter_map(|m| page.find(m))
                    .min()
                    .map_or(page.as_str(), |end| &page[..end]);
            for id in attribute_values(own, "id=\"") {
                let member = id.split('-').next().unwrap_or(id);
                let known =
                    ["method.", "tymethod.", "structfield.", "variant.", "associatedconstant.", "associatedtype."];
                if known.iter().any(|k| member.starts_with(k)) {
                    lines.insert(format!("{item} {member}"));
                }
            }
        }
        lines.insert(item);
    }
    Ok(())
}

/// Every value of an HTML attribute that starts with `prefix` (`href="`), up to its closing quote.
fn attribute_values<'a>(html: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut values = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
        let Some(end) = rest.find('"') else { break };
        values.push(&rest[..end]);
        rest = &rest[end..];
    }
    values
}
