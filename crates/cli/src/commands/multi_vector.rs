//! `embed` on a late-interaction model: each text's token vectors (ColBERT), or BGE-M3's outputs
//! from one pass (`--outputs dense,sparse,multi-vector`), as JSON lines or one `.npz` of rows and
//! offsets.

use std::io::Write;

use anyhow::{Context, Result, bail};
use nornir_vector::{CallOptions, Embedder, Encoded, MultiVectorOptions, Outputs, Precision, Ranges};

use super::EmbedJob;
use super::source::{Source, input_error, next_chunk, progress, show_progress};
use super::summary::RunSummary;
use crate::args::OutputKind;
use crate::output::{JsonLine, OutputFormat, Sink, TokenValues, Values};

/// The outputs a run asks for: `--outputs`, else the model's own (a BGE-M3 folder, whose kind is
/// embedder, its dense vector; a late-interaction model its token vectors).
fn outputs(job: &EmbedJob, embedder: &Embedder) -> Outputs {
    let asked = &job.multi_vector.outputs;
    if asked.is_empty() {
        return match embedder.model_info().folder.kind.kind {
            nornir_vector::ModelKind::MultiVector => Outputs::multi_vector(),
            _ => Outputs::new(true, false, false),
        };
    }
    let has = |k: OutputKind| asked.contains(&k);
    Outputs::new(has(OutputKind::Dense), has(OutputKind::Sparse), has(OutputKind::MultiVector))
}

/// One text's line: the outputs asked, with the input's id when it had one.
fn line<'a>(
    encoded: &'a Encoded,
    i: usize,
    precision: Precision,
    ranges: Option<&Ranges>,
    id: Option<&'a serde_json::Value>,
) -> Result<JsonLine<'a>> {
    let sparse = encoded.sparse.as_ref().map(|s| &s[i]);
    let vectors = match &encoded.multi_vector {
        Some(mv) if precision == Precision::Float32 => {
            Some(TokenValues::Floats(mv.get(i).chunks_exact(mv.dim().max(1)).collect()))
        }
        Some(mv) => Some(TokenValues::Integers(mv.text_to_precision(i, precision, ranges)?.rows_values())),
        None => None,
    };
    Ok(JsonLine {
        id,
        embedding: encoded.dense.as_ref().map(|d| Values::Floats(d.row(i))),
        indices: sparse.map(|v| v.indices.as_slice()),
        values: sparse.map(|v| v.values.as_slice()),
        vectors,
        ..JsonLine::default()
    })
}

/// `embed` on a model that makes token vectors.
pub(super) fn embed_multi_vector(
    job: &EmbedJob,
    embedder: &Embedder,
    call: CallOptions,
    mut source: Source,
    size: Option<u64>,
    mut sink: Sink,
) -> Result<()> {
    let outputs = outputs(job, embedder);
    let precision = job.compact.precision;
    let npz = match job.format {
        OutputFormat::Jsonl => false,
        OutputFormat::Npz if outputs == Outputs::multi_vector() => true,
        OutputFormat::Npz => bail!("--format npz holds token vectors only: leave out --outputs, or use --format jsonl"),
        other => bail!(
            "token vectors are written as JSON lines or one .npz of rows and offsets: use --format jsonl or npz, not {other:?}"
        ),
    };
    let options = MultiVectorOptions::new().with_query(job.multi_vector.query).with_call(call);
    let ranges = if precision.needs_ranges() || job.compact.ranges.is_some() || job.compact.calibrate.is_some() {
        Some(token_ranges(job, embedder, &options)?)
    } else {
        None
    };
    let bar = progress(!job.quiet && job.texts.is_empty(), size);
    let mut run = RunSummary::start(false);
    let (mut rows, mut offsets, mut dim) = (Vec::<u8>::new(), vec![0i64], 0usize);
    loop {
        let chunk = next_chunk(&mut source)?;
        if chunk.is_empty() {
            break;
        }
        let texts: Vec<&str> = chunk.iter().map(|r| r.text.as_str()).collect();
        let encoded = embedder.encode(&texts, outputs, &options).map_err(|e| input_error(e, run.texts()))?;
        if npz {
            let mv = encoded.multi_vector.as_ref().context("the model made no token vectors")?;
            dim = mv.dim();
            let c = mv.to_precision(precision, ranges.as_ref())?;
            rows.extend_from_slice(c.as_bytes());
            let last = *offsets.last().unwrap_or(&0);
            offsets.extend(mv.offsets()[1..].iter().map(|&o| last + o as i64));
        } else {
            for (i, rec) in chunk.iter().enumerate() {
                line(&encoded, i, precision, ranges.as_ref(), rec.id.as_ref())?.write(sink.writer())?;
            }
        }
        run.add(chunk.len(), encoded.usage);
        show_progress(&bar, &source, run.texts(), run.started());
    }
    bar.finish_and_clear();
    if npz {
        write_npz(&mut sink, &rows, &offsets, dim, precision)?;
    }
    sink.finish()?;
    run.with("query", job.multi_vector.query).report(job, embedder);
    Ok(())
}

