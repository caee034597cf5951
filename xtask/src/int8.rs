//! The int8 models the comparisons use, made fresh on each run from the default model: nornir's
//! own (`nornir vector quantize`, its defaults) and ONNX Runtime's Python `quantize_dynamic` of the
//! same model (`scripts/quantize_python.py`, per-channel), the peer it must beat.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::assets;
use crate::process::{run_checked, workspace_root};

pub fn nornir_int8(nornir: &Path, home: &Path) -> Result<PathBuf> {
    let out = home.join("models/all-MiniLM-L6-v2-nornir-int8");
    run_checked(
        Command::new(nornir)
            .args(["vector", "quantize", "--quiet", "--force", "--device", "cpu", "--model"])
            .arg(home.join(assets::EXPORT_MODEL_DIR))
            .arg("--output")
            .arg(&out),
    )?;
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
