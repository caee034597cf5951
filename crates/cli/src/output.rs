//! Writing embeddings as JSON lines, .npy or raw float32, to stdout or to a file that appears only
//! when the run succeeded (a temporary file in the same folder, renamed at the end).

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One JSON object per text and line: {"id"?, "embedding"} (and the other outputs the model
    /// makes: docs/cli.md); "id" only where the input had ids.
    Jsonl,
    /// A NumPy .npy file, float32, shape [texts, dimension] (rows are kept in memory until the end).
    Npy,
    /// Raw little-endian float32 rows, no header.
    F32,
    /// Token vectors only: one NumPy .npz with `vectors` `[rows, dimension]` and `offsets`
    /// `[texts + 1]` (text i's rows are `offsets[i]..offsets[i + 1]`).
    Npz,
}

/// Where the output goes: stdout, a device or pipe written in place, or a temporary file renamed
/// onto the target on success.
pub struct Sink {
    out: BufWriter<Box<dyn Write>>,
    target: Option<(PathBuf, PathBuf)>,
}

impl Sink {
    pub fn open(path: Option<&Path>) -> Result<Self> {
        match path {
            None => Ok(Self { out: BufWriter::with_capacity(1 << 20, Box::new(std::io::stdout())), target: None }),
            Some(p) => {
                let dir = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                let name = p.file_name().with_context(|| format!("{} is not a file path", p.display()))?;
                if p.is_dir() {
                    anyhow::bail!("--output {} is a folder: give a file path inside it", p.display());
                }
                if std::fs::metadata(p).is_ok_and(|m| !m.is_file()) {
                    // A device or a pipe (/dev/null, a FIFO) is written in place: renaming a
                    // temporary file onto it would replace it with a regular file.
                    let file = std::fs::OpenOptions::new()
                        .write(true)
                        .open(p)
                        .with_context(|| format!("cannot write to --output {}", p.display()))?;
                    return Ok(Self { out: BufWriter::with_capacity(1 << 20, Box::new(file)), target: None });
                }
                let tmp = dir.join(format!(".{}.nornir-{}.tmp", name.to_string_lossy(), std::process::id()));
                let file = std::fs::File::create(&tmp)
                    .with_context(|| format!("cannot write into {}: choose a writable --output path", dir.display()))?;
                Ok(Self {
                    out: BufWriter::with_capacity(1 << 20, Box::new(file)),
                    target: Some((tmp, p.to_path_buf())),
                })
            }
        }
    }

    pub fn writer(&mut self) -> &mut BufWriter<Box<dyn Write>> {
        &mut self.out
    }

    /// Flushes and, for a file, renames the temporary file onto the target.
    pub fn finish(mut self) -> Result<()> {
        self.out.flush().context("write output")?;
        if let Some((tmp, target)) = self.target.take()
            && let Err(e) = std::fs::rename(&tmp, &target)
        {
            let _ = std::fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("cannot create --output {}", target.display()));
        }
        Ok(())
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        // Not finished: remove the temporary file so nothing half-written is left behind.
        if let Some((tmp, _)) = self.target.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// One line of `--format jsonl`, the same object for every kind of model, with or without ids:
/// the input's `id` where it had one, then each output the run makes under its own key: the
/// vector (`embedding`, float32 or a compact precision's integers) and its `chunks`, a sparse
/// vector's `indices`, `values` (and `tokens`), token vectors (`vectors`). Floats are written
/// as float32's shortest form everywhere.
#[derive(Default, serde::Serialize)]
pub struct JsonLine<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Values<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunks: Option<&'a [ChunkOut<'a>]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indices: Option<&'a [u32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<&'a [f32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vectors: Option<TokenValues<'a>>,
}

impl JsonLine<'_> {
    /// Writes the line and its newline.
    pub fn write(&self, w: &mut dyn Write) -> Result<()> {
        serde_json::to_writer(&mut *w, self).context("write output")?;
        w.write_all(b"\n").context("write output")
    }
}

/// A vector's values: float32, or a compact precision's integers.
#[derive(serde::Serialize)]
#[serde(untagged)]
pub enum Values<'a> {
    Floats(&'a [f32]),
    Integers(Vec<i64>),
}

