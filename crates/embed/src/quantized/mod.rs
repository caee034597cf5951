//! A model folder made int8 for the CPU and checked (feature `quantize`): nornir-quantize
//! rewrites the graph, then the float32 and the int8 model run the built-in sample as their kind
//! runs, and what int8 costs is recorded in the folder's `quantization.json`. The folder is
//! written under a temporary name and renamed into place only when whole. Every caller gets this
//! one rule: `nornir vector quantize`, Python's `quantize()` and `cargo xtask`.

mod calibrate;
mod check;
mod files;
mod vision;

use std::path::{Path, PathBuf};

use nornir_ep_select::Device;
use nornir_options::EmbedderOptions;
use nornir_quantize::{
    Activations, Fusion, Granularity, QuantizeError, QuantizeOptions, QuantizeReport, Quantized, WeightType,
    quantize_external,
};
use sha2::{Digest, Sha256};

use crate::embedder::Embedder;
use crate::error::EmbedError;
use crate::kinds::compact_calls::SAMPLE_TEXTS;
use files::{at, copy_folder, read_beside, replace_dir};

/// How a folder is quantized and checked.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct QuantizeFolderOptions {
    /// The rewrite: granularity, activations, smoothing, weights, kept nodes, fusions.
    pub rewrite: QuantizeOptions,
    /// Replace an existing output folder (only once the new one is whole) instead of refusing.
    pub replace: bool,
    /// Texts smoothing is calibrated on, with a name for the record; `None`: the built-in sample.
    pub calibration: Option<(Vec<String>, String)>,
    /// How the models are loaded for the check (always on the CPU: int8 is for the CPU).
    pub embedder: EmbedderOptions,
}

impl QuantizeFolderOptions {
    /// The rewrite's options.
    pub fn with_rewrite(mut self, rewrite: QuantizeOptions) -> Self {
        self.rewrite = rewrite;
        self
    }
    /// Replace an existing output folder.
    pub fn with_replace(mut self, replace: bool) -> Self {
        self.replace = replace;
        self
    }
    /// Calibrate smoothing on `texts`, named `source` in the record.
    pub fn with_calibration(mut self, texts: Vec<String>, source: impl Into<String>) -> Self {
        self.calibration = Some((texts, source.into()));
        self
    }
    /// How the models are loaded for the check.
    pub fn with_embedder(mut self, embedder: EmbedderOptions) -> Self {
        self.embedder = embedder;
        self
    }
}

/// What [`quantize_folder`] wrote and measured.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QuantizedFolder {
    /// The folder written.
    pub folder: PathBuf,
    /// What the rewrite did (of the graph written: the unfused one where it replaced the fused).
    pub report: QuantizeReport,
    /// `quantization.json`, as written.
    pub record: serde_json::Value,
    /// One line: what int8 costs against float32 on the sample, by the kind's own output.
    pub summary: String,
    /// Why the fusions were not applied, where the unfused graph was written instead.
    pub fusion_fallback: Option<String>,
    /// Fusions asked for that matched nothing in the graph.
    pub fusions_unmatched: Vec<Fusion>,
}

/// Why a folder was not quantized; nothing is left at the output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuantizeFolderError {
    /// The output exists and the options do not say to replace it; each surface names its way.
    #[error("{} already exists: choose another output folder, or ask to replace it", .path.display())]
    OutputExists {
        /// The output folder.
        path: PathBuf,
    },
    /// The output is the source folder.
    #[error("the output {} is the model folder itself: write the int8 model to another folder", .path.display())]
    OutputIsSource {
        /// The output folder.
        path: PathBuf,
    },
    /// The output's parent folder is missing.
    #[error("the folder {} for the output does not exist: create it first", .path.display())]
    NoOutputParent {
        /// The missing folder.
        path: PathBuf,
    },
    /// Smoothing was to be calibrated on texts that hold none.
    #[error("the calibration texts {source_name} hold no text: give one text per line")]
    NoCalibrationTexts {
        /// Their name (a file).
        source_name: String,
    },
    /// nornir-quantize refused or failed.
    #[error("cannot quantize {}", .file.display())]
    Rewrite {
        /// The graph.
        file: PathBuf,
        /// Why.
        source: QuantizeError,
    },
    /// The calibration graph's output is not the width of the activations it measures.
    #[error(
        "the calibration graph gave {channels} channels where {expected} were expected: quantize without smoothing"
    )]
    Calibration {
        /// Its channels.
        channels: usize,
        /// The activations' widths, summed.
        expected: usize,
    },
    /// A model (the float32 one, the int8 one, the calibration graph) did not load or run.
    #[error("{what}")]
    Stage {
        /// Which.
        what: &'static str,
        /// Why.
        source: EmbedError,
    },
    /// Reading or writing a file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

