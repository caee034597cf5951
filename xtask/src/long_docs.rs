//! `cargo xtask long-docs`: what chunking buys on long documents, with the default model and the
//! release `nornir vector embed`. The needle set comes from the corpus: its paragraphs of 200 words
//! or more are the documents; sentences taken out of a document are the queries, whose answer is
//! that document, found among all documents (and, in a second round, among every corpus text of 50
//! words or more as well). One set takes its queries from the second halves of the documents
//! (past what truncation keeps), another from the first halves (where truncation already works).
//! Methods: truncation, chunks with their token-weighted mean or element-wise max, late chunking,
//! and best chunk (a query's best cosine over a document's chunks), at the model's 256-token
//! window and at 128. Then the speed of chunking against the same chunks as separate texts.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::process::{cargo, run_checked, workspace_root};
use crate::{assets, fetch};

/// Sentences: cut after `.`, `!`, `?` or `:` and a space; runs of more than 40 words without one
/// (lists, tables) are cut every 25 words, so that every document yields queries.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for word in text.split_whitespace() {
        current.push(word);
        let ends = word.ends_with(['.', '!', '?', ':']) && current.len() >= 3;
        if ends || current.len() >= 40 {
            let keep = if ends { current.len() } else { 25 };
            out.push(current[..keep].join(" "));
            current.drain(..keep);
        }
    }
    if !current.is_empty() {
        out.push(current.join(" "));
    }
    out
}

struct NeedleSet {
    documents: Vec<String>,
    /// (query, the document it was taken from)
    queries: Vec<(String, usize)>,
}

/// Up to `per_doc` sentences of 8 words or more from each document's first or second half, taken
/// out of it.
fn needle_set(paragraphs: &[&str], second_half: bool, per_doc: usize) -> NeedleSet {
    let mut documents = Vec::new();
    let mut queries = Vec::new();
    for (d, p) in paragraphs.iter().enumerate() {
        let s = sentences(p);
        let half = s.len() / 2;
        let range = if second_half { half..s.len() } else { 0..half };
        let picked: Vec<usize> = range.filter(|&i| s[i].split_whitespace().count() >= 8).take(per_doc).collect();
        for &i in &picked {
            queries.push((s[i].clone(), d));
        }
        let rest: Vec<&str> =
            s.iter().enumerate().filter(|(i, _)| !picked.contains(i)).map(|(_, t)| t.as_str()).collect();
        documents.push(rest.join(" "));
    }
    NeedleSet { documents, queries }
}

/// Rows and chunks of one `nornir vector embed` run over JSON lines input.
struct Embedded {
    rows: Vec<Vec<f32>>,
    chunks: Vec<Vec<Vec<f32>>>,
    seconds: f64,
}

fn embed(nornir: &Path, model: &Path, input: &Path, extra: &[&str]) -> Result<Embedded> {
    let started = Instant::now();
    let out = Command::new(nornir)
        .args(["vector", "embed", "-q", "--device", "cpu", "--input-format", "jsonl", "--model"])
        .arg(model)
        .arg("--input")
        .arg(input)
        .args(extra)
        .output()
        .context("run nornir vector embed")?;
    let seconds = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("nornir vector embed {extra:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut rows = Vec::new();
    let mut chunks = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line)?;
        let floats = |v: &Value| -> Vec<f32> {
            v.as_array().map(|a| a.iter().filter_map(Value::as_f64).map(|x| x as f32).collect()).unwrap_or_default()
        };
        rows.push(floats(&v["embedding"]));
        chunks.push(
            v["chunks"].as_array().map(|c| c.iter().map(|c| floats(&c["embedding"])).collect()).unwrap_or_default(),
        );
    }
    Ok(Embedded { rows, chunks, seconds })
}

pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = dot(&v, &v).sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// How well a query matches document `d`.
type Score<'a> = Box<dyn Fn(&[f32], usize) -> f32 + 'a>;

