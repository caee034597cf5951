//! The calibration of smoothing: the largest magnitude of each channel the smoothing divides,
//! measured by running nornir-quantize's calibration graph on texts.

use std::path::Path;

use nornir_options::{EmbedderOptions, Pooling};
use nornir_quantize::{CALIBRATION_OUTPUT, QuantizeOptions, calibration_model};

use super::QuantizeFolderError as Error;
use super::files::{at, link_or_copy, read_beside};
use crate::embedder::Embedder;

/// The largest magnitude of each channel of the activations smoothing divides, measured by
/// running the calibration graph (nornir-quantize's `calibration_model`) on `texts` with max
/// pooling, so that padding never counts, cut at the model's `max_length`, in a hidden folder next
/// to the output, removed after.
pub(super) fn calibrate(
    model_file: &Path,
    parent: &Path,
    model: &[u8],
    qopts: &QuantizeOptions,
    opts: &EmbedderOptions,
    (texts, max_length): (&[&str], usize),
) -> Result<std::collections::HashMap<String, Vec<f32>>, Error> {
    let source_dir = model_file.parent().unwrap_or(Path::new("."));
    let calibration = match calibration_model(model, Some(&mut read_beside(model_file)), qopts) {
        Ok(c) => c,
        // No LayerNorm feeds an int8 MatMul: nothing to smooth, nothing to measure.
        Err(nornir_quantize::QuantizeError::NothingToQuantize(_)) => return Ok(Default::default()),
        Err(source) => return Err(Error::Rewrite { file: model_file.to_path_buf(), source }),
    };
    let dir = parent.join(format!(".nornir-calibration-{}.tmp", std::process::id()));
    let result = (|| -> Result<Vec<f32>, Error> {
        std::fs::create_dir(&dir).map_err(at(&dir))?;
        // The tokenizer, the length limit and the prompts, not config.json: its hidden size is not
        // this output's width.
        for name in ["tokenizer.json", "sentence_bert_config.json", "config_sentence_transformers.json"] {
            if source_dir.join(name).is_file() {
                std::fs::copy(source_dir.join(name), dir.join(name)).map_err(at(&source_dir.join(name)))?;
            }
        }
        std::fs::write(dir.join("model.onnx"), &calibration.model).map_err(at(&dir))?;
        // The graph still points at the source's external data: the same files, hard-linked
        // (only those: the source's config.json would describe another output).
        for name in &calibration.data_files {
            let link = dir.join(name);
            if let Some(folder) = link.parent() {
                std::fs::create_dir_all(folder).map_err(at(folder))?;
            }
            link_or_copy(&source_dir.join(name), &link)?;
        }
        let mut o = opts.clone().with_output_name(CALIBRATION_OUTPUT).with_pooling(Pooling::Max);
        o.call.normalize = Some(false);
        // Every channel of the output, whatever --dim asks of the model's vectors; texts cut where
        // the model cuts them (the limit may come from config.json, which is not copied).
        o.model_file = None;
        o.max_length = Some(max_length);
        o.call.dimensions = None;
        let stage = |source| Error::Stage { what: "the calibration graph", source };
        let e = Embedder::new(&dir, &o).map_err(stage)?;
        let rows = e.embed(texts).map_err(stage)?;
        let mut max = vec![0f32; e.dimension()];
        for row in rows.rows() {
            max.iter_mut().zip(row).for_each(|(m, v)| *m = m.max(v.abs()));
        }
        Ok(max)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let max = result?;
    let widths: usize = calibration.activations.iter().map(|(_, w)| w).sum();
    if max.len() != widths {
        return Err(Error::Calibration { channels: max.len(), expected: widths });
    }
    let mut out = std::collections::HashMap::new();
    let mut start = 0;
    for (name, width) in calibration.activations {
        out.insert(name, max[start..start + width].to_vec());
        start += width;
    }
    Ok(out)
}
