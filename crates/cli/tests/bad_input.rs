//! Every bad input, each an automated test: through the library (`Embedder::new`, `check_library`)
//! where the input reaches it, and through the `nornir` command, where the rule is exit code 2, one
//! line on stderr that says what to do, no panic, and no output or temporary file left behind.
//!
//! | input | expected (part of the one-line error, or the outcome) |
//! | --- | --- |
//! | missing model folder | `no such folder; pass a model folder with model.onnx and tokenizer.json` |
//! | folder without tokenizer.json | `no tokenizer.json (export it with the model's tokenizer` |
//! | model.onnx truncated | `check that it is a complete ONNX model (...): Load model from ... failed:Protobuf parsing failed` |
//! | model.onnx empty | `check that it is a complete ONNX model (...): ... No graph was found in the protobuf` |
//! | model.onnx random bytes | `check that it is a complete ONNX model (re-download or re-export it)` |
//! | tokenizer.json invalid JSON | `it must be the model's own Hugging Face tokenizer.json (...): EOF while parsing a value` |
//! | tokenizer larger than config.json's vocab_size | `it has 31522 tokens but config.json says the model has 30522 (vocab_size)` |
//! | the same, no config.json | `the model fails on a first test text (...); is tokenizer.json (31522 tokens) the model's own?` |
//! | an image model | `input "pixel_values" takes Float; a text model takes int64 or int32 token ids (is this an image or audio model?)` |
//! | modules.json with a module nornir does not apply (LayerNorm) | `module "sentence_transformers.models.LayerNorm" (2_LayerNorm) is not one nornir applies` |
//! | a Dense module: weights missing, only pytorch_model.bin, in_features not the pooled width, weights of another shape, an unknown activation | one line each (`crates/embed/tests/dense.rs`); here the activation and the missing weights |
//! | --prompt-name on a model without prompts | `unknown prompt name "query": the model has no prompts` |
//! | --task on a model without tasks | `--task "retrieval.query": the model has no tasks` |
//! | --dimensions wider than the model | `invalid --dimensions: 385 is wider than the model's 384-dimensional vectors` |
//! | serve: a missing model folder | `no such folder` before anything listens |
//! | serve: a --host that is not an address | `--host "nowhere" is not an IP address` |
//! | serve: --ranges with a min above its max | `invalid --ranges: ...: dimension 0: min 1 is above max -1` before anything listens |
//! | serve: --ranges of another width than the model's | `the ranges cover 1 dimensions and the vectors have 384`, at load |
//! | serve: --image-url-host that is not a host | `invalid --image-url-host: "http://a.example" is not a host: give a name or an address as a URL writes it` |
//! | embed --precision int8: --ranges of two lengths, upside down, another width, not an object | one line each, no output (`compact.rs`) |
//! | --output-name that the graph lacks | `invalid --output-name: the model has no output "pooled"; its outputs are "last_hidden_state" ...` |
//! | invalid UTF-8 on line 3 | `line 3 is not valid UTF-8; convert the file to UTF-8` |
//! | NUL bytes in a line | embedded like any other text: one row per line |
//! | one 10 MB line | one row, equal to the row of its first 2,000 bytes (both are cut to 256 tokens) |
//! | a million empty lines | a million rows, all equal |
//! | missing input file | `cannot read --input /no/such/file` |
//! | output folder does not exist | `choose a writable --output path` |
//! | output path is a folder | `is a folder: give a file path inside it` |
//! | --ort-lib: a shared library that is not ONNX Runtime | `does not export OrtGetApiBase, so it is not ONNX Runtime` |
//! | --ort-lib: a text file | `cannot be loaded as ONNX Runtime` |
//! | --ort-lib / ORT_DYLIB_PATH: a folder without the library | `is a folder with no libonnxruntime.so* in it: point ORT_DYLIB_PATH (or --ort-lib) at a libonnxruntime.so file` |
//! | --ort-lib: ONNX Runtime 1.20 (a stub whose OrtGetApiBase says 1.20.0) | `is ONNX Runtime 1.20.0, older than 1.22` |
//! | --ort-lib: a library that crashes the process on load | `doctor` dies by SIGSEGV; `doctor --isolate` reports `killed by signal 11` |
//! | a corrupt (truncated) CUDA provider library, simulated NVIDIA machine | never handed to the loader (SIGBUS): forced, `forced to cuda ... not loaded: ... is not a valid ELF shared library`; auto: CPU, the reason recorded |
//! | NORNIR_CUDA_LIBS with empty, relative and missing entries | each in doctor's `rejected_entries`; stubs in the working folder are never loaded |
//! | libraries in the model folder, run from inside it | never loaded (stubs there would crash the process) |
//! | --threads 0, --workers 0, --batch-tokens 0; an unknown flag | clap's `invalid value '0'` / `unexpected argument`, exit 2; the library says `must be at least 1` |
//! | --batch-tokens 1, smaller than any text | each text alone in a batch, the same vectors |
//! | quantize: a folder that is not a model | `no model.onnx or onnx/model.onnx`; no output folder |
//! | quantize: --output exists | `already exists: choose another --output, or pass --force`; the old folder untouched |
//! | quantize: --output in a folder that does not exist | `does not exist: create it first` |
//! | quantize: a graph with nothing to quantize | `nothing to quantize: the graph has no MatMul or Gemm node`; no output folder |
//! | quantize: --calibrate FILE missing, or with no texts | `cannot read --calibrate`, `the file has no texts`; no output folder |
//! | quantize: an int8 model forced onto a GPU | `the model is int8 for the CPU ... run it with --device cpu` (crates/cli/tests/quantize.rs) |

