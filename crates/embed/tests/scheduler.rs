//! Batching across calls, on the real default model and CPU ONNX Runtime: async calls resolve
//! with no runtime, a full queue refuses and keeps serving, and a text that fails its batch fails
//! only its own call (on the jina-v2-like fixture, whose 8,192-row position table makes any
//! longer text fail inside ONNX Runtime).

mod common;

use std::future::Future;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use common::{cosine, join_all, model_dir, parity_sample};
use nornir_embed::{CallOptions, CancelHandle, EmbedError, Embedder, EmbedderOptions, QueueFull};
use nornir_ep_select::Device;
use nornir_test_support::fixtures::{self, Kind};

fn options() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_threads(2)
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn async_calls_share_batches_and_match_blocking_calls() {
    nornir_test_support::needs_assets!();
    let (texts, _) = parity_sample();
    let e = Embedder::new(&model_dir(), &options()).expect("load");
    let whole = e.embed(&texts).expect("blocking");
    e.reset_stats();
    let calls: Vec<&[String]> = texts.chunks(3).collect();
    let futures: Vec<_> = calls.iter().map(|c| e.embed_async(c)).collect();
    let results = join_all(futures);
    for (k, r) in results.into_iter().enumerate() {
        let rows = r.expect("async call");
        assert_eq!(rows.len(), calls[k].len());
        for (j, row) in rows.rows().enumerate() {
            assert!(cosine(row, whole.row(k * 3 + j)) > 0.9999, "call {k} row {j}");
        }
        assert!(rows.total_tokens() > 0);
    }
    let s = e.stats();
    assert_eq!(s.texts, texts.len() as u64);
    assert!(s.batches < calls.len() as u64, "33 calls queued at once share batches: {s:?}");
    let empty: [&str; 0] = [];
    assert!(join_all(vec![e.embed_async(&empty)])[0].as_ref().expect("empty").is_empty());
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_full_queue_refuses_at_once_and_keeps_serving() {
    nornir_test_support::needs_assets!();
    let (texts, _) = parity_sample();
    let many: Vec<String> = (0..8).flat_map(|i| texts.iter().map(move |t| format!("{i} {t}"))).collect();
    let e = Embedder::new(
        &model_dir(),
        &options().with_workers(1).with_max_queued_texts(4).with_queue_full(QueueFull::Refuse),
    )
    .expect("load");
    std::thread::scope(|s| {
        // A call larger than the limit runs when the queue is empty...
        let big = s.spawn(|| e.embed(&many));
        let started = Instant::now();
        while e.stats().queued_texts == 0 {
            assert!(started.elapsed() < Duration::from_secs(30), "the large call never queued");
            std::thread::yield_now();
        }
        // ...and while it waits, a caller is refused at once, with what to do.
        match e.embed(&["one more text"]) {
            Err(EmbedError::Overloaded { limit: 4, .. }) => {}
            other => panic!("expected Overloaded, got {other:?}"),
        }
        let e2 = e.embed_async(&["one more text"]);
        assert!(matches!(join_all(vec![e2]).remove(0), Err(EmbedError::Overloaded { .. })));
        assert_eq!(big.join().expect("join").expect("the large call").len(), many.len());
    });
    assert_eq!(e.embed(&["served again"]).expect("after the flood").len(), 1);
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_text_that_fails_its_batch_fails_only_its_own_call() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    fixtures::write_model(t.path(), Kind::LongContext, 30522);
    let mut tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model_dir().join("tokenizer.json")).expect("tokenizer"))
            .expect("json");
    tokenizer["truncation"] = serde_json::Value::Null;
    std::fs::write(t.path().join("tokenizer.json"), tokenizer.to_string()).expect("write tokenizer");
    // 9,000 tokens allowed, though the graph has 8,192 positions; a large budget, so that texts of
    // about 8,200 tokens share a batch.
    let o = options().with_workers(1).with_max_length(9000).with_token_budget(1 << 20);
    let e = Embedder::new(t.path(), &o).expect("load");
    let words = |n: usize, w: &str| format!("{w} ").repeat(n);
    let (ok_a, ok_b, bad) = (words(8150, "apple"), words(8140, "pear"), words(8250, "plum"));
    let alone_a = e.embed(&[ok_a.as_str()]).expect("alone");
    let alone_b = e.embed(&[ok_b.as_str()]).expect("alone");
    // The three calls must reach the queue while the blocker runs, so that they share a batch;
    // on a loaded machine the blocker can finish first, and the round is tried again.
    for round in 0..5 {
        e.reset_stats();
        let blocker = words(8000, "stone");
        let (results, shared) = std::thread::scope(|s| {
            let busy = s.spawn(|| e.embed(&[blocker.as_str(), &words(7990, "sand")]));
            let started = std::time::Instant::now();
            while e.stats().running_texts < 2 {
                assert!(started.elapsed() < Duration::from_secs(60), "the blocker never started: {:?}", e.stats());
                std::thread::sleep(Duration::from_millis(1));
            }
            let futures =
                vec![e.embed_async(&[bad.as_str()]), e.embed_async(&[ok_a.as_str()]), e.embed_async(&[ok_b.as_str()])];
            let results = join_all(futures);
            busy.join().expect("join").expect("the blocker");
            // Counted batches are those that ran: the blocker's pair, then the two good texts
            // alone, rerun after the batch of three failed (apart, they would run as a pair).
            let s = e.stats();
            (results, (s.batches, s.batch_sizes[0], s.batch_sizes[1]) == (3, 2, 3))
        });
        let err = results[0].as_ref().expect_err("the 8,250-token text overruns the position table").to_string();
        assert!(err.contains("inference failed"), "{err}");
        assert!(cosine(results[1].as_ref().expect("its neighbour").row(0), alone_a.row(0)) > 0.99999);
        assert!(cosine(results[2].as_ref().expect("its neighbour").row(0), alone_b.row(0)) > 0.99999);
        if shared {
            return;
        }
        eprintln!("round {round}: the three calls did not share a batch ({:?}); again", e.stats());
    }
    panic!("in 5 rounds the three calls never shared a batch behind the blocker");
}

