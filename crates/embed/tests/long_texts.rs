//! Chunking long texts on the real default model and CPU ONNX Runtime: windows cut on the model's
//! token ids at word starts, spans that map back to the text (non-ASCII too), each chunk's vector
//! that of its own text, and the document vector made from them.

mod common;

use common::{cosine, model_dir};
use nornir_embed::{CallOptions, Chunking, DocumentVector, EmbedError, Embedder, EmbedderOptions};
use nornir_ep_select::Device;
use nornir_test_support::unit;

fn options() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_threads(2)
}

/// About 900 tokens of plain and accented words, with punctuation.
fn document() -> String {
    let words = [
        "Ålesund", "lies", "on", "islands,", "fjords", "carve", "the", "naïve", "coast;", "Tromsø", "glaciers", "melt.",
    ];
    (0..700).map(|i| words[(i * 5 + i / 7) % words.len()]).collect::<Vec<_>>().join(" ")
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_text_that_fits_one_window_is_one_chunk_with_todays_vector() {
    nornir_test_support::needs_assets!();
    let e = Embedder::new(&model_dir(), &options()).expect("load");
    let texts = ["A man is eating food.", "", "Ålesund lies on islands."];
    let today = e.embed(&texts).expect("today");
    let chunked = e.embed_with(&texts, &CallOptions::new().with_chunking(Chunking::new())).expect("chunked");
    assert!(chunked.is_chunked() && !today.is_chunked());
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(chunked.row(i), today.row(i), "text {i}: bit-identical");
        let chunks: Vec<_> = chunked.chunks(i).collect();
        assert_eq!(chunks.len(), 1, "text {i}");
        assert_eq!((chunks[0].0.start, chunks[0].0.end), (0, text.len()), "text {i} spans itself");
        assert_eq!(chunks[0].1, today.row(i));
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn chunks_are_windows_of_token_ids_whose_spans_are_their_texts() {
    nornir_test_support::needs_assets!();
    let e = Embedder::new(&model_dir(), &options()).expect("load");
    let doc = document();
    let chunking = Chunking::new().with_window(64).with_overlap(8);
    let got = e.embed_with(&[doc.as_str()], &CallOptions::new().with_chunking(chunking)).expect("chunks");
    let chunks: Vec<_> = got.chunks(0).collect();
    assert!(chunks.len() > 10, "{} chunks", chunks.len());
    let texts: Vec<&str> = chunks.iter().map(|(c, _)| &doc[c.start..c.end]).collect();
    let alone = e.embed(&texts).expect("each chunk's text alone");
    let mut covered = 0;
    for (k, ((chunk, vector), text)) in chunks.iter().zip(&texts).enumerate() {
        assert!(chunk.tokens <= 62, "chunk {k}: 64 less [CLS] and [SEP]: {chunk:?}");
        // Cut at word starts: the span re-tokenizes to the chunk's own ids.
        assert_eq!(alone.token_count(k), Some(chunk.tokens + 2), "chunk {k}: {text:?}");
        assert!(cosine(vector, alone.row(k)) >= 0.9999, "chunk {k}");
        assert!(chunk.start <= covered, "chunk {k} leaves a gap before it");
        covered = chunk.end;
        if k > 0 {
            assert!(chunk.start < chunks[k - 1].0.end, "chunk {k} overlaps the one before");
        }
    }
    assert_eq!(covered, doc.len(), "the chunks reach the end");
    assert_eq!(got.token_count(0), Some(chunks.iter().map(|(c, _)| c.tokens + 2).sum()), "tokens read");
    // The document: the chunks' token-weighted mean, normalised.
    let total: usize = chunks.iter().map(|(c, _)| c.tokens).sum();
    let mean: Vec<f32> =
        (0..384).map(|d| chunks.iter().map(|(c, v)| v[d] * c.tokens as f32).sum::<f32>() / total as f32).collect();
    assert!(cosine(got.row(0), &unit(&mean)) >= 0.99999);
    let max = CallOptions::new().with_chunking(chunking.with_document(DocumentVector::Max));
    let got_max = e.embed_with(&[doc.as_str()], &max).expect("max");
    let want: Vec<f32> = (0..384).map(|d| chunks.iter().map(|(_, v)| v[d]).fold(f32::MIN, f32::max)).collect();
    assert!(cosine(got_max.row(0), &unit(&want)) >= 0.99999);
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn chunking_with_a_prompt_and_bad_windows() {
    nornir_test_support::needs_assets!();
    let e = Embedder::new(&model_dir(), &options()).expect("load");
    let doc = document();
    let prompted =
        CallOptions::new().with_prompt("passage: ").with_chunking(Chunking::new().with_window(48).with_overlap(4));
    let got = e.embed_with(&[doc.as_str()], &prompted).expect("chunks");
    let with_prompt: Vec<String> = got.chunks(0).map(|(c, _)| format!("passage: {}", &doc[c.start..c.end])).collect();
    let alone = e.embed(&with_prompt).expect("alone");
    for (k, (chunk, v)) in got.chunks(0).enumerate() {
        assert!(!doc[chunk.start..chunk.end].starts_with("passage"), "spans are of the text, not the prompt");
        assert!(cosine(v, alone.row(k)) >= 0.9999, "chunk {k} carries the prompt");
    }
    for (chunking, needle) in [
        (Chunking::new().with_window(1000), "longer than the 256 tokens"),
        (Chunking::new().with_window(10).with_overlap(8), "overlap of 8"),
    ] {
        match e.embed_with(&[doc.as_str()], &CallOptions::new().with_chunking(chunking)) {
            Err(EmbedError::InvalidOption { option: "chunking.window", reason, .. }) => {
                assert!(reason.contains(needle), "{reason}")
            }
            other => panic!("{chunking:?}: {other:?}"),
        }
    }
}