#![cfg(feature = "embed-ort")]

use nornir_test_support::stubs as support;

use nornir_test_support::{cosine, fixtures};

mod common;

use std::path::{Path, PathBuf};

use common::{Run, assert_one_line_error, f32_rows, files_in, model, nornir, s, stderr};
use nornir_vector::{Device, Embedder, EmbedderOptions};

fn embed_error(dir: &Path, needle: &str) {
    assert_one_line_error(&nornir(&["vector", "embed", "--model", s(dir), "hello"]), needle);
}

fn cpu() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_threads(1)
}

fn library_error(dir: &Path, options: &EmbedderOptions, needle: &str) {
    let e = nornir_vector::error_chain(&Embedder::new(dir, options).expect_err("a load error"));
    assert!(e.contains(needle), "expected {needle:?} in {e}");
}

/// The default model's folder with links to its files, except those `replace` writes.
fn model_copy(dir: &Path, replace: &[(&str, &[u8])]) -> PathBuf {
    let m = model();
    let copy = dir.join("model");
    std::fs::create_dir_all(&copy).expect("mkdir");
    for entry in std::fs::read_dir(&m).expect("read model dir") {
        let name = entry.expect("entry").file_name();
        std::os::unix::fs::symlink(m.join(&name), copy.join(&name)).expect("link");
    }
    for (name, bytes) in replace {
        let p = copy.join(name);
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, bytes).expect("write replacement");
    }
    copy
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn broken_model_folders() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let missing = t.path().join("no-such-model");
    library_error(&missing, &cpu(), "no such folder");
    embed_error(&missing, "no such folder; pass a model folder with model.onnx and tokenizer.json");

    let no_tokenizer = model_copy(&t.path().join("a"), &[]);
    std::fs::remove_file(no_tokenizer.join("tokenizer.json")).expect("rm");
    library_error(&no_tokenizer, &cpu(), "no tokenizer.json");
    embed_error(&no_tokenizer, "no tokenizer.json (export it with the model's tokenizer");

    let model_bytes = std::fs::read(model().join("model.onnx")).expect("model");
    let truncated = model_copy(&t.path().join("b"), &[("model.onnx", &model_bytes[..model_bytes.len() / 3])]);
    library_error(&truncated, &cpu(), "Protobuf parsing failed");
    embed_error(&truncated, "check that it is a complete ONNX model (re-download or re-export it): Load model from");
    embed_error(&truncated, "failed:Protobuf parsing failed");
    let e = stderr(&nornir(&["vector", "embed", "--model", s(&truncated), "x"]));
    assert!(!e.contains(".."), "{e}");

    let empty = model_copy(&t.path().join("c"), &[("model.onnx", b"")]);
    library_error(&empty, &cpu(), "No graph was found");
    embed_error(&empty, "check that it is a complete ONNX model");

    let noise: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let random = model_copy(&t.path().join("d"), &[("model.onnx", &noise)]);
    library_error(&random, &cpu(), "complete ONNX model");
    embed_error(&random, "check that it is a complete ONNX model (re-download or re-export it)");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn broken_or_foreign_tokenizers() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let invalid = model_copy(&t.path().join("a"), &[("tokenizer.json", b"{\"version\": ")]);
    library_error(&invalid, &cpu(), "EOF while parsing");
    embed_error(
        &invalid,
        "it must be the model's own Hugging Face tokenizer.json (tokenizer.save_pretrained): re-download or re-export it: EOF while parsing",
    );

    // Another model's tokenizer: the same one with 1,000 more tokens than the model has rows.
    let text = std::fs::read_to_string(model().join("tokenizer.json")).expect("tokenizer");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("tokenizer JSON");
    let vocab = json["model"]["vocab"].as_object_mut().expect("WordPiece vocab");
    for i in 0..1000 {
        vocab.insert(format!("nornirextra{i}"), serde_json::json!(30522 + i));
    }
    let larger = serde_json::to_vec(&json).expect("serialize");
    let foreign = model_copy(&t.path().join("b"), &[("tokenizer.json", &larger)]);
    library_error(&foreign, &cpu(), "it has 31522 tokens but config.json says the model has 30522 (vocab_size)");
    embed_error(&foreign, "so it is not this model's tokenizer");
    std::fs::remove_file(foreign.join("config.json")).expect("rm config");
    library_error(&foreign, &cpu(), "is tokenizer.json (31522 tokens) the model's own?");
    embed_error(&foreign, "the model fails on a first test text");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn an_image_model_is_refused_at_load() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let dir = model_copy(&t.path().join("a"), &[]);
    std::fs::remove_file(dir.join("model.onnx")).expect("rm");
    fixtures::write_model(&dir, fixtures::Kind::ImageModel, 30522);
    library_error(&dir, &cpu(), "pixel_values");
    embed_error(&dir, "a text model takes int64 or int32 token ids (is this an image or audio model?)");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn model_contract_mistakes() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let modules = br#"[{"path":"","type":"sentence_transformers.models.Transformer"},
        {"path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
        {"path":"2_LayerNorm","type":"sentence_transformers.models.LayerNorm"}]"#;
    let other = model_copy(&t.path().join("a"), &[("modules.json", modules)]);
    library_error(&other, &cpu(), "is not one nornir applies");
    embed_error(&other, "module \"sentence_transformers.models.LayerNorm\" (2_LayerNorm) is not one nornir applies");

    let modules = nornir_test_support::dense::modules_json(&["2_Dense"]);
    let softplus = nornir_test_support::dense::Dense {
        in_features: 384,
        out_features: 8,
        activation: "torch.nn.modules.activation.Softplus",
        bias: true,
        seed: 1,
    };
    let dense = model_copy(&t.path().join("dense"), &[("modules.json", modules.as_bytes())]);
    nornir_test_support::dense::write_dense(&dense, "2_Dense", &softplus);
    embed_error(
        &dense,
        "2_Dense/config.json: activation_function \"torch.nn.modules.activation.Softplus\" is not one nornir applies",
    );
    let tanh = nornir_test_support::dense::Dense { activation: "torch.nn.modules.activation.Tanh", ..softplus };
    let unweighted = model_copy(&t.path().join("unweighted"), &[("modules.json", modules.as_bytes())]);
    nornir_test_support::dense::write_dense(&unweighted, "2_Dense", &tanh);
    std::fs::remove_file(unweighted.join("2_Dense/model.safetensors")).expect("rm");
    embed_error(&unweighted, "2_Dense/model.safetensors is missing: the Dense module has no weights");

    let m = model();
    let with = |extra: &[&str]| {
        let mut args = vec!["vector", "embed", "--model", s(&m)];
        args.extend_from_slice(extra);
        args.push("hello");
        nornir(&args)
    };
    let cases: [(&[&str], &str); 4] = [
        (&["--prompt-name", "query"], "unknown prompt name \"query\": the model has no prompts"),
        (&["--task", "retrieval.query"], "invalid --task: \"retrieval.query\": the model has no tasks"),
        (&["--dimensions", "385"], "invalid --dimensions: 385 is wider than the model's 384-dimensional vectors"),
        (
            &["--output-name", "pooled"],
            "invalid --output-name: the model has no output \"pooled\"; its outputs are \"last_hidden_state\"",
        ),
    ];
    for (extra, needle) in cases {
        assert_one_line_error(&with(extra), needle);
    }
    let missing = t.path().join("no-such-model");
    assert_one_line_error(&nornir(&["vector", "serve", "--port", "0", "--model", s(&missing)]), "no such folder");
    assert_one_line_error(
        &nornir(&["vector", "serve", "--port", "0", "--host", "nowhere", "--model", s(&m)]),
        "--host \"nowhere\" is not an IP address",
    );
    // Ranges are checked where they are read: a server would otherwise answer every int8 as -128.
    let upside_down = t.path().join("ranges.json");
    std::fs::write(&upside_down, r#"{"min": [1.0], "max": [-1.0]}"#).expect("write ranges");
    assert_one_line_error(
        &nornir(&["vector", "serve", "--port", "0", "--ranges", s(&upside_down), "--model", s(&m)]),
        "dimension 0: min 1 is above max -1",
    );
    // An allow-list entry that is not a host, refused by the server's config check.
    let o = nornir(&[
        "vector",
        "serve",
        "--port",
        "0",
        "--allow-image-urls",
        "--image-url-host",
        "http://a.example",
        "--model",
        s(&m),
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    let last = e.trim_end().lines().last().unwrap_or_default();
    assert!(last.contains("invalid --image-url-host: \"http://a.example\" is not a host"), "{e}");
    let narrow = t.path().join("narrow.json");
    std::fs::write(&narrow, r#"{"min": [-1.0], "max": [1.0]}"#).expect("write ranges");
    // Found when the model loads, after the server has said where it listens: exit 2, the
    // error on its own last line.
    let o = nornir(&["vector", "serve", "--port", "0", "--ranges", s(&narrow), "--model", s(&m)]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    let last = e.trim_end().lines().last().unwrap_or_default();
    assert!(last.contains("the ranges cover 1 dimensions and the vectors have 384"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn input_text_edge_cases() {
    nornir_test_support::needs_assets!();
    let m = model();
    let t = tempfile::tempdir().expect("tempdir");
    let out = t.path().join("out.f32");
    let bad = t.path().join("bad.txt");
    std::fs::write(&bad, b"fine\nalso fine\nnot \xff utf8\n").expect("write");
    let o = nornir(&["vector", "embed", "--model", s(&m), "--input", s(&bad), "--output", s(&out)]);
    assert_one_line_error(&o, "line 3 is not valid UTF-8; convert the file to UTF-8");
    assert_eq!(files_in(t.path()), ["bad.txt"], "no partial output, no temporary file");

    let o = Run { stdin: b"a\0b\n\0\nplain\n", ..Run::new(&["vector", "embed", "--model", s(&m), "--format", "f32"]) }
        .output();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(f32_rows(&o.stdout).len(), 3, "NUL bytes are text: one row per line");

    let mut long = String::new();
    let words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog,", "again."];
    let mut i = 0;
    while long.len() < 10 << 20 {
        long.push_str(words[i % words.len()]);
        long.push(' ');
        i += 7;
    }
    let head = &long[..long[..2000].rfind(' ').expect("space")];
    let input = format!("{long}\n{head}\n");
    let o =
        Run { stdin: input.as_bytes(), ..Run::new(&["vector", "embed", "--model", s(&m), "--format", "f32"]) }.output();
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = f32_rows(&o.stdout);
    assert_eq!(rows.len(), 2);
    assert!(cosine(&rows[0], &rows[1]) > 0.99999, "the 10 MB line embeds as its first 256 tokens");

    let empty_lines = vec![b'\n'; 1_000_000];
    let o = Run { stdin: &empty_lines, ..Run::new(&["vector", "embed", "-q", "--model", s(&m), "--format", "f32"]) }
        .output();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout.len(), 1_000_000 * 384 * 4);
    let first = &o.stdout[..384 * 4];
    assert!(o.stdout.chunks_exact(384 * 4).all(|r| r == first), "every empty line has the empty text's vector");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn missing_input_and_unwritable_outputs() {
    nornir_test_support::needs_assets!();
    let m = model();
    let t = tempfile::tempdir().expect("tempdir");
    assert_one_line_error(
        &nornir(&["vector", "embed", "--model", s(&m), "--input", "/no/such/file"]),
        "cannot read --input /no/such/file",
    );
    let nowhere = t.path().join("no/such/dir/out.jsonl");
    assert_one_line_error(
        &nornir(&["vector", "embed", "--model", s(&m), "--output", s(&nowhere), "x"]),
        "choose a writable --output path",
    );
    let folder = t.path().join("folder");
    std::fs::create_dir(&folder).expect("mkdir");
    assert_one_line_error(
        &nornir(&["vector", "embed", "--model", s(&m), "--output", s(&folder), "x"]),
        "is a folder: give a file path inside it",
    );
    assert_eq!(files_in(t.path()), ["folder"], "no temporary file left behind");
    assert!(files_in(&folder).is_empty());
}

/// A stub `libonnxruntime.so.<version>` whose `OrtGetApiBase()->GetVersionString()` says `version`.
fn stub_ort(dir: &Path, version: &str) -> PathBuf {
    let src = format!(
        "typedef struct {{ const void* (*get_api)(unsigned); const char* (*version)(void); }} OrtApiBase;\n\
         static const void* get_api(unsigned v) {{ (void)v; return 0; }}\n\
         static const char* version(void) {{ return \"{version}\"; }}\n\
         static const OrtApiBase base = {{ get_api, version }};\n\
         const OrtApiBase* OrtGetApiBase(void) {{ return &base; }}\n"
    );
    support::stub_library(dir, &format!("libonnxruntime.so.{version}"), &src, &[])
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn ort_libraries_that_are_not_usable() {
    nornir_test_support::needs_assets!();
    let m = model();
    let t = tempfile::tempdir().expect("tempdir");
    let not_ort = support::stub_library(t.path(), "libnotort.so.1", "int not_onnx_runtime = 1;\n", &[]);
    let old = stub_ort(&t.path().join("old"), "1.20.0");
    let text = t.path().join("libonnxruntime.so");
    std::fs::write(&text, "not a library\n").expect("write");

    let check = |p: &Path| nornir_vector::diagnostics::check_library(p).expect_err("not usable").to_string();
    assert!(check(&not_ort).contains("does not export OrtGetApiBase, so it is not ONNX Runtime"));
    assert!(check(&text).contains("cannot be loaded as ONNX Runtime"));
    assert_eq!(
        nornir_vector::diagnostics::check_library(&old).ok().as_deref(),
        Some("1.20.0"),
        "it is ONNX Runtime, too old"
    );

    let embed = |lib: &Path| nornir(&["vector", "embed", "--model", s(&m), "--ort-lib", s(lib), "x"]);
    assert_one_line_error(&embed(&not_ort), "does not export OrtGetApiBase, so it is not ONNX Runtime");
    assert_one_line_error(&embed(&text), "cannot be loaded as ONNX Runtime");
    assert_one_line_error(&embed(&old), "is ONNX Runtime 1.20.0, older than 1.22");
    // A folder without the library: an error, never another library found elsewhere.
    let empty = t.path().join("no-ort-here");
    std::fs::create_dir_all(&empty).expect("mkdir");
    assert_one_line_error(&embed(&empty), "is a folder with no libonnxruntime.so* in it");
    let o = nornir(&["vector", "doctor", "--json", "--ort-lib", s(&old)]);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor JSON");
    assert!(d["ort"]["error"].as_str().is_some_and(|e| e.contains("1.20.0 is older than 1.22")), "{}", d["ort"]);
}

/// A library that kills any process that loads it (a constructor that dereferences null), as a
/// build for another CPU or a broken install can: only a child process can survive checking it.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn doctor_isolate_reports_a_library_that_crashes_on_load() {
    nornir_test_support::needs_assets!();
    let m = model();
    let t = tempfile::tempdir().expect("tempdir");
    let crash = support::stub_library(
        t.path(),
        "libonnxruntime.so.1.31.1",
        "__attribute__((constructor)) static void nornir_crash(void) { *(volatile int*)0 = 1; }\n\
         const void* OrtGetApiBase(void) { return 0; }\n",
        &[],
    );
    let plain = nornir(&["vector", "doctor", "--model", s(&m), "--ort-lib", s(&crash)]);
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&plain.status), Some(11), "without --isolate it dies");

    let o = nornir(&["vector", "doctor", "--isolate", "--json", "--model", s(&m), "--ort-lib", s(&crash)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor JSON");
    assert_eq!(d["isolated"], true);
    let e = d["ort"]["error"].as_str().unwrap_or_default();
    assert!(e.contains("killed by signal 11 (SIGSEGV") && e.contains(s(&crash)), "{e}");
    assert!(d["session"]["error"].as_str().is_some_and(|x| x.contains("use another build")), "{}", d["session"]);
    let human = nornir(&["vector", "doctor", "--isolate", "--model", s(&m), "--ort-lib", s(&crash)]);
    assert!(human.status.success());
    assert!(String::from_utf8_lossy(&human.stdout).contains("killed by signal 11"));

    // A good library through --isolate gives the same report as without it, read back typed.
    let report = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["vector", "doctor", "--json", "--model", s(&m)];
        args.extend_from_slice(extra);
        let o = nornir(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).expect("doctor JSON")
    };
    let (mut d, mut plain) = (report(&["--isolate"]), report(&[]));
    // The memory each session added is measured anew in each process: compared apart.
    let (memory, plain_memory) = (d["session"]["memory"].take(), plain["session"]["memory"].take());
    assert_eq!(memory["workers_per_session"], plain_memory["workers_per_session"], "{memory} {plain_memory}");
    assert_eq!(
        memory["session_growth_bytes"].as_array().map(Vec::len),
        Some(1),
        "one session for the workers: {memory}"
    );
    assert!(memory["resident_bytes"].as_u64().is_some_and(|b| b > 0), "{memory}");
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider", "{d}");
    assert!(d["session"]["model"]["output_reason"].as_str().is_some(), "{d}");
    assert!(d["ort"]["version"].as_str().is_some());
    assert_eq!((&d["session"], &d["ort"], &d["next_step"]), (&plain["session"], &plain["ort"], &plain["next_step"]));
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_corrupt_provider_library() {
    nornir_test_support::needs_assets!();
    let gpu =
        PathBuf::from(std::env::var_os("NORNIR_TEST_ORT_GPU").expect("NORNIR_TEST_ORT_GPU: run `cargo xtask test`"));
    let t = tempfile::tempdir().expect("tempdir");
    let build = t.path().join("ort");
    std::fs::create_dir(&build).expect("mkdir");
    for name in ["libonnxruntime.so.1.31.1", "libonnxruntime_providers_shared.so"] {
        std::os::unix::fs::symlink(gpu.with_file_name(name), build.join(name)).expect("link");
    }
    let mut corrupt = std::fs::read(gpu.with_file_name("libonnxruntime_providers_cuda.so")).expect("provider");
    corrupt.truncate(4096);
    std::fs::write(build.join("libonnxruntime_providers_cuda.so"), &corrupt).expect("write");
    let (root, libs) = support::simulated_nvidia_machine(t.path());
    let env = [("NORNIR_PROBE_ROOT", s(&root)), ("NORNIR_CUDA_LIBS", s(&libs))];
    let lib = build.join("libonnxruntime.so.1.31.1");
    let m = model();

    let forced = Run {
        env: &env,
        ..Run::new(&["vector", "embed", "--model", s(&m), "--ort-lib", s(&lib), "--device", "cuda", "x"])
    }
    .output();
    assert_one_line_error(&forced, "forced to cuda");
    assert!(stderr(&forced).contains("libonnxruntime_providers_cuda.so"), "{}", stderr(&forced));

    let auto =
        Run { env: &env, ..Run::new(&["vector", "doctor", "--json", "--model", s(&m), "--ort-lib", s(&lib)]) }.output();
    assert!(auto.status.success(), "{}", stderr(&auto));
    let d: serde_json::Value = serde_json::from_slice(&auto.stdout).expect("doctor JSON");
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
    let cuda = d["session"]["registrations"]
        .as_array()
        .and_then(|r| r.iter().find(|x| x["provider"] == "CUDAExecutionProvider"))
        .unwrap_or_else(|| panic!("no CUDA registration: {d}"));
    assert_eq!(cuda["ok"], false);
    assert!(
        cuda["error"].as_str().is_some_and(
            |e| e.contains("not loaded") && e.contains("libonnxruntime_providers_cuda.so is not a valid ELF")
        ),
        "{cuda}"
    );
}

/// Empty, relative and missing entries are ignored and reported; a folder that an empty or
/// relative entry would mean (the working folder) holds stubs that would make CUDA available if
/// it were searched.
#[test]
fn library_path_variables_with_bad_entries() {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    support::nvidia_driver_tree(&root);
    let cwd = t.path().join("work");
    support::stub_libcuda(&cwd, 1);
    support::stub_cudart(&cwd);
    support::stub_libcuda(&cwd.join("lib"), 1);
    support::stub_cudart(&cwd.join("lib"));
    let o = Run {
        env: &[("NORNIR_PROBE_ROOT", s(&root)), ("NORNIR_CUDA_LIBS", "::lib:./lib:/no/such/folder")],
        cwd: Some(&cwd),
        ..Run::new(&["vector", "doctor", "--json", "--cuda"])
    }
    .output();
    assert!(o.status.success(), "{}", stderr(&o));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor JSON");
    let rejected: Vec<String> = d["cuda"]["rejected_entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| format!("{} {}", r["entry"].as_str().unwrap_or("?"), r["reason"].as_str().unwrap_or("?")))
        .collect();
    assert!(rejected.iter().any(|r| r.contains("empty entry ignored")), "{rejected:?}");
    assert!(rejected.iter().any(|r| r.starts_with("lib ") && r.contains("relative entry ignored")), "{rejected:?}");
    assert!(rejected.iter().any(|r| r.starts_with("./lib ")), "{rejected:?}");
    assert!(rejected.iter().any(|r| r.starts_with("/no/such/folder") && r.contains("not an existing folder")));
    assert_eq!(d["cuda"]["available"], false, "the working folder's stubs were not loaded: {}", d["cuda"]);
    let text = d.to_string();
    assert!(!text.contains(&format!("{}/libcuda", s(&cwd))), "nothing from the working folder: {text}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn numeric_options_out_of_range() {
    nornir_test_support::needs_assets!();
    let m = model();
    for flag in ["--threads", "--workers", "--batch-tokens", "--max-length"] {
        let o = nornir(&["vector", "embed", "--model", s(&m), flag, "0", "x"]);
        assert_eq!(o.status.code(), Some(2), "{flag}");
        assert!(stderr(&o).contains("invalid value '0'"), "{flag}: {}", stderr(&o));
    }
    let unknown = nornir(&["vector", "embed", "--no-such-flag"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("unexpected argument"));
    library_error(&m, &cpu().with_threads(0), "invalid `threads`: must be at least 1");
    library_error(&m, &cpu().with_workers(0), "invalid `workers`: must be at least 1");
    library_error(&m, &cpu().with_token_budget(0), "invalid `token_budget`: must be at least 1");
    library_error(&m, &cpu().with_max_length(0), "invalid `max_length`: must be at least 1");

    // A budget smaller than any text: each text runs alone, with the same vectors.
    let texts = ["a short one", "", "a somewhat longer text than the first"];
    let small = Embedder::new(&m, &cpu().with_token_budget(1)).expect("load");
    let one_by_one = small.embed(&texts).expect("embed");
    assert_eq!(small.stats().batches, 3);
    let normal = Embedder::new(&m, &cpu()).expect("load").embed(&texts).expect("embed");
    for i in 0..texts.len() {
        assert!(cosine(one_by_one.row(i), normal.row(i)) > 0.99999, "row {i}");
    }
}

/// Libraries inside the model folder, run from inside it, are never loaded: a library there that
/// would crash any process loading it goes unnoticed.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn nothing_is_loaded_from_the_model_folder_or_the_working_folder() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let dir = model_copy(t.path(), &[]);
    let crash = "__attribute__((constructor)) static void nornir_crash(void) { *(volatile int*)0 = 1; }\n";
    for soname in ["libonnxruntime.so.1.31.1", "libonnxruntime.so", "libcudart.so.13", "libcuda.so.1"] {
        support::stub_library(&dir, soname, crash, &[]);
    }
    let o = Run { cwd: Some(&dir), ..Run::new(&["vector", "embed", "--model", ".", "x"]) }.output();
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    let o = Run { cwd: Some(&dir), ..Run::new(&["vector", "doctor", "--model", "."]) }.output();
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn quantize_bad_inputs() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let out = t.path().join("int8");
    let o = s(&out);
    let empty = t.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    assert_one_line_error(
        &nornir(&["vector", "quantize", "--model", s(&empty), "--output", o]),
        "no model.onnx or onnx/model.onnx",
    );
    assert!(!out.exists());

    let existing = t.path().join("existing");
    std::fs::create_dir_all(&existing).expect("mkdir");
    std::fs::write(existing.join("keep.txt"), b"mine").expect("write");
    let m = model();
    assert_one_line_error(
        &nornir(&["vector", "quantize", "--model", s(&m), "--output", s(&existing)]),
        "already exists: choose another --output, or pass --force",
    );
    assert_eq!(files_in(&existing), ["keep.txt"]);
    assert_one_line_error(
        &nornir(&["vector", "quantize", "--model", s(&m), "--output", s(&t.path().join("no/such/int8"))]),
        "does not exist: create it first",
    );

    let no_texts = t.path().join("empty.txt");
    std::fs::write(&no_texts, "\n  \n").expect("write");
    assert_one_line_error(
        &nornir(&["vector", "quantize", "--model", s(&m), "--output", o, "--calibrate", s(&t.path().join("none.txt"))]),
        "cannot read --calibrate",
    );
    assert_one_line_error(
        &nornir(&["vector", "quantize", "--model", s(&m), "--output", o, "--calibrate", s(&no_texts)]),
        "the file has no texts; give one text per line",
    );
    assert!(!out.exists());
    std::fs::remove_file(&no_texts).expect("rm");

    let gather_only = model_copy(&t.path().join("g"), &[]);
    // A 4-wide table: the configs that name a width of 384 go.
    for f in ["model.onnx", "config.json", "modules.json", "1_Pooling"] {
        std::fs::remove_file(gather_only.join(f)).expect("rm");
    }
    fixtures::write_model(&gather_only, fixtures::Kind::NoTokenTypeIds, 30522);
    assert_one_line_error(
        &nornir(&["vector", "quantize", "--model", s(&gather_only), "--output", o]),
        "nothing to quantize: the graph has no MatMul or Gemm node",
    );
    assert!(!out.exists());
    assert_eq!(files_in(t.path()), ["empty", "existing", "g"], "no temporary folder left");
}
