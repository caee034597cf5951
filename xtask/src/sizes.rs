//! `cargo xtask sizes` (also run by `check-features`): no source file over 450 lines and no
//! function over 100 lines, outside tests.
//!
//! The files are every `*.rs` under `crates/*/src` and `xtask/src`, except tests: the crate
//! `crates/test-support` (a dev-dependency only, the tests' shared fixtures), a file named
//! `tests.rs` or `*_tests.rs`, one under a `tests/` folder, and one that its parent declares with
//! `#[cfg(test)] mod NAME;` (with everything under that module's folder). Inside a file, an item
//! under `#[cfg(test)]` (a `mod tests { ... }`, a helper) counts for neither limit. A file's length
//! is its lines less those test items' lines. A function runs from the line of its `fn` to the
//! line of its closing brace, found by matching braces in the source with comments, string and
//! char literals blanked; a function without a body (a trait's declaration) has no length, and a
//! nested function is measured on its own too.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::cycles::source::blank_non_code;

/// The crate whose code only tests build (every crate's dev-dependency): tests, for the limits.
const TEST_ONLY_CRATE: &str = "test-support";

/// The longest a source file may be, in lines outside tests.
pub const MAX_FILE_LINES: usize = 450;
/// The longest a function may be, from its `fn` line to its closing brace.
pub const MAX_FN_LINES: usize = 100;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(u8),
}

/// The tokens of blanked code, each with its 1-based line.
fn tokens(code: &str) -> Vec<(Tok, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Ident(code[start..i].to_owned()), line));
            continue;
        }
        if c == b'\n' {
            line += 1;
        } else if !c.is_ascii_whitespace() {
            out.push((Tok::Punct(c), line));
        }
        i += 1;
    }
    out
}

/// What one file measures.
#[derive(Debug, Default, PartialEq)]
struct Measure {
    /// Lines outside `#[cfg(test)]` items.
    lines: usize,
    /// `(name, line of its fn, length in lines)` of every function with a body outside tests.
    fns: Vec<(String, usize, usize)>,
    /// The modules it declares with `#[cfg(test)] mod NAME;`.
    test_modules: Vec<String>,
}

fn is_punct(t: Option<&(Tok, usize)>, c: u8) -> bool {
    matches!(t, Some((Tok::Punct(p), _)) if *p == c)
}

fn is_ident(t: Option<&(Tok, usize)>, s: &str) -> bool {
    matches!(t, Some((Tok::Ident(i), _)) if i == s)
}

/// The index of the `}` that closes the `{` at `open` (the last token when none does).
fn closing(toks: &[(Tok, usize)], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, (t, _)) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Punct(b'{') => depth += 1,
            Tok::Punct(b'}') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    toks.len().saturating_sub(1)
}

/// Where the item starting at `from` ends: its `;` (None for the body) or its body's `{`, at
/// depth zero of parentheses and brackets.
fn item_body(toks: &[(Tok, usize)], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (k, (t, _)) in toks.iter().enumerate().skip(from) {
        match t {
            Tok::Punct(b'(' | b'[') => depth += 1,
            Tok::Punct(b')' | b']') => depth -= 1,
            Tok::Punct(b';') if depth <= 0 => return None,
            Tok::Punct(b'{') if depth <= 0 => return Some(k),
            _ => {}
        }
    }
    None
}

/// `#[cfg(test)]` at `i`: the index after it.
fn cfg_test_at(toks: &[(Tok, usize)], i: usize) -> Option<usize> {
    let want = [
        Tok::Punct(b'#'),
        Tok::Punct(b'['),
        Tok::Ident("cfg".to_owned()),
        Tok::Punct(b'('),
        Tok::Ident("test".to_owned()),
        Tok::Punct(b')'),
        Tok::Punct(b']'),
    ];
    let found = toks.get(i..i + want.len())?;
    found.iter().zip(&want).all(|((t, _), w)| t == w).then_some(i + want.len())
}

fn measure(code: &str) -> Measure {
    let toks = tokens(&blank_non_code(code));
    let mut m = Measure { lines: code.lines().count(), ..Measure::default() };
    let mut i = 0;
    while i < toks.len() {
        if let Some(after) = cfg_test_at(&toks, i) {
            // The whole next item is a test's: skip it, and its lines.
            let start_line = toks[i].1;
            let end = match item_body(&toks, after) {
                Some(open) => closing(&toks, open),
                None => {
                    let semi = (after..toks.len()).find(|&k| is_punct(toks.get(k), b';')).unwrap_or(toks.len() - 1);
                    let words: Vec<&str> = toks[after..semi]
                        .iter()
                        .filter_map(|(t, _)| if let Tok::Ident(s) = t { Some(s.as_str()) } else { None })
                        .collect();
                    if let Some(p) = words.iter().position(|w| *w == "mod") {
                        m.test_modules.extend(words.get(p + 1).map(|s| s.to_string()));
                    }
                    semi
                }
            };
            m.lines -= toks[end].1 - start_line + 1;
            i = end + 1;
            continue;
        }
        if is_ident(toks.get(i), "fn")
            && let Some((Tok::Ident(name), _)) = toks.get(i + 1)
            && let Some(open) = item_body(&toks, i + 2)
        {
            let close = closing(&toks, open);
            m.fns.push((name.clone(), toks[i].1, toks[close].1 - toks[i].1 + 1));
        }
        i += 1;
    }
    m
}

/// Whether a file is a test by its name or folder (relative to its crate's `src`).
fn test_by_name(rel: &Path) -> bool {
    let name = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name == "tests.rs" || name.ends_with("_tests.rs") || rel.parent().is_some_and(|p| p.iter().any(|c| c == "tests"))
}

