//! Reading Rust source as text for the cycle check: comments and literals blanked, tokens, every
//! path a file names (`use` trees expanded), what its module-level `use` declarations bind, and
//! the names of the items it defines.

/// Every `*.rs` file under `dir`, sorted: the source files the checks read.
pub(crate) fn rust_files(dir: &std::path::Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use anyhow::Context;
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("read {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The source with comments, string and char literals replaced by spaces (lines kept).
pub(crate) fn blank_non_code(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if b[i] == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) && !ident_byte(b, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let end =
                b[j + 1..].windows(close.len()).position(|w| w == close).map_or(b.len(), |p| j + 1 + p + close.len());
            for &c in &b[i..end] {
                blank(&mut out, c);
            }
            i = end;
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                blank(&mut out, b[i]);
                i += 1;
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' && is_char_literal(b, i) {
            // The closing quote: after the escaped character of `'\x'`, else after the first.
            let from = if b.get(i + 1) == Some(&b'\\') { i + 3 } else { i + 1 };
            let end =
                b.get(from..).and_then(|rest| rest.iter().position(|&c| c == b'\'')).map_or(b.len(), |p| from + p + 1);
            out.extend(std::iter::repeat_n(b' ', end - i));
            i = end;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn ident_byte(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// `'x'` or `'\n'`, not a lifetime `'a`.
fn is_char_literal(b: &[u8], i: usize) -> bool {
    match (b.get(i + 1), b.get(i + 2)) {
        (Some(b'\\'), _) => true,
        (Some(_), Some(b'\'')) => true,
        (Some(c), _) if *c >= 0x80 => b[i + 1..].iter().take(6).any(|&c| c == b'\''),
        _ => false,
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Star,
    Other,
}

/// The tokens, with the 1-based line each begins on.
fn tokens(code: &str) -> (Vec<Token>, Vec<usize>) {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut lines = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Token::Ident(code[start..i].to_owned()));
            lines.push(line);
            continue;
        }
        if c == b'\n' {
            line += 1;
        }
        lines.push(line);
        out.push(match c {
            b':' if b.get(i + 1) == Some(&b':') => {
                i += 1;
                Token::PathSep
            }
            b'{' => Token::Open,
            b'}' => Token::Close,
            b',' => Token::Comma,
            b'*' => Token::Star,
            c if c.is_ascii_whitespace() => {
                lines.pop();
                i += 1;
                continue;
            }
            _ => Token::Other,
        });
        i += 1;
    }
    (out, lines)
}

/// What one leaf of a `use` tree binds in its module.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Bind {
    /// `a::b` or `a::b as c`: the name `b` (or `c`).
    Name(String),
    /// `a::*`: every name `a` binds.
    Glob,
    /// `a as _`, or a plain path outside a `use`.
    Nothing,
}

/// One leaf of a path or `use` tree.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Leaf {
    pub path: Vec<String>,
    pub bind: Bind,
}

/// A module-level `use` leaf, of any visibility: a private import is visible to the module's
/// children too, so `super::name` can reach it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Import {
    /// The module it is declared in: the file's, or an inline `mod x { ... }` inside it.
    pub scope: Vec<String>,
    /// Absolute when it began with `crate`/`super`/`self`; else relative to `scope` (a child
    /// module, or something outside the crate).
    pub path: Vec<String>,
    pub relative: bool,
    pub bind: Bind,
}

/// What the cycle check reads from one file.
#[derive(Debug, Default)]
pub(super) struct Scan {
    /// Every path named through `crate::`, `super::` or `self::`, made absolute, with its line
    /// and whether it is inside an inline `mod tests`.
    pub paths: Vec<(Vec<String>, usize, bool)>,
    /// Every path that begins with a plain name (`child::Item`, but also `std::fs`, `Vec::new`),
    /// with the scope it is relative to, its line and whether it is inside an inline `mod tests`;
    /// the caller keeps those whose first name is a module.
    pub relative: Vec<(Vec<String>, Vec<String>, usize, bool)>,
    /// The module-level `use` declarations.
    pub imports: Vec<Import>,
    /// `(scope, name)` of each module-level item (`fn`, `struct`, `mod`, `const`, ...).
    pub defined: Vec<(Vec<String>, String)>,
    /// The inline modules, as absolute module paths.
    pub inline_modules: Vec<Vec<String>>,
}

const ITEM_KEYWORDS: &[&str] = &["fn", "struct", "enum", "union", "trait", "type", "const", "static", "mod"];