/// A text's token vectors: float32 rows, or a compact precision's integer rows.
#[derive(serde::Serialize)]
#[serde(untagged)]
pub enum TokenValues<'a> {
    Floats(Vec<&'a [f32]>),
    Integers(Vec<Vec<i64>>),
}

/// One chunk of a text as written (the library's `CharChunk`; this module also builds without
/// the embedder): its span in characters, its tokens and its vector.
#[derive(serde::Serialize)]
pub struct ChunkOut<'a> {
    pub start: usize,
    pub end: usize,
    pub tokens: usize,
    pub embedding: &'a [f32],
}

/// The chunk files beside a .npy or .f32 output: the vectors and a TSV index.
struct ChunkFiles {
    vectors: RowWriter,
    index: Sink,
}

/// Writes rows in the chosen format; `.npy` collects rows and writes at `finish`.
pub struct RowWriter {
    format: OutputFormat,
    sink: Sink,
    npy_rows: Vec<f32>,
    dim: usize,
    /// Texts written so far (their index in the chunk index).
    texts: usize,
    chunk_files: Option<Box<ChunkFiles>>,
}

/// `dir/name.chunks.ext` and `dir/name.chunks.tsv` beside `dir/name.ext`.
pub fn chunk_paths(output: &Path) -> (PathBuf, PathBuf) {
    let stem = output.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = output.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    (output.with_file_name(format!("{stem}.chunks{ext}")), output.with_file_name(format!("{stem}.chunks.tsv")))
}

impl RowWriter {
    pub fn new(format: OutputFormat, sink: Sink) -> Self {
        Self { format, sink, npy_rows: Vec::new(), dim: 0, texts: 0, chunk_files: None }
    }

    /// Chunks of .npy and .f32 outputs go to two files beside `output` (see [`chunk_paths`]);
    /// JSON lines carry them in each text's object.
    pub fn with_chunk_files(mut self, output: Option<&Path>) -> Result<Self> {
        if self.format == OutputFormat::Jsonl {
            return Ok(self);
        }
        let output = output.context(
            "chunks of .npy or .f32 output go to files beside it: give --output FILE (or --format jsonl for standard output)",
        )?;
        let (vectors, index) = chunk_paths(output);
        let mut index = Sink::open(Some(&index))?;
        index.writer().write_all(b"text\tchunk\tstart\tend\ttokens\n")?;
        let vectors = RowWriter::new(self.format, Sink::open(Some(&vectors))?);
        self.chunk_files = Some(Box::new(ChunkFiles { vectors, index }));
        Ok(self)
    }

    pub fn write_row(&mut self, row: &[f32], id: Option<&serde_json::Value>) -> Result<()> {
        self.write_text(row, id, None)
    }

