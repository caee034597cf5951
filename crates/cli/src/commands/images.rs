//! `nornir vector embed --images LIST`: a dual encoder's (CLIP, SigLIP) image vectors, row i for
//! line i of LIST (a path per line), in the text vectors' space and output formats.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use nornir_vector::{CallOptions, Embedder, ImageInput};

use super::EmbedJob;
use super::source::progress;
use crate::output::{RowWriter, Sink};

/// Images embedded per call: bounds memory whatever the list's length.
const IMAGES_PER_CALL: usize = 64;

pub(super) fn embed_images(job: &EmbedJob, list: &Path, embedder: &Embedder, sink: Sink) -> Result<()> {
    if job.compact.compacts()
        || job.sparse.any()
        || job.multi_vector.any()
        || matches!(job.long, nornir_vector::LongInputs::Chunk(_))
    {
        bail!("--images makes dense float vectors: leave out --precision, --tokens, --query, --outputs and --long");
    }
    let paths = read_list(list)?;
    let options = CallOptions::default();
    let mut writer = RowWriter::new(job.format, sink);
    let bar = progress(!job.quiet, Some(paths.len() as u64));
    let started = std::time::Instant::now();
    for (part, chunk) in paths.chunks(IMAGES_PER_CALL).enumerate() {
        let images: Vec<ImageInput> = chunk.iter().map(ImageInput::path).collect();
        let rows = embedder.embed_images_with(&images, &options).map_err(|e| match e {
            nornir_vector::EmbedError::BadImage { index, reason, .. } => anyhow::anyhow!(
                "--images {} line {} ({}): {reason}",
                list.display(),
                part * IMAGES_PER_CALL + index + 1,
                chunk[index].display()
            ),
            e => e.into(),
        })?;
        for (row, path) in rows.rows().zip(chunk) {
            let id = serde_json::Value::String(path.display().to_string());
            writer.write_row(row, Some(&id))?;
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    writer.finish(embedder.dimension())?;
    let seconds = started.elapsed().as_secs_f64();
    let rate = paths.len() as f64 / seconds.max(1e-9);
    let provider = &embedder.report().active_provider;
    if job.json {
        let summary = serde_json::json!({"images": paths.len(), "seconds": seconds, "images_per_second": rate, "provider": provider});
        eprintln!("{summary}");
    } else if !job.quiet {
        eprintln!("nornir: {} images in {seconds:.2} s ({rate:.1} images/s) on {provider}", paths.len());
    }
    Ok(())
}

/// The image paths of `list` ('-': standard input), one a line; an empty line is refused, as
/// row i must be line i.
fn read_list(list: &Path) -> Result<Vec<PathBuf>> {
    let text = if list.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read --images from standard input")?
    } else {
        std::fs::read_to_string(list).with_context(|| format!("cannot read --images {}", list.display()))?
    };
    let mut paths = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            bail!("--images {} line {} is empty: give one image path a line", list.display(), i + 1);
        }
        paths.push(PathBuf::from(line));
    }
    if paths.is_empty() {
        bail!("--images {} lists no image: give one image path a line", list.display());
    }
    Ok(paths)
}
