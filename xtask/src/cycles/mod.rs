//! The import-cycle check of `cargo xtask check-features`: no two files of one crate that are not
//! parent and child may reach each other through the crate's own paths.
//!
//! It reads the source as text (comments and string literals blanked), expands `use` trees and
//! inline paths (`crate::`, `super::`, `self::`, or a child module's name) into module paths, and
//! resolves each to the file that defines the item. A name a module brings in with a `use` (of
//! any visibility: `pub use`, `pub(crate) use`, or a private one, which the module's children can
//! reach through `super::`) resolves to where that `use` points, following chains of re-exports; a
//! name that a module's glob import (`pub use x::*`) can bind resolves to the glob's source too,
//! whether or not the module also binds it itself, since the text does not say which `#[cfg]`
//! holds. So `super::f` in `a/x.rs`, where `a.rs` has `pub use y::f`, is an edge to `a/y.rs`. A
//! name nothing binds (a macro's item, a name from outside the crate) resolves to the module
//! that holds it. What a file uses through its own glob import of another module is not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

mod folders;
pub(crate) mod source;

use source::{Bind, scan};

/// One crate's source folder: every `.rs` file under it, as `(module path, file)`.
fn modules(src: &Path) -> Result<Vec<(Vec<String>, PathBuf)>> {
    let mut found = Vec::new();
    for path in source::rust_files(src)? {
        let rel = path.strip_prefix(src).unwrap_or(&path);
        let mut parts: Vec<String> =
            rel.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
            parts.pop();
        }
        found.push((parts, path));
    }
    found.sort();
    Ok(found)
}

/// A module path: `["commands", "convert"]`; the crate root is empty.
type ModulePath = Vec<String>;

/// What an imported name points at: an absolute path, or `None` for something outside the crate.
type Target = Option<ModulePath>;

/// What a crate's modules bind, for resolving a path to the file that defines its item.
#[derive(Default)]
struct Names {
    /// Every module, the files' and the inline ones, with the index of its file.
    scopes: BTreeMap<Vec<String>, usize>,
    /// Per module, what each imported name points at: an absolute path, or `None` for something
    /// outside the crate. Several where `#[cfg]`s choose between imports of one name.
    imported: BTreeMap<ModulePath, BTreeMap<String, Vec<Target>>>,
    /// Per module, the modules it glob-imports.
    globs: BTreeMap<Vec<String>, Vec<Vec<String>>>,
    /// Per module, the names of the items it defines.
    defined: BTreeMap<Vec<String>, BTreeSet<String>>,
}

impl Names {
    /// A path made absolute: as it is, or relative to `scope` when it begins with a child module.
    fn absolute(&self, scope: &[String], path: &[String], relative: bool) -> Option<Vec<String>> {
        if !relative {
            return Some(path.to_vec());
        }
        let full: Vec<String> = scope.iter().chain(path).cloned().collect();
        self.scopes.contains_key(&full[..=scope.len()]).then_some(full)
    }

    /// Whether module `scope` binds `name`: defines it, imports it, or glob-imports a module that does.
    fn binds(&self, scope: &[String], name: &str, seen: &mut BTreeSet<Vec<String>>) -> bool {
        if !seen.insert(scope.to_vec()) {
            return false;
        }
        self.defined.get(scope).is_some_and(|d| d.contains(name))
            || self.imported.get(scope).is_some_and(|m| m.contains_key(name))
            || self.globs.get(scope).is_some_and(|g| g.iter().any(|g| self.binds(g, name, seen)))
    }

    /// The files that define what `path` names (through re-exports), into `out`.
    fn resolve(&self, path: &[String], seen: &mut BTreeSet<Vec<String>>, out: &mut BTreeSet<usize>) {
        if !seen.insert(path.to_vec()) {
            return;
        }
        let Some(n) = (0..=path.len()).rev().find(|&n| self.scopes.contains_key(&path[..n])) else {
            return;
        };
        let (scope, file) = (&path[..n], self.scopes[&path[..n]]);
        let Some(name) = path.get(n) else {
            out.insert(file);
            return;
        };
        let rest = &path[n + 1..];
        let mut bound = self.defined.get(scope).is_some_and(|d| d.contains(name));
        if bound {
            out.insert(file);
        }
        for target in self.imported.get(scope).and_then(|m| m.get(name)).into_iter().flatten() {
            bound = true;
            match target {
                Some(t) => self.resolve(&[t.as_slice(), rest].concat(), seen, out),
                None => {
                    out.insert(file);
                }
            }
        }
        for glob in self.globs.get(scope).into_iter().flatten() {
            if self.binds(glob, name, &mut BTreeSet::new()) {
                bound = true;
                self.resolve(&[glob.as_slice(), &path[n..]].concat(), seen, out);
            }
        }
        if !bound {
            out.insert(file);
        }
    }
}

