//! The check after `nornir vector convert` writes an encoder: nornir loads the folder and embeds
//! the built-in sample; a fused graph is compared with the plain one, and replaced by it where
//! it does not run or computes something else.

use std::path::Path;

use anyhow::{Context, Result};
use nornir_vector::convert::{Conversion, ConvertOptions, convert as write_folder};
use nornir_vector::{Device, Embedder, EmbedderOptions, Embeddings};

use super::Checked;
use super::quantize::cosine;
use nornir_vector::SAMPLE_TEXTS;

/// The fused graph only reorders float arithmetic (measured: min cosine 1.0000 on the sample for
/// all-MiniLM-L6-v2); anything under this computes something else.
const FUSED_MIN_COSINE: f32 = 0.9999;

fn embed(dir: &Path) -> Result<Embeddings> {
    let e = Embedder::new(dir, &EmbedderOptions::default().with_device(Device::Cpu))
        .with_context(|| format!("nornir cannot load the converted folder {}", dir.display()))?;
    let texts: Vec<&str> = SAMPLE_TEXTS.lines().collect();
    Ok(e.embed(&texts)?)
}

/// The line for a folder nornir cannot embed with for a reason outside the graph (a module it
/// does not apply, a tokenizer that does not fit): the conversion stands, unchecked.
fn not_checked(e: &anyhow::Error) -> Checked {
    Checked { summary: format!("not checked: {e:#}"), replaced_by: None }
}

pub fn check_converted(source: &Path, out: &Path, conversion: &Conversion) -> Result<Checked> {
    if !out.join("tokenizer.json").is_file() {
        return Ok(Checked {
            summary: "not checked: the folder has no tokenizer.json, so nornir cannot embed with it; add the model's tokenizer.json".to_owned(),
            replaced_by: None,
        });
    }
    let tried = embed(out);
    if !conversion.fused {
        return Ok(match tried {
            Ok(rows) => Checked {
                summary: format!(
                    "checked: nornir embeds the built-in sample (99 texts) with it, {} dimensions",
                    rows.dim()
                ),
                replaced_by: None,
            },
            Err(e) => not_checked(&e),
        });
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let plain_dir = parent.join(format!(".nornir-convert-plain-{}", std::process::id()));
    let plain_options = ConvertOptions::default().with_fused(false).with_replace(true);
    let compared =
        write_folder(source, &plain_dir, &plain_options).map_err(anyhow::Error::from).and_then(|_| embed(&plain_dir));
    let _ = std::fs::remove_dir_all(&plain_dir);
    let plain = match compared {
        Ok(plain) => plain,
        Err(e) => {
            return match tried {
                // Neither graph embeds: the folder, not the fusions, is what nornir cannot run.
                Err(in_output) => Ok(not_checked(&in_output)),
                Ok(_) => Err(e.context("the plain graph, which the fused one is checked against")),
            };
        }
    };
    let why = match tried {
        Ok(rows) => {
            let min = rows.rows().zip(plain.rows()).map(|(x, y)| cosine(x, y)).fold(f32::INFINITY, f32::min);
            if min >= FUSED_MIN_COSINE {
                return Ok(Checked {
                    summary: format!(
                        "checked: nornir embeds the built-in sample (99 texts) with it, {} dimensions; the fused graph's vectors against the plain graph's: min cosine {min:.6}",
                        rows.dim()
                    ),
                    replaced_by: None,
                });
            }
            format!("the fused graph's vectors differ from the plain graph's (min cosine {min:.6} on the sample)")
        }
        Err(e) => format!("the fused graph does not run: {e:#}"),
    };
    tracing::warn!("{why}; writing the plain graph");
    let replaced = write_folder(source, out, &plain_options)?;
    Ok(Checked { summary: format!("fusions not applied: {why}; wrote the plain graph"), replaced_by: Some(replaced) })
}