/// int8's and uint8's ranges for token vectors: `--ranges` from an earlier run, else calibrated
/// on `--calibrate`'s texts or the built-in sample (as documents; queries must use the same),
/// saved beside `--output` as OUTPUT.ranges.json.
fn token_ranges(job: &EmbedJob, embedder: &Embedder, options: &MultiVectorOptions) -> Result<Ranges> {
    if let Some(file) = &job.compact.ranges {
        return Ok(Ranges::read(file)?);
    }
    let out = job.output.as_ref().context(
        "int8 and uint8 token vectors need ranges saved beside --output FILE (queries and documents must share them): give --output, or --ranges FILE from an earlier run",
    )?;
    let ranges = match &job.compact.calibrate {
        Some(file) => {
            let text =
                std::fs::read_to_string(file).with_context(|| format!("cannot read --calibrate {}", file.display()))?;
            let texts: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            embedder.multi_vector_ranges(&texts, options, &file.display().to_string())?
        }
        None => embedder.multi_vector_ranges_on_sample(options)?,
    };
    let path = super::compact::ranges_path(out);
    ranges.write(&path).with_context(|| format!("write {}", path.display()))?;
    Ok(ranges)
}

/// An `.npz` (a zip of `.npy` files, stored) with `vectors` (`[rows, dim]` float32, or
/// `[rows, dim / 8]` bytes for the binary kinds) and `offsets` (`[texts + 1]` int64: text i's
/// rows are `offsets[i]..offsets[i + 1]`), as `numpy.load` reads it.
fn write_npz(sink: &mut Sink, rows: &[u8], offsets: &[i64], dim: usize, precision: Precision) -> Result<()> {
    use npyz::WriterBuilder;
    let texts = offsets.len() as u64;
    let mut vectors = Vec::new();
    match precision {
        Precision::Float32 => {
            let values: Vec<f32> = rows.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            let n = (values.len() / dim.max(1)) as u64;
            let mut w = npyz::WriteOptions::<f32>::new()
                .default_dtype()
                .shape(&[n, dim as u64])
                .writer(&mut vectors)
                .begin_nd()?;
            w.extend(values)?;
            w.finish()?;
        }
        // int8's and binary's bytes are int8 (binary offset by -128), as sentence-transformers' are.
        p if p.is_signed() => {
            let width = precision.bytes_per_vector(dim).max(1);
            let n = (rows.len() / width) as u64;
            let mut w = npyz::WriteOptions::<i8>::new()
                .default_dtype()
                .shape(&[n, width as u64])
                .writer(&mut vectors)
                .begin_nd()?;
            w.extend(rows.iter().map(|&b| b as i8))?;
            w.finish()?;
        }
        _ => {
            let width = precision.bytes_per_vector(dim).max(1);
            let n = (rows.len() / width) as u64;
            let mut w = npyz::WriteOptions::<u8>::new()
                .default_dtype()
                .shape(&[n, width as u64])
                .writer(&mut vectors)
                .begin_nd()?;
            w.extend(rows.iter().copied())?;
            w.finish()?;
        }
    }
    let mut index = Vec::new();
    let mut w = npyz::WriteOptions::<i64>::new().default_dtype().shape(&[texts]).writer(&mut index).begin_nd()?;
    w.extend(offsets.iter().copied())?;
    w.finish()?;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in [("vectors.npy", &vectors), ("offsets.npy", &index)] {
        zip.start_file(name, stored).context("write .npz")?;
        zip.write_all(bytes).context("write .npz")?;
    }
    let bytes = zip.finish().context("write .npz")?.into_inner();
    sink.writer().write_all(&bytes).context("write output")
}
