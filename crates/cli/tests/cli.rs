//! The `nornir` binary end to end, on the real default model and the real CPU ONNX Runtime
//! (`cargo xtask test` fetches both and sets NORNIR_TEST_MODEL / NORNIR_HOME).

#![cfg(feature = "embed-ort")]

mod common;

use common::{Run, files_in, model, nornir, stderr};

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn embed_arguments_to_jsonl_and_say_the_provider() {
    nornir_test_support::needs_assets!();
    let m = model();
    let o = nornir(&["vector", "embed", "-v", "--model", m.to_str().expect("utf8"), "A man is eating food.", ""]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<Vec<f32>> = String::from_utf8_lossy(&o.stdout).lines().map(common::embedding_of_line).collect();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.len() == 384));
    assert!(stderr(&o).contains("running on CPUExecutionProvider (cpu)"), "{}", stderr(&o));
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn stdin_lines_keep_row_order_and_formats_agree() {
    nornir_test_support::needs_assets!();
    let m = model();
    let m = m.to_str().expect("utf8");
    let t = tempfile::tempdir().expect("tempdir");
    let input = b"first\n\nthird line, longer than the others\n";
    let npy = t.path().join("v.npy");
    let o = Run {
        stdin: input,
        ..Run::new(&["vector", "embed", "--model", m, "--format", "npy", "--output", npy.to_str().expect("utf8")])
    }
    .output();
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&npy).expect("npy written");
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let header = String::from_utf8_lossy(&bytes[..128]);
    assert!(header.contains("(3, 384,") && header.contains("<f4"), "{header}");
    let o = Run { stdin: input, ..Run::new(&["vector", "embed", "--model", m, "--format", "f32"]) }.output();
    assert!(o.status.success());
    assert_eq!(o.stdout.len(), 3 * 384 * 4);
    assert_eq!(&bytes[bytes.len() - o.stdout.len()..], &o.stdout[..], "npy data equals the f32 rows");
    assert_eq!(files_in(t.path()), ["v.npy"], "no temporary file left");
}

