//! The folder half of the import-cycle check: the file imports lifted to the units of each folder.
//!
//! At every folder level of a crate's `src` (the `src` itself, then each module folder in it,
//! recursively), the units are the folder's direct children: each sub-folder together with its
//! module file (`kinds/` with `kinds/mod.rs` or the `kinds.rs` beside it), and each plain file.
//! Every import from a file in one unit to a file in a sibling unit is an edge between the two
//! units; the folder's own module file (`mod.rs`, `lib.rs`, or the `foo.rs` beside `foo/`) is the
//! parent of the level and takes part in none of its edges, so a child using what its parent
//! defines, or a parent using its children, is never a cycle. Tests take part in no edge (files
//! named `tests.rs` or `*_tests.rs` or under a `tests/` folder, inline `mod tests`): a test may use
//! any sibling. A cycle of units at any level fails, named with one file import per step, unless
//! every unit in it is a plain file (the file check already names that cycle).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;

use super::{Graph, ModulePath, strongly_connected};

/// One step of a folder cycle: a unit reaching the next one through one file's import.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    pub from_unit: String,
    pub to_unit: String,
    /// The importing file, its line, the path it names (made absolute) and the file that defines it.
    pub file: PathBuf,
    pub line: usize,
    pub path: String,
    pub target: PathBuf,
}

/// A cycle between the units of one folder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FolderCycle {
    /// The folder, as a module path (empty for the crate's `src`).
    pub level: ModulePath,
    /// Every unit of the strongly connected set (`load/` for a folder, `error.rs` for a file), sorted.
    pub units: Vec<String>,
    /// One cycle through them, back to its first unit.
    pub steps: Vec<Step>,
    /// Every edge between two of them, each with one import, for untangling the whole set.
    pub edges: Vec<Step>,
}

/// Every folder cycle of a crate, by level and then by units.
pub(crate) fn folder_cycles(graph: &Graph) -> Vec<FolderCycle> {
    let mut levels: BTreeSet<ModulePath> = BTreeSet::new();
    for (module, _) in &graph.mods {
        for n in 0..module.len() {
            levels.insert(module[..n].to_vec());
        }
    }
    let mut out = Vec::new();
    for level in levels {
        out.extend(level_cycles(graph, &level));
    }
    out
}

/// The cycles among the units directly under `level`.
fn level_cycles(graph: &Graph, level: &[String]) -> Vec<FolderCycle> {
    // Each file strictly under the level, with its unit's index.
    let mut names: Vec<String> = Vec::new();
    let mut folder: Vec<bool> = Vec::new();
    let mut unit_of: BTreeMap<usize, usize> = BTreeMap::new();
    for (k, (module, _)) in graph.mods.iter().enumerate() {
        if module.len() <= level.len() || !module.starts_with(level) {
            continue;
        }
        let name = &module[level.len()];
        let u = names.iter().position(|n| n == name).unwrap_or_else(|| {
            names.push(name.clone());
            folder.push(false);
            names.len() - 1
        });
        folder[u] |= module.len() > level.len() + 1;
        unit_of.insert(k, u);
    }
    // Unit edges, each with the first file import that makes it.
    let mut evidence: BTreeMap<(usize, usize), Step> = BTreeMap::new();
    for (&k, &u) in &unit_of {
        for (&t, (path, line)) in &graph.code_edges[k] {
            let Some(&v) = unit_of.get(&t) else { continue };
            if u != v {
                evidence.entry((u, v)).or_insert_with(|| Step {
                    from_unit: String::new(),
                    to_unit: String::new(),
                    file: graph.mods[k].1.clone(),
                    line: *line,
                    path: path.clone(),
                    target: graph.mods[t].1.clone(),
                });
            }
        }
    }
    let label = |u: usize| if folder[u] { format!("{}/", names[u]) } else { format!("{}.rs", names[u]) };
    let mut edges = vec![BTreeSet::new(); names.len()];
    for &(u, v) in evidence.keys() {
        edges[u].insert(v);
    }
    let mut cycles = Vec::new();
    for mut component in strongly_connected(&edges) {
        if component.len() < 2 || component.iter().all(|&u| !folder[u]) {
            continue;
        }
        component.sort_by_key(|&u| label(u));
        let ring = shortest_cycle(&edges, component[0], &component);
        let step =
            |(u, v): (usize, usize)| Step { from_unit: label(u), to_unit: label(v), ..evidence[&(u, v)].clone() };
        let steps = ring.windows(2).map(|w| step((w[0], w[1]))).collect();
        let mut all: Vec<Step> =
            evidence.keys().filter(|(u, v)| component.contains(u) && component.contains(v)).map(|&e| step(e)).collect();
        all.sort_by(|a, b| (&a.from_unit, &a.to_unit).cmp(&(&b.from_unit, &b.to_unit)));
        let units = component.iter().map(|&u| label(u)).collect();
        cycles.push(FolderCycle { level: level.to_vec(), units, steps, edges: all });
    }
    cycles.sort_by(|a, b| a.units.cmp(&b.units));
    cycles
}

