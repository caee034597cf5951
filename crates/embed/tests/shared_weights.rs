//! One copy of the weights for every CPU session of a model: a real fp32 export
//! (paraphrase-MiniLM-L3-v2, 69 MB, fetched by `cargo xtask test`) with three sessions, where
//! sharing starts. Without shared initializers each further session costs about its weights
//! again in resident memory (measured: about 70 MB per session); with them, a fraction. Its own
//! process, so that no other test's allocations count.

mod common;

use common::{cosine, parity_sample_with};
use nornir_embed::{Embedder, EmbedderOptions};
use nornir_ep_select::Device;
use nornir_test_support::env_path;

#[test]
fn three_sessions_share_one_copy_of_the_weights_and_embed_correctly() {
    let dir = env_path("NORNIR_TEST_PARAPHRASE_MODEL");
    let file_bytes = std::fs::metadata(dir.join("model.onnx")).expect("model.onnx").len();
    let options = EmbedderOptions::default().with_device(Device::Cpu).with_threads(3).with_sessions(3);
    let embedder = Embedder::new(&dir, &options).expect("load paraphrase-MiniLM-L3-v2");
    assert_eq!(embedder.warm_up(), 3, "every session built");

    let memory = embedder.report().memory;
    assert!(memory.shared_initializers > 0, "{memory:?}");
    assert!(
        memory.shared_weight_bytes as f64 >= 0.9 * file_bytes as f64,
        "nearly all of the {file_bytes}-byte file is weights, all shared: {memory:?}"
    );
    let growth = &memory.session_growth_bytes;
    assert_eq!(growth.len(), 3, "{memory:?}");
    // Unshared, a session grows by its weights again or more (1.0x and up); shared, measured 0.3x
    // to 0.52x (the build's own allocations vary from run to run).
    for (k, &grew) in growth.iter().enumerate().skip(1) {
        assert!(
            grew < memory.shared_weight_bytes / 4 * 3,
            "session {k} grew the resident memory by {} MB, more than 3/4 of the {} MB of weights it should share",
            grew >> 20,
            memory.shared_weight_bytes >> 20
        );
    }

    // Every session gives the reference vectors (the rows go to all three side by side).
    let (texts, reference) = parity_sample_with("paraphrase-sample.f32");
    let got = embedder.embed(&texts).expect("embed");
    let dim = got.dim();
    for (i, row) in got.rows().enumerate() {
        let c = cosine(row, &reference[i * dim..(i + 1) * dim]);
        assert!(c >= 0.9999, "row {i}: cosine {c}");
    }
}
