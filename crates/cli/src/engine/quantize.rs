//! `nornir vector quantize`: the int8 rewrite (nornir-quantize) and what it costs, measured by
//! running the float32 and the int8 model on the built-in sample; the result is a complete model
//! folder, written into a temporary folder and renamed into place only when everything succeeded.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use nornir_vector::quantize::{
    Activations, Granularity, QuantizeOptions, QuantizeReport, WeightType, quantize as rewrite,
};
use nornir_vector::{Device, Embedder};
use sha2::{Digest, Sha256};

use super::enabled::{SAMPLE, model_dir, options};
use crate::QuantizeArgs;

/// Files of the source folder that are not copied: the ONNX graphs (the int8 one replaces them),
/// an earlier quantization's record, and hidden files.
fn is_copied(name: &str) -> bool {
    !(name.starts_with('.')
        || name.ends_with(".onnx")
        || name.ends_with(".onnx_data")
        || name.ends_with(".onnx.data")
        || name == "quantization.json")
}

pub fn quantize(a: &QuantizeArgs) -> Result<()> {
    let source_dir = model_dir(&a.model)?;
    let out = &a.output;
    if out.exists() && !a.force {
        bail!("{} already exists: choose another --output, or pass --force to replace it", out.display());
    }
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        bail!("the folder {} for --output does not exist: create it first", parent.display());
    }
    if out.exists() && same_dir(out, &source_dir) {
        bail!("--output {} is the model folder itself: write the int8 model to another folder", out.display());
    }
    let mut opts = options(&a.model)?;
    opts.device = Device::Cpu;
    let fp32 = Embedder::new(&source_dir, &opts)?;
    let model_file = fp32.model_info().folder.model_file.clone();
    let bytes = std::fs::read(&model_file).with_context(|| format!("cannot read {}", model_file.display()))?;
    let granularity = if a.per_tensor { Granularity::PerTensor } else { Granularity::PerChannel };
    let activations = if a.activations == "per-tensor" { Activations::PerTensor } else { Activations::PerToken };
    let qopts = QuantizeOptions::default()
        .with_granularity(granularity)
        .with_activations(activations)
        .with_weights(match a.weights.as_str() {
            "int8" => WeightType::Int8,
            "uint8" => WeightType::Uint8,
            _ => WeightType::for_this_cpu(),
        })
        .with_keep_fp32(a.keep_fp32.clone());
    let (int8_bytes, report) =
        rewrite(&bytes, &qopts).with_context(|| format!("cannot quantize {}", model_file.display()))?;

    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "int8".to_owned());
    let tmp = parent.join(format!(".{name}.nornir-{}.tmp", std::process::id()));
    let result = (|| -> Result<serde_json::Value> {
        std::fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        copy_folder(&source_dir, &tmp)?;
        std::fs::write(tmp.join("model.onnx"), &int8_bytes)
            .with_context(|| format!("cannot write {}", tmp.join("model.onnx").display()))?;
        let mut int8_opts = opts.clone();
        int8_opts.model_file = None;
        let int8 = Embedder::new(&tmp, &int8_opts).context("the int8 model does not load")?;
        let texts: Vec<&str> = SAMPLE.lines().collect();
        let (a32, a8) = (fp32.embed(&texts)?, int8.embed(&texts)?);
        let cosines: Vec<f32> = a32.rows().zip(a8.rows()).map(|(x, y)| cosine(x, y)).collect();
        let (worst, min) =
            cosines.iter().copied().enumerate().fold((0, f32::INFINITY), |b, (i, c)| if c < b.1 { (i, c) } else { b });
        let mean = cosines.iter().map(|&c| f64::from(c)).sum::<f64>() / cosines.len() as f64;
        let record = record(&model_file, &bytes, &report, &qopts, min, mean, texts[worst]);
        let text = serde_json::to_string_pretty(&record)?;
        std::fs::write(tmp.join("quantization.json"), text + "\n")?;
        Ok(record)
    })();
    let record = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    replace_dir(&tmp, out)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else if !a.quiet {
        let kept = report.kept_fp32.len();
        println!(
            "{}: {} MatMul/Gemm nodes now int8 ({}, {} weights, activations {}, {}), {kept} kept in float32, {} gathers from int8 tables",
            out.display(),
            report.rewritten.len(),
            granularity_name(granularity),
            if qopts.weights == WeightType::Int8 { "int8" } else { "uint8" },
            if activations == Activations::PerToken { "per token" } else { "per tensor" },
            activations.operator(),
            report.int8_gathers.len()
        );
        println!(
            "weights {:.1} MB -> {:.1} MB; cosine to the float32 model on the built-in sample (99 texts): min {:.4}, mean {:.4}",
            report.weight_bytes_before as f64 / 1e6,
            report.weight_bytes_after as f64 / 1e6,
            record["cost"]["cosine_min"].as_f64().unwrap_or(f64::NAN),
            record["cost"]["cosine_mean"].as_f64().unwrap_or(f64::NAN),
        );
    }
    Ok(())
}

fn granularity_name(g: Granularity) -> &'static str {
    match g {
        Granularity::PerTensor => "one scale per weight",
        _ => "one scale per output column",
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = a.iter().map(|x| x * x).sum::<f32>().sqrt() * b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 { dot / norm } else { 0.0 }
}

fn record(
    model_file: &Path,
    bytes: &[u8],
    report: &QuantizeReport,
    qopts: &QuantizeOptions,
    min: f32,
    mean: f64,
    worst: &str,
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
        "weights": qopts.weights,
        "keep_fp32_patterns": qopts.keep_fp32,
        "opset": report.opset,
        "weight_bytes_before": report.weight_bytes_before,
        "weight_bytes_after": report.weight_bytes_after,
        "rewritten": report.rewritten,
        "kept_fp32": report.kept_fp32,
        "int8_gathers": report.int8_gathers,
        "cost": {
            "sample": "built-in sample (testdata/parity-sample.txt, 99 texts)",
            "cosine_min": min,
            "cosine_mean": mean,
            "worst_text": worst,
        },
    })
}

fn same_dir(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// Copies every file of `from` except the ONNX graphs, keeping sub-folders (`1_Pooling/`) and
/// following symbolic links (a Hugging Face cache's snapshot is made of them).
fn copy_folder(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        let (src, dst) = (entry.path(), to.join(&name));
        let kind = std::fs::metadata(&src).with_context(|| format!("cannot read {}", src.display()))?.file_type();
        if kind.is_dir() {
            std::fs::create_dir_all(&dst)?;
            copy_folder(&src, &dst)?;
        } else if kind.is_file() && is_copied(&name.to_string_lossy()) {
            std::fs::copy(&src, &dst).with_context(|| format!("cannot copy {}", src.display()))?;
        }
    }
    Ok(())
}

/// Puts the finished folder `tmp` at `out`, replacing an old one only after the new one is whole.
fn replace_dir(tmp: &Path, out: &Path) -> Result<()> {
    if out.exists() {
        let old = tmp.with_extension("old");
        std::fs::rename(out, &old).with_context(|| format!("cannot move the old {} aside", out.display()))?;
        if let Err(e) = std::fs::rename(tmp, out) {
            let _ = std::fs::rename(&old, out);
            let _ = std::fs::remove_dir_all(tmp);
            return Err(e).with_context(|| format!("cannot rename the new folder to {}", out.display()));
        }
        let _ = std::fs::remove_dir_all(&old);
        return Ok(());
    }
    std::fs::rename(tmp, out)
        .inspect_err(|_| {
            let _ = std::fs::remove_dir_all(tmp);
        })
        .with_context(|| format!("cannot rename the new folder to {}", out.display()))
}