/// Reads one file. `module` is the file's own module path; inline `mod x { ... }` blocks shift
/// `super`/`self` and the scope of what they declare.
pub(super) fn scan(code: &str, module: &[String]) -> Scan {
    let (toks, lines) = tokens(&blank_non_code(code));
    let mut found = Scan::default();
    // The inline modules we are inside, with the brace depth each opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let here = |inline: &[(String, usize)]| -> Vec<String> {
        module.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect()
    };
    while i < toks.len() {
        let module_level = depth == inline.last().map_or(0, |(_, d)| d + 1);
        let after_use = module_level && i > 0 && matches!(&toks[i - 1], Token::Ident(u) if u == "use");
        let preceded_by_sep = i > 0 && toks[i - 1] == Token::PathSep;
        match &toks[i] {
            Token::Open => depth += 1,
            Token::Close => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Token::Ident(kw) if kw == "mod" => {
                if let Some(Token::Ident(name)) = toks.get(i + 1) {
                    if module_level {
                        found.defined.push((here(&inline), name.clone()));
                    }
                    if toks.get(i + 2) == Some(&Token::Open) {
                        inline.push((name.clone(), depth));
                        found.inline_modules.push(here(&inline));
                        depth += 1;
                        i += 3;
                        continue;
                    }
                }
            }
            Token::Ident(kw) if module_level && ITEM_KEYWORDS.contains(&kw.as_str()) => {
                if let Some(Token::Ident(name)) = toks.get(i + 1) {
                    found.defined.push((here(&inline), name.clone()));
                }
            }
            Token::Ident(kw) if module_level && kw == "macro_rules" => {
                if let Some(Token::Ident(name)) = toks.get(i + 2) {
                    found.defined.push((here(&inline), name.clone()));
                }
            }
            Token::Ident(root) if !preceded_by_sep && toks.get(i + 1) == Some(&Token::PathSep) => {
                let scope = here(&inline);
                let relative = !matches!(root.as_str(), "crate" | "super" | "self");
                let (prefix, next) = if relative { (Vec::new(), i) } else { path_start(&toks, i, &scope) };
                let (leaves, end) = use_tree(&toks, next, prefix);
                let in_tests = inline.iter().any(|(n, _)| n == "tests");
                for leaf in leaves {
                    if after_use {
                        found.imports.push(Import {
                            scope: scope.clone(),
                            path: leaf.path.clone(),
                            relative,
                            bind: leaf.bind,
                        });
                    }
                    if relative {
                        found.relative.push((scope.clone(), leaf.path, lines[i], in_tests));
                    } else {
                        found.paths.push((leaf.path, lines[i], in_tests));
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// Where a path starting at `toks[i]` (`crate`, `super` or `self`) begins, made absolute, and the
/// index of the token after its leading `crate::`/`super::super::` part.
fn path_start(toks: &[Token], mut i: usize, here: &[String]) -> (Vec<String>, usize) {
    let mut base: Vec<String> = here.to_vec();
    loop {
        match &toks[i] {
            Token::Ident(s) if s == "crate" => base.clear(),
            Token::Ident(s) if s == "super" => {
                base.pop();
            }
            Token::Ident(s) if s == "self" => {}
            _ => break,
        }
        if toks.get(i + 1) != Some(&Token::PathSep) {
            break;
        }
        i += 2;
    }
    (base, i)
}

/// Parses a path or use tree from `toks[i]` under `prefix`; returns its leaves and the index after it.
fn use_tree(toks: &[Token], mut i: usize, prefix: Vec<String>) -> (Vec<Leaf>, usize) {
    let mut path = prefix;
    loop {
        match toks.get(i) {
            Some(Token::Ident(s)) => {
                if s != "self" {
                    path.push(s.clone());
                }
                i += 1;
                if toks.get(i) == Some(&Token::PathSep) {
                    i += 1;
                    continue;
                }
                let mut bind = path.last().cloned().map_or(Bind::Nothing, Bind::Name);
                if matches!(toks.get(i), Some(Token::Ident(a)) if a == "as") {
                    bind = match toks.get(i + 1) {
                        Some(Token::Ident(n)) if n != "_" => Bind::Name(n.clone()),
                        _ => Bind::Nothing,
                    };
                    i += 2;
                }
                return (vec![Leaf { path, bind }], i);
            }
            Some(Token::Star) => return (vec![Leaf { path, bind: Bind::Glob }], i + 1),
            Some(Token::Open) => {
                i += 1;
                let mut all = Vec::new();
                while i < toks.len() {
                    match toks[i] {
                        Token::Close => {
                            if all.is_empty() {
                                all.push(Leaf { path, bind: Bind::Nothing });
                            }
                            return (all, i + 1);
                        }
                        Token::Comma => i += 1,
                        _ => {
                            let (leaves, end) = use_tree(toks, i, path.clone());
                            all.extend(leaves);
                            i = end.max(i + 1);
                        }
                    }
                }
                return (all, i);
            }
            _ => return (vec![Leaf { path, bind: Bind::Nothing }], i),
        }
    }
}
