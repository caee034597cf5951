//! The weights of an embedder's `Dense` modules (`2_Dense/model.safetensors`: `linear.weight`
//! `[out, in]`, `linear.bias` `[out]`), read with the `safetensors` crate and checked against
//! each module's config. A folder with only `pytorch_model.bin` is refused: reading PyTorch's
//! format is nornir-convert's, which the embedder does not depend on in every build.

use std::path::Path;

use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};

use crate::error::{EmbedError, Result};
use crate::load::checks::{MAX_WIDTH, count_in};
use crate::math::dense::{Activation, DenseHead, DenseLayer};
use crate::values::DenseSpec;

/// Every Dense module of the folder `dir`, in order, with its weights.
pub(crate) fn load_head(dir: &Path, specs: &[DenseSpec]) -> Result<DenseHead> {
    let layers: Result<Vec<_>> =
        specs.iter().map(|s| load_layer(dir, s).map_err(|e| EmbedError::model(dir, e))).collect();
    Ok(DenseHead::new(layers?))
}

fn load_layer(dir: &Path, spec: &DenseSpec) -> std::result::Result<DenseLayer, String> {
    let file = format!("{}/model.safetensors", spec.path);
    let bytes = match std::fs::read(dir.join(&file)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(if dir.join(&spec.path).join("pytorch_model.bin").is_file() {
                format!(
                    "{}/ holds only pytorch_model.bin; nornir reads a Dense module from model.safetensors: \
                     `nornir vector convert` writes it (or Python: safetensors.torch.save_file(torch.load(\"pytorch_model.bin\"), \"model.safetensors\"))",
                    spec.path
                )
            } else {
                format!("{file} is missing: the Dense module has no weights")
            });
        }
        Err(e) => return Err(format!("cannot read {file}: {e}")),
    };
    let st = open_safetensors(&file, &bytes)?;
    let (i, o) = (spec.in_features, spec.out_features);
    let weight = tensor(&st, &file, "linear.weight", Some(&[o, i]))?.1;
    let bias = if spec.bias { tensor(&st, &file, "linear.bias", Some(&[o]))?.1 } else { vec![0.0; o] };
    let activation = Activation::from_torch(Some(&spec.activation))?;
    Ok(DenseLayer { in_features: i, out_features: o, weight, bias, activation })
}

/// A head saved as a bare `nn.Linear` state dict (`weight` `[out, in]`, `bias` `[out]`), as
/// BGE-M3's `colbert_linear` and `sparse_linear` are once converted from `.pt`, taking
/// `in_features` (the hidden size), with `activation` after it.
pub(crate) fn load_linear(dir: &Path, file: &str, in_features: usize, activation: Activation) -> Result<DenseLayer> {
    let read = || -> std::result::Result<DenseLayer, String> {
        let bytes = std::fs::read(dir.join(file)).map_err(|e| format!("cannot read {file}: {e}"))?;
        let st = open_safetensors(file, &bytes)?;
        let (shape, weight) = tensor(&st, file, "weight", None)?;
        let [o, i] = shape[..] else {
            return Err(format!("{file}: weight has shape {shape:?}, not [out_features, in_features]"));
        };
        if i != in_features {
            return Err(format!("{file}: weight takes {i} features, but the model's vectors are {in_features} wide"));
        }
        count_in("out_features", o, 1..=MAX_WIDTH, "the values the head gives per token")
            .map_err(|why| format!("{file}: weight has shape [{o}, {i}]: {why}"))?;
        let bias = match st.tensor("bias") {
            Ok(_) => tensor(&st, file, "bias", Some(&[o]))?.1,
            Err(_) => vec![0.0; o],
        };
        Ok(DenseLayer { in_features: i, out_features: o, weight, bias, activation })
    };
    read().map_err(|e| EmbedError::model(dir, e))
}

fn open_safetensors<'a>(file: &str, bytes: &'a [u8]) -> std::result::Result<SafeTensors<'a>, String> {
    SafeTensors::deserialize(bytes).map_err(|e| format!("{file} is not a readable safetensors file ({e})"))
}

/// Tensor `name` of `file` widened to f32, with its shape (checked against `shape` if given).
fn tensor(
    st: &SafeTensors<'_>,
    file: &str,
    name: &str,
    shape: Option<&[usize]>,
) -> std::result::Result<(Vec<usize>, Vec<f32>), String> {
    let t = st.tensor(name).map_err(|_| format!("{file} has no tensor {name:?}"))?;
    if let Some(shape) = shape.filter(|s| *s != t.shape()) {
        return Err(format!(
            "{file}: {name} has shape {:?}, but config.json says {shape:?} (out_features, in_features)",
            t.shape()
        ));
    }
    let values = float_values(&t).map_err(|e| format!("{file}: {name} {e}"))?;
    Ok((t.shape().to_vec(), values))
}

/// A tensor's values widened to f32 (float32, float16, bfloat16 or float64), each finite.
pub(crate) fn float_values(t: &TensorView<'_>) -> std::result::Result<Vec<f32>, String> {
    let data = t.data();
    let values: Vec<f32> = match t.dtype() {
        Dtype::F32 => data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        Dtype::F16 => data.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Dtype::BF16 => data.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
            .collect(),
        other => return Err(format!("is {other:?}, not a float type")),
    };
    if values.iter().any(|v| !v.is_finite()) {
        return Err("holds a value that is not finite".to_owned());
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    /// `file` in `dir`: a bare linear layer's `weight` of `shape`, zeros.
    fn linear(dir: &Path, file: &str, shape: [usize; 2]) {
        let data = vec![0u8; shape[0] * shape[1] * 4];
        let view = TensorView::new(Dtype::F32, shape.to_vec(), &data).expect("view");
        std::fs::write(dir.join(file), safetensors::serialize(vec![("weight", view)], None).expect("bytes"))
            .expect("write");
    }

    #[test]
    fn a_head_zero_values_wide_or_reading_another_width_is_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        linear(t.path(), "colbert_linear.safetensors", [8, 8]);
        let layer = load_linear(t.path(), "colbert_linear.safetensors", 8, Activation::Identity).expect("loads");
        assert_eq!((layer.in_features, layer.out_features), (8, 8));
        linear(t.path(), "colbert_linear.safetensors", [0, 8]);
        let e = load_linear(t.path(), "colbert_linear.safetensors", 8, Activation::Identity).unwrap_err().to_string();
        assert!(e.contains("colbert_linear.safetensors: weight has shape [0, 8]: out_features is 0, it must be a positive whole number"), "{e}");
        linear(t.path(), "sparse_linear.safetensors", [1, 4]);
        let e = load_linear(t.path(), "sparse_linear.safetensors", 8, Activation::Relu).unwrap_err().to_string();
        assert!(e.contains("weight takes 4 features, but the model's vectors are 8 wide"), "{e}");
    }
}
