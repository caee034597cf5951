//! `cargo xtask docs`: every shell command of README.md and docs/*.md run against the fetched
//! models by the `nornir` just built, as a new user would type it (docs/development.md says the
//! rules). A command fails the run by its exit code (or one other than the `# exit N` its comment
//! promises), a curl by an answer with an `"error"`, and a command whose doc shows its output as
//! a `# {...}` line by an output line with other keys. A block the test assets cannot run is
//! marked `<!-- not run: REASON -->` in the doc, and counted with its reason.

mod extract;
mod run;
mod workdir;

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::process::{cargo, run_checked, workspace_root};

/// The docs' commands (of the docs named in `only`, or all) with the tests' variables `env`;
/// fails naming every command that failed.
pub(crate) fn run_docs(env: &[(&'static str, PathBuf)], only: &[String]) -> Result<()> {
    let started = std::time::Instant::now();
    // target/debug/nornir, the build the tests use, whatever target folder xtask itself runs from
    run_checked(cargo().env_remove("CARGO_TARGET_DIR").args(["build", "--quiet", "-p", "nornir-cli"]))?;
    let root = workspace_root();
    // A fresh folder under target/ each run (what the commands write stays there to look at):
    // the fixtures once, then a folder of each doc's own that links them, so that one doc's
    // outputs never meet another's.
    let run_dir = root.join("target/docs-run");
    let _ = std::fs::remove_dir_all(&run_dir);
    let fixtures = run_dir.join("fixtures");
    std::fs::create_dir_all(&fixtures)?;
    workdir::prepare(&fixtures, &root.join("target/debug"), env)?;
    let mut tally = run::Tally::default();
    for file in doc_files(&root)? {
        let text = std::fs::read_to_string(&file)?;
        let name = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
        if !only.is_empty() && !only.contains(&name) {
            continue;
        }
        let work = run_dir.join(name.replace('/', "-").trim_end_matches(".md"));
        workdir::link_fixtures(&fixtures, &work)?;
        let bin = root.join("target/debug");
        for block in extract::blocks(&text) {
            if block.not_run.is_some() {
                run::block(&name, &block, &work, &bin, env, &mut tally);
                continue;
            }
            let what = format!("{name}:{}", block.line);
            progress(&what, &mut tally, |tally| run::block(&name, &block, &work, &bin, env, tally));
        }
        let curls = extract::table_curls(&text);
        if !curls.is_empty() {
            tally.blocks += 1;
            let what = format!("{name}: {} curls of its tables", curls.len());
            progress(&what, &mut tally, |tally| run::table_curls(&name, &curls, &work, &bin, env, tally));
        }
    }
    eprintln!(
        "xtask: docs: {} commands run in {} blocks in {:.0} s; {} blocks marked not run{}",
        tally.commands,
        tally.blocks,
        started.elapsed().as_secs_f64(),
        tally.not_run.len(),
        if tally.not_run.is_empty() { String::new() } else { format!(":\n  {}", tally.not_run.join("\n  ")) }
    );
    if !tally.failures.is_empty() {
        bail!("{} doc command(s) failed:\n{}", tally.failures.len(), tally.failures.join("\n"));
    }
    Ok(())
}

/// Runs `what` with `tally`, then says on one line whether it added failures, and how long it took.
fn progress(what: &str, tally: &mut run::Tally, run: impl FnOnce(&mut run::Tally)) {
    let (started, failed) = (std::time::Instant::now(), tally.failures.len());
    run(tally);
    let state = if tally.failures.len() > failed { "FAILED" } else { "ok" };
    eprintln!("xtask: docs: {what} {state} ({:.1} s)", started.elapsed().as_secs_f64());
}

/// README.md and every docs/*.md, in name order.
fn doc_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    Ok(files)
}
