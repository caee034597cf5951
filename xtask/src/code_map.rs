//! `cargo xtask code-map` (also run by `check-features`): ARCHITECTURE.md names every source file
//! by its path, and every source file begins with a `//!` line saying what it is.
//!
//! The files are every `*.rs` under `crates/*/src` and `xtask/src`. A word of the document is a
//! run of letters, digits and `_ . / -` (a trailing `.` dropped), so backticks and punctuation
//! around a path do not matter. A file is named by one of:
//! - its path from the repository root: `crates/embed/src/load/engine.rs`, `xtask/src/main.rs`;
//! - its path from `crates/`: `embed/src/load/engine.rs`;
//! - a folder path in either form, ending in `/` (`crates/embed/src/load/`, `embed/src/`,
//!   `xtask/src/cycles/`), followed by the file's path relative to that folder (`engine.rs`,
//!   `mod.rs`, `model/tests.rs`): a folder path applies to the words after it up to the next folder
//!   path, blank line or heading. So `` `crates/embed/src/load/`: `engine.rs`, `model.rs` `` names
//!   two files, and a bare `engine.rs` anywhere else names none.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Every `*.rs` under `dir`, as paths relative to `dir` with `/` separators, sorted.
fn rust_files(dir: &Path) -> Result<Vec<String>> {
    let relative = |path: &PathBuf| {
        let rel = path.strip_prefix(dir).unwrap_or(path);
        rel.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>().join("/")
    };
    Ok(crate::cycles::source::rust_files(dir)?.iter().map(relative).collect())
}

/// The document's path-like words.
fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// A word as a path from the repository root, when it is one of the two path forms: from the
/// root (`crates/...`, `xtask/...`) or from `crates/` (`embed/src/...`, for a crate in `crates`).
fn from_root(word: &str, crate_dirs: &[&str]) -> Option<String> {
    if word.starts_with("crates/") || word.starts_with("xtask/") {
        return Some(word.to_owned());
    }
    let (first, _) = word.split_once('/')?;
    let full = format!("crates/{word}");
    crate_dirs.contains(&format!("crates/{first}").as_str()).then_some(full)
}

/// Every path from the root that `doc` names under the rules above.
fn named(doc: &str, crate_dirs: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut folder: Option<String> = None;
    for line in doc.lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            folder = None;
            continue;
        }
        for word in words(line) {
            match from_root(word, crate_dirs) {
                Some(path) if path.ends_with('/') => folder = Some(path),
                Some(path) => {
                    out.insert(path);
                }
                None => {
                    if let Some(f) = &folder {
                        out.insert(format!("{f}{word}"));
                    }
                }
            }
        }
    }
    out
}

/// The files of `crates` (each a crate's folder from the root, with its files relative to its
/// `src`) that `doc` does not name, as paths from the root.
fn unnamed(doc: &str, crates: &[(String, Vec<String>)]) -> Vec<String> {
    let dirs: Vec<&str> = crates.iter().map(|(d, _)| d.as_str()).collect();
    let named = named(doc, &dirs);
    let mut missing = Vec::new();
    for (dir, files) in crates {
        for rel in files {
            let full = format!("{dir}/src/{rel}");
            if !named.contains(&full) {
                missing.push(full);
            }
        }
    }
    missing
}

