//! `cargo xtask soak`: one embedder shared by 8 threads, every row checked, release build.

use anyhow::Result;

use crate::process::{cargo, run_checked};
use crate::{assets, fetch, test};

pub fn soak(calls: u64) -> Result<()> {
    let home = fetch::fetch(assets::DEFAULT_ASSETS)?;
    eprintln!("xtask: soak, 8 threads x {calls} calls, release build");
    // Made before `cargo()`, which readies /dev/null for cargo: making them runs pip and apt-get.
    let env = test::test_env(&home)?;
    run_checked(
        cargo()
            .args([
                "test",
                "--release",
                "-p",
                "nornir-embed",
                "--test",
                "soak",
                "--",
                "--include-ignored",
                "--nocapture",
            ])
            .envs(env)
            .env("NORNIR_SOAK_CALLS", calls.to_string()),
    )
}
