//! `nornir vector embed --precision`: the compact vectors the library makes from the same float32
//! rows, the ranges saved beside the output and read back, and each precision the run cannot
//! give as one line and exit 2.

#![cfg(feature = "embed-ort")]

mod common;

use common::{assert_one_line_error, model, nornir, s, stderr};
use nornir_vector::{Device, Embedder, EmbedderOptions, Precision, Ranges, to_precision};
use serde_json::Value;

const TEXTS: [&str; 3] = ["A man is eating food.", "what is a fjord?", "Paris is the capital of France."];

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn compact_vectors_equal_the_library_s_with_the_saved_ranges() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let lib =
        Embedder::new(&model(), &EmbedderOptions::default().with_device(Device::Cpu).with_threads(1)).expect("load");
    let floats = lib.embed(&TEXTS).expect("floats");
    let m = model();
    let out = t.path().join("v.jsonl");
    let mut args = vec!["vector", "embed", "-q", "--model", s(&m), "--precision", "int8", "--output", s(&out)];
    args.extend(TEXTS);
    let o = nornir(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let ranges = Ranges::read(&t.path().join("v.jsonl.ranges.json")).expect("the saved ranges");
    assert!(ranges.source().contains("built-in sample (99 texts, 384 dimensions)"), "{}", ranges.source());
    for (p, flag) in
        [(Precision::Int8, None), (Precision::Ubinary, Some("ubinary")), (Precision::Binary, Some("binary"))]
    {
        let text = match flag {
            None => std::fs::read_to_string(&out).expect("output"),
            Some(f) => {
                let mut args = vec!["vector", "embed", "-q", "--model", s(&m), "--precision", f];
                args.extend(TEXTS);
                let o = nornir(&args);
                assert!(o.status.success(), "{}", stderr(&o));
                String::from_utf8_lossy(&o.stdout).into_owned()
            }
        };
        let want = to_precision(&floats, p, Some(&ranges)).expect("library");
        for (i, line) in text.lines().enumerate() {
            let got: Vec<i64> = serde_json::from_str::<Value>(line).expect("a JSON line")["embedding"]
                .as_array()
                .expect("ints")
                .iter()
                .filter_map(Value::as_i64)
                .collect();
            assert_eq!(got, want.row_values(i), "{p}, text {i}");
        }
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn what_a_run_cannot_give_is_one_line() {
    nornir_test_support::needs_assets!();
    let m = model();
    let run = |extra: &[&str]| {
        let mut args = vec!["vector", "embed", "-q", "--model", s(&m)];
        args.extend_from_slice(extra);
        args.push("a text");
        nornir(&args)
    };
    assert_one_line_error(&run(&["--precision", "binary", "--dimensions", "100"]), "multiple of 8");
    assert_one_line_error(&run(&["--precision", "int8"]), "ranges are saved beside --output FILE");
    assert_one_line_error(
        &run(&["--precision", "ubinary", "--format", "f32", "-o", "/dev/null"]),
        "--format npy or jsonl",
    );
    // clap's own usage error: exit 2, the accepted values named.
    let o = run(&["--precision", "int4"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("use one of float32, int8, uint8, binary, ubinary"), "{}", stderr(&o));
    assert_one_line_error(
        &run(&["--precision", "binary", "--ranges", "nope.json"]),
        "are for --precision int8 or uint8",
    );
    assert_one_line_error(&run(&["--precision", "int8", "--ranges", "/nonexistent.json"]), "invalid --ranges");
    // Ranges are checked where they are read: every int8 value would otherwise be -128.
    let t = tempfile::tempdir().expect("tempdir");
    let bad = [
        (r#"{"min": [1.0], "max": [-1.0]}"#, "min 1 is above max -1"),
        (r#"{"min": [0.0, 0.0], "max": [1.0]}"#, "min has 2 values and max 1"),
        (r#"{"min": [0.0], "max": [1.0]}"#, "the ranges cover 1 dimensions and the vectors have 384"),
        (r#"[0, 1]"#, "not a ranges object"),
    ];
    for (i, (text, why)) in bad.into_iter().enumerate() {
        let file = t.path().join(format!("r{i}.json"));
        std::fs::write(&file, text).expect("write ranges");
        let out = t.path().join(format!("v{i}.npy"));
        let args = ["--precision", "int8", "--format", "npy", "--ranges", s(&file), "-o", s(&out)];
        assert_one_line_error(&run(&args), why);
        assert!(!out.exists(), "{why}: nothing written");
    }
    let splade = nornir_test_support::env_path("NORNIR_TEST_SPLADE_MODEL");
    let o = nornir(&["vector", "embed", "--model", s(&splade), "--precision", "binary", "x"]);
    assert_one_line_error(&o, "--precision compacts an embedder's dense vectors");
}
