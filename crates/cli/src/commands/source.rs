//! Where `embed`, `rerank` and `bench` read their texts from (arguments, a file, standard
//! input), in parts of bounded size, with a progress bar, and an embedder's error in the words of
//! a command that read them.

use std::io::{BufRead, BufReader, IsTerminal};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use nornir_vector::EmbedError;

use nornir_cli::input::{InputFormat, Record, Records};

/// Texts embedded per call when streaming: bounds memory whatever the input size.
pub(super) const CHUNK: usize = 4096;

pub(super) enum Source {
    Args(std::vec::IntoIter<String>),
    Reader { records: Records<Box<dyn BufRead>>, name: String },
}

impl Source {
    fn next(&mut self) -> Result<Option<Record>> {
        match self {
            Source::Args(it) => Ok(it.next().map(|text| Record { text, id: None, pair: None })),
            Source::Reader { records, name } => records.next_record(name),
        }
    }
    pub(super) fn bytes(&self) -> u64 {
        match self {
            Source::Args(_) => 0,
            Source::Reader { records, .. } => records.bytes,
        }
    }
}

/// Texts from the arguments, else `input` ('-' or none: standard input) in `format`, with its size.
pub(super) fn open_source(
    texts: &[String],
    input: Option<&std::path::PathBuf>,
    format: InputFormat,
) -> Result<(Source, Option<u64>)> {
    if !texts.is_empty() {
        return Ok((Source::Args(Vec::from(texts).into_iter()), None));
    }
    let (reader, name, size): (Box<dyn BufRead>, String, Option<u64>) = match input {
        Some(p) if p.as_os_str() != "-" => {
            let f = std::fs::File::open(p).with_context(|| format!("cannot read --input {}", p.display()))?;
            let size = f.metadata().ok().map(|m| m.len());
            (Box::new(BufReader::with_capacity(1 << 20, f)), p.display().to_string(), size)
        }
        _ => (Box::new(BufReader::with_capacity(1 << 20, std::io::stdin())), "standard input".to_owned(), None),
    };
    Ok((Source::Reader { records: Records::new(reader, format), name }, size))
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

/// The next `CHUNK` records of `source` (empty at its end), each a text alone: a record with a
/// `text_pair` is refused (only `predict` scores pairs).
pub(super) fn next_chunk(source: &mut Source) -> Result<Vec<Record>> {
    let chunk = next_records(source)?;
    if chunk.iter().any(|r| r.pair.is_some()) {
        bail!(
            "the input has a \"text_pair\": a pair of texts is scored by `nornir vector predict`; give texts alone here"
        );
    }
    Ok(chunk)
}

/// The next `CHUNK` records of `source`, texts alone or pairs (empty at its end).
pub(super) fn next_records(source: &mut Source) -> Result<Vec<Record>> {
    let mut chunk: Vec<Record> = Vec::with_capacity(CHUNK);
    while chunk.len() < CHUNK {
        match source.next()? {
            Some(r) => chunk.push(r),
            None => break,
        }
    }
    Ok(chunk)
}

/// An embedder's error for a call whose first text is text `done` of the input, in the CLI's words.
pub(super) fn input_error(e: EmbedError, done: usize) -> anyhow::Error {
    match e {
        EmbedError::TooLong { index, tokens, exact, max_length, .. } => anyhow::anyhow!(
            "text {} of the input has {}{tokens} tokens, more than the {max_length} the model reads: shorten it, or use --long truncate|chunk",
            done + index + 1,
            if exact { "" } else { "more than " }
        ),
        e => e.into(),
    }
}

/// Moves `bar` to where `source` is, with `done` texts and their rate since `started`.
pub(super) fn show_progress(bar: &ProgressBar, source: &Source, done: usize, started: std::time::Instant) {
    bar.set_position(source.bytes());
    bar.set_message(format!("{done} texts, {:.0} texts/s", done as f64 / started.elapsed().as_secs_f64().max(1e-9)));
}
