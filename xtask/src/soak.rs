//! `cargo xtask soak`: one embedder shared by 8 threads, every row checked, release build; then
//! the memory target that the test itself leaves to this benchmark (its figures depend on the
//! machine): resident memory at the end within 10% + 32 MiB of the figure after warm-up.

use anyhow::Result;

use crate::process::{cargo, run_checked};
use crate::{assets, fetch, figures, test};

pub fn soak(calls: u64) -> Result<()> {
    let home = fetch::fetch(assets::DEFAULT_ASSETS)?;
    eprintln!("xtask: soak, 8 threads x {calls} calls, release build");
    // Made before `cargo()`, which readies /dev/null for cargo: making them runs pip and apt-get.
    let env = test::test_env(&home)?;
    let path = figures::file("soak")?;
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
            .env("NORNIR_SOAK_CALLS", calls.to_string())
            .env(nornir_test_support::FIGURES_VAR, &path),
    )?;
    let f = figures::read(&path, "soak")?;
    let (warm, end) = (figures::number(&f, "warm_rss_kib")? / 1024.0, figures::number(&f, "end_rss_kib")? / 1024.0);
    let bound = warm * 1.1 + 32.0;
    figures::target(
        &format!(
            "memory flat after warm-up: {end:.0} MiB at the end, at most {bound:.0} MiB ({warm:.0} MiB + 10% + 32 MiB)"
        ),
        end <= bound,
    );
    Ok(())
}