/// A crate's files and the imports between them.
pub(crate) struct Graph {
    /// Every file, as `(module path, file)`, sorted.
    pub mods: Vec<(ModulePath, PathBuf)>,
    /// Per file, the files it reaches that are not its ancestors or descendants, each with the
    /// first path that reaches it and the line of that path.
    pub edges: Vec<BTreeMap<usize, (String, usize)>>,
    /// The same, leaving out the tests: files named `tests.rs` or `*_tests.rs` or under a `tests/`
    /// folder, and inline `mod tests`.
    pub code_edges: Vec<BTreeMap<usize, (String, usize)>>,
}

/// Whether a file is tests by its name: `tests.rs`, `*_tests.rs`, or under a `tests/` folder.
fn test_file(module: &[String]) -> bool {
    module.iter().any(|m| m == "tests") || module.last().is_some_and(|m| m.ends_with("_tests"))
}

/// Reads a crate's `src` and resolves every path it names to the files it reaches.
pub(crate) fn graph(src: &Path) -> Result<Graph> {
    let mods = modules(src)?;
    let mut scans = Vec::new();
    for (module, file) in &mods {
        let code = std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
        scans.push(scan(&code, module));
    }
    let mut names = Names::default();
    for (k, ((module, _), s)) in mods.iter().zip(&scans).enumerate() {
        names.scopes.insert(module.clone(), k);
        for inline in &s.inline_modules {
            names.scopes.entry(inline.clone()).or_insert(k);
        }
        for (scope, name) in &s.defined {
            names.defined.entry(scope.clone()).or_default().insert(name.clone());
        }
    }
    for s in &scans {
        for import in &s.imports {
            let target = names.absolute(&import.scope, &import.path, import.relative);
            match &import.bind {
                Bind::Name(name) => names
                    .imported
                    .entry(import.scope.clone())
                    .or_default()
                    .entry(name.clone())
                    .or_default()
                    .push(target),
                Bind::Glob => names.globs.entry(import.scope.clone()).or_default().extend(target),
                Bind::Nothing => {}
            }
        }
    }
    let mut edges: Vec<BTreeMap<usize, (String, usize)>> = vec![BTreeMap::new(); mods.len()];
    let mut code_edges = edges.clone();
    for (k, s) in scans.iter().enumerate() {
        let relative = s
            .relative
            .iter()
            .filter_map(|(scope, path, line, t)| names.absolute(scope, path, true).map(|p| (p, *line, *t)));
        for (path, line, in_tests) in s.paths.iter().cloned().chain(relative) {
            let mut targets = BTreeSet::new();
            names.resolve(&path, &mut BTreeSet::new(), &mut targets);
            for t in targets {
                let (a, b) = (&mods[k].0, &mods[t].0);
                if t != k && !a.starts_with(b) && !b.starts_with(a) {
                    let evidence = (format!("crate::{}", path.join("::")), line);
                    if !in_tests && !test_file(a) {
                        code_edges[k].entry(t).or_insert_with(|| evidence.clone());
                    }
                    edges[k].entry(t).or_insert(evidence);
                }
            }
        }
    }
    Ok(Graph { mods, edges, code_edges })
}

/// A cycle between files of one crate that are not parent and child, as the files in order.
pub fn crate_cycles(src: &Path) -> Result<Vec<Vec<PathBuf>>> {
    let Graph { mods, edges, .. } = graph(src)?;
    let edges: Vec<BTreeSet<usize>> = edges.iter().map(|e| e.keys().copied().collect()).collect();
    let mut cycles = Vec::new();
    for component in strongly_connected(&edges) {
        if component.len() > 1 {
            let mut files: Vec<PathBuf> = component.iter().map(|&k| mods[k].1.clone()).collect();
            files.sort();
            cycles.push(files);
        }
    }
    cycles.sort();
    Ok(cycles)
}

