//! Correctness against the reference pipeline (Python tokenizers + onnxruntime, one text at a
//! time): every row of the parity sample within cosine 0.9999, with the embedder's own batching,
//! on the real CPU build of ONNX Runtime 1.31.1, for the real default model and for a real fp32
//! export whose graph puts integer outputs first (paraphrase-MiniLM-L3-v2; its reference rows
//! were made by `scripts/reference_embed.py`, see README.md).

mod common;

use common::{cosine, model_dir, parity_sample, parity_sample_with};
use nornir_embed::{Embedder, EmbedderOptions};
use nornir_ep_select::Device;
use nornir_test_support::env_path;

fn cpu_options() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_threads(2)
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn parity_sample_matches_reference() {
    nornir_test_support::needs_assets!();
    let (texts, reference) = parity_sample();
    assert_eq!(texts.len(), 99);
    assert_eq!(reference.len(), 99 * 384);
    let embedder = Embedder::new(&model_dir(), &cpu_options()).expect("load the default model");
    assert_eq!(embedder.dimension(), 384);
    assert_eq!(embedder.report().active_provider, "CPUExecutionProvider");
    assert_eq!(embedder.gpu_vendor(), "cpu");
    let got = embedder.embed(&texts).expect("embed");
    assert_eq!(got.len(), 99);
    let (c, i) = worst_row(&got, &reference);
    assert!(c >= 0.9999, "row {i} has cosine {c} with the reference: {:?}", texts[i]);
    // The same texts in one-text calls give the same vectors as the batched call.
    for i in [0, 50, 98] {
        let one = embedder.embed(&[texts[i].as_str()]).expect("embed one");
        assert!(cosine(one.row(0), got.row(i)) > 0.99999, "row {i} differs between batched and single");
    }
}

