//! A conversion checked by running it (feature `convert`): nornir-convert writes the folder,
//! then the embedder loads it and embeds the built-in sample; a fused encoder's vectors are
//! compared with the plain graph's, and the plain graph is written instead where the fused one
//! does not run or computes something else. A folder whose graph embeds the sample as values that
//! are not finite (NaN, infinity) is removed and refused. Every caller gets this one rule:
//! `nornir vector convert`, Python's `convert()` and `cargo xtask fetch`.

use std::path::{Path, PathBuf};

use nornir_convert::{Conversion, ConvertError, ConvertOptions, Head, WeightDtype, convert};
use nornir_options::{EmbedderOptions, ModelKind};
use serde::Serialize;

use crate::embedder::Embedder;
use crate::error::EmbedError;
use crate::kinds::compact_calls::SAMPLE_TEXTS;
use crate::kinds::multi_vector_tokens::MultiVectorOptions;
use crate::values::embeddings::Embeddings;

/// The fused graph only reorders float arithmetic (measured: min cosine 1.0000 on the sample for
/// all-MiniLM-L6-v2); anything under this computes something else.
pub const FUSED_MIN_COSINE: f32 = 0.9999;

/// What [`convert_checked`] wrote and what its check found.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct CheckedConversion {
    /// The record of the folder as it stands (the plain graph's where it replaced the fused one).
    pub conversion: Conversion,
    /// One line: checked (with the figure), not checked (and why), or the fusions not applied;
    /// `None` for a head's graph (a classifier's or a masked-LM's), which is not run.
    pub check: Option<String>,
    /// The fused graph was replaced by the plain one.
    pub replaced: bool,
}

/// Why a checked conversion failed: the conversion itself, or the plain graph it was checked
/// against when the fused one embeds.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertCheckError {
    /// nornir-convert refused or failed.
    #[error(transparent)]
    Convert(#[from] ConvertError),
    /// The plain graph, which the fused one is checked against, could not be written or run.
    #[error("the plain graph, which the fused one is checked against: {0}")]
    Plain(Box<dyn std::error::Error + Send + Sync>),
    /// The graph embeds the built-in sample as values that are not finite; the folder was removed.
    #[error(
        "{folder}: the converted graph embeds text {text} of the built-in sample as a vector that is not finite (NaN or infinity), so the folder was removed: the model's config.json or weights are damaged; check them against the model's published files"
    )]
    NotFinite {
        /// The output folder, now removed.
        folder: String,
        /// The first text of the sample (from 0) whose vector is not finite.
        text: usize,
    },
}

/// Converts `source` into `output` with `options`, then checks an encoder as the module says,
/// loading each graph with `embedder` (its device and ONNX Runtime library). A folder nornir
/// cannot embed with for a reason outside the graph (no tokenizer, a module it does not apply)
/// stands, its check saying why.
pub fn convert_checked(
    source: &Path,
    output: &Path,
    options: &ConvertOptions,
    embedder: &EmbedderOptions,
) -> Result<CheckedConversion, ConvertCheckError> {
    // A folder being replaced stays aside until the new one passes its check, so a refused
    // conversion leaves the old folder where it was.
    let aside = set_aside(source, output, options)?;
    let result = convert_and_check(source, output, options, embedder);
    if let Some(old) = aside {
        if result.is_ok() {
            let _ = std::fs::remove_dir_all(&old);
        } else {
            let _ = std::fs::remove_dir_all(output);
            std::fs::rename(&old, output)
                .map_err(|source| ConvertError::Write { path: output.display().to_string(), source })?;
        }
    }
    result
}

/// Moves `output` to a hidden sibling when the conversion may replace it (it exists, the options
/// say replace, and it is not the source, which `convert` refuses); where it went.
fn set_aside(source: &Path, output: &Path, options: &ConvertOptions) -> Result<Option<PathBuf>, ConvertError> {
    let same = matches!((source.canonicalize(), output.canonicalize()), (Ok(a), Ok(b)) if a == b);
    if !options.replace || same || !output.exists() {
        return Ok(None);
    }
    let name = output.file_name().map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned());
    let parent = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let old = parent.join(format!(".{name}.nornir-convert-{}.replaced", std::process::id()));
    let _ = std::fs::remove_dir_all(&old);
    std::fs::rename(output, &old)
        .map_err(|source| ConvertError::Write { path: output.display().to_string(), source })?;
    Ok(Some(old))
}

