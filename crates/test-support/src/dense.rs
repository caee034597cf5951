//! sentence-transformers `Dense` module folders written at test time: `config.json` and a
//! `model.safetensors` (written here byte by byte: the 8-byte header length, the JSON header,
//! the little-endian float32 data) with seeded pseudo-random weights.

use std::path::Path;

/// One Dense module to write.
#[derive(Debug, Clone)]
pub struct Dense<'a> {
    pub in_features: usize,
    pub out_features: usize,
    /// The torch class, as sentence-transformers writes it.
    pub activation: &'a str,
    pub bias: bool,
    pub seed: u64,
}

/// Weights in [-scale, scale), from a fixed-seed generator (the same values on every machine).
pub fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// A safetensors file of float32 tensors (name, shape, values).
pub fn safetensors(tensors: &[(&str, &[usize], &[f32])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, shape, values) in tensors {
        let start = data.len();
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        header.insert(
            (*name).to_owned(),
            serde_json::json!({ "dtype": "F32", "shape": shape, "data_offsets": [start, data.len()] }),
        );
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

/// Writes `dir/path/config.json` and `dir/path/model.safetensors` (`linear.weight` `[out, in]`,
/// `linear.bias`); returns the weight and the bias (zeros without one). Weights are scaled by
/// 1/sqrt(in), as torch initialises `nn.Linear`, so the activations see values of order one.
pub fn write_dense(dir: &Path, path: &str, d: &Dense<'_>) -> (Vec<f32>, Vec<f32>) {
    let folder = dir.join(path);
    std::fs::create_dir_all(&folder).unwrap();
    let config = serde_json::json!({
        "in_features": d.in_features,
        "out_features": d.out_features,
        "bias": d.bias,
        "activation_function": d.activation,
    });
    std::fs::write(folder.join("config.json"), config.to_string()).unwrap();
    let scale = 1.0 / (d.in_features as f32).sqrt();
    let weight = random(d.in_features * d.out_features, d.seed, scale);
    let bias = if d.bias { random(d.out_features, d.seed + 1, scale) } else { vec![0.0; d.out_features] };
    let shape = [d.out_features, d.in_features];
    let mut tensors: Vec<(&str, &[usize], &[f32])> = vec![("linear.weight", &shape, &weight)];
    let bias_shape = [d.out_features];
    if d.bias {
        tensors.push(("linear.bias", &bias_shape, &bias));
    }
    std::fs::write(folder.join("model.safetensors"), safetensors(&tensors)).unwrap();
    (weight, bias)
}

/// `modules.json` of a sentence-transformers embedder: Transformer, Pooling, the Dense folders
/// named, then Normalize.
pub fn modules_json(dense: &[&str]) -> String {
    let mut list = vec![
        serde_json::json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
        serde_json::json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}),
    ];
    for path in dense {
        list.push(serde_json::json!({"idx": list.len(), "name": list.len().to_string(), "path": path,
            "type": "sentence_transformers.models.Dense"}));
    }
    list.push(serde_json::json!({"idx": list.len(), "name": list.len().to_string(), "path": "9_Normalize",
        "type": "sentence_transformers.models.Normalize"}));
    serde_json::Value::Array(list).to_string()
}