/// The shortest path from `start` back to itself inside `within` (a strongly connected set, so
/// one exists), as the units in order, `start` at both ends.
fn shortest_cycle(edges: &[BTreeSet<usize>], start: usize, within: &[usize]) -> Vec<usize> {
    let mut before: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(u) = queue.pop_front() {
        for &v in &edges[u] {
            if !within.contains(&v) {
                continue;
            }
            if v == start {
                let mut ring = vec![start, u];
                let mut at = u;
                while at != start {
                    at = before[&at];
                    ring.push(at);
                }
                ring.reverse();
                return ring;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = before.entry(v) {
                e.insert(u);
                queue.push_back(v);
            }
        }
    }
    vec![start]
}

#[cfg(test)]
mod tests {
    use super::super::graph;
    use super::super::tests::tree;
    use super::*;

    /// A crate whose folders `load/` and `call/` reach each other through different files, so no
    /// two files cycle; with `back`, `call/run.rs` imports `load/` again.
    fn fake_crate(back: bool) -> tempfile::TempDir {
        let run = if back { "use crate::load::engine::Engine;\npub fn run() {}\n" } else { "pub fn run() {}\n" };
        tree(&[
            ("lib.rs", "mod call;\nmod load;\nmod error;\n"),
            ("load/mod.rs", "mod engine;\nmod model;\npub struct Loaded;\n"),
            ("load/engine.rs", "pub struct Engine;\nuse super::Loaded;\n"),
            ("load/model.rs", "use crate::call::prepare::Prepared;\nuse crate::error::Error;\n"),
            (
                "call.rs",
                "mod prepare;\nmod run;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod t {\n    mod tests { use crate::load::Loaded; }\n}\n",
            ),
            ("call/prepare.rs", "pub struct Prepared;\nuse crate::error::Error;\n"),
            ("call/run.rs", run),
            // Tests may reach anywhere.
            ("call/tests.rs", "use crate::load::engine::Engine;\n"),
            ("call/prepare_tests.rs", "use crate::load::engine::Engine;\n"),
            ("call/mod_x/tests/a.rs", "use crate::load::engine::Engine;\n"),
            ("error.rs", "pub struct Error;\n"),
        ])
    }

    #[test]
    fn a_cycle_between_folders_fails_naming_one_import_per_step() {
        let d = fake_crate(true);
        let g = graph(d.path()).unwrap();
        assert!(crate::cycles::crate_cycles(d.path()).unwrap().is_empty(), "no two files cycle");
        let cycles = folder_cycles(&g);
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        let c = &cycles[0];
        assert_eq!(c.level, Vec::<String>::new());
        assert_eq!(c.units, ["call/", "load/"]);
        let steps: Vec<(&str, &str, PathBuf, usize)> = c
            .steps
            .iter()
            .map(|s| (s.from_unit.as_str(), s.to_unit.as_str(), s.file.strip_prefix(d.path()).unwrap().into(), s.line))
            .collect();
        assert_eq!(steps, [("call/", "load/", "call/run.rs".into(), 1), ("load/", "call/", "load/model.rs".into(), 1)]);
        assert_eq!(c.steps[0].path, "crate::load::engine::Engine");
    }

    #[test]
    fn the_same_crate_without_the_back_import_passes() {
        let d = fake_crate(false);
        assert_eq!(folder_cycles(&graph(d.path()).unwrap()), []);
    }

    #[test]
    fn a_cycle_between_sub_folders_is_found_at_its_level() {
        let d = tree(&[
            ("lib.rs", "mod load;\n"),
            ("load/mod.rs", "mod a;\nmod b;\n"),
            ("load/a/mod.rs", "mod x;\n"),
            ("load/a/x.rs", "use crate::load::b::y::Y;\npub struct X;\n"),
            ("load/b.rs", "mod y;\nmod z;\n"),
            ("load/b/y.rs", "pub struct Y;\n"),
            ("load/b/z.rs", "use super::super::a::x::X;\n"),
        ]);
        let cycles = folder_cycles(&graph(d.path()).unwrap());
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycles[0].level, ["load"]);
        assert_eq!(cycles[0].units, ["a/", "b/"]);
    }

    #[test]
    fn parents_children_and_file_only_cycles_are_not_folder_cycles() {
        // kinds/x.rs uses kinds/mod.rs (one unit); the parent uses its children; error.rs and
        // util.rs cycle as plain files, which the file check names.
        let d = tree(&[
            ("lib.rs", "mod kinds;\nmod error;\nmod util;\npub use kinds::x::X;\n"),
            ("kinds/mod.rs", "pub mod x;\npub struct Kind;\npub use x::X;\nuse crate::error::E;\n"),
            ("kinds/x.rs", "use super::Kind;\nuse crate::kinds::Kind as K;\npub struct X;\n"),
            ("error.rs", "pub struct E;\nuse crate::util::u;\n"),
            ("util.rs", "pub fn u() {}\nuse crate::error::E;\n"),
        ]);
        assert_eq!(folder_cycles(&graph(d.path()).unwrap()), []);
    }
}