/// Row of `got` furthest from its reference row, and its cosine.
fn worst_row(got: &nornir_embed::Embeddings, reference: &[f32]) -> (f32, usize) {
    let dim = got.dim();
    got.rows()
        .enumerate()
        .map(|(i, row)| (cosine(row, &reference[i * dim..(i + 1) * dim]), i))
        .fold((1.0, 0), |worst, c| if c.0 < worst.0 { c } else { worst })
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_real_export_with_integer_outputs_first_matches_its_reference() {
    nornir_test_support::needs_assets!();
    let (texts, reference) = parity_sample_with("paraphrase-sample.f32");
    let dir = env_path("NORNIR_TEST_PARAPHRASE_MODEL");
    let embedder = Embedder::new(&dir, &cpu_options()).expect("load paraphrase-MiniLM-L3-v2");
    let info = embedder.model_info();
    assert_eq!(info.output, "onnx::Shape_422", "the token vectors, after two int64 outputs");
    assert!(info.output_reason.contains("\"output\" Tensor<i64>"), "{}", info.output_reason);
    assert_eq!((embedder.dimension(), info.max_length), (384, 128));
    let got = embedder.embed(&texts).expect("embed");
    let (c, i) = worst_row(&got, &reference);
    assert!(c >= 0.9999, "row {i} has cosine {c} with the reference: {:?}", texts[i]);
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn semantic_sanity() {
    nornir_test_support::needs_assets!();
    let embedder = Embedder::new(&model_dir(), &cpu_options()).expect("load");
    let e = embedder
        .embed(&[
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "A man is riding a horse.",
            "The girl is carrying a baby.",
        ])
        .expect("embed");
    let bread = cosine(e.row(0), e.row(1));
    let horse = cosine(e.row(0), e.row(2));
    let baby = cosine(e.row(0), e.row(3));
    assert!(bread > horse && horse > baby, "bread {bread} horse {horse} baby {baby}");
    assert!(
        (bread - 0.75).abs() < 0.02 && (horse - 0.25).abs() < 0.02 && (baby + 0.11).abs() < 0.02,
        "{bread} {horse} {baby}"
    );
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn empty_input_and_empty_text() {
    nornir_test_support::needs_assets!();
    let embedder = Embedder::new(&model_dir(), &cpu_options()).expect("load");
    let none: [&str; 0] = [];
    assert!(embedder.embed(&none).expect("no texts").is_empty());
    let e = embedder.embed(&["", "x"]).expect("an empty text is a text");
    assert_eq!(e.len(), 2);
    assert!((e.row(0).iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-4);
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn shared_across_threads_gives_the_single_threaded_result() {
    nornir_test_support::needs_assets!();
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Embedder>();
    let embedder = std::sync::Arc::new(Embedder::new(&model_dir(), &cpu_options()).expect("load"));
    let (texts, _) = parity_sample();
    let alone = embedder.embed(&texts).expect("embed");
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let (e, texts) = (embedder.clone(), texts.clone());
            std::thread::spawn(move || {
                (0..3).map(|k| e.embed(&texts[(t * 7 + k) % 50..]).expect("embed").into_vec()).collect::<Vec<_>>()
            })
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        for (k, data) in h.join().expect("thread").into_iter().enumerate() {
            let start = (t * 7 + k) % 50;
            for (i, row) in data.chunks_exact(384).enumerate() {
                assert!(cosine(row, alone.row(start + i)) > 0.99999, "thread {t} call {k} row {i}");
            }
        }
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn several_sessions_give_the_same_vectors_in_input_order() {
    nornir_test_support::needs_assets!();
    let (texts, reference) = parity_sample();
    // A small budget makes many batches, so both sessions take some.
    let options = cpu_options().with_workers(2).with_token_budget(64);
    let embedder = Embedder::new(&model_dir(), &options).expect("load");
    assert_eq!(embedder.workers(), 2);
    let got = embedder.embed(&texts).expect("embed");
    for (i, row) in got.rows().enumerate() {
        assert!(cosine(row, &reference[i * 384..(i + 1) * 384]) >= 0.9999, "row {i}");
    }
    assert!(embedder.stats().batches > 2);
}

/// A 10 MB text is tokenized from a prefix: its vector is that of a short text with the same
/// first 256 tokens (here, its first 2,000 bytes, cut at a space), and a text with no
/// whitespace to cut at still embeds.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_ten_megabyte_text_embeds_as_its_first_tokens() {
    nornir_test_support::needs_assets!();
    let (texts, _) = parity_sample();
    let mut long = String::new();
    while long.len() < 10 << 20 {
        long.push_str(&texts[long.len() % texts.len()]);
        long.push(' ');
    }
    let head = &long[..long[..2000].rfind(' ').expect("a space")];
    let blob = "x".repeat(1 << 20);
    let embedder = Embedder::new(&model_dir(), &cpu_options()).expect("load");
    let e = embedder.embed(&[long.as_str(), head, blob.as_str()]).expect("embed");
    assert!(cosine(e.row(0), e.row(1)) > 0.99999, "{}", cosine(e.row(0), e.row(1)));
    assert_eq!(e.len(), 3);
}

/// Repeated texts are embedded once and every row still belongs to its own text.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn duplicates_are_embedded_once_and_rows_stay_in_place() {
    nornir_test_support::needs_assets!();
    let embedder = Embedder::new(&model_dir(), &cpu_options()).expect("load");
    let texts = ["b", "", "a", "b", "", "", "a"];
    let e = embedder.embed(&texts).expect("embed");
    assert_eq!(e.len(), texts.len());
    let s = embedder.stats();
    assert_eq!((s.texts, s.batches, s.tokens), (7, 1, 3 + 2 + 3), "three distinct texts run, seven rows out");
    for (i, t) in texts.iter().enumerate() {
        let alone = embedder.embed(&[*t]).expect("embed one");
        assert!(cosine(alone.row(0), e.row(i)) > 0.99999, "row {i}");
    }
}
