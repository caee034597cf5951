//! One copy of the weights for every CPU worker of a model: a real fp32 export
//! (paraphrase-MiniLM-L3-v2, 69 MB, fetched by `cargo xtask test`) with two workers. They run
//! one ONNX Runtime session at once, so the second adds only the activations of its batches.
//! With a session per worker, the second one cost about its weights again in resident memory
//! (measured: about 70 MB). Its own process, so that no other test's allocations count.

mod common;

use common::{cosine, parity_sample_with, status_kib, testdata};
use nornir_embed::{Embedder, EmbedderOptions};
use nornir_ep_select::Device;
use nornir_test_support::env_path;

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn two_cpu_workers_share_one_session_and_embed_correctly() {
    nornir_test_support::needs_assets!();
    let dir = env_path("NORNIR_TEST_PARAPHRASE_MODEL");
    let file_bytes = std::fs::metadata(dir.join("model.onnx")).expect("model.onnx").len();
    let options = EmbedderOptions::default().with_device(Device::Cpu).with_threads(2).with_workers(2);
    let embedder = Embedder::new(&dir, &options).expect("load paraphrase-MiniLM-L3-v2");
    let session = embedder.report().memory.session_growth_bytes[0];
    assert!(session as f64 >= 0.5 * file_bytes as f64, "the first session holds the weights: {session} bytes");
    let start = status_kib("VmRSS:") * 1024;

    // Both workers run batches side by side, on the one session, and give the reference vectors
    // (the sample, then 400 corpus texts to keep both busy).
    let (texts, reference) = parity_sample_with("paraphrase-sample.f32");
    let corpus = std::fs::read_to_string(testdata("corpus.txt")).expect("corpus.txt");
    let many: Vec<&str> = texts.iter().map(String::as_str).chain(corpus.lines().take(400)).collect();
    let got = embedder.embed(&many).expect("embed");
    let dim = got.dim();
    for (i, row) in got.rows().take(texts.len()).enumerate() {
        let c = cosine(row, &reference[i * dim..(i + 1) * dim]);
        assert!(c >= 0.9999, "row {i}: cosine {c}");
    }
    let stats = embedder.stats();
    assert!(stats.batches >= 4, "enough batches for both workers: {stats:?}");

    // What running both workers added: the activations of their batches (measured: 16 MB). A
    // session of its own for the second worker, built at its first batch, added 95 MB.
    let grew = (status_kib("VmRSS:") * 1024).saturating_sub(start);
    eprintln!("session {} MB; running both workers added {} MB", session >> 20, grew >> 20);
    assert!(
        grew < file_bytes / 2,
        "running both workers grew resident memory by {} MB, more than half the {} MB of weights: a second copy?",
        grew >> 20,
        file_bytes >> 20
    );
    let memory = embedder.report().memory;
    assert_eq!((memory.session_growth_bytes.len(), memory.workers_per_session), (1, 2), "{memory:?}");
    assert_eq!(embedder.warm_up(), 1, "one session for both workers");
}
