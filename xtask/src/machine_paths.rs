//! The check that no tracked file names one machine's home or cache folder (a path into the root
//! user's home or one of the users' homes, or into a `.cache` folder): a script or test that reads from such
//! a path works only where it was written. Scripts and tests get the cache from the test command
//! (`NORNIR_HOME` and the variables it sets), as the Rust tests do.

use anyhow::{Context, Result, bail};

use crate::process::workspace_root;

/// Tracked files that may name such paths: the benchmark corpus (data: it quotes manuals that
/// mention the root user's files).
const EXEMPT: [&str; 1] = ["testdata/corpus.txt"];

/// Fails naming every tracked file and line that names a home or cache folder.
pub fn check() -> Result<()> {
    let root = workspace_root();
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output()
        .context("run git ls-files")?;
    if !out.status.success() {
        bail!("git ls-files failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let mut found = Vec::new();
    for name in out.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        if EXEMPT.contains(&name.as_str()) {
            continue;
        }
        // A file removed from the work tree but still tracked, or not text: nothing to read.
        let Ok(text) = std::fs::read_to_string(root.join(&name)) else { continue };
        for (n, line) in text.lines().enumerate() {
            if let Some(path) = machine_path(line) {
                found.push(format!("{name}:{}: {path}", n + 1));
            }
        }
    }
    if !found.is_empty() {
        bail!(
            "{} tracked lines name one machine's home or cache folder (read the cache from NORNIR_HOME, as the test command sets it):\n  {}",
            found.len(),
            found.join("\n  ")
        );
    }
    eprintln!("xtask: no tracked file names a home or cache folder");
    Ok(())
}

/// A cache folder's name, as `~/.cache` has it.
const CACHE: &str = ".cache";

/// The first absolute path in `line` that lies in a home folder or a `.cache` folder.
fn machine_path(line: &str) -> Option<&str> {
    let is_path_char = |c: char| !(c.is_whitespace() || "\"'`()[]{}<>,;=|".contains(c));
    let mut start = 0;
    for (i, c) in line.char_indices() {
        if !is_path_char(c) {
            start = i + c.len_utf8();
            continue;
        }
        let end = line[i..].find(|c: char| !is_path_char(c)).map_or(line.len(), |n| i + n);
        if i != start || c != '/' {
            continue;
        }
        let token = &line[i..end];
        let mut parts = token.split('/').skip(1);
        let first = parts.next().unwrap_or_default();
        let named = |p: Option<&str>| p.is_some_and(|n| n.starts_with(|c: char| c.is_ascii_alphanumeric()));
        // The root user's home, or one under home (Linux) or Users (macOS), with a name in it.
        let home = matches!(first, "root" | "home" | "Users") && named(parts.next());
        let in_cache = token.split('/').rev().skip(1).any(|c| c == CACHE);
        if home || in_cache {
            return Some(token);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::machine_path;

    /// An absolute path of `parts`, built here so this file names no machine's folder itself.
    fn abs(parts: &[&str]) -> String {
        format!("/{}", parts.join("/"))
    }

    #[test]
    fn absolute_home_and_cache_paths_are_found_and_portable_ones_are_not() {
        let found = [
            format!("MINILM = Path(\"{}\")", abs(&["root", ".cache", "nornir", "models", "all-MiniLM-L6-v2-st"])),
            format!("ORT_DYLIB_PATH={} python x.py", abs(&["home", "ann", "lib", "libonnxruntime.so"])),
            format!(
                "  chosen: {} (version 1.31.1)",
                abs(&["opt", "ci", ".cache", "nornir", "ort", "libonnxruntime.so"])
            ),
            format!("see `{}`", abs(&["Users", "bo", "models"])),
        ];
        for line in &found {
            assert!(machine_path(line).is_some(), "{line}");
        }
        let portable = [
            "else `~/.cache/nornir`".to_owned(),
            "nornir vector serve --model ~/.cache/nornir/models/all-MiniLM-L6-v2".to_owned(),
            r#"home.join(".cache/nornir")"#.to_owned(),
            r#"ORT_DYLIB_PATH="$NORNIR_HOME/ort/cpu/libonnxruntime.so.1.31.1""#.to_owned(),
            format!("the folder {}/ itself, or {} alone", abs(&["home"]), abs(&["root"])),
            "crates/embed/src/load/model.rs and /tmp/work".to_owned(),
        ];
        for line in &portable {
            assert_eq!(machine_path(line), None, "{line}");
        }
    }
}