/// The files (paths from the root) whose first line is not a `//!` doc line.
fn lacking_doc_line(root: &Path, crates: &[(String, Vec<String>)]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (dir, files) in crates {
        for rel in files {
            let full = format!("{dir}/src/{rel}");
            let text = std::fs::read_to_string(root.join(&full)).with_context(|| format!("read {full}"))?;
            if !text.lines().next().is_some_and(|l| l.starts_with("//!")) {
                out.push(full);
            }
        }
    }
    Ok(out)
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
    let undocumented = lacking_doc_line(root, &crates)?;
    let mut failures = Vec::new();
    if !missing.is_empty() {
        failures.push(format!(
            "ARCHITECTURE.md's code map does not name {} source file(s) by path: write `crates/embed/src/load/engine.rs` (from the root), `embed/src/load/engine.rs` (from crates/), or a folder path ending in `/` followed by the files' paths in it, up to the next folder path, blank line or heading (`crates/embed/src/load/`: `engine.rs`, `mod.rs`); a bare file name elsewhere names nothing (see xtask/src/code_map.rs):\n  {}",
            missing.len(),
            missing.join("\n  ")
        ));
    }
    if !undocumented.is_empty() {
        failures.push(format!(
            "{} source file(s) do not begin with a `//!` line saying what the file is:\n  {}",
            undocumented.len(),
            undocumented.join("\n  ")
        ));
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    let total: usize = crates.iter().map(|(_, f)| f.len()).sum();
    eprintln!("xtask: check-features: ARCHITECTURE.md names all {total} source files by path; each begins with `//!`");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn krate(dir: &str, files: &[&str]) -> (String, Vec<String>) {
        (dir.to_owned(), files.iter().map(|f| f.to_string()).collect())
    }

    #[test]
    fn a_file_is_named_by_its_path_from_the_root_or_crates_or_after_its_folder() {
        let doc = "# Architecture\n\n## Code map\n\n### `crates/cli` (nornir-cli)\n\
            `crates/cli/src/main.rs` only dispatches; `cli/src/commands/convert.rs`;\n\
            `crates/cli/src/doctor/`: `session.rs`, `render.rs`,\n\
            `mod.rs`; `lib.rs` here is doctor's, the folder's words run to the blank line\n\n\
            but `session.rs` after a blank line names nothing; `crates/convert/src/` (`config.rs`).\n\
            ### `xtask`\n`xtask/src/cycles/` is the check: `mod.rs`.\n\n`source.rs` after a blank line is bare.\n\n\
            ## Testing\n`fixtures.rs` of test-support; `embed.rs` of the CLI.\n";
        let crates = [
            krate(
                "crates/cli",
                &[
                    "main.rs",
                    "commands/convert.rs",
                    "commands/embed.rs",
                    "doctor/session.rs",
                    "doctor/render.rs",
                    "doctor/mod.rs",
                    "doctor/lib.rs",
                    "lib.rs",
                ],
            ),
            krate("crates/convert", &["config.rs", "network.rs"]),
            krate("xtask", &["cycles/mod.rs", "cycles/source.rs"]),
            krate("crates/test-support", &["fixtures.rs"]),
        ];
        assert_eq!(
            unnamed(doc, &crates),
            [
                "crates/cli/src/commands/embed.rs",
                "crates/cli/src/lib.rs",
                "crates/convert/src/network.rs",
                "xtask/src/cycles/source.rs",
                "crates/test-support/src/fixtures.rs",
            ]
        );
    }

    #[test]
    fn the_path_forms_and_words() {
        let dirs = ["crates/embed", "xtask"];
        assert_eq!(from_root("embed/src/a.rs", &dirs).as_deref(), Some("crates/embed/src/a.rs"));
        assert_eq!(from_root("crates/embed/src/", &dirs).as_deref(), Some("crates/embed/src/"));
        assert_eq!(from_root("xtask/src/main.rs", &dirs).as_deref(), Some("xtask/src/main.rs"));
        assert_eq!(from_root("load/engine.rs", &dirs), None);
        assert_eq!(from_root("engine.rs", &dirs), None);
        assert_eq!(words("see `a/b.rs`, (`c.rs`)."), ["see", "a/b.rs", "c.rs"]);
    }

    #[test]
    fn every_file_begins_with_a_doc_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("crates/a/src")).unwrap();
        std::fs::write(dir.path().join("crates/a/src/lib.rs"), "//! The crate.\nmod b;\n").unwrap();
        std::fs::write(dir.path().join("crates/a/src/b.rs"), "/// Not a module doc.\npub fn f() {}\n").unwrap();
        std::fs::write(dir.path().join("crates/a/src/c.rs"), "").unwrap();
        let crates = [krate("crates/a", &["b.rs", "c.rs", "lib.rs"])];
        assert_eq!(lacking_doc_line(dir.path(), &crates).unwrap(), ["crates/a/src/b.rs", "crates/a/src/c.rs"]);
    }
}
