//! Static models (Model2Vec) against model2vec's own `encode` (scripts/static_reference.py):
//! four folders saved by model2vec with random tables (a real WordPiece tokenizer with float32,
//! vocabulary-quantized and int8 tables; a Unigram tokenizer cut at 8 tokens), embedded by the
//! library, the command line and the server, with no ONNX Runtime loaded; each of four mistakes
//! shown to be caught by the comparison; and bad folders refused in one line.

#![cfg(feature = "embed-ort")]

mod common;

use std::path::Path;

use common::server::Server;
use common::{largest_difference, nornir, rows, s};
use nornir_test_support::env_path;
use nornir_vector::{CallOptions, Device, Embedder, EmbedderOptions, Precision};
use serde_json::{Value, json};

/// The reference's cases, made in `work`.
fn reference(work: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/static_reference.py");
    let tokenizer = common::model().join("tokenizer.json");
    let corpus = env_path("NORNIR_TEST_CORPUS").join("corpus.txt");
    let o = std::process::Command::new(env_path("NORNIR_TEST_REFERENCE_PYTHON"))
        .arg(script)
        .args(["cases", s(&tokenizer), s(&corpus), s(work)])
        .output()
        .expect("run the reference script");
    assert!(o.status.success(), "the reference failed:\n{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("the reference's JSON")
}

/// No ONNX Runtime at all: a library path that does not exist is never opened.
fn options() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_ort_library("/nonexistent/libonnxruntime.so")
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn static_models_embed_as_model2vec_does_on_every_surface() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference(t.path());
    let texts: Vec<String> =
        r["texts"].as_array().expect("texts").iter().map(|t| t.as_str().unwrap_or_default().to_owned()).collect();
    let input = t.path().join("texts.jsonl");
    let lines: Vec<String> = texts.iter().map(|t| json!({ "text": t }).to_string()).collect();
    std::fs::write(&input, lines.join("\n") + "\n").expect("write texts");
    let cases = r["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 4);
    let mut worst = 0f64;
    let mut caught = std::collections::BTreeMap::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let folder = Path::new(case["folder"].as_str().expect("folder"));
        let want = rows(&case["vectors"]);
        let e = Embedder::new(folder, &options()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(e.model_info().folder.is_static, "{name}");
        assert!(e.report().active_provider.contains("no ONNX Runtime"), "{name}");
        let got: Vec<Vec<f32>> = {
            let v = e.embed(&texts).expect(name);
            (0..v.len()).map(|i| v.row(i).to_vec()).collect()
        };
        let diff = largest_difference(&got, &want);
        assert!(diff <= 1e-5, "{name}: nornir and model2vec differ by {diff:e}");
        worst = worst.max(diff);
        // How far each mistake's vectors are from nornir's, at most, over the cases.
        for (mistake, wrong) in case["wrong"].as_object().expect("mistakes") {
            let off = largest_difference(&got, &rows(wrong));
            let seen = caught.entry(mistake.clone()).or_insert(0f64);
            *seen = seen.max(off);
        }
        // The command line's JSON lines are the library's vectors.
        let o = nornir(&["vector", "embed", "--model", s(folder), "--input-format", "jsonl", "--input", s(&input)]);
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let cli: Vec<Vec<f32>> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("a JSON line");
                v["embedding"]
                    .as_array()
                    .expect("embedding")
                    .iter()
                    .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
                    .collect()
            })
            .collect();
        let from_library: Vec<Vec<f64>> = got.iter().map(|r| r.iter().map(|&x| f64::from(x)).collect()).collect();
        assert!(largest_difference(&cli, &from_library) <= 1e-6, "{name}: the command line's vectors");
        // Matryoshka dimensions and compact vectors work as on any embedder.
        let cut = e.embed_with(&texts[..3], &CallOptions::new().with_dimensions(8)).expect("dimensions");
        assert_eq!(cut.row(0).len(), 8);
        let int8 = e.embed_compact(&texts[..3], &CallOptions::new().with_precision(Precision::Int8)).expect("int8");
        assert_eq!(int8.len(), 3);
    }
    eprintln!("static models: 4 models x {} texts, largest difference from model2vec {worst:e}", texts.len());
    // Each mistake would be caught: on some case its vectors are far from model2vec's.
    assert_eq!(caught.len(), 4, "{caught:?}");
    for (mistake, off) in &caught {
        assert!(*off > 1e-3, "the mistake {mistake:?} stays within {off:e} of nornir's vectors on every case");
    }
    eprintln!("mistakes, largest distance from the right vectors: {caught:?}");

    // The server's OpenAI and TEI routes answer with the library's vectors.
    let folder = Path::new(cases[0]["folder"].as_str().expect("folder"));
    let want = rows(&cases[0]["vectors"]);
    let server = Server::start_with(folder, &[]);
    let (status, got) = server.post("/v1/embeddings", &json!({ "input": &texts[..4], "model": "any" }));
    assert_eq!(status, 200, "{got}");
    for (i, item) in got["data"].as_array().expect("data").iter().enumerate() {
        let v: Vec<f32> = item["embedding"]
            .as_array()
            .expect("embedding")
            .iter()
            .filter_map(Value::as_f64)
            .map(|x| x as f32)
            .collect();
        assert!(largest_difference(&[v], &want[i..=i]) <= 1e-5, "/v1/embeddings row {i}");
    }
    let (status, got) = server.post("/embed", &json!({ "inputs": &texts[..2] }));
    assert_eq!(status, 200, "{got}");
    assert_eq!(got.as_array().map(Vec::len), Some(2), "{got}");
}

/// A word-level tokenizer of three tokens, the first unknown.
const WORD_LEVEL_TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
"model":{"type":"WordLevel","vocab":{"[UNK]":0,"a":1,"text":2},"unk_token":"[UNK]"}}"#;

#[test]
fn a_static_folder_without_its_table_or_with_another_tokenizer_is_refused_in_one_line() {
    let t = tempfile::tempdir().expect("tempdir");
    let folder = t.path().join("m2v");
    std::fs::create_dir(&folder).expect("mkdir");
    std::fs::write(folder.join("config.json"), r#"{"model_type": "model2vec", "normalize": true}"#).expect("config");
    std::fs::write(folder.join("tokenizer.json"), WORD_LEVEL_TOKENIZER).expect("tokenizer");
    let o = common::Run::new(&["vector", "embed", "--model", s(&folder), "a text"]).output();
    common::assert_one_line_error(&o, "model.safetensors is missing: a static model's table of token vectors");
    // A table whose rows are not the tokenizer's tokens.
    let header = br#"{"embeddings":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}}      "#;
    let mut table = (header.len() as u64).to_le_bytes().to_vec();
    table.extend_from_slice(header);
    table.extend_from_slice(&[0u8; 32]);
    std::fs::write(folder.join("model.safetensors"), table).expect("table");
    let o = common::Run::new(&["vector", "embed", "--model", s(&folder), "a text"]).output();
    common::assert_one_line_error(&o, "the table has 2 rows but the tokenizer has");
    // A static model runs on the CPU alone: forcing a GPU is refused, not ignored.
    let o = common::Run::new(&["vector", "embed", "--model", s(&folder), "--device", "cuda", "a text"]).output();
    common::assert_one_line_error(&o, "static model");
}
