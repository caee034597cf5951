//! `nornir vector embed`: texts in, rows out, a progress bar, a summary.

use std::time::Instant;

use anyhow::Result;
use nornir_vector::ModelKind;
use nornir_vector::diagnostics::Memory;

use super::EmbedJob;
use super::load::{load, long_policy, provider_line};
use super::source::{input_error, next_chunk, open_source, progress, show_progress};
use crate::output::{ChunkOut, RowWriter, Sink};

pub fn embed(job: &EmbedJob) -> Result<()> {
    let options = long_policy(job.long, job.window, job.overlap)?.call_options();
    let (mut source, size) = open_source(&job.texts, job.input.as_ref(), job.input_format)?;
    let sink = Sink::open(job.output.as_deref())?;
    let embedder = load(&job.model)?;
    if job.verbose {
        eprintln!("nornir: {}", provider_line(&embedder));
    }
    let makes_tokens = embedder.model_info().folder.multi_vector.is_some();
    if makes_tokens && (job.multi_vector.any() || embedder.model_info().folder.kind.kind == ModelKind::MultiVector) {
        return super::multi_vector::embed_multi_vector(job, &embedder, options, source, size, sink);
    }
    if job.multi_vector.any() {
        anyhow::bail!(
            "--query and --outputs are for a model that makes token vectors (ColBERT, BGE-M3), and this model is {}",
            embedder.model_info().folder.kind.kind.with_article()
        );
    }
    if job.format == crate::output::OutputFormat::Npz {
        anyhow::bail!(
            "--format npz holds token vectors (ColBERT, BGE-M3); use jsonl, npy or f32 for this model's vectors"
        );
    }
    match embedder.model_info().folder.kind.kind {
        ModelKind::SparseEncoder if job.compact.compacts() => {
            anyhow::bail!(
                "--precision compacts an embedder's dense vectors; a sparse encoder's are term ids and weights"
            )
        }
        ModelKind::SparseEncoder => return super::retrieval::embed_sparse(job, &embedder, options, source, size, sink),
        ModelKind::CrossEncoder => anyhow::bail!(
            "{} is a cross-encoder (it scores query and document pairs): use `{} --model {0} --query TEXT`",
            embedder.model_info().folder.dir.display(),
            ModelKind::CrossEncoder.calls().commands
        ),
        _ if job.sparse.any() => {
            anyhow::bail!(
                "--tokens, --top-k and --threshold are for a sparse encoder (SPLADE), and this model is an embedder"
            )
        }
        _ => {}
    }
    if job.compact.compacts() {
        return super::compact::embed_compact(job, &embedder, options, source, size, sink);
    }
    let mut writer = RowWriter::new(job.format, sink);
    if options.chunking.is_some() {
        writer = writer.with_chunk_files(job.output.as_deref())?;
    }
    let bar = progress(!job.quiet && job.texts.is_empty(), size);
    let started = Instant::now();
    let (mut done, mut truncated, mut chunks) = (0usize, 0usize, 0usize);
    loop {
        let chunk = next_chunk(&mut source)?;
        if chunk.is_empty() {
            break;
        }
        let texts: Vec<&str> = chunk.iter().map(|r| r.text.as_str()).collect();
        let vectors = embedder.embed_with(&texts, &options).map_err(|e| input_error(e, done))?;
        for (i, (row, rec)) in vectors.rows().zip(&chunk).enumerate() {
            truncated += usize::from(vectors.truncated(i));
            if vectors.is_chunked() {
                let out: Vec<ChunkOut<'_>> = vectors
                    .char_chunks(i, &rec.text)
                    .into_iter()
                    .map(|c| ChunkOut { start: c.start, end: c.end, tokens: c.tokens, embedding: c.embedding })
                    .collect();
                chunks += out.len();
                writer.write_text(row, rec.id.as_ref(), Some(&out))?;
            } else {
                writer.write_row(row, rec.id.as_ref())?;
            }
        }
        done += chunk.len();
        show_progress(&bar, &source, done, started);
    }
    bar.finish_and_clear();
    writer.finish(embedder.dimension())?;
    report_done(job, &embedder, done, truncated, chunks, started);
    Ok(())
}

/// What `embed` says when it is done: a JSON summary, the texts cut, and with `--verbose` the
/// speed and memory.
fn report_done(
    job: &EmbedJob,
    embedder: &nornir_vector::Embedder,
    done: usize,
    truncated: usize,
    chunks: usize,
    started: Instant,
) {
    if job.json {
        let summary = serde_json::json!({
            "texts": done,
            "truncated": truncated,
            "chunks": chunks,
            "seconds": started.elapsed().as_secs_f64(),
            "max_length": embedder.model_info().max_length,
            "provider": embedder.report().active_provider,
        });
        eprintln!("{summary}");
    } else if truncated > 0 {
        eprintln!(
            "nornir: {truncated} of {done} texts were longer than the model's {} tokens and were truncated to them; --long chunk keeps every token",
            embedder.model_info().max_length
        );
    }
    if job.verbose {
        let seconds = started.elapsed().as_secs_f64();
        let chunked = if chunks > 0 { format!(", {chunks} chunks") } else { String::new() };
        eprintln!(
            "nornir: {done} texts{chunked} in {seconds:.2} s ({:.1} texts/s) on {}; {truncated} truncated; peak RSS {:.0} MiB",
            done as f64 / seconds.max(1e-9),
            embedder.report().active_provider,
            peak_rss_mib(&embedder.report().memory).unwrap_or(f64::NAN)
        );
    }
}

/// The process's peak resident memory in MiB, as the embedder's memory report gives it.
pub(super) fn peak_rss_mib(memory: &Memory) -> Option<f64> {
    memory.peak_resident_bytes.map(|b| b as f64 / (1024.0 * 1024.0))
}
