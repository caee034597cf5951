//! `embed --precision`: compact vectors as .npy (int8 or uint8; a value per dimension, or a byte
//! per 8 dimensions for the binary kinds) or JSON lines of integers, and the ranges int8 and
//! uint8 use, saved beside the output or read from an earlier run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use nornir_vector::{CallOptions, Embedder, Ranges};

use super::EmbedJob;
use super::source::{Source, input_error, next_chunk, progress, show_progress};
use super::summary::RunSummary;
use crate::output::{JsonLine, OutputFormat, Sink, Values};

/// Where a run's ranges go: `OUTPUT.ranges.json` beside `OUTPUT`.
pub fn ranges_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".ranges.json");
    output.with_file_name(name)
}

/// The ranges of the run: read from `--ranges`, else calibrated on `--calibrate`'s texts, else
/// the library's rule (the embedder's ranges, else calibrated on the built-in sample, as every
/// surface does), and where to save them.
fn ranges(job: &EmbedJob, embedder: &Embedder, call: &CallOptions) -> Result<(Ranges, Option<PathBuf>)> {
    if let Some(file) = &job.compact.ranges {
        return Ok((Ranges::read(file)?, None));
    }
    let out = job.output.as_ref().context(
        "int8 and uint8 ranges are saved beside --output FILE (queries and documents must share them): give --output, or --ranges FILE from an earlier run",
    )?;
    let ranges: Ranges = match &job.compact.calibrate {
        Some(file) => {
            let text =
                std::fs::read_to_string(file).with_context(|| format!("cannot read --calibrate {}", file.display()))?;
            let texts: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            embedder.calibrate(&texts, call, &file.display().to_string())?
        }
        None => (*embedder.ranges_for(call)?).clone(),
    };
    Ok((ranges, Some(ranges_path(out))))
}

pub(super) fn embed_compact(
    job: &EmbedJob,
    embedder: &Embedder,
    call: CallOptions,
    mut source: Source,
    size: Option<u64>,
    mut sink: Sink,
) -> Result<()> {
    let precision = job.compact.precision;
    if job.format == OutputFormat::F32 {
        bail!("--format f32 writes float32 rows; {precision} vectors are written with --format npy or jsonl");
    }
    if !precision.needs_ranges() && (job.compact.ranges.is_some() || job.compact.calibrate.is_some()) {
        bail!("--ranges and --calibrate are for --precision int8 or uint8, not {precision}");
    }
    let mut call = call.with_precision(precision);
    let (mut saved, mut source_of_ranges, mut ranges_file) = (None, None, job.compact.ranges.clone());
    if precision.needs_ranges() {
        let (ranges, save_to) = ranges(job, embedder, &call)?;
        source_of_ranges = Some(ranges.source().to_owned());
        ranges_file = ranges_file.or(save_to.clone());
        saved = save_to.map(|p| (p, ranges.clone()));
        call = call.with_ranges(Arc::new(ranges));
    }
    let bar = progress(!job.quiet && job.texts.is_empty(), size);
    let mut run = RunSummary::start(true);
    let mut npy = Vec::new();
    let mut width = precision.bytes_per_vector(call.dimensions.unwrap_or(embedder.dimension()));
    loop {
        let chunk = next_chunk(&mut source)?;
        if chunk.is_empty() {
            break;
        }
        let texts: Vec<&str> = chunk.iter().map(|r| r.text.as_str()).collect();
        let v = embedder.embed_compact(&texts, &call).map_err(|e| input_error(e, run.texts()))?;
        width = v.bytes_per_vector();
        for (i, rec) in chunk.iter().enumerate() {
            match job.format {
                OutputFormat::Npy => npy.extend_from_slice(v.row(i)),
                _ => {
                    let embedding = Some(Values::Integers(v.row_values(i)));
                    JsonLine { id: rec.id.as_ref(), embedding, ..JsonLine::default() }.write(sink.writer())?;
                }
            }
        }
        run.add(chunk.len(), v.usage());
        show_progress(&bar, &source, run.texts(), run.started());
    }
    bar.finish_and_clear();
    if job.format == OutputFormat::Npy {
        write_npy(sink.writer(), &npy, width, precision.is_signed())?;
    }
    // The ranges first, so that the output never appears without them.
    if let Some((path, ranges)) = saved {
        let mut file = Sink::open(Some(&path))?;
        serde_json::to_writer(file.writer(), &ranges)?;
        file.finish()?;
    }
    sink.finish()?;
    run.with("precision", precision.label())
        .with("bytes_per_vector", width)
        .with("ranges", source_of_ranges)
        .with("ranges_file", ranges_file.map(|p| p.display().to_string()))
        .report(job, embedder);
    Ok(())
}

/// `.npy` of `bytes`, `width` to a row, as int8 (`signed`) or uint8.
fn write_npy(w: &mut dyn Write, bytes: &[u8], width: usize, signed: bool) -> Result<()> {
    use npyz::WriterBuilder;
    let shape = [bytes.len().checked_div(width).unwrap_or(0) as u64, width as u64];
    if signed {
        let mut npy = npyz::WriteOptions::<i8>::new().default_dtype().shape(&shape).writer(w).begin_nd()?;
        npy.extend(bytes.iter().map(|&b| b as i8)).context("write .npy data")?;
        npy.finish().context("finish .npy")?;
    } else {
        let mut npy = npyz::WriteOptions::<u8>::new().default_dtype().shape(&shape).writer(w).begin_nd()?;
        npy.extend(bytes.iter().copied()).context("write .npy data")?;
        npy.finish().context("finish .npy")?;
    }
    Ok(())
}
