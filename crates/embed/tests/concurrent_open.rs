//! Embedders opened at once on several threads of a fresh process all load: ONNX Runtime adds
//! nornir's operator domain to ONNX's process-wide table without a lock, so the first sessions
//! that register it are committed one at a time (`load/kernels.rs`, `committing`). Before that,
//! two of them built at once could fail with "the domain is already exist".

mod common;

use std::sync::{Arc, Barrier};

use nornir_embed::{Embedder, EmbedderOptions};
use nornir_ep_select::Device;

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn embedders_opened_at_once_on_several_threads_all_load() {
    nornir_test_support::needs_assets!();
    let threads = 8;
    let start = Arc::new(Barrier::new(threads));
    let opened: Vec<_> = (0..threads)
        .map(|_| {
            let start = start.clone();
            std::thread::spawn(move || {
                let options = EmbedderOptions::default().with_device(Device::Cpu).with_threads(1);
                start.wait();
                Embedder::new(&common::model_dir(), &options).map(|e| e.embed(&["one text"]).map(|v| v.row(0).to_vec()))
            })
        })
        .collect();
    let vectors: Vec<Vec<f32>> =
        opened.into_iter().map(|t| t.join().expect("no panic").expect("loads").expect("embeds")).collect();
    assert!(vectors.windows(2).all(|w| w[0] == w[1]), "one model, one text: one vector");
}