type Error = QuantizeFolderError;

/// The least similarity (check.rs's `similarity`: cosine of vectors, of sparse or token vectors,
/// or the Pearson correlation of a cross-encoder's scores) between a fused graph's output and the
/// unfused graph's on the sample. The fusions only reorder float arithmetic, which moves a few
/// int8 roundings: min cosine 0.9997 on the default model over 64 corpus texts, 0.9980 on the
/// sample without smoothing. A fusion that computes something else falls below it (an attention
/// scale 10% off: 0.994).
pub const FUSED_INT8_MIN_SIMILARITY: f32 = 0.995;

/// The external data file of an int8 graph whose weights pass what one `.onnx` file holds.
const DATA_FILE: &str = "model.onnx_data";

/// What the rewrite writes into the folder: `model.onnx` and, where its weights are too large for
/// one file, [`DATA_FILE`] (empty: none).
struct Int8Files {
    model: Vec<u8>,
    data: Vec<u8>,
}

impl From<Quantized> for Int8Files {
    fn from(q: Quantized) -> Self {
        Int8Files { model: q.model, data: q.data }
    }
}

/// Quantizes the model folder `source` into `output` for the CPU, as the module says.
pub fn quantize_folder(
    source: &Path,
    output: &Path,
    options: &QuantizeFolderOptions,
) -> Result<QuantizedFolder, QuantizeFolderError> {
    let parent = output_parent(source, output, options.replace)?;
    let opts = options.embedder.clone().with_device(Device::Cpu);
    let stage = |what| move |source| Error::Stage { what, source };
    let fp32 = Embedder::new(source, &opts).map_err(stage("the float32 model"))?;
    let model_file = fp32.model_info().folder.model_file.clone();
    // A dual encoder's text graph keeps its name, which puts the vision graph beside it.
    let (graph, data_file) = match fp32.takes_images() {
        true => ("text_model.onnx", "text_model.onnx_data"),
        false => ("model.onnx", DATA_FILE),
    };
    let bytes = std::fs::read(&model_file).map_err(at(&model_file))?;
    let (calibration_texts, mut calibration_name) = match &options.calibration {
        Some((texts, name)) => (texts.iter().map(String::as_str).collect::<Vec<_>>(), name.clone()),
        None => (SAMPLE_TEXTS.lines().collect(), "built-in sample (99 texts)".to_owned()),
    };
    let mut qopts = options.rewrite.clone();
    if fp32.takes_images() {
        // SigLIP's text graph pads every text inside itself, so its activations are not one row
        // per token given; each channel is estimated from its norm's weights instead.
        calibration_name = "none: a dual encoder's smoothing estimates each channel from its norm's weights".to_owned();
    } else if qopts.smoothing.is_some() && qopts.activations == Activations::PerToken {
        let lines: Vec<&str> = calibration_texts.into_iter().filter(|l| !l.trim().is_empty()).collect();
        if lines.is_empty() {
            return Err(Error::NoCalibrationTexts { source_name: calibration_name });
        }
        let max_length = fp32.model_info().max_length;
        let channel_max = calibrate::calibrate(&model_file, &parent, &bytes, &qopts, &opts, (&lines, max_length))?;
        qopts = qopts.with_channel_max(channel_max);
    }
    let rewrite = |qopts: &QuantizeOptions| -> Result<(Int8Files, QuantizeReport), Error> {
        let (files, report) = quantize_external(&bytes, &mut read_beside(&model_file), data_file, qopts)
            .map_err(|source| Error::Rewrite { file: model_file.clone(), source })?;
        Ok((files.into(), report))
    };
    let fused = rewrite(&qopts)?;
    let name = output.file_name().map_or_else(|| "int8".to_owned(), |n| n.to_string_lossy().into_owned());
    let tmp = parent.join(format!(".{name}.nornir-{}.tmp", std::process::id()));
    let mut int8_opts = opts.clone();
    int8_opts.model_file = None;
    let sample = check::Sample::new(SAMPLE_TEXTS.lines().collect());
    let kind = fp32.model_info().folder.kind.kind;
    let result = (|| -> Result<QuantizedFolder, Error> {
        std::fs::create_dir(&tmp).map_err(at(&tmp))?;
        copy_folder(source, &tmp)?;
        let a32 = check::run(&fp32, &sample).map_err(stage("the float32 model"))?;
        let unfused = || rewrite(&qopts.clone().with_fusions(Vec::new()));
        let (report, a8, fallback) = checked_fusions(&tmp, [graph, data_file], &int8_opts, &sample, fused, unfused)?;
        let vision = vision::quantize_vision(&fp32, &tmp, &int8_opts, &qopts)?;
        let (cost, mut summary) = check::cost(&a32, &a8, &sample, kind);
        if let Some(v) = &vision {
            summary = format!("{summary}\n{}", vision::summary(v));
        }
        let unmatched: Vec<Fusion> =
            qopts.fusions.iter().copied().filter(|f| !report.fused.iter().any(|done| done.fusion == *f)).collect();
        let mut record = record(&model_file, &bytes, &report, &qopts, &calibration_name, cost);
        record["fusion_fallback"] = fallback.clone().into();
        record["fusions_unmatched"] = unmatched.iter().map(|f| f.name()).collect::<Vec<_>>().into();
        record["summary"] = summary.clone().into();
        if let Some(vision) = vision {
            record["vision"] = vision;
        }
        let text = serde_json::to_string_pretty(&record).map_err(std::io::Error::other)? + "\n";
        let file = tmp.join("quantization.json");
        std::fs::write(&file, text).map_err(at(&file))?;
        let folder = output.to_path_buf();
        Ok(QuantizedFolder { folder, report, record, summary, fusion_fallback: fallback, fusions_unmatched: unmatched })
    })();
    match result {
        Ok(done) => {
            replace_dir(&tmp, output)?;
            Ok(done)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

/// The folder the output goes in, after the output's own refusals.
fn output_parent(source: &Path, output: &Path, replace: bool) -> Result<PathBuf, Error> {
    if output.exists() && !replace {
        return Err(Error::OutputExists { path: output.to_path_buf() });
    }
    let parent = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(Error::NoOutputParent { path: parent });
    }
    if output.exists() && nornir_gpu_probe::same_file(output, source) {
        return Err(Error::OutputIsSource { path: output.to_path_buf() });
    }
    Ok(parent)
}

/// Writes `fused` into `dir` (as `graph`, its weights in `data_file` where large) and runs the
/// sample with it, as its kind runs. Where fusions were
/// applied, the unfused graph (`unfused()`) runs too: if the fused one does not load or run, or
/// its output is not the unfused one's, the unfused graph is written instead and the reason
/// returned.
fn checked_fusions(
    dir: &Path,
    [graph, data_file]: [&str; 2],
    opts: &EmbedderOptions,
    sample: &check::Sample<'_>,
    (fused, report): (Int8Files, QuantizeReport),
    unfused: impl FnOnce() -> Result<(Int8Files, QuantizeReport), Error>,
) -> Result<(QuantizeReport, check::Outputs, Option<String>), Error> {
    let (file, data_file) = (dir.join(graph), dir.join(data_file));
    let write = |files: &Int8Files| -> Result<(), Error> {
        std::fs::write(&file, &files.model).map_err(at(&file))?;
        if files.data.is_empty() {
            let _ = std::fs::remove_file(&data_file);
            return Ok(());
        }
        Ok(std::fs::write(&data_file, &files.data).map_err(at(&data_file))?)
    };
    let stage = |source| Error::Stage { what: "the int8 model", source };
    let embed = |files: &Int8Files| -> Result<check::Outputs, Error> {
        write(files)?;
        let e = Embedder::new(dir, opts).map_err(stage)?;
        check::run(&e, sample).map_err(stage)
    };
    let tried = embed(&fused);
    if report.fused.is_empty() {
        return Ok((report, tried?, None));
    }
    let (plain_files, plain_report) = unfused()?;
    let plain = embed(&plain_files)?;
    let why = match tried {
        Ok(rows) => {
            let min = check::similarity(&rows, &plain);
            if min >= FUSED_INT8_MIN_SIMILARITY {
                write(&fused)?;
                return Ok((report, rows, None));
            }
            format!("the fused graph's output differs from the unfused graph's (min similarity {min:.4} on the sample)")
        }
        Err(e) => format!("the fused graph does not run: {}", crate::error_chain(&e)),
    };
    tracing::warn!("{why}; writing the graph without fusions");
    Ok((plain_report, plain, Some(why)))
}

/// quantization.json: the source, the rewrite's options and report, and the cost.
fn record(
    model_file: &Path,
    bytes: &[u8],
    report: &QuantizeReport,
    qopts: &QuantizeOptions,
    calibration: &str,
    cost: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "format": "nornir int8",
        "target": "cpu",
        "nornir_version": env!("CARGO_PKG_VERSION"),
        "source": {
            "model_file": model_file,
            "sha256": format!("{:x}", Sha256::digest(bytes)),
        },
        "operator": qopts.activations.operator(),
        "activations": qopts.activations,
        "activations_scheme": qopts.activations.describe(),
        "granularity": qopts.granularity,
        "weights": qopts.weights.resolved(),
        "smoothing_alpha": qopts.smoothing,
        "smoothing_calibrated_on": if qopts.channel_max.is_empty() { serde_json::Value::Null } else { calibration.into() },
        "keep_fp32_patterns": qopts.keep_fp32,
        "opset": report.opset,
        "weight_bytes_before": report.weight_bytes_before,
        "weight_bytes_after": report.weight_bytes_after,
        "rewritten": report.rewritten,
        "kept_fp32": report.kept_fp32,
        "int8_gathers": report.int8_gathers,
        "fused": report.fused,
        "nodes": { "before": report.nodes_before, "after": report.nodes_after },
        "cost": cost,
    })
}

