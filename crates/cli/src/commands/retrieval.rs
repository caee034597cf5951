//! The other kinds of model on the command line: `embed` on a sparse encoder (JSON lines of
//! term ids and weights), `rerank` with a cross-encoder (the documents best first) and `predict`
//! with a classifier (every label's score per text or pair, TEI's `/predict` shape).

use std::io::Write;

use anyhow::{Context, Result, bail};
use nornir_cli::input::InputFormat;
use nornir_vector::{CallOptions, Embedder, LongInputs, PairOptions, SparseOptions, SparseVector};

use super::EmbedJob;
use super::load::{load, long_policy};
use super::source::{Source, input_error, next_chunk, next_records, open_source, progress, show_progress};
use super::summary::RunSummary;
use crate::args::{PredictArgs, RerankArgs};
use crate::output::{JsonLine, OutputFormat, Sink};

/// `embed` on a sparse encoder: a JSON line per text, its terms ascending.
pub(super) fn embed_sparse(
    job: &EmbedJob,
    embedder: &Embedder,
    call: CallOptions,
    mut source: Source,
    size: Option<u64>,
    mut sink: Sink,
) -> Result<()> {
    if job.format != OutputFormat::Jsonl {
        bail!("a sparse encoder's vectors are written as JSON lines: use --format jsonl (the default)");
    }
    // A sparse encoder cannot chunk: the library refuses it, said with --long (errors.rs).
    let mut options = SparseOptions::new().with_call(call);
    if let Some(k) = job.sparse.top_k {
        options = options.with_top_k(k as usize);
    }
    if let Some(w) = job.sparse.threshold {
        options = options.with_threshold(w);
    }
    let bar = progress(!job.quiet && job.texts.is_empty(), size);
    let mut run = RunSummary::start(false);
    loop {
        let chunk = next_chunk(&mut source)?;
        if chunk.is_empty() {
            break;
        }
        let texts: Vec<&str> = chunk.iter().map(|r| r.text.as_str()).collect();
        let vectors = embedder.embed_sparse(&texts, &options).map_err(|e| input_error(e, run.texts()))?;
        for (v, rec) in vectors.vectors.iter().zip(&chunk) {
            sparse_line(embedder, v, job.sparse.tokens, rec.id.as_ref()).write(sink.writer())?;
        }
        run.add(chunk.len(), vectors.usage);
        show_progress(&bar, &source, run.texts(), run.started());
    }
    bar.finish_and_clear();
    sink.finish()?;
    run.report(job, embedder);
    Ok(())
}

/// A sparse vector's JSON line: its terms ascending, with their tokens where `tokens` asks.
pub(super) fn sparse_line<'a>(
    embedder: &Embedder,
    v: &'a SparseVector,
    tokens: bool,
    id: Option<&'a serde_json::Value>,
) -> JsonLine<'a> {
    let tokens = tokens.then(|| v.indices.iter().map(|&i| embedder.vocabulary_term(i).unwrap_or_default()).collect());
    JsonLine { id, indices: Some(&v.indices), values: Some(&v.values), tokens, ..JsonLine::default() }
}

/// One ranked document as written.
#[derive(serde::Serialize)]
struct RankedLine<'a> {
    index: usize,
    score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    /// With --long chunk, the chunk that scored: its number and bytes in the document.
    #[serde(skip_serializing_if = "Option::is_none")]
    chunk: Option<nornir_vector::ChunkSpan>,
}

/// `nornir vector rerank`: the documents scored against the query, best first.
pub fn rerank(args: &RerankArgs) -> Result<()> {
    let (mut source, _) = open_source(&args.documents, args.input.as_ref(), InputFormat::Lines)?;
    let mut documents = Vec::new();
    loop {
        let chunk = next_chunk(&mut source)?;
        if chunk.is_empty() {
            break;
        }
        documents.extend(chunk.into_iter().map(|r| r.text));
    }
    if documents.is_empty() {
        bail!("no documents to rank: give them as arguments, with --input FILE, or on standard input");
    }
    let mut sink = Sink::open(args.output.as_deref())?;
    let embedder = load(&args.model)?;
    let long = long_policy(args.long, args.window.map(|w| w as usize), args.overlap.map(|o| o as usize))?;
    if matches!(long, LongInputs::Chunk(c) if c.late) {
        bail!("--long late pools token vectors; a reranker scores each chunk with the query: use --long chunk");
    }
    let options = PairOptions::new().with_raw_scores(args.raw_scores).with_call(long.call_options());
    let top_n = args.top_n.map(|n| n as usize);
    let ranked = embedder.rerank(&args.query, &documents, top_n, &options).map_err(|e| input_error(e, 0))?;
    for r in ranked.ranked {
        let text = (!args.no_text).then_some(documents[r.index].as_str());
        let line = RankedLine { index: r.index, score: r.score, text, chunk: r.chunk };
        serde_json::to_writer(sink.writer(), &line).context("write output")?;
        sink.writer().write_all(b"\n").context("write output")?;
    }
    sink.finish()
}

/// One label's score as TEI's `/predict` writes it.
#[derive(serde::Serialize)]
struct LabelScore<'a> {
    label: &'a str,
    score: f32,
}

/// `nornir vector predict`: a JSON line per input, every label's score, best first.
pub fn predict(args: &PredictArgs) -> Result<()> {
    let (mut source, size) = open_source(&args.texts, args.input.as_ref(), args.input_format)?;
    let mut sink = Sink::open(args.output.as_deref())?;
    let embedder = load(&args.model)?;
    let labels = &embedder.model_info().folder.kind.labels;
    let options = PairOptions::new().with_raw_scores(args.raw_scores);
    let bar = progress(!args.quiet && args.texts.is_empty(), size);
    let (mut done, started) = (0, std::time::Instant::now());
    loop {
        let chunk = next_records(&mut source)?;
        if chunk.is_empty() {
            break;
        }
        let inputs: Vec<(&str, Option<&str>)> = chunk.iter().map(|r| (r.text.as_str(), r.pair.as_deref())).collect();
        let scores = embedder.score(&inputs, &options).map_err(|e| input_error(e, done))?;
        for row in scores.rows() {
            let mut line: Vec<LabelScore<'_>> =
                row.iter().zip(labels).map(|(&score, label)| LabelScore { label, score }).collect();
            line.sort_by(|a, b| b.score.total_cmp(&a.score));
            serde_json::to_writer(sink.writer(), &line).context("write output")?;
            sink.writer().write_all(b"\n").context("write output")?;
        }
        done += chunk.len();
        show_progress(&bar, &source, done, started);
    }
    bar.finish_and_clear();
    if done == 0 {
        bail!("no texts to classify: give them as arguments, with --input FILE, or on standard input");
    }
    sink.finish()
}
