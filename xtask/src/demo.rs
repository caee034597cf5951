//! `cargo xtask demo`: fetch, build, embed four sentences, print their similarity and the doctor summary.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::process::{cargo, run_checked, workspace_root};
use crate::{assets, fetch};

pub fn demo() -> Result<()> {
    let home = fetch::fetch(assets::DEFAULT_ASSETS)?;
    run_checked(cargo().args(["build", "--release", "--quiet", "-p", "nornir-cli"]))?;
    let nornir = workspace_root().join("target/release/nornir");
    let sentences = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "A man is riding a horse.",
        "The girl is carrying a baby.",
    ];
    let out = Command::new(&nornir)
        .args(["vector", "embed", "--quiet", "--format", "jsonl"])
        .args(sentences)
        .env("NORNIR_HOME", &home)
        .output()
        .context("run nornir vector embed")?;
    if !out.status.success() {
        bail!("nornir vector embed failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let rows: Vec<Vec<f32>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .map(|v| v["embedding"].clone())
                .and_then(serde_json::from_value)
        })
        .collect::<Result<_, _>>()
        .context("parse nornir's JSON lines ({\"embedding\": [...]} per line)")?;
    println!("cosine similarity (all-MiniLM-L6-v2, float32 converted from its safetensors):\n");
    for (i, a) in rows.iter().enumerate() {
        let cells: Vec<String> =
            rows.iter().map(|b| format!("{:6.3}", a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>())).collect();
        println!("  {} {:<36}", cells.join(" "), sentences[i]);
    }
    println!();
    run_checked(
        Command::new(&nornir)
            .args(["vector", "doctor", "--summary", "--model"])
            .arg(home.join(assets::DEFAULT_MODEL_DIR))
            .env("NORNIR_HOME", &home),
    )?;
    Ok(())
}
