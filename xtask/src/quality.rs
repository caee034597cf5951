//! `cargo xtask quality`: STS Benchmark (dev and test splits) through `nornir vector embed`, for
//! the default model, nornir's int8 and ONNX Runtime's Python int8 of it (or `--model DIR`s):
//! Spearman x 100 of the cosine of each pair against the gold score (ties get average ranks, as
//! scipy and MTEB do), and each model's cosine to the first model's vectors.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::process::{cargo, run_checked, workspace_root};
use crate::{assets, compare, fetch, int8};

/// (gold score, sentence 1, sentence 2) from an STS Benchmark csv: tab-separated, score in field
/// 5, sentences in 6 and 7, sometimes followed by source fields.
pub(crate) fn read_pairs(path: &Path) -> Result<Vec<(f64, String, String)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let f: Vec<&str> = line.split('\t').collect();
            match (f.get(4).and_then(|s| s.parse().ok()), f.get(5), f.get(6)) {
                (Some(score), Some(a), Some(b)) => Ok((score, (*a).to_owned(), (*b).to_owned())),
                _ => bail!("{}:{}: not an STS Benchmark line", path.display(), i + 1),
            }
        })
        .collect()
}

/// Ranks from 1, ties sharing their average rank.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let (va, vb): (f64, f64) = (a.iter().map(|x| (x - ma).powi(2)).sum(), b.iter().map(|y| (y - mb).powi(2)).sum());
    cov / (va * vb).sqrt()
}

pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    pearson(&ranks(a), &ranks(b))
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    f64::from(nornir_test_support::cosine(a, b))
}

/// Embeds `sentences` (a file, one per line) with `nornir vector embed` on the CPU: the rows.
fn embed(nornir: &Path, model: &Path, sentences: &Path) -> Result<Vec<Vec<f32>>> {
    let out = Command::new(nornir)
        .args(["vector", "embed", "--quiet", "--device", "cpu", "--format", "f32", "--model"])
        .arg(model)
        .arg("--input")
        .arg(sentences)
        .output()
        .context("run nornir vector embed")?;
    if !out.status.success() {
        bail!("nornir vector embed --model {} failed: {}", model.display(), String::from_utf8_lossy(&out.stderr));
    }
    let lines = std::fs::read_to_string(sentences)?.lines().count();
    let floats: Vec<f32> = out.stdout.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if lines == 0 || !floats.len().is_multiple_of(lines) {
        bail!("nornir returned {} floats for {lines} sentences", floats.len());
    }
    Ok(floats.chunks_exact(floats.len() / lines).map(<[f32]>::to_vec).collect())
}

/// `cargo xtask quality`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A model folder to score instead of the default three (repeatable).
    #[arg(long = "model", value_name = "DIR")]
    models: Vec<PathBuf>,
    /// Only this split of STS Benchmark.
    #[arg(long, value_parser = ["dev", "test"])]
    split: Option<String>,
}

pub fn quality(a: &Args) -> Result<()> {
    let mut models: Vec<(String, PathBuf)> = a.models.iter().map(|d| (d.display().to_string(), d.clone())).collect();
    let splits: Vec<&str> = match a.split.as_deref() {
        Some(one) => vec![one],
        None => vec!["dev", "test"],
    };
    let home = fetch::fetch(&[&assets::ORT_CPU, &assets::MODEL_ONNX, &assets::MODEL_TOKENIZER, &assets::STSB])?;
    run_checked(cargo().args(["build", "--release", "--quiet", "-p", "nornir-cli"]))?;
    let nornir = workspace_root().join("target/release/nornir");
    if models.is_empty() {
        let py = compare::python_env(&home)?;
        models.push(("float32 (the int8-weight export)".to_owned(), home.join(assets::EXPORT_MODEL_DIR)));
        models.push(("nornir int8".to_owned(), int8::nornir_int8(&home)?));
        models.push(("ONNX Runtime quantize_dynamic int8".to_owned(), int8::python_int8(&py, &home)?));
    }
    let tmp = std::env::temp_dir().join(format!("nornir-quality-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let mut report = serde_json::Map::new();
    for split in splits {
        let pairs = read_pairs(&home.join(assets::STSB.dest).join(format!("sts-{split}.csv")))?;
        let sentences = tmp.join(format!("{split}.txt"));
        let text: String = pairs.iter().map(|(_, a, b)| format!("{a}\n{b}\n")).collect();
        std::fs::write(&sentences, text)?;
        let gold: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let mut first: Option<Vec<Vec<f32>>> = None;
        let mut rows_out = Vec::new();
        eprintln!("STS Benchmark {split} ({} pairs): Spearman x100; cosine to the first model's vectors", pairs.len());
        for (label, dir) in &models {
            let rows = embed(&nornir, dir, &sentences)?;
            let cos: Vec<f64> = rows.chunks_exact(2).map(|p| cosine(&p[0], &p[1])).collect();
            let rho = 100.0 * spearman(&cos, &gold);
            let to_first: Option<(f64, f64)> = first.as_ref().map(|f| {
                let c: Vec<f64> = f.iter().zip(&rows).map(|(a, b)| cosine(a, b)).collect();
                (c.iter().copied().fold(f64::INFINITY, f64::min), c.iter().sum::<f64>() / c.len() as f64)
            });
            match to_first {
                Some((min, mean)) => eprintln!("  {rho:6.2}  cosine min {min:.4} mean {mean:.4}  {label}"),
                None => eprintln!("  {rho:6.2}  {label}"),
            }
            rows_out.push(serde_json::json!({
                "model": label, "folder": dir, "spearman": rho,
                "cosine_to_first_min": to_first.map(|t| t.0), "cosine_to_first_mean": to_first.map(|t| t.1),
            }));
            first.get_or_insert(rows);
        }
        report.insert(split.to_owned(), serde_json::Value::Array(rows_out));
    }
    let _ = std::fs::remove_dir_all(&tmp);
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_with_ties_matches_scipy() {
        // scipy.stats.spearmanr([1, 2, 2, 3, 5], [2, 1, 4, 4, 5]).statistic
        let rho = spearman(&[1.0, 2.0, 2.0, 3.0, 5.0], &[2.0, 1.0, 4.0, 4.0, 5.0]);
        assert!((rho - 0.763_157_894_736_842_1).abs() < 1e-12, "{rho}");
        assert_eq!(ranks(&[3.0, 1.0, 3.0]), [2.5, 1.0, 2.5]);
    }
}
