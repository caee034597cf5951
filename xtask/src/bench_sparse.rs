//! `cargo xtask bench-sparse`: splade-tiny (the test set-up's conversion) on the corpus's first
//! texts: nornir (`nornir vector bench --json`) beside the Python reference (ONNX Runtime, the
//! tokenizers library and NumPy pooling in sorted batches of 32, scripts/retrieval_reference.py),
//! rounds interleaved, medians; and nornir's peak memory beside the dense default model's on
//! the same texts.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::compare::{self, median};
use crate::process::{cargo, run_checked, workspace_root};
use crate::{assets, fetch};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Corpus texts to embed.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub texts: u64,
    /// Rounds of each, interleaved.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub rounds: u64,
}

fn json_of(out: std::process::Output, what: &str) -> Result<Value> {
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("{what}'s JSON"))
}

/// `nornir vector bench --json` of `model` on `input`: (texts/s, peak RSS MiB).
fn nornir_bench(nornir: &Path, model: &Path, input: &Path) -> Result<(f64, f64)> {
    let out = Command::new(nornir)
        .args(["vector", "bench", "--json", "--quiet", "--device", "cpu", "--model"])
        .arg(model)
        .arg("--input")
        .arg(input)
        .output()
        .context("run nornir vector bench")?;
    let v = json_of(out, "nornir vector bench")?;
    Ok((v["texts_per_second"].as_f64().unwrap_or(0.0), v["peak_rss_mib"].as_f64().unwrap_or(0.0)))
}

pub fn bench_sparse(a: &Args) -> Result<()> {
    let home = fetch::fetch(&crate::test::all_test_assets())?;
    let python = compare::python_env(&home)?;
    run_checked(cargo().args(["build", "--release", "--quiet", "-p", "nornir-cli"]))?;
    let nornir = workspace_root().join("target/release/nornir");
    let splade = home.join(assets::SPLADE_MODEL_DIR);
    let dense = home.join(assets::DEFAULT_MODEL_DIR);
    let dir = workspace_root().join("target/bench-sparse");
    std::fs::create_dir_all(&dir)?;
    let corpus = std::fs::read_to_string(workspace_root().join("testdata/corpus.txt")).context("the corpus")?;
    let input = dir.join("texts.txt");
    let texts: String = corpus.lines().take(a.texts as usize).map(|l| format!("{l}\n")).collect();
    std::fs::write(&input, texts)?;
    let (mut ours, mut theirs, mut our_rss, mut their_rss, mut dense_rss) = (vec![], vec![], vec![], vec![], vec![]);
    for round in 0..a.rounds {
        let (speed, rss) = nornir_bench(&nornir, &splade, &input)?;
        ours.push(speed);
        our_rss.push(rss);
        let out = Command::new(&python)
            .arg(workspace_root().join("scripts/retrieval_reference.py"))
            .arg("sparse")
            .arg(&splade)
            .arg(&input)
            .arg(a.texts.to_string())
            .arg(dir.join("reference.jsonl"))
            .output()
            .context("run the Python reference")?;
        let r = json_of(out, "the Python reference")?;
        theirs.push(r["texts_per_second"].as_f64().unwrap_or(0.0));
        their_rss.push(r["peak_rss_mib"].as_f64().unwrap_or(0.0));
        dense_rss.push(nornir_bench(&nornir, &dense, &input)?.1);
        eprintln!(
            "xtask: round {}: nornir {speed:.1} texts/s, Python {:.1} texts/s",
            round + 1,
            theirs[theirs.len() - 1]
        );
    }
    let (n, p) = (median(ours), median(theirs));
    println!(
        "{}",
        serde_json::json!({
            "model": "splade-tiny (BertForMaskedLM, 2 layers, hidden 128, 30,522 terms)",
            "texts": a.texts,
            "rounds": a.rounds,
            "nornir_texts_per_second": n,
            "python_reference_texts_per_second": p,
            "ratio": n / p.max(1e-9),
            "peak_rss_mib": {
                "nornir_splade": median(our_rss),
                "python_reference_splade": median(their_rss),
                "nornir_dense_default_model": median(dense_rss),
            },
        })
    );
    Ok(())
}
