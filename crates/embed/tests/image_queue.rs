//! Image calls go through the queue that text calls go through, on a tiny random CLIP that
//! scripts/image_reference.py makes and nornir-convert converts, on CPU ONNX Runtime: image and
//! text calls running side by side (blocking and async) get the rows they get alone, and the stats
//! count the images; an image call behind a long text call is refused by its `max_wait` or a full
//! queue, and cancelled (by its handle, or by dropping its future) leaves the queue, as a text
//! call does; a batch of images whose run panics runs again image by image. The tests take one
//! lock: a fault injected by one is process-wide.

mod common;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use common::join_all;
use nornir_embed::internals::fault::{self, Stage};
use nornir_embed::{
    CallOptions, CancelHandle, EmbedError, Embedder, EmbedderOptions, Embeddings, ImageInput, QueueFull,
};
use nornir_ep_select::Device;
use nornir_test_support::env_path;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A tiny CLIP (32 x 32 images, 24-wide vectors) converted in `work`: its ONNX folder.
fn clip(work: &Path) -> PathBuf {
    let (source, converted) = (work.join("clip"), work.join("clip-onnx"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/image_reference.py");
    let o = std::process::Command::new(env_path("NORNIR_TEST_REFERENCE_PYTHON"))
        .arg(script)
        .args(["make".as_ref(), "clip".as_ref(), source.as_os_str()])
        .output()
        .expect("run the reference script");
    assert!(o.status.success(), "image_reference.py make clip:\n{}", String::from_utf8_lossy(&o.stderr));
    nornir_convert::convert(&source, &converted, &nornir_convert::ConvertOptions::default()).expect("convert");
    converted
}

fn options() -> EmbedderOptions {
    EmbedderOptions::default()
        .with_device(Device::Cpu)
        .with_threads(2)
        .with_ort_library(env_path("NORNIR_TEST_ORT_CPU"))
}

/// `count` RGB images of several sizes and patterns (the processor crops each to 32 x 32).
fn images(count: usize) -> Vec<ImageInput> {
    (0..count)
        .map(|i| {
            let (w, h) = (20 + (i * 7) % 50, 24 + (i * 11) % 40);
            let pixels = (0..w * h * 3).map(|p| ((p * (i + 3) + i * 31) % 251) as u8).collect();
            ImageInput::rgb8(w as u32, h as u32, pixels)
        })
        .collect()
}

fn texts(count: usize, word: &str) -> Vec<String> {
    (0..count).map(|i| format!("{word} number {i}")).collect()
}

fn assert_same(got: &Embeddings, want: &Embeddings, what: &str) {
    assert_eq!((got.len(), got.dim()), (want.len(), want.dim()), "{what}");
    for i in 0..got.len() {
        let worst = got.row(i).iter().zip(want.row(i)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-5, "{what}: row {i} differs by {worst:e}");
    }
}

/// Waits until the queue grows past `last` while a long call's texts drain from it (only the
/// call under test adds to it), calling `poll` between looks; false when the long call drained
/// first.
fn queued_behind(e: &Embedder, mut last: u64, mut poll: impl FnMut()) -> bool {
    let started = Instant::now();
    while last > 0 && started.elapsed() < Duration::from_secs(60) {
        poll();
        std::thread::sleep(Duration::from_millis(1));
        let now = e.stats().queued_texts;
        if now > last {
            return true;
        }
        last = now;
    }
    false
}

/// Starts `e.embed(long)` on `s` and waits until it has texts waiting in the queue.
fn block<'s, 'e: 's>(
    s: &'s std::thread::Scope<'s, 'e>,
    e: &'e Embedder,
    long: &'e [String],
) -> std::thread::ScopedJoinHandle<'s, Result<Embeddings, EmbedError>> {
    let busy = s.spawn(move || e.embed(long));
    let started = Instant::now();
    while e.stats().running_texts == 0 || e.stats().queued_texts == 0 {
        assert!(started.elapsed() < Duration::from_secs(60), "the long call never queued: {:?}", e.stats());
        std::thread::yield_now();
    }
    busy
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn image_and_text_calls_side_by_side_get_their_rows_alone_and_are_counted() {
    nornir_test_support::needs_assets!();
    let _one = one_at_a_time();
    let t = tempfile::tempdir().expect("tempdir");
    let e = Embedder::new(&clip(t.path()), &options().with_workers(2)).expect("load");
    assert!(e.takes_images());
    let (pictures, words) = (images(40), texts(50, "a photo of a cat"));
    let alone_images = e.embed_images(&pictures).expect("images alone");
    let alone_texts = e.embed(&words).expect("texts alone");
    e.reset_stats();
    std::thread::scope(|s| {
        let image_calls: Vec<_> = (0..3).map(|_| s.spawn(|| e.embed_images(&pictures))).collect();
        let text_calls: Vec<_> = (0..3).map(|_| s.spawn(|| e.embed(&words))).collect();
        for (k, call) in image_calls.into_iter().enumerate() {
            assert_same(&call.join().expect("join").expect("image call"), &alone_images, &format!("image call {k}"));
        }
        for (k, call) in text_calls.into_iter().enumerate() {
            assert_same(&call.join().expect("join").expect("text call"), &alone_texts, &format!("text call {k}"));
        }
    });
    let s = e.stats();
    assert_eq!((s.images, s.texts, s.batched_texts), (120, 150, 270), "{s:?}");
    assert_eq!((s.queued_texts, s.running_texts), (0, 0), "{s:?}");
    assert!(s.batches >= 120 / 16, "at most 16 images a batch: {s:?}");
    // The async twins, polled together on one thread.
    let raw = CallOptions::new();
    let futures = vec![e.embed_images_with_async(pictures.clone(), &raw), e.embed_with_async(&words, &raw)];
    let mut results = join_all(futures).into_iter();
    assert_same(&results.next().expect("images").expect("async images"), &alone_images, "async images");
    assert_same(&results.next().expect("texts").expect("async texts"), &alone_texts, "async texts");
    // The call's width and normalisation, applied to the image rows as to a text's.
    let cut = e.embed_images_with(&pictures, &CallOptions::new().with_dimensions(8)).expect("8 wide");
    let whole = e.embed_images_with(&pictures, &CallOptions::new().with_normalize(false)).expect("raw");
    assert_eq!((cut.len(), cut.dim()), (40, 8));
    for i in 0..cut.len() {
        let mut row = whole.row(i)[..8].to_vec();
        nornir_embed::normalize(&mut row);
        let worst = row.iter().zip(cut.row(i)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-5, "image {i}: {worst:e}");
    }
    // A bad image fails its call, naming it, before anything is queued.
    let mut bad = images(3);
    bad[1] = ImageInput::bytes(b"not an image".to_vec());
    let before = e.stats().batches;
    assert!(matches!(e.embed_images(&bad), Err(EmbedError::BadImage { index: 1, .. })));
    let future = e.embed_images_with_async(bad, &raw);
    assert!(matches!(join_all(vec![future]).remove(0), Err(EmbedError::BadImage { index: 1, .. })));
    assert_eq!(e.stats().batches, before, "nothing of the bad calls ran");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn an_image_call_behind_a_long_text_call_is_refused_or_cancelled_as_a_text_call_is() {
    nornir_test_support::needs_assets!();
    let _one = one_at_a_time();
    let t = tempfile::tempdir().expect("tempdir");
    let dir = clip(t.path());
    // One text per batch, on one worker: the long call keeps the queue full for a while.
    let slow = options().with_workers(1).with_token_budget(16);
    let e = Embedder::new(&dir, &slow).expect("load");
    let (pictures, long) = (images(100), texts(4000, "a long call"));
    // A handle cancelled beforehand refuses the call before anything is preprocessed or queued.
    let handle = CancelHandle::new();
    handle.cancel();
    let cancelled = CallOptions::new().with_cancel(&handle);
    assert!(matches!(e.embed_images_with(&pictures, &cancelled), Err(EmbedError::Cancelled)));
    assert_eq!((e.stats().cancelled_texts, e.stats().batches), (100, 0), "{:?}", e.stats());
    e.embed(&["measures the run time per token"]).expect("a first call");
    for round in 0..5 {
        e.reset_stats();
        let handle = CancelHandle::new();
        let cancellable = CallOptions::new().with_cancel(&handle);
        let done = std::thread::scope(|s| {
            let busy = block(s, &e, &long);
            // Admission: the queue ahead would take longer than the call's max_wait.
            let hurried = CallOptions::new().with_max_wait(Duration::from_micros(1));
            let refused = e.embed_images_with(&pictures, &hurried);
            let text_refused = e.embed_with(&["a text"], &hurried);
            // Cancellation: the images leave the queue unrun.
            let last = e.stats().queued_texts;
            let waiting = s.spawn(|| e.embed_images_with(&pictures, &cancellable));
            let queued = queued_behind(&e, last, || {});
            handle.cancel();
            let cancelled = waiting.join().expect("join");
            // A dropped future takes its images out of the queue too.
            let mut future = e.embed_images_with_async(pictures.clone(), &CallOptions::new());
            let mut cx = Context::from_waker(Waker::noop());
            let last = e.stats().queued_texts;
            let dropped_queued = queued_behind(&e, last, || {
                assert!(std::pin::Pin::new(&mut future).poll(&mut cx).is_pending(), "queued behind the long call");
            });
            drop(future);
            let long_rows = busy.join().expect("join").expect("the long call");
            assert_eq!(long_rows.len(), long.len());
            if !(queued && dropped_queued) {
                return false;
            }
            assert!(matches!(refused, Err(EmbedError::WaitTooLong { .. })), "{:?}", refused.map(|r| r.len()));
            assert!(matches!(text_refused, Err(EmbedError::WaitTooLong { .. })), "{:?}", text_refused.map(|r| r.len()));
            assert!(matches!(cancelled, Err(EmbedError::Cancelled)), "{:?}", cancelled.map(|r| r.len()));
            true
        });
        let s = e.stats();
        if done && s.batched_texts != 4000 {
            // Images queue apart from texts: on a loaded machine a worker can take a batch of them
            // in the moment between the check that they wait and their cancellation. A call that
            // ran its cancelled images every time would fail all five rounds.
            eprintln!("round {round}: a batch of the image calls was taken before they were cancelled ({s:?}); again");
            continue;
        }
        if done {
            // The long call's 4,000 texts alone were batched (above); nothing cancelled was served.
            assert_eq!((s.cancelled_texts, s.images), (200, 0), "{s:?}");
            assert_eq!(e.embed_images(&pictures[..2]).expect("served again").len(), 2);
            // A full queue refuses an image call at once, as a text call.
            let full = Embedder::new(&dir, &slow.clone().with_max_queued_texts(4).with_queue_full(QueueFull::Refuse))
                .expect("load");
            std::thread::scope(|s| {
                let busy = block(s, &full, &long);
                match full.embed_images(&pictures) {
                    Err(EmbedError::Overloaded { limit: 4, .. }) => {}
                    other => panic!("expected Overloaded, got {:?}", other.map(|r| r.len())),
                }
                assert_eq!(busy.join().expect("join").expect("the long call").len(), long.len());
            });
            return;
        }
        eprintln!("round {round}: the long call drained before the image calls queued ({:?}); again", e.stats());
    }
    panic!("in 5 rounds the image calls never stayed queued behind the long call until cancelled");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_batch_of_images_whose_run_panics_runs_again_image_by_image() {
    nornir_test_support::needs_assets!();
    let _one = one_at_a_time();
    let t = tempfile::tempdir().expect("tempdir");
    let e = Embedder::new(&clip(t.path()), &options().with_workers(1)).expect("load");
    let pictures = images(16);
    let want = e.embed_images(&pictures).expect("alone");
    e.reset_stats();
    fault::inject(Stage::Run);
    let got = e.embed_images(&pictures).expect("each image again alone");
    assert!(!fault::pending(), "no worker reached the run");
    assert_same(&got, &want, "after a failed run");
    let s = e.stats();
    assert_eq!((s.batches, s.batch_sizes[0], s.images), (16, 16, 16), "each image alone: {s:?}");
    // A panic while handing rows over fails the call's images, and the next call works.
    fault::inject(Stage::HandOver);
    match e.embed_images(&pictures) {
        Err(EmbedError::Inference { reason, .. }) => assert!(reason.contains("panicked"), "{reason}"),
        other => panic!("expected a failed worker, got {:?}", other.map(|r| r.len())),
    }
    assert_same(&e.embed_images(&pictures).expect("the next call"), &want, "the next call");
}
