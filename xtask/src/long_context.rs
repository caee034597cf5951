//! `cargo xtask long-context`: peak memory of a long-context model, measured on the jina-v2-like
//! fixture (8,192 positions, one head of real attention; nornir-test-support's `fixtures`), with
//! the default model's tokenizer: one 8,192-token text, then eight of them under a 65,536-token
//! budget, which the token budget alone would run as one batch of eight; one session, then two
//! (each runs its own batch, so two long texts are in memory at once).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use nornir_test_support::fixtures::{self, Kind};

use crate::process::{cargo, run_checked, workspace_root};
use crate::{assets, fetch};

/// Writes the fixture folder: graph, tokenizer without its 128-token truncation, config.json.
fn write_fixture(dir: &Path, home: &Path) -> Result<()> {
    fixtures::write_model(dir, Kind::LongContext, 30522);
    let text = std::fs::read_to_string(home.join(assets::EXPORT_MODEL_DIR).join("tokenizer.json"))?;
    let mut tokenizer: serde_json::Value = serde_json::from_str(&text)?;
    tokenizer["truncation"] = serde_json::Value::Null;
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string())?;
    let config = serde_json::json!({ "max_position_embeddings": fixtures::POSITIONS, "hidden_size": fixtures::DIM });
    std::fs::write(dir.join("config.json"), config.to_string())?;
    Ok(())
}

/// Runs `nornir vector embed` on `input` and returns its peak RSS in MiB, from its `-v` summary.
fn peak_rss(nornir: &Path, model: &Path, input: &Path, budget: &str, sessions: &str) -> Result<f64> {
    let out = Command::new(nornir)
        .args(["vector", "embed", "-v", "--device", "cpu", "--format", "f32", "--batch-tokens", budget])
        .args(["--workers", sessions, "--model"])
        .arg(model)
        .arg("--input")
        .arg(input)
        .output()
        .context("run nornir")?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("nornir failed: {err}");
    }
    err.lines()
        .find_map(|l| l.split("peak RSS ").nth(1))
        .and_then(|v| v.trim_end_matches(" MiB").trim().parse().ok())
        .with_context(|| format!("no peak RSS in nornir's summary: {err}"))
}

pub fn long_context() -> Result<()> {
    let home = fetch::fetch(assets::DEFAULT_ASSETS)?;
    run_checked(cargo().args(["build", "--release", "--quiet", "-p", "nornir-cli"]))?;
    let nornir = workspace_root().join("target/release/nornir");
    let dir = workspace_root().join("target/long-context");
    let model = dir.join("model");
    write_fixture(&model, &home)?;
    // "word" is one token: 9,000 of them are cut to [CLS] + 8,190 + [SEP].
    let long = "word ".repeat(9000);
    let one = dir.join("one.txt");
    std::fs::write(&one, format!("{long}\n"))?;
    let eight = dir.join("eight.txt");
    std::fs::write(&eight, (0..8).map(|i| format!("{i} {long}\n")).collect::<String>())?;
    let short = dir.join("short.txt");
    std::fs::write(&short, "a short text\n")?;
    let base = peak_rss(&nornir, &model, &short, "256", "1")?;
    let single = peak_rss(&nornir, &model, &one, "256", "1")?;
    let bounded = peak_rss(&nornir, &model, &eight, "65536", "1")?;
    let two_sessions = peak_rss(&nornir, &model, &eight, "65536", "2")?;
    println!(
        "{}",
        serde_json::json!({
            "fixture": "jina-v2-like, 8,192 positions, 1 attention head, width 4",
            "peak_rss_mib": {
                "one_short_text": base,
                "one_8192_token_text": single,
                "eight_8192_token_texts_budget_65536": bounded,
                "the_same_on_two_sessions": two_sessions,
            },
        })
    );
    Ok(())
}
