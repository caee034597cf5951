//! `nornir vector convert`: every architecture against an independent NumPy reference
//! (scripts/convert_reference.py, run in the test venv with ONNX Runtime), the real splade-tiny
//! and all-MiniLM-L6-v2 weights, and each bad input as one line, exit 2, nothing written.

mod common;

use common::{assert_one_line_error, files_in, nornir, s, stderr};
use nornir_test_support::env_path;
use serde_json::{Value, json};

/// Runs scripts/convert_reference.py with `args` after the nornir binary; its JSON result.
fn reference(args: &[&str]) -> Value {
    common::reference_script("convert_reference.py", args[0], &args[1..])
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn every_architecture_equals_an_independent_numpy_implementation() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference(&["synthetic", s(t.path())]);
    let cases = r["cases"].as_array().expect("cases");
    // Six architectures x float32, float16 and bfloat16 weights x fused and plain graphs; one
    // with its weights in model.onnx_data, and one from two shards.
    assert_eq!(cases.len(), 38, "{r:#}");
    for c in cases {
        assert!(c["max_abs_diff"].as_f64().is_some_and(|d| d <= 1e-4), "{c:#}");
        let fused = c["graph"] != "plain";
        let ops = &c["operators"];
        // A fused graph's layers are nornir's `Attention` operator (its body runs
        // MultiHeadAttention where the kernel is not registered, as in this Python reference).
        assert_eq!(ops.get("Attention").is_some(), fused, "{c:#}");
        assert_eq!(ops.get("Softmax").is_some(), !fused, "{c:#}");
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn real_splade_tiny_logits_equal_the_reference_and_rank_the_right_terms() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let corpus = env_path("NORNIR_TEST_CORPUS").join("corpus.txt");
    let model = env_path("NORNIR_TEST_SPLADE_SAFETENSORS");
    let out = t.path().join("splade-tiny");
    let r = reference(&["splade", s(&model), s(&out), s(&corpus), "500"]);
    assert_eq!(r["texts"], 500);
    assert!(r["max_abs_diff"].as_f64().is_some_and(|d| d <= 1e-4), "{r:#}");
    let top: Vec<&str> = r["top_terms"]["The capital of France is Paris."]
        .as_array()
        .expect("top terms")
        .iter()
        .take(3)
        .filter_map(|p| p[0].as_str())
        .collect();
    assert_eq!(top, ["capital", "paris", "france"], "{r:#}");
}

/// Embeds with the converted model: only in a build with the embedder.
#[cfg(feature = "embed-ort")]
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn converted_minilm_is_checked_fused_and_close_to_the_int8_export() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let out = t.path().join("minilm");
    let source = env_path("NORNIR_TEST_MINILM_SAFETENSORS");
    let o = nornir(&["vector", "convert", "--model", s(&source), "--output", s(&out), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let record: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(record["architecture"], "BertModel");
    let check = record["check"].as_str().expect("the check's line");
    assert!(check.contains("the fused graph's vectors against the plain graph's: min cosine"), "{check}");
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(out.join("conversion.json")).expect("conversion.json")).expect("JSON");
    assert_eq!(on_disk["sources"], record["sources"]);
    assert!(files_in(&out).iter().any(|f| f == "tokenizer.json") && out.join("1_Pooling/config.json").is_file());
    assert!(!files_in(&out).iter().any(|f| f.ends_with(".safetensors")), "the weights are not copied");

    // The fetched conversion of the same weights against the int8-weight export, first 1,000
    // corpus texts (the export's weights were rounded to int8).
    let corpus = env_path("NORNIR_TEST_CORPUS").join("corpus.txt");
    let text = std::fs::read_to_string(&corpus).expect("corpus");
    let first: String = text.lines().take(1000).map(|l| format!("{l}\n")).collect();
    let input = t.path().join("first-1000.txt");
    std::fs::write(&input, first).expect("write");
    let embed = |model: &std::path::Path, name: &str| {
        let file = t.path().join(name);
        let o = nornir(&[
            "vector",
            "embed",
            "-q",
            "--model",
            s(model),
            "--input",
            s(&input),
            "--format",
            "f32",
            "--output",
            s(&file),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        common::f32_rows(&std::fs::read(file).expect("vectors"))
    };
    let converted = embed(&env_path("NORNIR_TEST_CONVERTED_MODEL"), "converted.f32");
    let export = embed(&common::model(), "export.f32");
    assert_eq!(converted.len(), 1000);
    let min = converted.iter().zip(&export).map(|(a, b)| nornir_test_support::cosine(a, b)).fold(1.0f32, f32::min);
    assert!(min >= 0.999, "min cosine {min}");

    // A folder nornir does not embed with (here a Dense module whose folder is missing) still
    // converts; the check says why it did not run.
    let with_dense = t.path().join("with-dense");
    std::fs::create_dir(&with_dense).expect("mkdir");
    for f in files_in(&source) {
        if f != "modules.json" {
            std::os::unix::fs::symlink(source.join(&f), with_dense.join(&f)).expect("symlink");
        }
    }
    std::fs::write(
        with_dense.join("modules.json"),
        r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
            {"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.models.Dense"}]"#,
    )
    .expect("modules.json");
    let dense_out = t.path().join("dense-out");
    let o = nornir(&["vector", "convert", "--model", s(&with_dense), "--output", s(&dense_out), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let record: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let check = record["check"].as_str().expect("the check's line");
    assert!(check.starts_with("not checked: ") && check.contains("Dense"), "{check}");
    assert!(dense_out.join("model.onnx").is_file());

    // The converted float32 graph is a source for the int8 rewrite: every weight product becomes
    // int8 (attention is already one MultiHeadAttention, so nothing is left to fuse). This run's
    // conversion, not the fetched one, which an older converter may have written.
    let int8 = t.path().join("int8");
    let o = nornir(&["vector", "quantize", "--model", s(&out), "--output", s(&int8), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let q: Value = serde_json::from_slice(&o.stdout).expect("quantization.json");
    assert_eq!(q["rewritten"].as_array().map(Vec::len), Some(36), "{q:#}");
    assert!(q["cost"]["cosine_min"].as_f64().is_some_and(|c| c >= 0.99), "{q:#}");

    // The same weights in external data (as a model over 1.8 GB is written) quantize to the same
    // int8 graph: read from model.onnx_data, smoothing calibrated through it.
    let external = t.path().join("external");
    let o = nornir(&["vector", "convert", "--model", s(&source), "--output", s(&external), "--external-data", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(external.join("model.onnx_data").is_file());
    let int8_external = t.path().join("int8-external");
    let o = nornir(&["vector", "quantize", "--model", s(&external), "--output", s(&int8_external), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let qe: Value = serde_json::from_slice(&o.stdout).expect("quantization.json");
    assert!(qe["smoothing_calibrated_on"].is_string(), "{qe:#}");
    assert_eq!(qe["cost"], q["cost"], "the same int8 model from weights in one file or two");
    assert!(!int8_external.join("model.onnx_data").exists(), "its int8 weights fit in model.onnx");
}

// --- bad input: one line, exit 2, nothing written ----------------------------------------------

/// A small BertModel checkpoint: (name, dtype, shape) of each tensor, zero-filled except where
/// `tweak` changes the list.
fn tiny_bert(
    tweak: impl FnOnce(&mut Vec<(String, &'static str, Vec<usize>)>),
) -> Vec<(String, &'static str, Vec<usize>)> {
    let (h, i) = (4usize, 8usize);
    let mut t: Vec<(String, &'static str, Vec<usize>)> = vec![
        ("embeddings.word_embeddings.weight".into(), "F32", vec![10, h]),
        ("embeddings.position_embeddings.weight".into(), "F32", vec![8, h]),
        ("embeddings.token_type_embeddings.weight".into(), "F32", vec![2, h]),
        ("embeddings.LayerNorm.weight".into(), "F32", vec![h]),
        ("embeddings.LayerNorm.bias".into(), "F32", vec![h]),
    ];
    let l = "encoder.layer.0";
    for (name, shape) in [
        ("attention.self.query", vec![h, h]),
        ("attention.self.key", vec![h, h]),
        ("attention.self.value", vec![h, h]),
        ("attention.output.dense", vec![h, h]),
        ("intermediate.dense", vec![i, h]),
        ("output.dense", vec![h, i]),
    ] {
        t.push((format!("{l}.{name}.bias"), "F32", vec![shape[0]]));
        t.push((format!("{l}.{name}.weight"), "F32", shape));
    }
    for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
        t.push((format!("{l}.{norm}.weight"), "F32", vec![h]));
        t.push((format!("{l}.{norm}.bias"), "F32", vec![h]));
    }
    tweak(&mut t);
    t
}

/// The safetensors bytes of `tensors` (the values are zeros).
fn safetensors(tensors: &[(String, &str, Vec<usize>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, dtype, shape) in tensors {
        let width = match *dtype {
            "F16" | "BF16" => 2,
            "I8" | "U8" => 1,
            "F64" | "I64" => 8,
            _ => 4,
        };
        let len = width * shape.iter().product::<usize>();
        header.insert(name.clone(), json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len]}));
        offset += len;
    }
    let text = Value::Object(header).to_string();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.resize(out.len() + offset, 0);
    out
}

const CONFIG: &str = r#"{"architectures":["BertModel"],"model_type":"bert","hidden_size":4,"num_hidden_layers":1,
"num_attention_heads":2,"intermediate_size":8,"vocab_size":10,"max_position_embeddings":8,"type_vocab_size":2}"#;

/// A model folder with `config` and `weights` (None: no weights file) in a fresh temp folder.
fn folder(config: Option<&str>, weights: Option<Vec<u8>>) -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(t.path().join("model")).expect("mkdir");
    if let Some(c) = config {
        std::fs::write(t.path().join("model/config.json"), c).expect("config");
    }
    if let Some(w) = weights {
        std::fs::write(t.path().join("model/model.safetensors"), w).expect("weights");
    }
    t
}

/// Converts `t/model` into `t/out`; asserts the one-line error and that nothing was written.
fn refused(t: &tempfile::TempDir, needle: &str) {
    let (model, out) = (t.path().join("model"), t.path().join("out"));
    let o = nornir(&["vector", "convert", "--model", s(&model), "--output", s(&out)]);
    assert_one_line_error(&o, needle);
    assert_eq!(files_in(t.path()), ["model"], "nothing written beside the model");
}

#[test]
fn a_tiny_checkpoint_converts_and_records_what_it_read() {
    let t = folder(Some(CONFIG), Some(safetensors(&tiny_bert(|_| {}))));
    std::fs::create_dir(t.path().join("model/1_Pooling")).expect("mkdir");
    std::fs::write(t.path().join("model/1_Pooling/config.json"), "{}").expect("pooling");
    std::fs::write(t.path().join("model/pytorch_model.bin"), "x").expect("bin");
    let out = t.path().join("out");
    let o = nornir(&["vector", "convert", "--model", s(&t.path().join("model")), "--output", s(&out), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(
        (r["architecture"].as_str(), r["head"].as_str(), r["output"].as_str()),
        (Some("BertModel"), Some("encoder"), Some("last_hidden_state"))
    );
    assert_eq!(r["sources"][0]["file"], "config.json");
    assert_eq!(r["sources"][1]["file"], "model.safetensors");
    assert_eq!(r["sources"][1]["sha256"].as_str().map(str::len), Some(64));
    // Without a tokenizer (or in a build without the embedder) the converted encoder is not embedded.
    let not_checked = if cfg!(feature = "embed-ort") {
        "not checked: the folder has no tokenizer.json"
    } else {
        "not checked: this nornir was built without the ONNX Runtime embedder"
    };
    assert!(r["check"].as_str().is_some_and(|c| c.starts_with(not_checked)), "{r:#}");
    // Weights in any format stay behind; configs and module folders are copied.
    assert_eq!(files_in(&out), ["1_Pooling", "config.json", "conversion.json", "model.onnx"]);
    assert_eq!(files_in(t.path()), ["model", "out"], "no temporary folder left");
    // An existing output is refused, and left as it was; --force replaces it.
    std::fs::write(out.join("mine.txt"), "keep").expect("write");
    let o = nornir(&["vector", "convert", "--model", s(&t.path().join("model")), "--output", s(&out)]);
    assert_one_line_error(&o, "already exists: choose another --output, or pass --force to replace it");
    assert!(out.join("mine.txt").is_file());
    let o = nornir(&["vector", "convert", "-q", "--model", s(&t.path().join("model")), "--output", s(&out), "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!out.join("mine.txt").exists());
    // An output inside the model folder is never copied into the next conversion.
    let inside = t.path().join("model/converted");
    for _ in 0..2 {
        let o = nornir(&[
            "vector",
            "convert",
            "-q",
            "--model",
            s(&t.path().join("model")),
            "--output",
            s(&inside),
            "--force",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(files_in(&inside), ["1_Pooling", "config.json", "conversion.json", "model.onnx"]);
}

#[test]
fn a_truncated_or_corrupt_safetensors_file_is_named() {
    let mut bytes = safetensors(&tiny_bert(|_| {}));
    bytes.truncate(bytes.len() - 10);
    refused(&folder(Some(CONFIG), Some(bytes)), "model.safetensors is truncated or has bytes after its tensors");
    refused(
        &folder(Some(CONFIG), Some(b"PK\x03\x04 not safetensors".to_vec())),
        "model.safetensors is not a safetensors file",
    );
    refused(&folder(Some(CONFIG), Some(Vec::new())), "model.safetensors is not a safetensors file or is cut short");
}

#[test]
fn a_missing_or_misshapen_tensor_is_named_with_its_file() {
    let missing = tiny_bert(|t| t.retain(|(n, ..)| n != "encoder.layer.0.attention.self.key.weight"));
    refused(
        &folder(Some(CONFIG), Some(safetensors(&missing))),
        "tensor \"encoder.layer.0.attention.self.key.weight\" is not in",
    );
    let misshapen = tiny_bert(|t| t[0].2 = vec![11, 4]);
    refused(&folder(Some(CONFIG), Some(safetensors(&misshapen))), "tensor \"embeddings.word_embeddings.weight\" in ");
    let o = {
        let t = folder(Some(CONFIG), Some(safetensors(&misshapen)));
        let o =
            nornir(&["vector", "convert", "--model", s(&t.path().join("model")), "--output", s(&t.path().join("o"))]);
        stderr(&o)
    };
    assert!(o.contains("has shape [11, 4] where config.json implies [10, 4]"), "{o}");
}

#[test]
fn an_unknown_or_unconverted_dtype_is_named_with_its_tensor() {
    let unknown = tiny_bert(|t| t[3].1 = "Q4");
    refused(
        &folder(Some(CONFIG), Some(safetensors(&unknown))),
        "tensor \"embeddings.LayerNorm.weight\" has the dtype \"Q4\", which is not a safetensors type",
    );
    let int8 = tiny_bert(|t| t[3].1 = "I8");
    refused(&folder(Some(CONFIG), Some(safetensors(&int8))), "tensor \"embeddings.LayerNorm.weight\" in ");
}

#[test]
fn a_config_without_a_converted_architecture_is_refused_by_name() {
    let weights = || Some(safetensors(&tiny_bert(|_| {})));
    refused(
        &folder(Some(r#"{"model_type":"bert"}"#), weights()),
        "config.json has no `architectures` (model_type \"bert\")",
    );
    refused(
        &folder(Some(r#"{"architectures":["GPT2LMHeadModel"]}"#), weights()),
        "cannot convert architecture GPT2LMHeadModel: supported are BertModel, BertForMaskedLM",
    );
    refused(&folder(Some("{not json"), weights()), "config.json is not a valid config");
    refused(&folder(None, weights()), "has no config.json");
    refused(&folder(Some(CONFIG), None), "has no model.safetensors or model.safetensors.index.json");
}

/// A `pytorch_model.bin` whose pickle calls `os.system` (as `posix.system`), the way a hostile
/// checkpoint runs code when Python unpickles it; `cut` bytes are cut off the end.
fn hostile_torch_checkpoint(cut: usize) -> Vec<u8> {
    use std::io::Write;
    let pickle = b"\x80\x02cposix\nsystem\nX\x05\x00\x00\x00touch\x85R.";
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("archive/data.pkl", stored).expect("entry");
    zip.write_all(pickle).expect("pickle");
    let mut bytes = zip.finish().expect("zip").into_inner();
    bytes.truncate(bytes.len() - cut);
    bytes
}

/// A torch.save archive whose `data.pkl` is `pickle`, stored as torch writes it.
fn torch_archive_of(pickle: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("archive/data.pkl", stored).expect("entry");
    zip.write_all(pickle).expect("pickle");
    zip.finish().expect("zip").into_inner()
}

/// Hostile pickles of each class: too deep (a stack overflow before), too wide for a quadratic
/// dict (minutes before), a list inside itself; each refused by its limit in one line.
#[test]
fn a_pickle_too_deep_too_wide_or_inside_itself_is_refused_by_its_limit() {
    let deep = [&b"\x80\x02)"[..], &vec![0x85; 2_000_000], b"."].concat();
    let mut wide = b"\x80\x02}(".to_vec();
    for i in 0..300_000i32 {
        wide.push(b'J');
        wide.extend_from_slice(&i.to_le_bytes());
        wide.push(b'N');
    }
    wide.extend_from_slice(b"u.");
    let cycle = b"\x80\x02]q\x00h\x00a.".to_vec();
    for (pickle, needle) in [
        (deep, "nests deeper than 1,000 levels"),
        (wide, "holds a dict without tensors"),
        (cycle, "changes a list or dict at byte 7 after putting it inside another or itself"),
    ] {
        let t = folder(Some(CONFIG), None);
        std::fs::write(t.path().join("model/pytorch_model.bin"), torch_archive_of(&pickle)).expect("bin");
        refused(&t, needle);
    }
}

#[test]
fn a_pytorch_checkpoint_that_names_code_or_is_truncated_is_refused() {
    let t = folder(Some(CONFIG), None);
    std::fs::write(t.path().join("model/pytorch_model.bin"), hostile_torch_checkpoint(0)).expect("bin");
    refused(&t, "pytorch_model.bin's pickle names posix.system, which is not a tensor");
    let t = folder(Some(CONFIG), None);
    std::fs::write(t.path().join("model/pytorch_model.bin"), hostile_torch_checkpoint(30)).expect("bin");
    refused(&t, "pytorch_model.bin is a truncated or corrupt zip archive");
}

#[test]
fn a_config_that_does_not_fit_its_weights_is_refused() {
    let weights = || Some(safetensors(&tiny_bert(|_| {})));
    let heads = CONFIG.replace(r#""num_attention_heads":2"#, r#""num_attention_heads":3"#);
    refused(&folder(Some(&heads), weights()), "has hidden_size 4, not a multiple of num_attention_heads 3");
    let layers = CONFIG.replace(r#""num_hidden_layers":1"#, r#""num_hidden_layers":3"#);
    refused(
        &folder(Some(&layers), weights()),
        "says num_hidden_layers 3 but the weights hold 1 layers: the config and the weights do not belong together",
    );
}

#[test]
fn each_familys_unsupported_variants_are_refused_by_name() {
    let weights = || Some(safetensors(&tiny_bert(|_| {})));
    let sizes = r#""hidden_size":4,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":8,"vocab_size":10,"max_position_embeddings":8"#;
    let nomic = r#""architectures":["NomicBertModel"],"model_type":"nomic_bert","n_embd":4,"n_layer":1,"n_head":2,"n_inner":8,"vocab_size":10,"n_positions":8,"activation_function":"swiglu""#;
    for (config, needle) in [
        (
            format!(r#"{{{nomic},"num_experts":8,"moe_every_n_layers":2}}"#),
            "has a mixture of experts (nomic-embed-text v2)",
        ),
        (format!(r#"{{{nomic},"rotary_emb_interleaved":true}}"#), "has interleaved rotary positions"),
        (format!(r#"{{{nomic},"rotary_emb_fraction":0.5}}"#), "rotary positions on part of each head"),
        (format!(r#"{{{nomic},"prenorm":true}}"#), "has pre-norm NomicBERT layers"),
        (
            format!(r#"{{"architectures":["NewModel"],"model_type":"new",{sizes},"logn_attention_scale":true}}"#),
            "has logn_attention_scale true",
        ),
        (
            format!(
                r#"{{"architectures":["NewModel"],"model_type":"new",{sizes},"rope_scaling":{{"type":"yarn","factor":4}}}}"#
            ),
            "has rope_scaling {\"factor\":4,\"type\":\"yarn\"}",
        ),
        (
            format!(
                r#"{{"architectures":["JinaBertModel"],"model_type":"bert",{sizes},"position_embedding_type":"alibi","feed_forward_type":"original"}}"#
            ),
            "has JinaBERT feed_forward_type \"original\"",
        ),
        (
            format!(
                r#"{{"architectures":["XLMRobertaLoRA"],"model_type":"xlm-roberta",{sizes},"position_embedding_type":"absolute"}}"#
            ),
            "(jina-embeddings-v3 is \"rotary\")",
        ),
        (
            format!(
                r#"{{"architectures":["ModernBertForSequenceClassification"],"model_type":"modernbert",{sizes},"classifier_pooling":"max"}}"#
            ),
            "has classifier_pooling \"max\"",
        ),
        (
            format!(
                r#"{{"architectures":["BertModel"],"model_type":"bert",{sizes},"position_embedding_type":"relative_key"}}"#
            ),
            "has position_embedding_type \"relative_key\"",
        ),
    ] {
        refused(&folder(Some(&config), weights()), needle);
        let o = {
            let t = folder(Some(&config), weights());
            stderr(&nornir(&[
                "vector",
                "convert",
                "--model",
                s(&t.path().join("model")),
                "--output",
                s(&t.path().join("o")),
            ]))
        };
        if needle.contains("mixture") || needle.contains("rotary") || needle.contains("NomicBERT") {
            assert!(o.contains("supported are BERT, XLM-RoBERTa, JinaBERT v2"), "names the supported families: {o}");
        }
    }
}

// --- decoders ------------------------------------------------------------------------------------

/// A tiny Qwen3 checkpoint (`model.` prefix, untied `lm_head`): hidden 8, 4 heads over 2 kv
/// heads of width 4, `layers` layers.
fn tiny_qwen3(layers: usize) -> Vec<(String, &'static str, Vec<usize>)> {
    let (h, d, i, v) = (8usize, 4usize, 16usize, 12usize);
    let mut t: Vec<(String, &'static str, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), "BF16", vec![v, h]),
        ("model.norm.weight".into(), "BF16", vec![h]),
        ("lm_head.weight".into(), "BF16", vec![v, h]),
    ];
    for l in 0..layers {
        for (name, shape) in [
            ("input_layernorm", vec![h]),
            ("post_attention_layernorm", vec![h]),
            ("self_attn.q_proj", vec![4 * d, h]),
            ("self_attn.k_proj", vec![2 * d, h]),
            ("self_attn.v_proj", vec![2 * d, h]),
            ("self_attn.o_proj", vec![h, 4 * d]),
            ("self_attn.q_norm", vec![d]),
            ("self_attn.k_norm", vec![d]),
            ("mlp.gate_proj", vec![i, h]),
            ("mlp.up_proj", vec![i, h]),
            ("mlp.down_proj", vec![h, i]),
        ] {
            t.push((format!("model.layers.{l}.{name}.weight"), "BF16", shape));
        }
    }
    t
}

const QWEN3: &str = r#"{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":8,"num_hidden_layers":1,
"num_attention_heads":4,"num_key_value_heads":2,"head_dim":4,"intermediate_size":16,"vocab_size":12,"rms_norm_eps":1e-6,
"rope_theta":1000000.0,"rope_scaling":null,"use_sliding_window":false,"tie_word_embeddings":false}"#;

/// A tokenizer.json whose vocabulary has `words` at ids 0, 1, 2...
fn tokenizer(words: &[&str]) -> String {
    let vocab: serde_json::Map<String, Value> =
        words.iter().enumerate().map(|(i, w)| ((*w).to_owned(), json!(i))).collect();
    json!({"version": "1.0", "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "a"}}).to_string()
}

/// Converts `t/model` into `t/out` with `flags`; asserts the one-line error and that nothing was
/// written.
fn refused_with(t: &tempfile::TempDir, flags: &[&str], needle: &str) {
    let (model, out) = (t.path().join("model"), t.path().join("out"));
    let mut args = vec!["vector", "convert", "--model", s(&model), "--output", s(&out)];
    args.extend_from_slice(flags);
    assert_one_line_error(&nornir(&args), needle);
    assert_eq!(files_in(t.path()), ["model"], "nothing written beside the model");
}

#[test]
fn a_decoder_the_converter_does_not_implement_is_refused_by_name() {
    let weights = || Some(safetensors(&tiny_qwen3(1)));
    let with = |from: &str, to: &str| QWEN3.replace(from, to);
    for (config, needle) in [
        (with(r#""use_sliding_window":false"#, r#""use_sliding_window":true"#), "has use_sliding_window true"),
        (
            with(r#""rope_scaling":null"#, r#""rope_scaling":{"rope_type":"yarn","factor":4.0}"#),
            "has rope_scaling type \"yarn\" (converted: default, linear, llama3)",
        ),
        (
            with(r#""num_key_value_heads":2"#, r#""num_key_value_heads":3"#),
            "has num_attention_heads 4, not a multiple of num_key_value_heads 3",
        ),
        (
            with(r#""num_hidden_layers":1"#, r#""num_hidden_layers":2"#),
            "says num_hidden_layers 2 but the weights hold 1 layers",
        ),
        (with(r#"Qwen3ForCausalLM"#, "Qwen3MoeForCausalLM"), "cannot convert architecture Qwen3MoeForCausalLM"),
    ] {
        refused_with(&folder(Some(&config), weights()), &[], needle);
    }
    // More layers in the weights than the config says.
    refused_with(
        &folder(Some(QWEN3), Some(safetensors(&tiny_qwen3(2)))),
        &[],
        "says num_hidden_layers 1 but the weights hold 2 layers",
    );
}

#[test]
fn config_numbers_that_would_compute_nan_or_allocate_without_bound_are_refused_in_one_line() {
    let with = |from: &str, to: &str| QWEN3.replace(from, to);
    for (config, needle) in [
        (
            with(r#""rope_theta":1000000.0"#, r#""rope_theta":0"#),
            "has rope_theta 0, which must be a finite number above 1 (the rotary base; Qwen3 uses 1000000): fix the config",
        ),
        (
            with(r#""rope_scaling":null"#, r#""rope_scaling":{"rope_type":"linear","factor":0}"#),
            "has rope_scaling.factor 0, which must be a positive, finite number",
        ),
        (with(r#""rms_norm_eps":1e-6"#, r#""rms_norm_eps":-1e-6"#), "has rms_norm_eps -1e-6, which must be a number"),
        (
            with(r#""num_hidden_layers":1"#, r#""num_hidden_layers":1000000000000000"#),
            "has num_hidden_layers 1000000000000000, which must be a whole number from 1 to 1000",
        ),
        (with(r#""head_dim":4"#, r#""head_dim":-4"#), "has head_dim -4, not a value of its kind"),
    ] {
        refused_with(&folder(Some(&config), Some(safetensors(&tiny_qwen3(1)))), &[], needle);
    }
    let weights = || Some(safetensors(&tiny_bert(|_| {})));
    let zero = CONFIG.replace(r#""hidden_size":4"#, r#""hidden_size":0"#);
    refused(&folder(Some(&zero), weights()), "has hidden_size 0, which must be a whole number from 1 to 1048576");
    let eps = CONFIG.replace(r#""type_vocab_size":2"#, r#""type_vocab_size":2,"layer_norm_eps":0"#);
    refused(&folder(Some(&eps), weights()), "has layer_norm_eps 0, which must be a number from 1e-38 to 1");
}

#[test]
fn a_reranker_without_yes_and_no_and_an_encoder_in_half_precision_are_refused() {
    let t = folder(Some(QWEN3), Some(safetensors(&tiny_qwen3(1))));
    std::fs::write(t.path().join("model/tokenizer.json"), tokenizer(&["a", "b", "yes"])).expect("tokenizer");
    refused_with(&t, &["--reranker"], "has no tokens \"yes\" and \"no\" in its vocabulary");
    let t = folder(Some(CONFIG), Some(safetensors(&tiny_bert(|_| {}))));
    refused_with(&t, &["--dtype", "bfloat16"], "an encoder: --dtype bfloat16 is for decoders only; leave --dtype out");
}

#[test]
fn a_decoder_converts_as_an_embedder_or_as_a_one_label_reranker() {
    let t = folder(Some(QWEN3), Some(safetensors(&tiny_qwen3(1))));
    std::fs::write(t.path().join("model/tokenizer.json"), tokenizer(&["a", "no", "b", "yes"])).expect("tokenizer");
    let (model, out) = (t.path().join("model"), t.path().join("out"));
    let run = |flags: &[&str]| {
        let mut args = vec!["vector", "convert", "--model", s(&model), "--output", s(&out), "--force", "--json"];
        args.extend_from_slice(flags);
        let o = nornir(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<Value>(&o.stdout).expect("conversion.json")
    };
    let r = run(&["--dtype", "bfloat16"]);
    assert_eq!(
        (&r["family"], &r["head"], &r["output"], &r["dtype"]),
        (&json!("qwen3"), &json!("encoder"), &json!("last_hidden_state"), &json!("bfloat16"))
    );
    // Fused, as asked by default; but heads 4 wide keep the causal bias everywhere: ONNX
    // Runtime's GroupQueryAttention takes widths that are multiples of 8 only.
    assert_eq!(r["fused"], true);
    let ops = r["operators"].as_array().expect("operators");
    assert!(!ops.iter().any(|o| o[0] == "GroupQueryAttention" || o[0] == "If"), "{ops:?}");
    assert_eq!(r["reranker_by"], Value::Null);
    let r = run(&["--reranker"]);
    assert_eq!((&r["head"], &r["output"], &r["labels"]), (&json!("yes-no"), &json!("logits"), &json!(1)));
    assert_eq!(r["reranker_by"], "asked");
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).expect("config")).expect("json");
    assert_eq!(config["architectures"], json!(["Qwen3ForSequenceClassification"]));
    assert_eq!((&config["num_labels"], &config["id2label"]), (&json!(1), &json!({"0": "yes"})));
    assert_eq!(config["hidden_size"], 8, "the rest of the config is kept");
}

/// A decoder is a reranker where asked or where its model card says `pipeline_tag: text-ranking`,
/// never because of its folder's name; the summary says which it became and why.
#[test]
fn a_decoder_is_a_reranker_by_its_model_card_and_the_summary_says_so() {
    let t = folder(Some(QWEN3), Some(safetensors(&tiny_qwen3(1))));
    let named = t.path().join("Qwen3-Reranker-0.6B");
    std::fs::rename(t.path().join("model"), &named).expect("rename");
    std::fs::write(named.join("tokenizer.json"), tokenizer(&["a", "no", "b", "yes"])).expect("tokenizer");
    let out = t.path().join("out");
    let summary = || {
        let o = nornir(&["vector", "convert", "--model", s(&named), "--output", s(&out), "--force"]);
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let record = || -> Value {
        serde_json::from_str(&std::fs::read_to_string(out.join("conversion.json")).expect("record")).expect("json")
    };
    let text = summary();
    assert!(text.contains("converted as an embedder") && text.contains("pass --reranker"), "{text}");
    assert_eq!(record()["head"], "encoder", "a name proves nothing");
    let card = "---\nlicense: apache-2.0\npipeline_tag: text-ranking\n---\n# Qwen3-Reranker\n";
    std::fs::write(named.join("README.md"), card).expect("card");
    let text = summary();
    assert!(text.contains("converted as a yes/no reranker: its README.md says pipeline_tag: text-ranking"), "{text}");
    assert_eq!((&record()["head"], &record()["reranker_by"]), (&json!("yes-no"), &json!("model-card")));
}

/// The help that lists what a registry holds is made from it: every architecture nornir-convert
/// converts is in `convert --help`, every route the server answers in `serve --help`.
#[test]
fn convert_and_serve_help_list_their_registries() {
    let help = |command: &str| {
        let o = nornir(&["vector", command, "--help"]);
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let convert = help("convert");
    for architecture in nornir_vector::convert::supported_architectures() {
        assert!(convert.contains(architecture), "{architecture} missing from convert --help");
    }
    #[cfg(feature = "embed-ort")]
    {
        let serve = help("serve");
        for route in nornir_server::routes() {
            let listed = format!("{} {}", route.method, route.path);
            assert!(serve.contains(&listed), "{listed} missing from serve --help");
        }
    }
}
