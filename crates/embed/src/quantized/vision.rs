//! A dual encoder's vision graph (CLIP, SigLIP) made int8 beside its text graph, and what that
//! costs measured on images: the float32 and the int8 folder embed a built-in set of synthetic
//! images (smooth gradients, stripes, checkerboards and noise at several sizes, so every resize
//! path runs), compared by cosine.

use std::path::Path;

use nornir_quantize::{QuantizeOptions, QuantizeReport, quantize_external};
use serde_json::{Value, json};

use super::files::{at, read_beside};
use super::{Error, QuantizeFolderError};
use crate::embedder::Embedder;
use crate::kinds::image::ImageInput;
use nornir_options::EmbedderOptions;

/// The vision graph's file in a dual encoder's folder, and its external data.
const VISION_MODEL: &str = "vision_model.onnx";
const VISION_DATA: &str = "vision_model.onnx_data";

/// Writes the int8 vision graph of `fp32`'s folder into `dir` (beside the int8 text graph) with
/// the text graph's rewrite options, then compares the two folders on the synthetic images; what
/// quantization.json records under "vision". `None` for a text-only model.
pub(super) fn quantize_vision(
    fp32: &Embedder,
    dir: &Path,
    int8_options: &EmbedderOptions,
    qopts: &QuantizeOptions,
) -> Result<Option<Value>, Error> {
    let Some(file) = fp32.model_info().folder.vision_file.clone() else { return Ok(None) };
    let bytes = std::fs::read(&file).map_err(at(&file))?;
    // Smoothing's measured channel maxima are the text graph's; the vision graph's norms estimate
    // their own.
    let options = qopts.clone().with_channel_max(Default::default());
    let (files, report) = quantize_external(&bytes, &mut read_beside(&file), VISION_DATA, &options)
        .map_err(|source| Error::Rewrite { file: file.clone(), source })?;
    let graph = dir.join(VISION_MODEL);
    std::fs::write(&graph, &files.model).map_err(at(&graph))?;
    if !files.data.is_empty() {
        let data = dir.join(VISION_DATA);
        std::fs::write(&data, &files.data).map_err(at(&data))?;
    }
    let stage = |what| move |source| QuantizeFolderError::Stage { what, source };
    let int8 = Embedder::new(dir, int8_options).map_err(stage("the int8 model"))?;
    let images = synthetic_images();
    let a = fp32.embed_images(&images).map_err(stage("the float32 vision graph"))?;
    let b = int8.embed_images(&images).map_err(stage("the int8 vision graph"))?;
    let cosines: Vec<f64> = a.rows().zip(b.rows()).map(|(x, y)| cosine(x, y)).collect();
    let min = cosines.iter().copied().fold(1.0, f64::min);
    let mean = cosines.iter().sum::<f64>() / cosines.len().max(1) as f64;
    Ok(Some(json!({
        "graph": VISION_MODEL,
        "rewritten": report.rewritten.len(),
        "weight_bytes": [report.weight_bytes_before, report.weight_bytes_after],
        "images": format!("{} synthetic images (gradients, stripes, checkerboards, noise; 7x5 to 640x480)", images.len()),
        "cosine_min": min,
        "cosine_mean": mean,
        "nodes": nodes(&report),
    })))
}

/// The vision graph's line of the summary.
pub(super) fn summary(v: &Value) -> String {
    format!(
        "vision graph: {} MatMul/Gemm nodes int8; cosine to the float32 graph on {}: min {:.4}, mean {:.4}",
        v["rewritten"],
        v["images"].as_str().unwrap_or_default(),
        v["cosine_min"].as_f64().unwrap_or_default(),
        v["cosine_mean"].as_f64().unwrap_or_default()
    )
}

fn nodes(report: &QuantizeReport) -> [usize; 2] {
    [report.nodes_before, report.nodes_after]
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}

/// Sixteen RGB images, the same on every run: four patterns at four sizes.
fn synthetic_images() -> Vec<ImageInput> {
    let sizes = [(7, 5), (97, 41), (224, 224), (640, 480)];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut noise = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 56) as u8
    };
    let mut images = Vec::new();
    for (w, h) in sizes {
        for pattern in 0..4u32 {
            let mut pixels = Vec::with_capacity((w * h * 3) as usize);
            for y in 0..h {
                for x in 0..w {
                    let (fx, fy) = (x * 255 / w.max(2), y * 255 / h.max(2));
                    let rgb = match pattern {
                        0 => [fx, fy, 255 - fx],
                        1 => [if (x / 4) % 2 == 0 { 230 } else { 20 }, fy, 128],
                        2 => [if ((x / 8) + (y / 8)) % 2 == 0 { 240 } else { 10 }; 3],
                        _ => [u32::from(noise()), u32::from(noise()), u32::from(noise())],
                    };
                    pixels.extend(rgb.map(|c| c as u8));
                }
            }
            images.push(ImageInput::rgb8(w, h, pixels));
        }
    }
    images
}