/// Tarjan's strongly connected components.
pub(crate) fn strongly_connected(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
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

/// Every crate's `src` (and xtask's): fails naming each cycle between files and each cycle
/// between the folders of one level (see `folders.rs`), the latter with one import per step.
pub fn check(root: &Path) -> Result<()> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("src")))
        .filter(|p| p.is_dir())
        .collect();
    dirs.push(root.join("xtask/src"));
    dirs.sort();
    let shown = |f: &Path| f.strip_prefix(root).unwrap_or(f).display().to_string();
    let mut report = Vec::new();
    let mut folder_report = Vec::new();
    for dir in &dirs {
        for cycle in crate_cycles(dir)? {
            let names: Vec<String> = cycle.iter().map(|f| shown(f)).collect();
            report.push(format!("  {}", names.join(" <-> ")));
        }
        for cycle in folders::folder_cycles(&graph(dir)?) {
            let folder = dir.join(cycle.level.join("/"));
            folder_report.push(format!(
                "  in {}/: {}",
                shown(&folder).trim_end_matches('/'),
                cycle.units.join(" <-> ")
            ));
            let line = |step: &folders::Step| {
                format!(
                    "    {} -> {}: {}:{} names {} (in {})",
                    step.from_unit,
                    step.to_unit,
                    shown(&step.file),
                    step.line,
                    step.path,
                    shown(&step.target)
                )
            };
            folder_report.extend(cycle.steps.iter().map(line));
            if cycle.edges.len() > cycle.steps.len() {
                folder_report.push("    every edge among these units, one import each:".to_owned());
                folder_report.extend(cycle.edges.iter().map(|s| format!("  {}", line(s))));
            }
        }
    }
    let mut failures = Vec::new();
    if !report.is_empty() {
        failures.push(format!(
            "import cycles between files that are not parent and child (ARCHITECTURE.md: modules never import back); move what both need into one of them or a third file:\n{}",
            report.join("\n")
        ));
    }
    if !folder_report.is_empty() {
        failures.push(format!(
            "import cycles between the folders (and files) of one level (issue 60: no unit reaches back into a sibling that reaches it); move one of the imports named below, or what it names:\n{}",
            folder_report.join("\n")
        ));
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    eprintln!("xtask: check-features: no import cycles between files or folders in {} crates", dirs.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake crate's files, written into a temporary folder (the folder check's tests too).
    pub(super) fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
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

    fn names(cycle: &[PathBuf], root: &Path) -> Vec<String> {
        cycle.iter().map(|f| f.strip_prefix(root).unwrap().display().to_string()).collect()
    }

    #[test]
    fn a_cycle_hidden_behind_a_parents_re_export_is_found() {
        // x calls `super::check`, which the parent re-exports from y; y imports x's type.
        let d = tree(&[
            ("main.rs", "mod commands;\n"),
            ("commands.rs", "mod x;\n#[cfg(feature = \"a\")]\nmod y;\npub(crate) use y::check;\npub use x::run;\n"),
            ("commands/x.rs", "pub struct Checked;\npub fn run() { super::check(); }\n"),
            ("commands/y.rs", "use super::x::Checked;\npub fn check() -> Checked { Checked }\n"),
        ]);
        let cycles = crate_cycles(d.path()).unwrap();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(names(&cycles[0], d.path()), ["commands/x.rs", "commands/y.rs"]);
    }

    #[test]
    fn chains_of_re_exports_globs_and_renames_are_followed() {
        // a reaches c's `f` through the root's `pub use b::*` and b's `pub use crate::c::g as f`;
        // c reaches a's `T` through the root's private import, which children can name.
        let d = tree(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\npub use b::*;\nuse a::T;\n"),
            ("a.rs", "pub struct T;\nfn u() { crate::f() }\n"),
            ("b.rs", "pub use crate::c::g as f;\n"),
            ("c.rs", "pub fn g() -> crate::T { todo!() }\n"),
        ]);
        let cycles = crate_cycles(d.path()).unwrap();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(names(&cycles[0], d.path()), ["a.rs", "c.rs"]);
    }

    #[test]
    fn a_parent_re_exporting_a_child_nobody_cycles_with_is_not_a_cycle() {
        // x uses y's re-exported item one way only; the parent re-exports both, and y's tests
        // glob-import their parent.
        let d = tree(&[
            ("lib.rs", "mod commands;\npub use commands::*;\n"),
            ("commands/mod.rs", "mod x;\nmod y;\npub use x::run;\npub use y::*;\nuse crate::Thing as _;\n"),
            ("commands/x.rs", "pub fn run() { super::check(); let _ = crate::Thing; }\n"),
            ("commands/y.rs", "pub fn check() {}\npub struct Thing;\n#[cfg(test)]\nmod tests { use super::*; }\n"),
        ]);
        assert_eq!(crate_cycles(d.path()).unwrap(), Vec::<Vec<PathBuf>>::new());
    }
}