/// `--long`: chunk writes each text's chunks (JSON lines, or .chunks.npy and .chunks.tsv beside
/// the output, with character spans that cut the right substrings of non-ASCII text); truncate
/// says how many texts it cut; refuse stops with the text's number.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn long_texts_are_chunked_refused_or_counted_when_truncated() {
    nornir_test_support::needs_assets!();
    let m = model();
    let m = m.to_str().expect("utf8");
    let long = "Ålesund ligger på øyer, og fjordene skjærer inn i landet. ".repeat(60);
    let input = format!("short text\n{long}\n");
    let args = ["vector", "embed", "-q", "--model", m, "--long", "chunk", "--window", "64", "--overlap", "8"];
    let o = Run { stdin: input.as_bytes(), ..Run::new(&args) }.output();
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["chunks"].as_array().map(Vec::len), Some(1));
    let chunks = rows[1]["chunks"].as_array().expect("chunks");
    assert!(chunks.len() > 10, "{}", chunks.len());
    let chars: Vec<char> = long.chars().collect();
    let first: String = chars[..chunks[0]["end"].as_u64().expect("end") as usize].iter().collect();
    assert!(first.starts_with("Ålesund ligger") && !first.ends_with(' '), "{first:?}");
    let text_end = long.trim_end().chars().count() as u64;
    assert_eq!(chunks.last().and_then(|c| c["end"].as_u64()), Some(text_end), "the last chunk ends the text");
    assert_eq!(chunks[0]["embedding"].as_array().map(Vec::len), Some(384));

    let t = tempfile::tempdir().expect("tempdir");
    let npy = t.path().join("v.npy");
    let npy_args = [&args[..], &["--format", "npy", "--output", npy.to_str().expect("utf8")]].concat();
    let o = Run { stdin: input.as_bytes(), ..Run::new(&npy_args) }.output();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(files_in(t.path()), ["v.chunks.npy", "v.chunks.tsv", "v.npy"]);
    let index = std::fs::read_to_string(t.path().join("v.chunks.tsv")).expect("index");
    assert_eq!(index.lines().count(), 1 + 1 + chunks.len(), "a header and a line per chunk");
    assert!(index.starts_with("text\tchunk\tstart\tend\ttokens\n0\t0\t0\t10\t"), "{index}");
    let header =
        String::from_utf8_lossy(&std::fs::read(t.path().join("v.chunks.npy")).expect("chunks")[..128]).into_owned();
    assert!(header.contains(&format!("({}, 384,", 1 + chunks.len())), "{header}");

    let o = Run { stdin: input.as_bytes(), ..Run::new(&["vector", "embed", "-q", "--model", m]) }.output();
    assert!(o.status.success());
    assert!(stderr(&o).contains("1 of 2 texts were longer than the model's 256 tokens"), "{}", stderr(&o));
    let o = Run { stdin: input.as_bytes(), ..Run::new(&["vector", "embed", "-q", "--json", "--model", m]) }.output();
    let summary: serde_json::Value = serde_json::from_str(stderr(&o).trim()).expect("one JSON line on stderr");
    assert_eq!((summary["texts"].as_u64(), summary["truncated"].as_u64()), (Some(2), Some(1)), "{summary}");
    // Every kind of output counts its cut texts, in --json and in the notice.
    let binary = ["vector", "embed", "-q", "--json", "--precision", "binary", "--model", m];
    let o = Run { stdin: input.as_bytes(), ..Run::new(&binary) }.output();
    let summary: serde_json::Value = serde_json::from_str(stderr(&o).trim()).expect("one JSON line on stderr");
    assert_eq!((summary["truncated"].as_u64(), &summary["precision"]), (Some(1), &serde_json::json!("binary")));
    let without_json: Vec<&str> = binary.iter().copied().filter(|a| *a != "--json").collect();
    let o = Run { stdin: input.as_bytes(), ..Run::new(&without_json) }.output();
    assert!(stderr(&o).contains("1 of 2 texts were longer"), "{}", stderr(&o));
    let o =
        Run { stdin: input.as_bytes(), ..Run::new(&["vector", "embed", "--model", m, "--long", "refuse"]) }.output();
    common::assert_one_line_error(&o, "text 2 of the input has");
    let o = nornir(&["vector", "embed", "--model", m, "--long", "chunk", "--format", "f32", "x"]);
    common::assert_one_line_error(&o, "give --output FILE");
    let o = nornir(&["vector", "embed", "--model", m, "--window", "64", "x"]);
    common::assert_one_line_error(&o, "--long chunk");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn jsonl_input_keeps_ids() {
    nornir_test_support::needs_assets!();
    let m = model();
    let o = Run {
        stdin: b"{\"id\": \"a\", \"text\": \"hello\"}\n{\"id\": 2, \"text\": \"world\"}\n",
        ..Run::new(&["vector", "embed", "--model", m.to_str().expect("utf8"), "--input-format", "jsonl"])
    }
    .output();
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(rows[0]["id"], "a");
    assert_eq!(rows[1]["id"], 2);
    assert_eq!(rows[1]["embedding"].as_array().map(Vec::len), Some(384));
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn forcing_an_unavailable_gpu_is_an_error_auto_falls_back() {
    nornir_test_support::needs_assets!();
    let m = model();
    let m = m.to_str().expect("utf8");
    let forced = nornir(&["vector", "embed", "--model", m, "--device", "cuda", "x"]);
    assert_eq!(forced.status.code(), Some(2));
    assert!(stderr(&forced).contains("forced to cuda"), "{}", stderr(&forced));
    let auto = nornir(&["vector", "embed", "--model", m, "--device", "auto", "x"]);
    assert!(auto.status.success(), "{}", stderr(&auto));
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn doctor_json_has_the_documented_keys_and_expect_works() {
    nornir_test_support::needs_assets!();
    let m = model();
    let m = m.to_str().expect("utf8");
    let o = nornir(&["vector", "doctor", "--json", "--model", m]);
    assert!(o.status.success(), "{}", stderr(&o));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    for key in ["driver_present", "available", "libraries"] {
        assert!(d["cuda"].get(key).is_some() && d["rocm"].get(key).is_some(), "{key}");
    }
    for key in ["path", "version", "providers"] {
        assert!(d["ort"].get(key).is_some(), "{key}");
    }
    for key in ["vendor", "providers", "reasons"] {
        assert!(d["plan"].get(key).is_some(), "{key}");
    }
    assert_eq!(d["session"]["active_provider"], "CPUExecutionProvider");
    assert!(
        d["session"]["registrations"]
            .as_array()
            .is_some_and(|r| r.iter().all(|x| x.get("ok").is_some() && x.get("error").is_some()))
    );
    assert_eq!(d["session"]["placement"]["status"], "known", "{}", d["session"]["placement"]);
    assert!(d["session"]["placement"]["nodes"]["CPUExecutionProvider"].as_u64().is_some_and(|n| n > 0));
    assert_eq!(nornir(&["vector", "doctor", "--model", m, "--expect", "cpu"]).status.code(), Some(0));
    if !common::skip_on_a_gpu_machine("doctor --expect cuda exits 1") {
        assert_eq!(nornir(&["vector", "doctor", "--model", m, "--expect", "cuda"]).status.code(), Some(1));
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn bench_json_on_the_builtin_sample() {
    nornir_test_support::needs_assets!();
    let m = model();
    let o = nornir(&["vector", "bench", "--json", "--model", m.to_str().expect("utf8"), "--threads", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let b: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(b["texts"], 99);
    assert!(b["texts_per_second"].as_f64().is_some_and(|x| x > 0.0));
    assert!(b["ort_seconds"].as_f64().is_some_and(|x| x > 0.0));
    assert_eq!(b["active_provider"], "CPUExecutionProvider");
    // Two threads: two CPU workers on one session.
    assert_eq!(b["memory"]["workers_per_session"], 2, "{}", b["memory"]);
    assert_eq!(b["memory"]["session_growth_bytes"].as_array().map(Vec::len), Some(1), "{}", b["memory"]);
    assert!(b["memory"]["peak_resident_bytes"].as_u64().is_some_and(|x| x > 0), "{}", b["memory"]);
    assert!(b["memory"]["resident_bytes"].as_u64().is_some_and(|x| x > 0), "{}", b["memory"]);

    let args =
        ["vector", "bench", "--json", "--model", m.to_str().expect("utf8"), "--concurrency", "4", "--per-call", "2"];
    let o = nornir(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!((c["callers"].as_u64(), c["per_call"].as_u64(), c["calls"].as_u64()), (Some(4), Some(2), Some(50)));
    assert!(c["ratio_to_bulk"].as_f64().is_some_and(|r| r > 0.0), "{c}");
    let l = &c["latency_ms"];
    assert!(l["p50"].as_f64() <= l["p99"].as_f64() && l["p99"].as_f64() <= l["max"].as_f64(), "{c}");
    let o = nornir(&["vector", "bench", "--per-call", "2"]);
    assert_eq!(o.status.code(), Some(2), "--per-call needs --concurrency");
}

/// `nornir ... | head -1`: the reader goes away after one line; nornir ends quietly (SIGPIPE, as
/// `cat` does), never with a panic about printing to stdout.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_closed_pipe_ends_quietly() {
    nornir_test_support::needs_assets!();
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let m = model();
    let texts: Vec<String> = (0..2000).map(|i| format!("text number {i}")).collect();
    let mut args = vec!["vector".to_owned(), "embed".into(), "--model".into(), m.display().to_string()];
    args.extend(texts);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nornir"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run nornir");
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut first).expect("one line");
    assert!(first.starts_with("{\"embedding\":["), "{first}");
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    const SIGPIPE: i32 = 13; // on Linux
    assert_eq!(out.status.signal(), Some(SIGPIPE), "{:?}: {err}", out.status);
}

/// The command parses --device, --pooling and --expect with the library's own parsers, so
/// `NORNIR_DEVICE=nvidia` means the same to both.
#[test]
fn options_accept_the_library_words() {
    let o = Run { env: &[("NORNIR_DEVICE", "nvidia")], ..Run::new(&["vector", "doctor", "--summary"]) }.output();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("plan: cuda"), "{}", String::from_utf8_lossy(&o.stdout));
    let o = nornir(&["vector", "embed", "--pooling", "median", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown pooling \"median\": use one of mean, cls, last, max"), "{}", stderr(&o));
    let o = nornir(&["vector", "doctor", "--expect", "auto"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--expect needs a device"), "{}", stderr(&o));
}

/// The image-URL limits mean nothing without the flag that allows URLs: refused before any model
/// is looked for.
#[test]
fn image_url_limits_need_allow_image_urls() {
    for flags in
        [&["--image-url-timeout", "5"][..], &["--image-url-max-bytes", "100"], &["--image-url-host", "a.example"]]
    {
        let mut args = vec!["vector", "serve", "--port", "0"];
        args.extend(flags);
        let o = nornir(&args);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--allow-image-urls"), "{flags:?}: {}", stderr(&o));
    }
}

/// `--dim` reaches every output format's shape, and the vectors are the full ones cut and
/// normalised again.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn dim_keeps_the_first_dimensions_in_every_format() {
    nornir_test_support::needs_assets!();
    let m = model();
    let m = m.to_str().expect("utf8");
    let t = tempfile::tempdir().expect("tempdir");
    let npy = t.path().join("v.npy");
    let o = nornir(&[
        "vector",
        "embed",
        "--model",
        m,
        "--dim",
        "64",
        "--format",
        "npy",
        "-o",
        npy.to_str().expect("utf8"),
        "a",
        "b",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&npy).expect("npy");
    assert!(String::from_utf8_lossy(&bytes[..128]).contains("(2, 64,"), "{}", String::from_utf8_lossy(&bytes[..128]));
    let jsonl = |args: &[&str]| -> Vec<f32> {
        let o = nornir(args);
        assert!(o.status.success(), "{}", stderr(&o));
        common::embedding_of_line(String::from_utf8_lossy(&o.stdout).lines().next().expect("a row"))
    };
    let cut = jsonl(&["vector", "embed", "--model", m, "--dim", "64", "A man is eating food."]);
    let full = jsonl(&["vector", "embed", "--model", m, "A man is eating food."]);
    assert_eq!((cut.len(), full.len()), (64, 384));
    let norm = full[..64].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!(cut.iter().zip(&full[..64]).all(|(c, f)| (c - f / norm).abs() < 1e-5));
}

/// The doctor says which output of a real export it reads and why, and what the folder decided.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn doctor_explains_the_model_contract() {
    nornir_test_support::needs_assets!();
    let dir = nornir_test_support::env_path("NORNIR_TEST_PARAPHRASE_MODEL");
    let o = nornir(&["vector", "doctor", "--device", "cpu", "--model", dir.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("model output: \"onnx::Shape_422\", the first floating-point output"), "{text}");
    assert!(text.contains("384 dimensions, mean pooling, up to 128 tokens"), "{text}");
    assert!(text.contains("normalised (no modules.json; nornir normalises by default)"), "{text}");
    let o = nornir(&["vector", "doctor", "--json", "--device", "cpu", "--model", dir.to_str().expect("utf8")]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor JSON");
    assert_eq!(json["session"]["model"]["output"], "onnx::Shape_422");
    assert_eq!(json["session"]["model"]["normalize"], true);
}