/// Recall@1 and mean reciprocal rank of `score(query, document)` over the queries.
fn rank(queries: &[(Vec<f32>, usize)], documents: usize, score: impl Fn(&[f32], usize) -> f32) -> (f64, f64) {
    let (mut hits, mut rr) = (0.0, 0.0);
    for (q, answer) in queries {
        let mine = score(q, *answer);
        let better = (0..documents).filter(|&d| d != *answer && score(q, d) > mine).count();
        hits += f64::from(u8::from(better == 0));
        rr += 1.0 / (better + 1) as f64;
    }
    let n = queries.len().max(1) as f64;
    (hits / n, rr / n)
}

fn write_jsonl(path: &Path, texts: &[String]) -> Result<()> {
    let lines: Vec<String> = texts.iter().enumerate().map(|(i, t)| json!({ "id": i, "text": t }).to_string()).collect();
    std::fs::write(path, lines.join("\n") + "\n")?;
    Ok(())
}

/// Speed: chunking the documents against embedding the same chunk texts as separate lines, and
/// late chunking, medians of three runs.
fn speed(nornir: &Path, model: &Path, dir: &Path) -> Result<Value> {
    let docs = dir.join("documents.jsonl");
    let texts: Vec<String> = std::fs::read_to_string(&docs)?
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["text"].as_str().map(str::to_owned))
        .collect();
    let out = Command::new(nornir)
        .args(["vector", "embed", "-q", "--device", "cpu", "--input-format", "jsonl", "--long", "chunk", "--model"])
        .arg(model)
        .arg("--input")
        .arg(&docs)
        .output()?;
    let mut chunk_texts = Vec::new();
    for (line, text) in String::from_utf8_lossy(&out.stdout).lines().zip(&texts) {
        let v: Value = serde_json::from_str(line)?;
        let chars: Vec<char> = text.chars().collect();
        for c in v["chunks"].as_array().into_iter().flatten() {
            let (s, e) = (c["start"].as_u64().unwrap_or(0) as usize, c["end"].as_u64().unwrap_or(0) as usize);
            chunk_texts.push(chars[s..e].iter().collect::<String>());
        }
    }
    let chunk_file = dir.join("chunk-texts.jsonl");
    write_jsonl(&chunk_file, &chunk_texts)?;
    let (mut chunking, mut separate, mut late) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        chunking.push(embed(nornir, model, &docs, &["--long", "chunk"])?.seconds);
        separate.push(embed(nornir, model, &chunk_file, &[])?.seconds);
        late.push(embed(nornir, model, &docs, &["--long", "late", "--window", "128"])?.seconds);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(json!({
        "documents": texts.len(),
        "chunks": chunk_texts.len(),
        "chunking_seconds": median(&mut chunking),
        "same_chunks_as_texts_seconds": median(&mut separate),
        "late_window_128_seconds": median(&mut late),
    }))
}

