//! The int8 models the comparisons use, made fresh on each run from the default model: nornir's
//! own (the library's `quantize_folder` with its defaults, as `nornir vector quantize` runs it) and
//! ONNX Runtime's Python `quantize_dynamic` of the same model (`scripts/quantize_python.py`,
//! per-channel), the peer it must beat.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::assets;
use crate::process::{run_checked, workspace_root};

pub fn nornir_int8(home: &Path) -> Result<PathBuf> {
    let out = home.join("models/all-MiniLM-L6-v2-nornir-int8");
    let cpu_ort = home.join(assets::ORT_CPU.dest).join("libonnxruntime.so.1.31.1");
    let embedder = nornir_vector::EmbedderOptions::default().with_ort_library(cpu_ort);
    let options = nornir_vector::QuantizeFolderOptions::default().with_replace(true).with_embedder(embedder);
    let done = nornir_vector::quantize_folder(&home.join(assets::EXPORT_MODEL_DIR), &out, &options)
        .map_err(|e| anyhow::anyhow!(nornir_vector::error_chain(&e)))?;
    eprintln!("xtask: {}: {}", out.display(), done.summary);
    Ok(out)
}

pub fn python_int8(py: &Path, home: &Path) -> Result<PathBuf> {
    let out = home.join("models/all-MiniLM-L6-v2-ort-quantize-dynamic");
    let _ = std::fs::remove_dir_all(&out);
    run_checked(
        Command::new(py)
            .arg(workspace_root().join("scripts/quantize_python.py"))
            .arg(home.join(assets::EXPORT_MODEL_DIR))
            .arg(&out)
            .arg("per-channel"),
    )?;
    Ok(out)
}