    /// A text's row, and its chunks when the run chunks long texts.
    pub fn write_text(
        &mut self,
        row: &[f32],
        id: Option<&serde_json::Value>,
        chunks: Option<&[ChunkOut<'_>]>,
    ) -> Result<()> {
        self.dim = row.len();
        let text = self.texts;
        self.texts += 1;
        if let (Some(files), Some(chunks)) = (self.chunk_files.as_deref_mut(), chunks) {
            for (k, c) in chunks.iter().enumerate() {
                files.vectors.write_row(c.embedding, None)?;
                writeln!(files.index.writer(), "{text}\t{k}\t{}\t{}\t{}", c.start, c.end, c.tokens)?;
            }
        }
        let w = self.sink.writer();
        match self.format {
            OutputFormat::Jsonl => {
                JsonLine { id, embedding: Some(Values::Floats(row)), chunks, ..JsonLine::default() }.write(w)?;
            }
            OutputFormat::Npz => anyhow::bail!("--format npz holds token vectors only (ColBERT, BGE-M3)"),
            OutputFormat::F32 => {
                let bytes: Vec<u8> = row.iter().flat_map(|x| x.to_le_bytes()).collect();
                w.write_all(&bytes)?;
            }
            OutputFormat::Npy => self.npy_rows.extend_from_slice(row),
        }
        Ok(())
    }

    /// Writes what is held and renames every file into place: the chunk files first, so that the
    /// main output never appears without them.
    pub fn finish(mut self, dim: usize) -> Result<()> {
        if let Some(files) = self.chunk_files.take() {
            let ChunkFiles { vectors, index } = *files;
            vectors.finish(dim)?;
            index.finish()?;
        }
        if self.format == OutputFormat::Npy {
            let dim = if self.dim == 0 { dim } else { self.dim };
            let rows = self.npy_rows.len().checked_div(dim).unwrap_or(0);
            use npyz::WriterBuilder;
            let mut npy = npyz::WriteOptions::<f32>::new()
                .default_dtype()
                .shape(&[rows as u64, dim as u64])
                .writer(self.sink.writer())
                .begin_nd()
                .context("write .npy header")?;
            npy.extend(self.npy_rows.iter().copied()).context("write .npy data")?;
            npy.finish().context("finish .npy")?;
        }
        self.sink.finish()
    }
}

#[cfg(test)]
mod sink_tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    /// `--output /dev/null` writes to the device; before, the finished output was renamed onto
    /// it, which (run as root) replaced /dev/null with a regular file for the whole machine.
    #[test]
    fn a_device_is_written_in_place_and_stays_a_device() {
        let null = Path::new("/dev/null");
        if !std::fs::metadata(null).is_ok_and(|m| m.file_type().is_char_device()) {
            eprintln!("skipped: /dev/null is not a character device on this machine");
            return;
        }
        let mut sink = Sink::open(Some(null)).expect("open /dev/null");
        sink.writer().write_all(b"discarded").expect("write");
        sink.finish().expect("finish");
        assert!(std::fs::metadata(null).expect("stat").file_type().is_char_device());
    }

    /// A regular file appears only when finished, and nothing is left when not.
    #[test]
    fn a_file_appears_when_finished_and_never_half_written() {
        let t = tempfile::tempdir().expect("tempdir");
        let path = t.path().join("out.f32");
        let mut sink = Sink::open(Some(&path)).expect("open");
        sink.writer().write_all(b"rows").expect("write");
        assert!(!path.exists());
        sink.finish().expect("finish");
        assert_eq!(std::fs::read(&path).expect("read"), b"rows");
        let other = t.path().join("dropped.f32");
        drop(Sink::open(Some(&other)).expect("open"));
        assert_eq!(std::fs::read_dir(t.path()).expect("list").count(), 1, "only out.f32 is left");
    }
}

#[cfg(test)]
mod json_line_tests {
    use super::*;

    /// One object per line with or without ids, each output under its own key, float32 numbers
    /// in their shortest form (0.1, not 0.10000000149011612).
    #[test]
    fn a_line_is_one_object_whatever_the_kind_and_the_ids() {
        let line = |l: JsonLine<'_>| {
            let mut out = Vec::new();
            l.write(&mut out).expect("write");
            String::from_utf8(out).expect("utf8")
        };
        let row = [0.1f32, -2.5];
        assert_eq!(
            line(JsonLine { embedding: Some(Values::Floats(&row)), ..JsonLine::default() }),
            "{\"embedding\":[0.1,-2.5]}\n"
        );
        let id = serde_json::json!("doc-1");
        assert_eq!(
            line(JsonLine { id: Some(&id), embedding: Some(Values::Integers(vec![-3, 127])), ..JsonLine::default() }),
            "{\"id\":\"doc-1\",\"embedding\":[-3,127]}\n"
        );
        let (indices, values) = ([3u32, 9], [0.5f32, 1.25]);
        let tokens = [[0.1f32, 0.2], [0.3, 0.4]];
        let all = JsonLine {
            embedding: Some(Values::Floats(&row)),
            indices: Some(&indices),
            values: Some(&values),
            vectors: Some(TokenValues::Floats(tokens.iter().map(|t| t.as_slice()).collect())),
            ..JsonLine::default()
        };
        assert_eq!(
            line(all),
            "{\"embedding\":[0.1,-2.5],\"indices\":[3,9],\"values\":[0.5,1.25],\"vectors\":[[0.1,0.2],[0.3,0.4]]}\n"
        );
    }
}
