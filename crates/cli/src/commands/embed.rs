//! `nornir vector embed`: texts in, rows out, a progress bar, a summary.

use std::io::{BufRead, BufReader, IsTerminal};
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use nornir_vector::diagnostics::Memory;

use super::EmbedJob;
use super::load::{load, long_policy, provider_line};
use crate::output::{ChunkOut, RowWriter, Sink};
use nornir_cli::input::{Record, Records};

/// Texts embedded per call when streaming: bounds memory whatever the input size.
pub(super) const CHUNK: usize = 4096;

enum Source {
    Args(std::vec::IntoIter<String>),
    Reader { records: Records<Box<dyn BufRead>>, name: String },
}

impl Source {
    fn next(&mut self) -> Result<Option<Record>> {
        match self {
            Source::Args(it) => Ok(it.next().map(|text| Record { text, id: None })),
            Source::Reader { records, name } => records.next_record(name),
        }
    }
    fn bytes(&self) -> u64 {
        match self {
            Source::Args(_) => 0,
            Source::Reader { records, .. } => records.bytes,
        }
    }
}

fn open_source(job: &EmbedJob) -> Result<(Source, Option<u64>)> {
    if !job.texts.is_empty() {
        return Ok((Source::Args(job.texts.clone().into_iter()), None));
    }
    let (reader, name, size): (Box<dyn BufRead>, String, Option<u64>) = match &job.input {
        Some(p) if p.as_os_str() != "-" => {
            let f = std::fs::File::open(p).with_context(|| format!("cannot read --input {}", p.display()))?;
            let size = f.metadata().ok().map(|m| m.len());
            (Box::new(BufReader::with_capacity(1 << 20, f)), p.display().to_string(), size)
        }
        _ => (Box::new(BufReader::with_capacity(1 << 20, std::io::stdin())), "standard input".to_owned(), None),
    };
    Ok((Source::Reader { records: Records::new(reader, job.input_format), name }, size))
}

pub(super) fn progress(enabled: bool, total: Option<u64>) -> ProgressBar {
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match total {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{bar:40} {percent:>3}% {msg} ETA {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner(),
    }
}

pub fn embed(job: &EmbedJob) -> Result<()> {
    let options = long_policy(job.long, job.window, job.overlap)?.call_options();
    let (mut source, size) = open_source(job)?;
    let sink = Sink::open(job.output.as_deref())?;
    let mut writer = RowWriter::new(job.format, sink);
    if options.chunking.is_some() {
        writer = writer.with_chunk_files(job.output.as_deref())?;
    }
    let embedder = load(&job.model)?;
    if job.verbose {
        eprintln!("nornir: {}", provider_line(&embedder));
    }
    let bar = progress(!job.quiet && job.texts.is_empty(), size);
    let started = Instant::now();
    let (mut done, mut truncated, mut chunks) = (0usize, 0usize, 0usize);
    loop {
        let mut chunk: Vec<Record> = Vec::with_capacity(CHUNK);
        while chunk.len() < CHUNK {
            match source.next()? {
                Some(r) => chunk.push(r),
                None => break,
            }
        }
        if chunk.is_empty() {
            break;
        }
        let texts: Vec<&str> = chunk.iter().map(|r| r.text.as_str()).collect();
        let vectors = embedder.embed_with(&texts, &options).map_err(|e| match e {
            nornir_vector::EmbedError::TooLong { index, tokens, exact, max_length, .. } => anyhow::anyhow!(
                "text {} of the input has {}{tokens} tokens, more than the {max_length} the model reads: shorten it, or use --long truncate|chunk",
                done + index + 1,
                if exact { "" } else { "more than " }
            ),
            e => e.into(),
        })?;
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
        bar.set_position(source.bytes());
        bar.set_message(format!(
            "{done} texts, {:.0} texts/s",
            done as f64 / started.elapsed().as_secs_f64().max(1e-9)
        ));
    }
    bar.finish_and_clear();
    writer.finish(embedder.dimension())?;
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
    Ok(())
}

/// The process's peak resident memory in MiB, as the embedder's memory report gives it.
pub(super) fn peak_rss_mib(memory: &Memory) -> Option<f64> {
    memory.peak_resident_bytes.map(|b| b as f64 / (1024.0 * 1024.0))
}
