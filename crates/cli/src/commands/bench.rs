//! `nornir vector bench`: bulk or concurrent speed, latency, batches and the embedder's report.

use std::time::Instant;

use anyhow::{Context, Result};
use nornir_vector::{
    Embedder, EmbedderReport, ModelKind, MultiVectorOptions, PairOptions, SAMPLE_TEXTS, SparseOptions,
};

use super::load::load;
use super::source::{CHUNK, progress};
use super::summary::peak_rss_mib;
use crate::args::BenchArgs;
use nornir_cli::input::{InputFormat, Records};

/// A bench's own figures with the embedder's report beside them (the keys of `doctor --json`'s
/// session, `/info` and Python's `report()`), as one JSON object on stdout.
fn print_json(figures: serde_json::Value, report: &EmbedderReport) -> Result<()> {
    #[derive(serde::Serialize)]
    struct WithReport<'a> {
        #[serde(flatten)]
        figures: serde_json::Value,
        #[serde(flatten)]
        report: &'a EmbedderReport,
    }
    println!("{}", serde_json::to_string_pretty(&WithReport { figures, report })?);
    Ok(())
}

/// One bulk call of `chunk` as the model's kind runs it: dense vectors, sparse vectors, or
/// scores of each text as a document paired with `query`.
fn run_kind(embedder: &Embedder, kind: ModelKind, query: &str, chunk: &[String]) -> Result<()> {
    match kind {
        ModelKind::SparseEncoder => drop(embedder.embed_sparse(chunk, &SparseOptions::new())?),
        ModelKind::CrossEncoder => {
            let pairs: Vec<(&str, Option<&str>)> = chunk.iter().map(|d| (query, Some(d.as_str()))).collect();
            drop(embedder.score(&pairs, &PairOptions::new())?);
        }
        // A late-interaction model's documents: their token vectors.
        ModelKind::MultiVector => drop(embedder.embed_multi_vector(chunk, &MultiVectorOptions::new())?),
        _ => drop(embedder.embed(chunk)?),
    }
    Ok(())
}

/// The texts of `--input` (one per line) or the built-in sample, and how to name them.
fn read_texts(a: &BenchArgs) -> Result<(Vec<String>, String)> {
    let (texts, source): (Vec<String>, String) = match &a.input {
        Some(p) => {
            let bytes = std::fs::read(p).with_context(|| format!("cannot read --input {}", p.display()))?;
            let mut records = Records::new(bytes.as_slice(), InputFormat::Lines);
            let mut texts = Vec::new();
            while let Some(r) = records.next_record(&p.display().to_string())? {
                texts.push(r.text);
            }
            (texts, p.display().to_string())
        }
        None => (SAMPLE_TEXTS.lines().map(str::to_owned).collect(), "built-in sample (99 texts)".to_owned()),
    };
    Ok((texts, source))
}

/// `--concurrency`: callers sharing the embedder's batches, against bulk calls.
fn concurrent(a: &BenchArgs, embedder: &Embedder, texts: &[String], source: &str, callers: u32) -> Result<()> {
    let r = super::concurrency::measure(embedder, texts, callers as usize, a.per_call as usize, CHUNK)?;
    if a.json {
        let mut j = serde_json::to_value(&r)?;
        j["input"] = serde_json::json!(source);
        j["texts"] = serde_json::json!(texts.len());
        let described = embedder.describe();
        j["batch_tokens"] = serde_json::json!(a.model.batch_tokens);
        j["peak_rss_mib"] = serde_json::json!(peak_rss_mib(&described.session.memory));
        print_json(j, &described)?;
    } else {
        println!("input            {source} ({} texts)", texts.len());
        println!("provider         {} ({})", embedder.report().active_provider, embedder.gpu_vendor());
        println!("bulk             {:.1} texts/s (calls of {CHUNK})", r.bulk_texts_per_second);
        println!(
            "concurrent       {} callers x {} texts per call: {:.1} texts/s, {:.2}x bulk",
            r.callers, r.per_call, r.texts_per_second, r.ratio_to_bulk
        );
        let l = &r.latency_ms;
        println!(
            "latency          p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} calls)",
            l.p50, l.p95, l.p99, l.max, r.calls
        );
        println!(
            "batches          {} of {:.1} texts on average, {:.1}% padding",
            r.batches,
            r.mean_batch_texts,
            100.0 * r.padding
        );
    }
    Ok(())
}