fn convert_and_check(
    source: &Path,
    output: &Path,
    options: &ConvertOptions,
    embedder: &EmbedderOptions,
) -> Result<CheckedConversion, ConvertCheckError> {
    let conversion = convert(source, output, options)?;
    if conversion.head != Head::Encoder {
        return Ok(CheckedConversion { conversion, check: None, replaced: false });
    }
    let stands = |conversion, check: String| Ok(CheckedConversion { conversion, check: Some(check), replaced: false });
    if !output.join("tokenizer.json").is_file() {
        let why = "not checked: the folder has no tokenizer.json, so nornir cannot embed with it; add the model's tokenizer.json";
        return stands(conversion, why.to_owned());
    }
    if let Some(why) = too_large_to_check(conversion.weight_bytes, conversion.dtype, available_memory()) {
        return stands(conversion, why);
    }
    let tried = sample_rows(output, embedder);
    if !conversion.fused {
        return match tried {
            Ok(rows) => {
                refuse_not_finite(output, &rows)?;
                stands(conversion, format!("checked: {}", embeds(&rows)))
            }
            Err(e) => stands(conversion, format!("not checked: {}", crate::error_chain(&e))),
        };
    }
    let parent = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let plain_dir = parent.join(format!(".nornir-convert-plain-{}", std::process::id()));
    let plain_options = options.clone().with_fused(false).with_replace(true);
    let compared = convert(source, &plain_dir, &plain_options)
        .map_err(|e| ConvertCheckError::Plain(Box::new(e)))
        .and_then(|_| sample_rows(&plain_dir, embedder).map_err(|e| ConvertCheckError::Plain(Box::new(e))));
    let _ = std::fs::remove_dir_all(&plain_dir);
    let plain = match (compared, &tried) {
        (Ok(plain), _) => plain,
        // Neither graph embeds: the folder, not the fusions, is what nornir cannot run.
        (Err(_), Err(in_output)) => {
            return stands(conversion, format!("not checked: {}", crate::error_chain(in_output)));
        }
        (Err(e), Ok(rows)) => {
            refuse_not_finite(output, rows)?;
            return Err(e);
        }
    };
    // Where the plain graph computes NaN, so does the model: no graph stands.
    refuse_not_finite(output, &plain)?;
    let why = match tried {
        Ok(rows) if first_not_finite(&rows).is_some() => "the fused graph's vectors are not finite".to_owned(),
        Ok(rows) => {
            let min = rows.rows().zip(plain.rows()).map(|(x, y)| cosine(x, y)).fold(f32::INFINITY, f32::min);
            if min >= FUSED_MIN_COSINE {
                let check = format!(
                    "checked: {}; the fused graph's vectors against the plain graph's: min cosine {min:.6}",
                    embeds(&rows)
                );
                return stands(conversion, check);
            }
            format!("the fused graph's vectors differ from the plain graph's (min cosine {min:.6} on the sample)")
        }
        Err(e) => format!("the fused graph does not run: {}", crate::error_chain(&e)),
    };
    tracing::warn!("{why}; writing the plain graph");
    let conversion = convert(source, output, &plain_options)?;
    let check = Some(format!("fusions not applied: {why}; wrote the plain graph"));
    Ok(CheckedConversion { conversion, check, replaced: true })
}

/// Why a converted model is not loaded for its check: ONNX Runtime holds its weights in float32
/// (half-precision ones widened), and where that, with a fifth more for the session, passes the
/// memory this machine has free, loading it would be killed rather than fail (an 8B decoder on a
/// 24 GB machine). `None`: check it. Without a reading of free memory, it is checked.
fn too_large_to_check(weight_bytes: usize, dtype: WeightDtype, available: Option<u64>) -> Option<String> {
    let widened = match dtype {
        WeightDtype::Float32 => weight_bytes as u64,
        _ => 2 * weight_bytes as u64,
    };
    let needed = widened + widened / 5;
    let available = available?;
    (needed > available).then(|| {
        format!(
            "not checked: ONNX Runtime would hold {:.1} GB of float32 weights and this machine has {:.1} GB of memory free; embed with it where it fits",
            widened as f64 / 1e9,
            available as f64 / 1e9
        )
    })
}

/// `MemAvailable` of /proc/meminfo, in bytes (Linux); `None` elsewhere or unreadable.
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The first row of `rows` holding a value that is not finite (NaN or infinity).
fn first_not_finite(rows: &Embeddings) -> Option<usize> {
    rows.rows().position(|row| row.iter().any(|v| !v.is_finite()))
}

