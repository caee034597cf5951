//! `nornir vector quantize`: the library's `quantize_folder` (the int8 rewrite, checked by
//! running the float32 and the int8 model on the built-in sample as their kind runs), with this
//! command's flags and its summary.

use anyhow::{Context, Result};
use nornir_vector::quantize::{Granularity, QuantizeOptions};
use nornir_vector::{QuantizeFolderError, QuantizeFolderOptions, QuantizedFolder, quantize_folder};

use super::load::{model_dir, options};
use crate::args::QuantizeArgs;
use nornir_vector::diagnostics::fusion_counts;

pub fn quantize(a: &QuantizeArgs) -> Result<()> {
    let source = model_dir(&a.model)?;
    let granularity = if a.per_tensor { Granularity::PerTensor } else { Granularity::PerChannel };
    let rewrite = QuantizeOptions::default()
        .with_granularity(granularity)
        .with_activations(a.activations)
        .with_smoothing(a.smoothing.0)
        .with_weights(a.weights)
        .with_keep_fp32(a.keep_fp32.clone())
        .with_fusions(a.fuse.0.clone())
        .with_external_data(a.external_data);
    let mut folder_options =
        QuantizeFolderOptions::default().with_rewrite(rewrite).with_replace(a.force).with_embedder(options(&a.model)?);
    if let Some(file) = &a.calibrate {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("cannot read --calibrate {}", file.display()))?;
        folder_options =
            folder_options.with_calibration(text.lines().map(str::to_owned).collect(), file.display().to_string());
    }
    let done = quantize_folder(&source, &a.output, &folder_options).map_err(in_our_words)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&done.record)?);
    } else if !a.quiet {
        print_summary(&done, &folder_options.rewrite);
    }
    Ok(())
}

/// The library's refusals that leave the what-to-do to the surface, said with this command's flags.
fn in_our_words(e: QuantizeFolderError) -> anyhow::Error {
    match e {
        QuantizeFolderError::OutputExists { path } => {
            anyhow::anyhow!("{} already exists: choose another --output, or pass --force to replace it", path.display())
        }
        QuantizeFolderError::NoCalibrationTexts { source_name } => {
            anyhow::anyhow!("--calibrate {source_name}: the file has no texts; give one text per line")
        }
        QuantizeFolderError::Calibration { channels, expected } => anyhow::anyhow!(
            "the calibration graph gave {channels} channels where {expected} were expected; run with --smoothing off"
        ),
        other => anyhow::Error::new(other),
    }
}

/// The lines `nornir vector quantize` prints without `--json`: what was rewritten, the weights'
/// size, the cost on the sample, and the fusions.
fn print_summary(done: &QuantizedFolder, qopts: &QuantizeOptions) {
    let report = &done.report;
    let activations = qopts.activations;
    println!(
        "{}: {} MatMul/Gemm nodes now int8 ({}, {} weights, activations {}, {}), {} kept in float32, {} gathers from int8 tables",
        done.folder.display(),
        report.rewritten.len(),
        nornir_vector::granularity_name(qopts.granularity),
        nornir_vector::weight_type_name(qopts.weights),
        if activations == nornir_vector::quantize::Activations::PerToken { "per token" } else { "per tensor" },
        activations.operator(),
        report.kept_fp32.len(),
        report.int8_gathers.len()
    );
    println!(
        "weights {:.1} MB -> {:.1} MB; {}",
        report.weight_bytes_before as f64 / 1e6,
        report.weight_bytes_after as f64 / 1e6,
        done.summary,
    );
    match &done.fusion_fallback {
        Some(why) => println!("fusions not applied: {why}"),
        None if !report.fused.is_empty() => println!(
            "fused, each now one ONNX Runtime operator: {}; {} nodes (the source graph has {})",
            fusion_counts(report.fused.iter().map(|f| f.fusion.name())),
            report.nodes_after,
            report.nodes_before
        ),
        None => {}
    }
    if !done.fusions_unmatched.is_empty() {
        let names: Vec<&str> = done.fusions_unmatched.iter().map(|f| f.name()).collect();
        // The default (gelu,attention) finds nothing in a graph `convert` wrote: it is fused already.
        let converted = if names.iter().all(|n| ["gelu", "attention"].contains(n)) {
            " (a graph nornir converted has them fused already)"
        } else {
            ""
        };
        println!("--fuse {}: matched nothing in this graph{converted}, so nothing was fused for it", names.join(","));
    }
}