pub fn long_docs() -> Result<()> {
    let home = fetch::fetch(assets::DEFAULT_ASSETS)?;
    run_checked(cargo().args(["build", "--release", "--quiet", "-p", "nornir-cli"]))?;
    let nornir = workspace_root().join("target/release/nornir");
    let model = home.join(assets::EXPORT_MODEL_DIR);
    let corpus = std::fs::read_to_string(workspace_root().join("testdata/corpus.txt"))?;
    let paragraphs: Vec<&str> = corpus.lines().filter(|l| l.split_whitespace().count() >= 200).collect();
    let distractors: Vec<String> =
        corpus.lines().filter(|l| (50..200).contains(&l.split_whitespace().count())).map(str::to_owned).collect();
    let dir = workspace_root().join("target/long-docs");
    std::fs::create_dir_all(&dir)?;
    let mut results = BTreeMap::new();
    let mut table = Vec::new();
    for (set, second_half) in [("second half", true), ("first half", false)] {
        let needles = needle_set(&paragraphs, second_half, 6);
        let mut all_docs = needles.documents.clone();
        all_docs.extend(distractors.iter().cloned());
        let docs = dir.join("documents.jsonl");
        write_jsonl(&docs, &all_docs)?;
        let query_file = dir.join("queries.jsonl");
        let query_texts: Vec<String> = needles.queries.iter().map(|(q, _)| q.clone()).collect();
        write_jsonl(&query_file, &query_texts)?;
        let q = embed(&nornir, &model, &query_file, &[])?;
        let queries: Vec<(Vec<f32>, usize)> = q.rows.into_iter().zip(needles.queries.iter().map(|(_, d)| *d)).collect();
        for window in [256usize, 128] {
            let w = window.to_string();
            let truncated = embed(&nornir, &model, &docs, &["--max-length", &w])?;
            let chunked = embed(&nornir, &model, &docs, &["--long", "chunk", "--window", &w])?;
            let late = embed(&nornir, &model, &docs, &["--long", "late", "--window", &w])?;
            let maxed: Vec<Vec<f32>> = chunked
                .chunks
                .iter()
                .map(|c| unit((0..c[0].len()).map(|k| c.iter().map(|v| v[k]).fold(f32::MIN, f32::max)).collect()))
                .collect();
            let methods: [(&str, Score<'_>); 6] = [
                ("truncation", Box::new(|q, d| dot(q, &truncated.rows[d]))),
                ("chunk-mean", Box::new(|q, d| dot(q, &chunked.rows[d]))),
                ("chunk-max", Box::new(|q, d| dot(q, &maxed[d]))),
                ("late", Box::new(|q, d| dot(q, &late.rows[d]))),
                ("best-chunk", Box::new(|q, d| chunked.chunks[d].iter().map(|c| dot(q, c)).fold(f32::MIN, f32::max))),
                ("late best-chunk", Box::new(|q, d| late.chunks[d].iter().map(|c| dot(q, c)).fold(f32::MIN, f32::max))),
            ];
            for (name, score) in &methods {
                let (r1, mrr) = rank(&queries, needles.documents.len(), score);
                let (r1_all, mrr_all) = rank(&queries, all_docs.len(), score);
                table.push(format!("| {set} | {window} | {name} | {r1:.3} | {mrr:.3} | {r1_all:.3} | {mrr_all:.3} |"));
                results.insert(
                    format!("{set}/{window}/{name}"),
                    json!({ "recall_at_1": r1, "mrr": mrr, "recall_at_1_with_distractors": r1_all, "mrr_with_distractors": mrr_all }),
                );
            }
        }
        results.insert(
            format!("{set}/size"),
            json!({ "documents": needles.documents.len(), "queries": needles.queries.len(), "distractors": distractors.len() }),
        );
    }
    let speed = speed(&nornir, &model, &dir)?;
    println!(
        "| queries from | window | method | recall@1 | MRR | recall@1, with distractors | MRR, with distractors |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for row in table {
        println!("{row}");
    }
    println!("{}", serde_json::to_string_pretty(&json!({ "results": results, "speed": speed }))?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_and_needles() {
        assert_eq!(sentences("One two three. Four five six! Seven"), ["One two three.", "Four five six!", "Seven"]);
        let list = (0..100).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
        let s = sentences(&list);
        assert!(s.len() >= 3 && s.iter().all(|x| x.split_whitespace().count() <= 40), "{s:?}");
        let doc = (0..20)
            .map(|i| format!("This is sentence number {i} of the test document here."))
            .collect::<Vec<_>>()
            .join(" ");
        let set = needle_set(&[doc.as_str()], true, 3);
        assert_eq!(set.queries.len(), 3);
        for (q, d) in &set.queries {
            assert_eq!(*d, 0);
            assert!(!set.documents[0].contains(q.as_str()), "the query is taken out of its document");
            assert!(q.contains("number 1"), "from the second half: {q}");
        }
        let (r1, mrr) = rank(&[(vec![1.0, 0.0], 0), (vec![0.0, 1.0], 0)], 2, |q, d| q[d]);
        assert_eq!((r1, mrr), (0.5, 0.75));
    }
}
