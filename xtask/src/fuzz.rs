//! `cargo xtask fuzz`: every cargo-fuzz target for a while (nightly), seeded with real files
//! (xtask/src/fuzz_seeds.rs), under an allocation limit so that an allocation a file's numbers
//! size is a finding; a crash is kept as a regression input; a summary per target at the end.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::fuzz_seeds;
use crate::process::workspace_root;

/// Each target and the longest input it is given.
pub(crate) const FUZZ_TARGETS: [(&str, u32); 13] = [
    ("elf_deps", 65536),
    ("model_configs", 4096),
    ("input_records", 4096),
    ("pickle", 65536),
    ("torch_archive", 65536),
    ("safetensors", 65536),
    ("shard_index", 16384),
    ("convert_configs", 8192),
    ("folder_templates", 8192),
    ("request_bodies", 16384),
    ("onnx_graph_scan", 65536),
    ("static_table", 16384),
    ("image_preprocess", 65536),
];

/// One allocation larger than this is a finding (libFuzzer's `-malloc_limit_mb`): no input of
/// at most 64 KiB has a reason to ask for more.
const MALLOC_LIMIT_MB: u32 = 256;
/// The process's resident memory past this is a finding (`-rss_limit_mb`).
const RSS_LIMIT_MB: u32 = 2048;

pub fn fuzz(seconds: u64, only: &[String]) -> Result<()> {
    let fuzz_dir = workspace_root().join("fuzz");
    let has = |args: &[&str]| Command::new("cargo").args(args).output().is_ok_and(|o| o.status.success());
    if !has(&["+nightly", "fuzz", "--version"]) {
        bail!(
            "cargo fuzz needs the nightly toolchain and cargo-fuzz: `rustup toolchain install nightly` and `cargo install cargo-fuzz`"
        );
    }
    if let Some(unknown) = only.iter().find(|t| !FUZZ_TARGETS.iter().any(|(name, _)| name == t)) {
        let names: Vec<&str> = FUZZ_TARGETS.iter().map(|(n, _)| *n).collect();
        bail!("no fuzz target {unknown:?}: the targets are {}", names.join(", "));
    }
    let home = crate::fetch::fetch(&crate::test::all_test_assets())?;
    let mut summary = Vec::new();
    for (target, max_len) in FUZZ_TARGETS.iter().filter(|(t, _)| only.is_empty() || only.iter().any(|o| o == t)) {
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        let seeds = workspace_root().join("target/fuzz-seeds").join(target);
        let count = fuzz_seeds::write(target, &home, &seeds)?;
        let artifacts = fuzz_dir.join("regressions").join(target);
        std::fs::create_dir_all(&artifacts)?;
        eprintln!("xtask: fuzzing {target} for {seconds} s ({count} real seeds)");
        let log = workspace_root().join("target/fuzz-logs").join(format!("{target}.log"));
        std::fs::create_dir_all(log.parent().context("log folder")?)?;
        // cargo reads a regular-file /dev/null as source when it probes the compiler.
        crate::dev_null::empty_if_regular_file();
        let status = Command::new("cargo")
            .current_dir(&fuzz_dir)
            .args(["+nightly", "fuzz", "run", "-O", target])
            .arg(&corpus)
            .arg(&seeds)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-max_len={max_len}"))
            .arg(format!("-malloc_limit_mb={MALLOC_LIMIT_MB}"))
            .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .arg("-print_final_stats=1")
            .stderr(Stdio::from(std::fs::File::create(&log)?))
            .status()
            .context("run cargo fuzz")?;
        let line = stats_line(target, &log)?;
        eprintln!("xtask: {line}");
        summary.push(line);
        if !status.success() && std::fs::read_to_string(&log)?.contains("failed to build fuzz script") {
            bail!("{target} did not build (log {}): nothing was fuzzed", log.display());
        }
        if !status.success() {
            bail!(
                "{target} found a crash (log {}), saved under {}: fix it and keep the input as a regression test",
                log.display(),
                artifacts.display()
            );
        }
    }
    eprintln!("xtask: fuzz summary ({seconds} s a target):\n  {}", summary.join("\n  "));
    Ok(())
}

/// `target: N executions, cov C, ft F, corpus K` from libFuzzer's final lines in `log`.
fn stats_line(target: &str, log: &Path) -> Result<String> {
    let text = std::fs::read_to_string(log).with_context(|| format!("read {}", log.display()))?;
    let stat = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("stat::{key}:")))
            .map_or_else(|| "?".to_owned(), |v| v.trim().to_owned())
    };
    let last_status = text.lines().rev().find(|l| l.starts_with('#') && l.contains(" cov: ")).unwrap_or("");
    let field = |key: &str| last_status.split_whitespace().skip_while(|w| *w != key).nth(1).unwrap_or("?").to_owned();
    Ok(format!(
        "{target}: {} executions, cov {}, ft {}, corpus {}, peak RSS {} MB",
        stat("number_of_executed_units"),
        field("cov:"),
        field("ft:"),
        field("corp:"),
        stat("peak_rss_mb"),
    ))
}
