//! `nornir vector embed`: texts in, rows out, a progress bar, a summary.

use anyhow::Result;
use nornir_vector::ModelKind;

use super::EmbedJob;
use super::load::{load, long_policy, provider_line};
use super::source::{input_error, next_chunk, open_source, progress, show_progress};
use super::summary::RunSummary;
use crate::output::{ChunkOut, RowWriter, Sink};

pub fn embed(job: &EmbedJob) -> Result<()> {
    let options = long_policy(job.long, job.window, job.overlap)?.call_options();
    if let Some(list) = &job.images {
        let sink = Sink::open(job.output.as_deref())?;
        let embedder = load(&job.model)?;
        if job.verbose {
            eprintln!("nornir: {}", provider_line(&embedder));
        }
        return super::images::embed_images(job, list, &embedder, sink);
    }
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
    let mut run = RunSummary::start(true);
    loop {
        let chunk = next_chunk(&mut source)?;
        if chunk.is_empty() {
            break;
        }
        let texts: Vec<&str> = chunk.iter().map(|r| r.text.as_str()).collect();
        let vectors = embedder.embed_with(&texts, &options).map_err(|e| input_error(e, run.texts()))?;
        for (i, (row, rec)) in vectors.rows().zip(&chunk).enumerate() {
            if vectors.is_chunked() {
                let out: Vec<ChunkOut<'_>> = vectors
                    .char_chunks(i, &rec.text)
                    .into_iter()
                    .map(|c| ChunkOut { start: c.start, end: c.end, tokens: c.tokens, embedding: c.embedding })
                    .collect();
                run.add_chunks(out.len());
                writer.write_text(row, rec.id.as_ref(), Some(&out))?;
            } else {
                writer.write_row(row, rec.id.as_ref())?;
            }
        }
        run.add(chunk.len(), vectors.usage());
        show_progress(&bar, &source, run.texts(), run.started());
    }
    bar.finish_and_clear();
    writer.finish(embedder.dimension())?;
    run.report(job, &embedder);
    Ok(())
}