/// The folder a file's child modules live in.
fn children_folder(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new(""));
    match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => parent.to_path_buf(),
        _ => parent.join(file.file_stem().unwrap_or_default()),
    }
}

/// The violations in one crate's `src`: `(file, line, what)`.
fn check_dir(src: &Path) -> Result<Vec<(PathBuf, usize, String)>> {
    let files = crate::cycles::source::rust_files(src)?;
    let mut measured = Vec::new();
    let mut test_roots: Vec<PathBuf> = Vec::new();
    for file in files {
        if test_by_name(file.strip_prefix(src).unwrap_or(&file)) {
            continue;
        }
        let code = std::fs::read_to_string(&file).with_context(|| format!("read {}", file.display()))?;
        let m = measure(&code);
        let folder = children_folder(&file);
        for name in &m.test_modules {
            test_roots.push(folder.join(format!("{name}.rs")));
            test_roots.push(folder.join(name));
        }
        measured.push((file, m));
    }
    let mut out = Vec::new();
    for (file, m) in measured {
        if test_roots.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        if m.lines > MAX_FILE_LINES {
            out.push((file.clone(), 0, format!("{} lines outside tests (at most {MAX_FILE_LINES})", m.lines)));
        }
        for (name, line, len) in m.fns {
            if len > MAX_FN_LINES {
                out.push((file.clone(), line, format!("fn {name} is {len} lines (at most {MAX_FN_LINES})")));
            }
        }
    }
    Ok(out)
}

/// Every crate's `src` (and xtask's): fails naming each file and function over its limit.
pub fn check(root: &Path) -> Result<()> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|krate| !krate.ends_with(TEST_ONLY_CRATE))
        .map(|krate| krate.join("src"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.push(root.join("xtask/src"));
    dirs.sort();
    let mut report = Vec::new();
    for dir in &dirs {
        for (file, line, what) in check_dir(dir)? {
            let file = file.strip_prefix(root).unwrap_or(&file).display().to_string();
            report.push(if line == 0 { format!("  {file}: {what}") } else { format!("  {file}:{line}: {what}") });
        }
    }
    if !report.is_empty() {
        bail!(
            "{} source file(s) or function(s) too long (issue 60: files at most {MAX_FILE_LINES} lines, functions at most {MAX_FN_LINES}, tests aside); split them, moving code unchanged into well-named files:\n{}",
            report.len(),
            report.join("\n")
        );
    }
    eprintln!(
        "xtask: check-features: no source file over {MAX_FILE_LINES} lines, no function over {MAX_FN_LINES}, in {} crates",
        dirs.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long_fn(name: &str, body_lines: usize) -> String {
        let mut s = format!("pub fn {name}(x: u32) -> u32 {{\n");
        for k in 0..body_lines {
            s.push_str(&format!("    let _y{k} = \"}}\"; // }} {{\n"));
        }
        s.push_str("    x\n}\n");
        s
    }

    #[test]
    fn functions_are_measured_from_fn_to_their_closing_brace_ignoring_literals_and_comments() {
        let code = format!("//! Doc.\n\n{}\ntrait T {{\n    fn decl(&self);\n}}\n", long_fn("f", 3));
        let m = measure(&code);
        assert_eq!(m.fns, [("f".to_owned(), 3, 6)]);
    }

    #[test]
    fn a_long_function_and_a_long_file_fail_and_short_ones_pass() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::write(src.join("lib.rs"), format!("//! Lib.\nmod big;\n{}", long_fn("short", 97))).unwrap();
        let found = check_dir(src).unwrap();
        assert!(found.is_empty(), "{found:?}");
        std::fs::write(src.join("lib.rs"), format!("//! Lib.\nmod big;\n{}", long_fn("long", 98))).unwrap();
        let big: String = (0..451).map(|k| format!("const C{k}: u32 = {k};\n")).collect();
        std::fs::write(src.join("big.rs"), big).unwrap();
        let found: Vec<(String, usize, String)> = check_dir(src)
            .unwrap()
            .into_iter()
            .map(|(f, l, w)| (f.file_name().unwrap().to_string_lossy().into_owned(), l, w))
            .collect();
        assert_eq!(
            found,
            [
                ("big.rs".to_owned(), 0, "451 lines outside tests (at most 450)".to_owned()),
                ("lib.rs".to_owned(), 3, "fn long is 101 lines (at most 100)".to_owned()),
            ]
        );
    }

    #[test]
    fn tests_count_for_neither_limit() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        let long_tests = format!("#[cfg(test)]\nmod tests {{\n{}}}\n", long_fn("case", 500));
        std::fs::write(src.join("lib.rs"), format!("//! Lib.\n#[cfg(test)]\nmod checks;\nmod a;\n{long_tests}"))
            .unwrap();
        std::fs::write(src.join("a.rs"), format!("//! A.\n#[cfg(test)]\nfn helper() {{\n{}}}\n", "\n".repeat(200)))
            .unwrap();
        std::fs::write(src.join("checks.rs"), long_fn("case", 500)).unwrap();
        std::fs::create_dir_all(src.join("a/tests")).unwrap();
        std::fs::write(src.join("a/tests/deep.rs"), long_fn("case", 500)).unwrap();
        std::fs::write(src.join("a/x_tests.rs"), long_fn("case", 500)).unwrap();
        std::fs::write(src.join("a/tests.rs"), long_fn("case", 500)).unwrap();
        assert_eq!(check_dir(src).unwrap(), []);
        assert_eq!(measure(&format!("//! A.\n{long_tests}")).lines, 1);
    }
}
