//! The import-cycle check of `cargo xtask check-features`: no two files of one crate that are not
//! parent and child may reach each other through `crate::`/`super::`/`self::` paths.
//!
//! It reads the source as text (comments and string literals blanked), expands `use` trees and
//! inline paths into module paths, and resolves each to the file of its longest known module.
//! A path through a re-export resolves to the re-exporting module (usually the crate root, a
//! parent of everything), so a cycle hidden behind `pub use` is not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

mod source;

use source::referenced_paths;

/// One crate's source folder: every `.rs` file under it, as `(module path, file)`.
fn modules(src: &Path) -> Result<Vec<(Vec<String>, PathBuf)>> {
    let mut found = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("read {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let rel = path.strip_prefix(src).unwrap_or(&path);
                let mut parts: Vec<String> =
                    rel.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
                if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    parts.pop();
                }
                found.push((parts, path));
            }
        }
    }
    Ok(found)
}

/// A cycle between files of one crate that are not parent and child, as the files in order.
pub fn crate_cycles(src: &Path) -> Result<Vec<Vec<PathBuf>>> {
    let mods = modules(src)?;
    let by_path: BTreeMap<Vec<String>, usize> = mods.iter().enumerate().map(|(k, (m, _))| (m.clone(), k)).collect();
    let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); mods.len()];
    for (k, (module, file)) in mods.iter().enumerate() {
        let code = std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
        for path in referenced_paths(&code, module) {
            let target = (0..=path.len()).rev().find_map(|n| by_path.get(&path[..n]).copied());
            if let Some(t) = target {
                let (a, b) = (&mods[k].0, &mods[t].0);
                if t != k && !a.starts_with(b) && !b.starts_with(a) {
                    edges[k].insert(t);
                }
            }
        }
    }
    let mut cycles = Vec::new();
    for component in strongly_connected(&edges) {
        if component.len() > 1 {
            let mut files: Vec<PathBuf> = component.iter().map(|&k| mods[k].1.clone()).collect();
            files.sort();
            cycles.push(files);
        }
    }
    Ok(cycles)
}

/// Tarjan's strongly connected components.
fn strongly_connected(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.edges[v].iter() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let n = edges.len();
    let mut s = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

/// Every crate's `src` (and xtask's): fails naming each cycle.
pub fn check(root: &Path) -> Result<()> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("src")))
        .filter(|p| p.is_dir())
        .collect();
    dirs.push(root.join("xtask/src"));
    dirs.sort();
    let mut report = Vec::new();
    for dir in &dirs {
        for cycle in crate_cycles(dir)? {
            let names: Vec<String> =
                cycle.iter().map(|f| f.strip_prefix(root).unwrap_or(f).display().to_string()).collect();
            report.push(format!("  {}", names.join(" <-> ")));
        }
    }
    if !report.is_empty() {
        bail!(
            "import cycles between files that are not parent and child (ARCHITECTURE.md: modules never import back); move what both need into one of them or a third file:\n{}",
            report.join("\n")
        );
    }
    eprintln!("xtask: check-features: no import cycles in {} crates", dirs.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, code) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, code).unwrap();
        }
        dir
    }

    #[test]
    fn a_back_import_between_siblings_is_a_cycle() {
        let d = tree(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::Thing;\n"),
            ("b.rs", "pub struct Thing;\nfn f() { crate::a::g() }\n"),
        ]);
        let cycles = crate_cycles(d.path()).unwrap();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycles[0].len(), 2);
    }

    #[test]
    fn one_way_imports_parents_children_and_text_are_not_cycles() {
        let d = tree(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\npub use a::X;\nuse crate::c::Y;\n"),
            ("a.rs", "use crate::{b::{self, Z}, X as W};\npub struct X;\n"),
            // Mentions of the other file in comments and strings are not imports.
            (
                "b.rs",
                "// crate::a::X\nconst S: &str = \"crate::a::X\";\nconst R: &str = r#\"super::a\"#;\npub struct Z;\n",
            ),
            ("c/mod.rs", "mod d;\npub struct Y;\nuse d::D;\n"),
            // A child importing its parent, and its sibling through `super`.
            ("c/d.rs", "use super::Y;\npub struct D;\n#[cfg(test)]\nmod tests { use super::D; }\n"),
        ]);
        assert_eq!(crate_cycles(d.path()).unwrap(), Vec::<Vec<PathBuf>>::new());
    }

    #[test]
    fn cycles_through_super_paths_and_nested_modules_are_found() {
        let d = tree(&[
            ("main.rs", "mod commands;\n"),
            ("commands/mod.rs", "mod x;\nmod y;\n"),
            ("commands/x.rs", "use super::y::{Alpha, beta::Gamma};\n"),
            (
                "commands/y.rs",
                "pub mod beta { pub struct Gamma; }\npub struct Alpha;\nfn f() { let _ = super::x::helper; }\n",
            ),
        ]);
        let cycles = crate_cycles(d.path()).unwrap();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
    }
}
