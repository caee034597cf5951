//! A panic injected at each stage of a session worker that runs on the CPU (taking work from the
//! queue, running a batch, handing rows over; building a further session happens only on a GPU),
//! on the real default model and CPU ONNX Runtime: the call whose texts the worker held gets an error (or, for a failed run, its texts
//! run again alone), nobody waits, and the next calls work and match. One test, in a process of
//! its own: the injected fault is process-wide.

mod common;

use std::time::{Duration, Instant};

use common::{cosine, join_all, model_dir, parity_sample};
use nornir_embed::internals::fault::{self, Stage};
use nornir_embed::{EmbedError, Embedder, EmbedderOptions, Embeddings};
use nornir_ep_select::Device;

fn options() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_threads(2).with_workers(2)
}

fn assert_same(got: &Embeddings, want: &Embeddings, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for i in 0..got.len() {
        assert!(cosine(got.row(i), want.row(i)) >= 0.9999, "{what}: row {i}");
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_panic_at_any_stage_fails_what_the_worker_held_and_the_embedder_goes_on() {
    nornir_test_support::needs_assets!();
    let (texts, _) = parity_sample();
    let want = Embedder::new(&model_dir(), &options()).expect("load").embed(&texts).expect("reference");
    for stage in [Stage::Scheduler, Stage::Run, Stage::HandOver] {
        let e = Embedder::new(&model_dir(), &options()).expect("load");
        fault::inject(stage);
        let started = Instant::now();
        let first = e.embed(&texts);
        assert!(!fault::pending(), "{stage:?}: no worker reached the stage");
        assert!(started.elapsed() < Duration::from_secs(60), "{stage:?}: the call waited {:?}", started.elapsed());
        match (stage, first) {
            // A batch of several that fails runs again text by text: its texts get their vectors
            // (a batch of one text fails its call).
            (Stage::Run, Ok(rows)) => assert_same(&rows, &want, "after a failed run"),
            (_, Err(EmbedError::Inference { reason, .. })) => {
                assert!(reason.contains("panicked"), "{stage:?}: {reason}")
            }
            (_, other) => panic!("{stage:?}: {other:?}"),
        }
        assert_same(&e.embed(&texts).expect("the next call"), &want, &format!("{stage:?}, next call"));
        let calls: Vec<&[String]> = texts.chunks(10).collect();
        for (k, r) in join_all(calls.iter().map(|c| e.embed_async(c)).collect()).into_iter().enumerate() {
            let got = r.unwrap_or_else(|err| panic!("{stage:?}: async call {k}: {err}"));
            for i in 0..got.len() {
                assert!(cosine(got.row(i), want.row(k * 10 + i)) >= 0.9999, "{stage:?}: async call {k}, row {i}");
            }
        }
        let s = e.stats();
        assert_eq!((s.queued_texts, s.running_texts), (0, 0), "{stage:?}: nothing left queued or running");
    }
}