/// Removes `output` and refuses where a row of `rows`, its graph's vectors, is not finite: a
/// folder that answers NaN must not stand where a model is looked for.
fn refuse_not_finite(output: &Path, rows: &Embeddings) -> Result<(), ConvertCheckError> {
    let Some(text) = first_not_finite(rows) else { return Ok(()) };
    let _ = std::fs::remove_dir_all(output);
    Err(ConvertCheckError::NotFinite { folder: output.display().to_string(), text })
}

/// The built-in sample embedded with the folder at `dir` as its kind runs: a vector per text,
/// or a late-interaction model's token vectors, every text's one after another.
fn sample_rows(dir: &Path, options: &EmbedderOptions) -> Result<Embeddings, EmbedError> {
    let texts: Vec<&str> = SAMPLE_TEXTS.lines().collect();
    let embedder = Embedder::new(dir, options)?;
    match embedder.model_info().folder.kind.kind {
        ModelKind::MultiVector => Ok(embedder.embed_multi_vector(&texts, &MultiVectorOptions::new())?.rows()),
        _ => embedder.embed(&texts),
    }
}

fn embeds(rows: &Embeddings) -> String {
    let texts = SAMPLE_TEXTS.lines().count();
    if rows.len() == texts {
        format!("nornir embeds the built-in sample ({texts} texts) with it, {} dimensions", rows.dim())
    } else {
        format!(
            "nornir embeds the built-in sample ({texts} texts) with it as {} token vectors of {} dimensions",
            rows.len(),
            rows.dim()
        )
    }
}