/// A dropped future takes its waiting texts out of the queue: behind a long call that keeps the
/// one session busy, 500 texts are queued by polling, then the future is dropped; the queue
/// is empty at once, the 500 are counted as cancelled, and the embedder keeps serving.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_dropped_future_leaves_the_queue() {
    nornir_test_support::needs_assets!();
    let e = Embedder::new(&model_dir(), &options().with_workers(1)).expect("load");
    let long: Vec<String> =
        (0..64).map(|i| format!("{i} {}", "a long text that keeps the session busy ".repeat(20))).collect();
    let many: Vec<String> = (0..500).map(|i| format!("short text number {i}")).collect();
    std::thread::scope(|s| {
        let busy = s.spawn(|| e.embed(&long));
        let started = std::time::Instant::now();
        while e.stats().running_texts == 0 {
            assert!(started.elapsed() < Duration::from_secs(60), "the long call never started");
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut future = e.embed_async(&many);
        let mut cx = Context::from_waker(Waker::noop());
        // Polled until the tokenizing thread has handed its texts over and they wait in the queue.
        let started = std::time::Instant::now();
        while e.stats().queued_texts < 500 {
            assert!(std::pin::Pin::new(&mut future).poll(&mut cx).is_pending(), "queued behind the long call");
            assert!(started.elapsed() < Duration::from_secs(60), "never queued: {:?}", e.stats());
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(future);
        let s = e.stats();
        assert_eq!(s.cancelled_texts, 500, "{s:?}");
        assert!(s.queued_texts < 64, "only the long call's texts may still wait: {s:?}");
        assert_eq!(busy.join().expect("join").expect("the long call").len(), 64);
    });
    assert_eq!(e.stats().batched_texts, 64, "the cancelled texts never ran: {:?}", e.stats());
    assert_eq!(e.embed(&["served again"]).expect("after the cancel").len(), 1);
}

/// A blocking call's [`CancelHandle`] does what a drop does for a future: behind a long call that
/// keeps the one session busy, a call of 500 texts blocks in another thread; cancelling it from
/// here returns `Cancelled` to that thread at once, the 500 leave the queue without running, and
/// a handle cancelled beforehand refuses the next call before it queues anything.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_cancelled_blocking_call_leaves_the_queue() {
    nornir_test_support::needs_assets!();
    let e = Embedder::new(&model_dir(), &options().with_workers(1)).expect("load");
    let long: Vec<String> =
        (0..64).map(|i| format!("{i} {}", "a long text that keeps the session busy ".repeat(20))).collect();
    let many: Vec<String> = (0..500).map(|i| format!("short text number {i}")).collect();
    let handle = CancelHandle::new();
    let options = CallOptions::new().with_cancel(&handle);
    std::thread::scope(|s| {
        let busy = s.spawn(|| e.embed(&long));
        let started = Instant::now();
        while e.stats().running_texts == 0 {
            assert!(started.elapsed() < Duration::from_secs(60), "the long call never started");
            std::thread::sleep(Duration::from_millis(1));
        }
        let blocked = s.spawn(|| e.embed_with(&many, &options));
        while e.stats().queued_texts < 500 {
            assert!(!blocked.is_finished(), "queued behind the long call: {:?}", e.stats());
            assert!(started.elapsed() < Duration::from_secs(60), "never queued: {:?}", e.stats());
            std::thread::sleep(Duration::from_millis(1));
        }
        handle.cancel();
        let result = blocked.join().expect("join");
        assert!(matches!(result, Err(EmbedError::Cancelled)), "{:?}", result.map(|r| r.len()));
        let s = e.stats();
        assert_eq!(s.cancelled_texts, 500, "{s:?}");
        assert!(s.queued_texts < 64, "only the long call's texts may still wait: {s:?}");
        assert_eq!(busy.join().expect("join").expect("the long call").len(), 64);
    });
    assert_eq!(e.stats().batched_texts, 64, "the cancelled texts never ran: {:?}", e.stats());
    let again = e.embed_with(&["after the cancel"], &options);
    assert!(matches!(again, Err(EmbedError::Cancelled)), "a cancelled handle stays cancelled");
    assert_eq!(e.stats().batched_texts, 64, "nothing of it ran");
    let fresh = CallOptions::new().with_cancel(&CancelHandle::new());
    assert_eq!(e.embed_with(&["served again"], &fresh).expect("a fresh handle").len(), 1);
}
