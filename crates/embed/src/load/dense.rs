//! The weights of an embedder's `Dense` modules (`2_Dense/model.safetensors`: `linear.weight`
//! `[out, in]`, `linear.bias` `[out]`), read with the `safetensors` crate and checked against
//! each module's config. A folder with only `pytorch_model.bin` is refused: reading PyTorch's
//! format is nornir-convert's, which the embedder does not depend on in every build.

use std::path::Path;

use safetensors::SafeTensors;
use safetensors::tensor::Dtype;

use crate::error::{EmbedError, Result};
use crate::kinds::dense::{Activation, DenseHead, DenseLayer};
use crate::report::values::DenseSpec;

/// Every Dense module of the folder `dir`, in order, with its weights.
pub(crate) fn load_head(dir: &Path, specs: &[DenseSpec]) -> Result<DenseHead> {
    let layers: Result<Vec<_>> =
        specs.iter().map(|s| load_layer(dir, s).map_err(|e| EmbedError::model(dir, e))).collect();
    Ok(DenseHead::new(layers?))
}

fn load_layer(dir: &Path, spec: &DenseSpec) -> std::result::Result<DenseLayer, String> {
    let folder = dir.join(&spec.path);
    let file = folder.join("model.safetensors");
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(if folder.join("pytorch_model.bin").is_file() {
                format!(
                    "{}/ holds only pytorch_model.bin; nornir reads a Dense module from model.safetensors: \
                     `nornir vector convert` writes it (or Python: safetensors.torch.save_file(torch.load(\"pytorch_model.bin\"), \"model.safetensors\"))",
                    spec.path
                )
            } else {
                format!("{}/model.safetensors is missing: the Dense module has no weights", spec.path)
            });
        }
        Err(e) => return Err(format!("cannot read {}/model.safetensors: {e}", spec.path)),
    };
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{}/model.safetensors is not a readable safetensors file ({e})", spec.path))?;
    let tensor = |name: &str, shape: &[usize]| -> std::result::Result<Vec<f32>, String> {
        let t = st.tensor(name).map_err(|_| format!("{}/model.safetensors has no tensor {name:?}", spec.path))?;
        if t.shape() != shape {
            return Err(format!(
                "{}/model.safetensors: {name} has shape {:?}, but config.json says {shape:?} (out_features, in_features)",
                spec.path,
                t.shape()
            ));
        }
        let data = t.data();
        let values: Vec<f32> = match t.dtype() {
            Dtype::F32 => data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            Dtype::F16 => data.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::BF16 => data.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::F64 => data
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
                .collect(),
            other => return Err(format!("{}/model.safetensors: {name} is {other:?}, not a float type", spec.path)),
        };
        if values.iter().any(|v| !v.is_finite()) {
            return Err(format!("{}/model.safetensors: {name} holds a value that is not finite", spec.path));
        }
        Ok(values)
    };
    let (i, o) = (spec.in_features, spec.out_features);
    let weight = tensor("linear.weight", &[o, i])?;
    let bias = if spec.bias { tensor("linear.bias", &[o])? } else { vec![0.0; o] };
    let activation = Activation::from_torch(Some(&spec.activation))?;
    Ok(DenseLayer { in_features: i, out_features: o, weight, bias, activation })
}
