//! `cargo xtask code-map` (also run by `check-features`): ARCHITECTURE.md names every source file.
//!
//! The files are every `*.rs` under `crates/*/src` and `xtask/src`. A file is named when a word of
//! the document (a run of letters, digits and `_ . / -`, without a trailing `.`) is
//! - its path from the repository root (`crates/cli/src/commands/convert.rs`), anywhere in the
//!   document; or
//! - in its crate's section (from the heading ``### `crates/cli` `` or ``### `xtask` `` to the next
//!   heading; the whole document for a crate without one), its path relative to the crate's `src`
//!   (`commands/convert.rs`), that path after `src/` (`src/commands/convert.rs`), or the end of
//!   that path after a `/` (`convert.rs`); a `mod.rs` is named only with its folder (`fuse/mod.rs`,
//!   or the folder alone: `fuse/`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Every `*.rs` under `dir`, as paths relative to `dir` with `/` separators, sorted.
fn rust_files(dir: &Path) -> Result<Vec<String>> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("read {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let rel = path.strip_prefix(dir).unwrap_or(&path);
                found.push(rel.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>().join("/"));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The document's path-like words.
fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Each crate's section: the text under ``### `DIR` ``, by `DIR` (`crates/cli`, `xtask`).
fn sections(doc: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        if line.starts_with('#') {
            current = line
                .strip_prefix("### `")
                .and_then(|rest| rest.split_once('`'))
                .map(|(dir, _)| dir.trim_end_matches('/').to_owned());
            continue;
        }
        if let Some(dir) = &current {
            let text = out.entry(dir.clone()).or_default();
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

/// Whether `word` names the file at `rel` (relative to its crate's `src`) under the rule above.
fn names_relative(word: &str, rel: &str) -> bool {
    if word == rel || word.strip_suffix(rel).is_some_and(|head| head.ends_with("src/")) {
        return true;
    }
    if let Some(folder) = rel.strip_suffix("mod.rs") {
        return !folder.is_empty() && (word == folder || folder.strip_suffix(word).is_some_and(|h| h.ends_with('/')));
    }
    rel.strip_suffix(word).is_some_and(|head| head.ends_with('/'))
}

/// The files of `crates` (each a crate's folder from the root, with its files relative to its
/// `src`) that `doc` does not name, as paths from the root.
fn unnamed(doc: &str, crates: &[(String, Vec<String>)]) -> Vec<String> {
    let sections = sections(doc);
    let everywhere = words(doc);
    let mut missing = Vec::new();
    for (dir, files) in crates {
        let section = sections.get(dir).map_or(everywhere.clone(), |s| words(s));
        for rel in files {
            let full = format!("{dir}/src/{rel}");
            let named = everywhere.iter().any(|w| *w == full) || section.iter().any(|w| names_relative(w, rel));
            if !named {
                missing.push(full);
            }
        }
    }
    missing
}

/// Fails naming each source file ARCHITECTURE.md does not mention.
pub fn check(root: &Path) -> Result<()> {
    let doc_path = root.join("ARCHITECTURE.md");
    let doc = std::fs::read_to_string(&doc_path).with_context(|| format!("read {}", doc_path.display()))?;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.push(root.join("xtask"));
    dirs.sort();
    let mut crates = Vec::new();
    for dir in &dirs {
        let name = dir.strip_prefix(root).unwrap_or(dir).iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>();
        crates.push((name.join("/"), rust_files(&dir.join("src"))?));
    }
    let missing = unnamed(&doc, &crates);
    if !missing.is_empty() {
        bail!(
            "ARCHITECTURE.md's code map does not name {} source file(s) (by its path in its crate's src, or its name, in the crate's section; see xtask/src/code_map.rs):\n  {}",
            missing.len(),
            missing.join("\n  ")
        );
    }
    let total: usize = crates.iter().map(|(_, f)| f.len()).sum();
    eprintln!("xtask: check-features: ARCHITECTURE.md names all {total} source files");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn krate(dir: &str, files: &[&str]) -> (String, Vec<String>) {
        (dir.to_owned(), files.iter().map(|f| f.to_string()).collect())
    }

    #[test]
    fn a_file_is_named_by_its_path_or_name_in_its_section_or_by_its_full_path() {
        let doc = "# Architecture\n\n## Code map\n\n### `crates/cli` (nornir-cli)\n\
            `main.rs` only dispatches; `commands/convert.rs` and `doctor/` (`session.rs`,\n\
            `render.rs`); `fuse/mod.rs`.\n\n\
            ### `crates/convert` (nornir-convert)\n\
            `config.rs` reads; the command is `crates/cli/src/commands/quantize.rs`. Also lib.rs.\n\n\
            ### `xtask`\n`cycles/` is the check; `mod.rs` alone names nothing.\n\n\
            ## Testing\n`fixtures.rs` of test-support.\n";
        let crates = [
            krate(
                "crates/cli",
                &[
                    "main.rs",
                    "commands/convert.rs",
                    "commands/quantize.rs",
                    "doctor/session.rs",
                    "doctor/render.rs",
                    "doctor/mod.rs",
                    "fuse/mod.rs",
                    "lib.rs",
                    "session.rs",
                ],
            ),
            // `config.rs` is named in cli's section only, not in this crate's.
            krate("crates/convert", &["config.rs", "lib.rs", "network.rs"]),
            krate("xtask", &["cycles/mod.rs", "cycles/source.rs"]),
            // No section: the whole document.
            krate("crates/test-support", &["fixtures.rs", "stubs.rs"]),
        ];
        assert_eq!(
            unnamed(doc, &crates),
            [
                "crates/cli/src/lib.rs",
                "crates/convert/src/network.rs",
                "xtask/src/cycles/source.rs",
                "crates/test-support/src/stubs.rs",
            ]
        );
    }

    #[test]
    fn a_name_is_a_whole_word_and_a_suffix_only_after_a_slash() {
        assert!(names_relative("convert.rs", "commands/convert.rs"));
        assert!(!names_relative("vert.rs", "commands/convert.rs"));
        assert!(!names_relative("convert_check.rs", "commands/convert.rs"));
        assert!(!names_relative("mod.rs", "fuse/mod.rs"));
        assert!(names_relative("fuse/mod.rs", "fuse/mod.rs"));
        assert!(names_relative("fuse/", "fuse/mod.rs"));
        assert!(names_relative("src/embedder.rs", "embedder.rs"));
        assert!(!names_relative("tests/embedder.rs", "embedder.rs"));
        assert_eq!(words("see `a/b.rs`, (`c.rs`)."), ["see", "a/b.rs", "c.rs"]);
    }
}
