//! `cargo xtask fuzz`: every cargo-fuzz target for a while (nightly); a crash is kept as a regression input.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::process::workspace_root;

const FUZZ_TARGETS: [(&str, u32); 3] = [("elf_deps", 65536), ("model_configs", 4096), ("input_records", 4096)];

pub fn fuzz(seconds: u64) -> Result<()> {
    let fuzz_dir = workspace_root().join("fuzz");
    let has = |args: &[&str]| Command::new("cargo").args(args).output().is_ok_and(|o| o.status.success());
    if !has(&["+nightly", "fuzz", "--version"]) {
        bail!(
            "cargo fuzz needs the nightly toolchain and cargo-fuzz: `rustup toolchain install nightly` and `cargo install cargo-fuzz`"
        );
    }
    for (target, max_len) in FUZZ_TARGETS {
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        let artifacts = fuzz_dir.join("regressions").join(target);
        std::fs::create_dir_all(&artifacts)?;
        eprintln!("xtask: fuzzing {target} for {seconds} s");
        let status = Command::new("cargo")
            .current_dir(&fuzz_dir)
            .args(["+nightly", "fuzz", "run", "-O", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-max_len={max_len}"))
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .arg("-print_final_stats=1")
            .status()
            .context("run cargo fuzz")?;
        if !status.success() {
            bail!(
                "{target} found a crash, saved under {}: fix it and keep the input as a regression test",
                artifacts.display()
            );
        }
    }
    Ok(())
}