/// How the weights' scales are described in a summary.
pub fn granularity_name(g: Granularity) -> &'static str {
    match g {
        Granularity::PerTensor => "one scale per weight",
        _ => "one scale per output column",
    }
}

/// The weights' type as a summary names it.
pub fn weight_type_name(w: WeightType) -> &'static str {
    if w.resolved() == WeightType::Int8 { "int8" } else { "uint8" }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback on the real default model: the fused graph is kept when it matches the unfused
    /// one; a graph that does not load (stands in for an operator this ONNX Runtime lacks) or
    /// whose vectors differ (here the per-tensor graph, standing in for a wrong fusion) is
    /// replaced by the unfused graph, on disk too, with the reason.
    #[test]
    #[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
    fn a_fused_graph_that_fails_or_differs_is_written_unfused_with_the_reason() {
        nornir_test_support::needs_assets!();
        let model = nornir_test_support::env_path("NORNIR_TEST_MODEL");
        let bytes = std::fs::read(model.join("model.onnx")).expect("model.onnx");
        let qopts = QuantizeOptions::default().with_smoothing(None).with_weights(WeightType::Int8);
        let rewrite = |qopts: &QuantizeOptions| nornir_quantize::quantize(&bytes, qopts);
        let (fused, report) = rewrite(&qopts).expect("quantize");
        let (plain, _) = rewrite(&qopts.clone().with_fusions(Vec::new())).expect("quantize unfused");
        let (per_tensor, _) =
            rewrite(&qopts.clone().with_activations(Activations::PerTensor)).expect("quantize per tensor");
        assert!(!report.fused.is_empty());
        let dir = tempfile::tempdir().expect("tempdir");
        files::copy_folder(&model, dir.path()).expect("copy the model folder");
        let mut opts = EmbedderOptions::default();
        opts.device = Device::Cpu;
        let sample = check::Sample::new(SAMPLE_TEXTS.lines().collect());
        let on_disk = || std::fs::read(dir.path().join("model.onnx")).expect("model.onnx written");
        let check = |candidate: &[u8]| {
            let files = |model: Vec<u8>| Int8Files { model, data: Vec::new() };
            checked_fusions(
                dir.path(),
                ["model.onnx", DATA_FILE],
                &opts,
                &sample,
                (files(candidate.to_vec()), report.clone()),
                || {
                    let (m, r) = rewrite(&qopts.clone().with_fusions(Vec::new())).expect("unfused");
                    Ok((files(m), r))
                },
            )
            .expect("checked")
        };

        let (kept, rows, why) = check(&fused);
        assert!(why.is_none(), "{why:?}");
        let check::Outputs::Dense(rows) = rows else { panic!("an embedder's rows") };
        assert_eq!((kept.fused.len(), rows.len()), (report.fused.len(), sample.texts.len()));
        assert!(on_disk() == fused, "the fused graph is the one written");

        for (candidate, reason) in [(b"not an ONNX model".to_vec(), "does not run"), (per_tensor, "differ")] {
            let (kept, _, why) = check(&candidate);
            let why = why.expect("a reason");
            assert!(why.contains(reason), "{why}");
            assert!(kept.fused.is_empty(), "the unfused graph's report");
            assert!(on_disk() == plain, "the unfused graph is the one written ({why})");
        }
    }
}