pub fn bench(a: &BenchArgs) -> Result<()> {
    let (texts, source) = read_texts(a)?;
    let load_start = Instant::now();
    let embedder = load(&a.model)?;
    let load_seconds = load_start.elapsed().as_secs_f64();
    let kind = embedder.model_info().folder.kind.kind;
    if a.concurrency.is_some() && kind != ModelKind::Embedder {
        anyhow::bail!(
            "--concurrency measures an embedder's shared batches; this model is {}: leave it out",
            kind.with_article()
        );
    }
    if let Some(callers) = a.concurrency {
        return concurrent(a, &embedder, &texts, &source, callers);
    }
    let bar = progress(!a.quiet && !a.json, Some(texts.len() as u64 * u64::from(a.repeat)));
    let started = Instant::now();
    for _ in 0..a.repeat {
        for chunk in texts.chunks(CHUNK) {
            run_kind(&embedder, kind, &texts[0], chunk)?;
            bar.inc(chunk.len() as u64);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let s = embedder.stats();
    // One report for the run: the JSON carries it whole, the text prints parts of it.
    let described = embedder.describe();
    let memory = &described.session.memory;
    if a.json {
        let figures = serde_json::json!({
            "input": source,
            "kind": kind.label(),
            "texts": s.texts,
            "tokens": s.tokens,
            "padded_tokens": s.padded_tokens,
            "batches": s.batches,
            "seconds": seconds,
            "texts_per_second": s.texts as f64 / seconds,
            "tokens_per_second": s.tokens as f64 / seconds,
            "ort_seconds": s.ort_seconds,
            "ort_seconds_per_worker": s.ort_seconds / embedder.workers() as f64,
            "outside_ort_seconds": (seconds - s.ort_seconds / embedder.workers() as f64).max(0.0),
            "load_seconds": load_seconds,
            "peak_rss_mib": peak_rss_mib(memory),
            "threads": a.model.threads,
            "batch_tokens": a.model.batch_tokens,
        });
        print_json(figures, &described)?;
    } else {
        println!("input            {source}");
        if kind == ModelKind::CrossEncoder {
            println!("kind             cross-encoder: each text scored as a pair with the first as its query");
        } else {
            println!("kind             {kind}");
        }
        println!("provider         {} ({})", described.session.active_provider, embedder.gpu_vendor());
        println!("precision        {}", described.precision);
        if embedder.model_info().folder.quantization.is_some() {
            println!(
                "CPU int8 ISA     {} (ONNX Runtime picks the best; it does not say which)",
                described.cpu_int8_extensions.join(", ")
            );
        }
        println!(
            "texts            {} in {seconds:.2} s: {:.1} texts/s, {:.0} tokens/s",
            s.texts,
            s.texts as f64 / seconds,
            s.tokens as f64 / seconds
        );
        let workers = embedder.workers() as f64;
        println!(
            "inside ORT       {:.2} s per worker ({:.0}%) with {workers} worker(s), outside {:.2} s",
            s.ort_seconds / workers,
            100.0 * s.ort_seconds / workers / seconds,
            (seconds - s.ort_seconds / workers).max(0.0)
        );
        println!(
            "padding          {:.1}% of {} tokens fed",
            100.0 * (1.0 - s.tokens as f64 / s.padded_tokens.max(1) as f64),
            s.padded_tokens
        );
        println!("model load       {load_seconds:.2} s");
        if let Some(m) = peak_rss_mib(memory) {
            println!("peak RSS         {m:.0} MiB");
        }
        let mib = |b: u64| format!("{:.0}", b as f64 / (1024.0 * 1024.0));
        let each: Vec<String> = memory.session_growth_bytes.iter().map(|&b| mib(b)).collect();
        println!(
            "memory           added by each session built {} MiB; {} worker(s) per session",
            each.join(", "),
            memory.workers_per_session
        );
    }
    Ok(())
}
