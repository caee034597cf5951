//! Sparse encoders and cross-encoders against independent references
//! (scripts/retrieval_reference.py: ONNX Runtime, the tokenizers library and NumPy in Python):
//! the real splade-tiny, converted by the test command's set-up, on the corpus's first 500
//! texts; and cross-encoders with random weights in both families (BERT and XLM-RoBERTa, one
//! label and three, and a multi-label BERT), each with a tokenizer of its family, for pairs that
//! fit and pairs that must be cut. No real cross-encoder weights ship in any package the registries here serve.

#![cfg(feature = "embed-ort")]

mod common;

use std::path::Path;

use common::{nornir, s, stderr};
use nornir_test_support::env_path;
use serde_json::Value;

/// Runs scripts/retrieval_reference.py with `args`; its JSON result.
fn reference(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/retrieval_reference.py");
    let o = std::process::Command::new(env_path("NORNIR_TEST_REFERENCE_PYTHON"))
        .arg(script)
        .args(args)
        .output()
        .expect("run the reference script");
    assert!(o.status.success(), "the reference failed:\n{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("the reference's JSON")
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

/// `nornir` with `args`, which must succeed; its standard output.
fn o_ranked(args: &[&str]) -> Vec<u8> {
    let o = nornir(args);
    assert!(o.status.success(), "{}", stderr(&o));
    o.stdout
}

/// A sparse vector's terms above `floor`, as (id, weight).
fn terms(v: &Value, floor: f64) -> Vec<(u64, f64)> {
    let ids = v["indices"].as_array().expect("indices");
    let weights = v["values"].as_array().expect("values");
    assert_eq!(ids.len(), weights.len(), "{v}");
    let pairs: Vec<(u64, f64)> =
        ids.iter().zip(weights).map(|(i, w)| (i.as_u64().expect("id"), w.as_f64().expect("weight"))).collect();
    assert!(pairs.windows(2).all(|p| p[0].0 < p[1].0), "term ids ascend: {v}");
    pairs.into_iter().filter(|&(_, w)| w > floor).collect()
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn splade_tiny_weighs_the_same_terms_as_the_reference_on_500_corpus_texts() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let model = env_path("NORNIR_TEST_SPLADE_MODEL");
    let corpus = std::fs::read_to_string(env_path("NORNIR_TEST_CORPUS").join("corpus.txt")).expect("corpus");
    let first: String = corpus.lines().take(500).map(|l| format!("{l}\n")).collect();
    let input = t.path().join("first-500.txt");
    std::fs::write(&input, first).expect("write");
    let want_file = t.path().join("reference.jsonl");
    let r = reference(&["sparse", s(&model), s(&input), "500", s(&want_file)]);
    assert_eq!(r["texts"], 500, "{r}");
    let got_file = t.path().join("nornir.jsonl");
    let o = nornir(&["vector", "embed", "-q", "--model", s(&model), "--input", s(&input), "--output", s(&got_file)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = json_lines(&std::fs::read_to_string(&got_file).expect("output"));
    let want = json_lines(&std::fs::read_to_string(&want_file).expect("reference"));
    assert_eq!(got.len(), 500);
    // Every term above the tolerance on either side is on both, its weights within 1e-4 (a term
    // whose logit is within rounding of 0 may be weighed on one side only, at less than that).
    let mut worst = 0f64;
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let (all_g, all_w) = (terms(g, 0.0), terms(w, 0.0));
        let weight_of = |all: &[(u64, f64)], id: u64| all.iter().find(|t| t.0 == id).map_or(0.0, |t| t.1);
        for &(id, _) in terms(g, 1e-4).iter().chain(&terms(w, 1e-4)) {
            let diff = (weight_of(&all_g, id) - weight_of(&all_w, id)).abs();
            assert!(
                diff <= 1e-4,
                "text {k}, term {id}: nornir {} reference {}",
                weight_of(&all_g, id),
                weight_of(&all_w, id)
            );
            worst = worst.max(diff);
        }
    }
    eprintln!("splade-tiny: 500 texts, largest weight difference {worst:e}");

    // The tokens on request, pruned to the heaviest three.
    let o = nornir(&[
        "vector",
        "embed",
        "--model",
        s(&model),
        "--tokens",
        "--top-k",
        "3",
        "The capital of France is Paris.",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let line = &json_lines(&String::from_utf8_lossy(&o.stdout))[0];
    let mut tokens: Vec<&str> = line["tokens"].as_array().expect("tokens").iter().filter_map(Value::as_str).collect();
    tokens.sort_unstable();
    assert_eq!(tokens, ["capital", "france", "paris"], "{line}");
    let top_terms = &r["top_terms"]["The capital of France is Paris."];
    let reference_top: Vec<&str> =
        top_terms.as_array().expect("top").iter().take(3).filter_map(|p| p[0].as_str()).collect();
    assert_eq!(reference_top.len(), 3);
    assert!(reference_top.iter().all(|t| tokens.contains(t)), "{reference_top:?} vs {tokens:?}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_sparse_or_cross_encoder_refuses_what_is_not_its_kind_in_one_line() {
    nornir_test_support::needs_assets!();
    let model = env_path("NORNIR_TEST_SPLADE_MODEL");
    let o = nornir(&["vector", "embed", "--model", s(&model), "--format", "npy", "-o", "/dev/null", "hello"]);
    common::assert_one_line_error(&o, "use --format jsonl");
    let o = nornir(&["vector", "rerank", "--model", s(&model), "--query", "q", "a document"]);
    // The command's words, not the library's method names.
    common::assert_one_line_error(
        &o,
        "this command needs a cross-encoder and this model is a sparse-encoder: use nornir vector embed",
    );
    assert!(!common::stderr(&o).contains("embed_sparse"), "{}", common::stderr(&o));
    let o = nornir(&["vector", "embed", "--top-k", "3", "hello"]);
    common::assert_one_line_error(&o, "are for a sparse encoder");
    // The library's rule, said with the flag: a sparse encoder cannot chunk.
    let o = nornir(&["vector", "embed", "--model", s(&model), "--long", "chunk", "hello"]);
    common::assert_one_line_error(&o, "invalid --long: a sparse encoder weighs a text's first tokens");
    // A sparse encoder counts its cut texts as an embedder does.
    let long = "word ".repeat(600);
    let o = nornir(&["vector", "embed", "--json", "--model", s(&model), "--top-k", "3", "short", &long]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: Value = serde_json::from_str(stderr(&o).trim()).expect("one JSON line on stderr");
    assert_eq!((summary["texts"].as_u64(), summary["truncated"].as_u64()), (Some(2), Some(1)), "{summary}");
    let lines = json_lines(&String::from_utf8_lossy(&o.stdout));
    assert!(lines.iter().all(|l| l["indices"].is_array() && l.get("id").is_none()), "{lines:?}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn cross_encoders_of_both_families_score_as_the_reference() {
    use nornir_vector::{Device, EmbedError, Embedder, EmbedderOptions, ModelKind, PairOptions};

    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference(&["cross", env!("CARGO_BIN_EXE_nornir"), s(t.path())]);
    let max_length = r["max_length"].as_u64().expect("max_length") as usize;
    let cases = r["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 5);
    let options = EmbedderOptions::default()
        .with_device(Device::Cpu)
        .with_threads(2)
        .with_ort_library(env_path("NORNIR_TEST_ORT_CPU"));
    let worst = std::cell::Cell::new(0f64);
    let close = |got: &[f32], want: &Value, what: &str| {
        let want: Vec<f64> = want.as_array().expect("row").iter().filter_map(Value::as_f64).collect();
        assert_eq!(got.len(), want.len(), "{what}");
        for (g, w) in got.iter().zip(&want) {
            assert!((f64::from(*g) - w).abs() <= 1e-5, "{what}: nornir {got:?}, reference {want:?}");
            worst.set(worst.get().max((f64::from(*g) - w).abs()));
        }
    };
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let e = Embedder::new(Path::new(case["folder"].as_str().expect("folder")), &options).expect(name);
        let kind = &e.model_info().folder.kind;
        let labels = case["labels"].as_u64().expect("labels") as usize;
        assert_eq!((kind.kind, kind.labels.len()), (ModelKind::CrossEncoder, labels), "{name}: {}", kind.reason);
        let pairs: Vec<(String, String)> = case["pairs"]
            .as_array()
            .expect("pairs")
            .iter()
            .map(|p| (p[0].as_str().unwrap_or_default().to_owned(), p[1].as_str().unwrap_or_default().to_owned()))
            .collect();
        let tokens: Vec<u64> = case["tokens"].as_array().expect("tokens").iter().filter_map(Value::as_u64).collect();
        assert!(tokens.contains(&(max_length as u64)), "{name}: some pairs were cut to the model's length");
        let scores = e.predict(&pairs, &PairOptions::new()).expect(name);
        let raw = e.predict(&pairs, &PairOptions::new().with_raw_scores(true)).expect(name);
        for i in 0..pairs.len() {
            close(scores.row(i), &case["scores"][i], &format!("{name}, pair {i}"));
            close(raw.row(i), &case["raw"][i], &format!("{name}, pair {i}, raw"));
            assert_eq!(scores.token_count(i), Some(tokens[i] as usize), "{name}, pair {i}: its tokens");
        }
        if case["multi_label"].as_bool() == Some(true) {
            multi_label_is_scored_per_label(case, &scores);
        }
        let refused = e.embed(&["a text"]).expect_err("embed on a cross-encoder");
        assert!(matches!(refused, EmbedError::WrongKind { kind: ModelKind::CrossEncoder, .. }), "{refused}");
        // The kind's handle, checked once, gives the same scores; the other kinds' handles are refused.
        let Ok(nornir_vector::KindHandle::CrossEncoder(handle)) = e.by_kind() else { panic!("{name}: by_kind") };
        assert_eq!(handle.predict(&pairs, &PairOptions::new()).expect(name).as_slice(), scores.as_slice());
        let refused = e.text_embedder().expect_err("a text embedder handle on a cross-encoder");
        assert!(matches!(refused, EmbedError::WrongKind { call: "embed", .. }), "{refused}");
        assert!(e.sparse_encoder().is_err() && e.multi_vector_encoder().is_err() && e.image_embedder().is_err());
        let query = "what is a fjord?";
        let documents: Vec<&str> = pairs.iter().filter(|p| p.0 == query).map(|p| p.1.as_str()).collect();
        if name == "BertForSequenceClassification-1" {
            long_documents_score_by_their_best_chunk(&e, case["folder"].as_str().expect("folder"));
        }
        if labels != 1 {
            let e = e.rerank(query, &documents, None, &PairOptions::new()).expect_err("rerank on three labels");
            assert!(e.to_string().contains("call predict"), "{e}");
            continue;
        }
        // The documents best first, as the reference's scores order them.
        let mut want: Vec<(usize, f64)> = pairs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.0 == query)
            .enumerate()
            .map(|(k, (i, _))| (k, case["scores"][i][0].as_f64().expect("score")))
            .collect();
        want.sort_by(|a, b| b.1.total_cmp(&a.1));
        let ranked = e.rerank(query, &documents, Some(2), &PairOptions::new()).expect(name);
        assert_eq!(
            ranked.ranked.iter().map(|r| r.index).collect::<Vec<_>>(),
            want.iter().take(2).map(|w| w.0).collect::<Vec<_>>()
        );
        let empty = e.rerank(" ", &documents, None, &PairOptions::new()).expect_err("an empty query");
        assert!(empty.to_string().contains("`query`: is empty"), "{empty}");

        // The command line: JSON lines best first.
        let mut args = vec!["vector", "rerank", "--model", case["folder"].as_str().expect("folder"), "--query", query];
        args.extend(documents.iter().copied());
        let folder = case["folder"].as_str().expect("folder");
        let o = common::Run::new(&["vector", "rerank", "--model", folder, "--query", query]).output();
        common::assert_one_line_error(&o, "no documents to rank");
        let o = nornir(&["vector", "rerank", "--model", folder, "--query", "", "a document"]);
        common::assert_one_line_error(&o, "invalid --query: is empty: give the text");
        let o = nornir(&["vector", "embed", "--model", folder, "a text"]);
        common::assert_one_line_error(
            &o,
            "is a cross-encoder (it scores query and document pairs): use `nornir vector rerank",
        );
        let lines = json_lines(&String::from_utf8_lossy(&o_ranked(&args)));
        assert_eq!(lines.len(), documents.len());
        for (line, (index, score)) in lines.iter().zip(&want) {
            assert_eq!(line["index"].as_u64(), Some(*index as u64), "{line}");
            assert!((line["score"].as_f64().expect("score") - score).abs() <= 1e-5, "{line}");
            assert_eq!(line["text"].as_str(), Some(documents[*index]), "{line}");
        }
    }
    eprintln!("cross-encoders: 5 models x 10 pairs, largest score difference {:e}", worst.get());
}

/// Reranking with chunking on the reference's BERT reranker (32 tokens, a word per token): each
/// long document's score is the best of its chunks, each scored alone as a short document (the
/// chunks enumerated here from the rule: windows of what the query and the pair's 3 special
/// tokens leave, overlapping by 5 words); the command line says which chunk scored; a window
/// longer than the model's is refused in one line.
fn long_documents_score_by_their_best_chunk(e: &nornir_vector::Embedder, folder: &str) {
    use nornir_vector::{CallOptions, Chunking, PairOptions};
    const WORDS: &str = "the is of and to in what where why fjord capital paris france city river sea water long narrow \
                         inlet glacier valley ice cut deep coast norway made food man eating horse riding";
    let words: Vec<&str> = WORDS.split_whitespace().collect();
    let query = "how fjords form?"; // 4 tokens: how, fjords, form, ?
    let room = 32 - 3 - 4;
    let overlap = 5;
    // Documents of 60, 25 and 3 words in a seeded order: three chunks, one, one.
    let mut state = 7u64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        words[(state >> 33) as usize % words.len()]
    };
    let documents: Vec<Vec<&str>> = [60, 25, 3].iter().map(|&n| (0..n).map(|_| next()).collect()).collect();
    let texts: Vec<String> = documents.iter().map(|d| d.join(" ")).collect();
    let chunking = Chunking::new().with_overlap(overlap);
    let options = PairOptions::new().with_call(CallOptions::new().with_chunking(chunking));
    let ranked = e.rerank(query, &texts, None, &options).expect("rerank with chunking");
    assert_eq!(ranked.ranked.len(), 3);
    for r in &ranked.ranked {
        let words = &documents[r.index];
        let mut chunks = Vec::new();
        let mut start = 0;
        loop {
            let end = (start + room).min(words.len());
            chunks.push(words[start..end].join(" "));
            if end == words.len() {
                break;
            }
            start = end - overlap;
        }
        let pairs: Vec<(&str, &str)> = chunks.iter().map(|c| (query, c.as_str())).collect();
        let alone = e.predict(&pairs, &PairOptions::new()).expect("each chunk alone");
        let best = (0..alone.len()).map(|i| alone.row(i)[0]).fold(f32::MIN, f32::max);
        assert!((r.score - best).abs() <= 1e-4, "document {}: {} against its best chunk's {best}", r.index, r.score);
        let span = r.chunk.expect("the chunk that scored");
        assert_eq!(&texts[r.index][span.start..span.end], chunks[span.index], "document {}", r.index);
        assert!((alone.row(span.index)[0] - r.score).abs() <= 1e-4);
        assert_eq!(chunks.len(), [3, 1, 1][r.index], "document {}'s chunks", r.index);
    }
    eprintln!("rerank with chunking: {:?}", ranked.ranked);
    let input = tempfile::NamedTempFile::new().expect("temp");
    std::fs::write(input.path(), texts.join("\n") + "\n").expect("write documents");
    let args = [
        "vector",
        "rerank",
        "--model",
        folder,
        "--query",
        query,
        "--input",
        s(input.path()),
        "--long",
        "chunk",
        "--overlap",
        "5",
    ];
    let lines = json_lines(&String::from_utf8_lossy(&o_ranked(&args)));
    for (line, r) in lines.iter().zip(&ranked.ranked) {
        assert_eq!(line["index"].as_u64(), Some(r.index as u64), "{line}");
        let span = r.chunk.expect("a chunk");
        assert_eq!(
            line["chunk"],
            serde_json::json!({"index": span.index, "start": span.start, "end": span.end}),
            "{line}"
        );
    }
    let o = common::Run::new(&[
        "vector",
        "rerank",
        "--model",
        folder,
        "--query",
        query,
        "--long",
        "chunk",
        "--window",
        "64",
        "a document",
    ])
    .output();
    common::assert_one_line_error(&o, "a window of 64 tokens is longer than the 32 the model reads");
}

/// A multi-label head: each label's sigmoid, which a softmax over the labels would not give (the
/// reference's scores do not sum to 1), and `nornir vector predict` writes them per pair in TEI's
/// `/predict` shape, best first, from JSON lines with `text_pair`.
fn multi_label_is_scored_per_label(case: &Value, library: &nornir_vector::Embeddings) {
    let sums: Vec<f64> = (0..library.len()).map(|i| library.row(i).iter().map(|&s| f64::from(s)).sum()).collect();
    assert!(sums.iter().any(|s| (s - 1.0).abs() > 0.05), "sigmoid scores that a softmax could give: {sums:?}");
    let t = tempfile::tempdir().expect("tempdir");
    let input = t.path().join("pairs.jsonl");
    let pairs = case["pairs"].as_array().expect("pairs");
    let lines: Vec<String> =
        pairs.iter().map(|p| serde_json::json!({"text": p[0], "text_pair": p[1]}).to_string()).collect();
    std::fs::write(&input, lines.join("\n") + "\n").expect("write input");
    let folder = case["folder"].as_str().expect("folder");
    let args = ["vector", "predict", "--model", folder, "--input-format", "jsonl", "--input", s(&input)];
    let o = nornir(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = json_lines(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(got.len(), pairs.len());
    let labels = ["toxic", "insult", "threat"];
    for (i, line) in got.iter().enumerate() {
        let scores = line.as_array().expect("a list per pair");
        assert_eq!(scores.len(), 3, "{line}");
        assert!(scores.windows(2).all(|p| p[0]["score"].as_f64() >= p[1]["score"].as_f64()), "{line}");
        for entry in scores {
            let label = labels.iter().position(|l| entry["label"] == *l).expect("a label");
            let want = case["scores"][i][label].as_f64().expect("score");
            assert!((entry["score"].as_f64().expect("score") - want).abs() <= 1e-5, "pair {i}: {line}");
        }
    }
    // A text alone is classified as one text; a text_pair on `embed` is refused in one line.
    let o = nornir(&["vector", "predict", "--model", folder, "a text alone"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(json_lines(&String::from_utf8_lossy(&o.stdout)).len(), 1);
    let embedder = common::model();
    let o = common::Run::new(&[
        "vector",
        "embed",
        "--model",
        s(&embedder),
        "--input-format",
        "jsonl",
        "--input",
        s(&input),
    ])
    .output();
    common::assert_one_line_error(&o, "a pair of texts is scored by `nornir vector predict`");
}