/// The cosine of two vectors, summed in f64 (0 when either is zero).
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let (na, nb) = (norm(a), norm(b));
    if na > 0.0 && nb > 0.0 { (dot / (na * nb)) as f32 } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_larger_than_free_memory_is_not_loaded_for_its_check() {
        const GB: u64 = 1_000_000_000;
        // Qwen3-Embedding-8B in bfloat16 (15.1 GB on disk, 30.2 GB widened) with 22 GB free.
        let why = too_large_to_check(15_100_000_000, WeightDtype::Bfloat16, Some(22 * GB)).expect("too large");
        assert!(why.starts_with("not checked: ONNX Runtime would hold 30.2 GB"), "{why}");
        // The 0.6B in float32 (2.4 GB) fits; so does anything where free memory is unknown.
        assert_eq!(too_large_to_check(2_400_000_000, WeightDtype::Float32, Some(22 * GB)), None);
        assert_eq!(too_large_to_check(15_100_000_000, WeightDtype::Bfloat16, None), None);
        // The session's fifth more counts: 10 GB of weights need 12.
        assert!(too_large_to_check(10_000_000_000, WeightDtype::Float32, Some(11 * GB)).is_some());
    }

    #[test]
    fn a_graph_whose_vectors_are_not_finite_is_removed_and_refused_in_one_line() {
        let t = tempfile::tempdir().expect("tempdir");
        let output = t.path().join("converted");
        std::fs::create_dir(&output).expect("mkdir");
        std::fs::write(output.join("model.onnx"), b"graph").expect("write");
        let finite = Embeddings::new(vec![0.5, -1.0, 3.0, 0.0], 2).expect("rows");
        assert_eq!(first_not_finite(&finite), None);
        assert!(refuse_not_finite(&output, &finite).is_ok() && output.join("model.onnx").is_file());
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let rows = Embeddings::new(vec![0.5, -1.0, 3.0, bad, 1.0, 1.0], 2).expect("rows");
            assert_eq!(first_not_finite(&rows), Some(1));
        }
        let rows = Embeddings::new(vec![0.5, f32::NAN], 2).expect("rows");
        let e = refuse_not_finite(&output, &rows).expect_err("refused").to_string();
        assert!(e.contains("converted: the converted graph embeds text 0 of the built-in sample"), "{e}");
        assert!(e.contains("not finite (NaN or infinity), so the folder was removed") && !e.contains('\n'), "{e}");
        assert!(!output.exists(), "nothing left that looks complete");
    }

    /// A tiny BERT folder (hidden 4, one layer) whose feed-forward overflows float32: its first
    /// projection's weights are ±3e38, so its activations are infinite and the zero second
    /// projection makes them NaN (0 × inf). `overflow` false: every weight small, a valid model.
    fn tiny_bert(dir: &Path, overflow: bool) {
        use safetensors::tensor::{Dtype, TensorView};
        let (h, i, v) = (4usize, 8usize, 10usize);
        let big = if overflow { 3e38f32 } else { 0.1 };
        let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = vec![
            ("embeddings.word_embeddings.weight".into(), vec![v, h], [1.0, 2.0, 3.0, 4.0].repeat(v)),
            ("embeddings.position_embeddings.weight".into(), vec![8, h], vec![0.0; 8 * h]),
            ("embeddings.token_type_embeddings.weight".into(), vec![2, h], vec![0.0; 2 * h]),
        ];
        let l = "encoder.layer.0";
        for (name, out, inp) in [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", i, h),
            ("output.dense", h, i),
        ] {
            let weight = match name {
                "intermediate.dense" => [-big, -big, big, big].repeat(i),
                _ => vec![0.0; out * inp],
            };
            tensors.push((format!("{l}.{name}.weight"), vec![out, inp], weight));
            tensors.push((format!("{l}.{name}.bias"), vec![out], vec![0.0; out]));
        }
        for norm in
            ["embeddings.LayerNorm", &format!("{l}.attention.output.LayerNorm"), &format!("{l}.output.LayerNorm")]
        {
            tensors.push((format!("{norm}.weight"), vec![h], vec![1.0; h]));
            tensors.push((format!("{norm}.bias"), vec![h], vec![0.0; h]));
        }
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .into_iter()
            .map(|(name, shape, values)| (name, shape, values.iter().flat_map(|x| x.to_le_bytes()).collect()))
            .collect();
        let views = bytes.iter().map(|(name, shape, data)| {
            (name.as_str(), TensorView::new(Dtype::F32, shape.clone(), data).expect("view"))
        });
        let file = safetensors::serialize(views, None).expect("safetensors");
        let vocab: serde_json::Map<String, serde_json::Value> =
            (0..v).map(|i| (format!("w{i}"), serde_json::json!(i))).collect();
        let tokenizer = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
            "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"},
        });
        let config = r#"{"architectures":["BertModel"],"model_type":"bert","hidden_size":4,"num_hidden_layers":1,
            "num_attention_heads":2,"intermediate_size":8,"vocab_size":10,"max_position_embeddings":8}"#;
        std::fs::create_dir_all(dir.join("1_Pooling")).expect("mkdir");
        for (name, bytes) in [
            ("model.safetensors", file),
            ("config.json", config.as_bytes().to_vec()),
            ("tokenizer.json", tokenizer.to_string().into_bytes()),
            ("1_Pooling/config.json", br#"{"word_embedding_dimension":4,"pooling_mode_mean_tokens":true}"#.to_vec()),
        ] {
            std::fs::write(dir.join(name), bytes).expect("write");
        }
    }

    #[test]
    #[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
    fn a_conversion_that_embeds_nan_is_refused_and_leaves_nothing() {
        nornir_test_support::needs_assets!();
        let cpu = EmbedderOptions::default()
            .with_device(nornir_ep_select::Device::Cpu)
            .with_ort_library(nornir_test_support::env_path("NORNIR_TEST_ORT_CPU"));
        let t = tempfile::tempdir().expect("tempdir");
        let (source, output) = (t.path().join("model"), t.path().join("converted"));
        tiny_bert(&source, false);
        let checked = convert_checked(&source, &output, &ConvertOptions::default(), &cpu).expect("a valid model");
        let check = checked.check.expect("checked");
        assert!(check.starts_with("checked: ") && !checked.replaced, "{check}");
        std::fs::remove_dir_all(&output).expect("rm");
        for fused in [true, false] {
            tiny_bert(&source, true);
            let options = ConvertOptions::default().with_fused(fused);
            let e = convert_checked(&source, &output, &options, &cpu).expect_err("NaN refused").to_string();
            assert!(e.contains("embeds text 0 of the built-in sample as a vector that is not finite"), "{e}");
            assert!(!e.contains('\n'), "{e}");
            let mut left: Vec<String> = std::fs::read_dir(t.path())
                .expect("ls")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            left.sort();
            assert_eq!(left, ["model"], "nothing written beside the model (fused: {fused})");
        }
        // Replacing a folder: a refused conversion leaves the folder that was there.
        tiny_bert(&source, false);
        convert_checked(&source, &output, &ConvertOptions::default(), &cpu).expect("a valid model");
        let before = std::fs::read(output.join("model.onnx")).expect("the first conversion");
        tiny_bert(&source, true);
        let replace = ConvertOptions::default().with_replace(true);
        convert_checked(&source, &output, &replace, &cpu).expect_err("NaN refused");
        assert_eq!(std::fs::read(output.join("model.onnx")).expect("kept"), before, "the old folder is kept");
        let mut left: Vec<String> = std::fs::read_dir(t.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["converted", "model"], "nothing else beside the model");
    }
}
