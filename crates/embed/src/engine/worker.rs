//! The workers: worker `k` takes its next batch from the queue, runs it (on the CPU on
//! the one session all workers share, on a GPU on session `k`, with the GPU-to-CPU fallback; a
//! batch of images on the vision graph's one session), and hands each row to its call's request.

use crate::engine::Engine;
use crate::error::{EmbedError, InferenceKind, Result, error_chain};
use crate::forward::run::Row;
use crate::schedule::request::{Input, Item};

/// Worker `k`: runs batches until the embedder is dropped. A panic anywhere in
/// it (building a session, running, handing rows over, taking work) fails the texts it holds,
/// as they drop, and the worker starts again.
pub(crate) fn work(engine: &Engine, k: usize) {
    while std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_batches(engine, k))).is_err() {
        tracing::error!("worker {k} panicked; the texts it held failed, and it starts again");
        engine.scheduler.worker_restarted(k);
        // A fault that comes back at once is not run at full speed.
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn run_batches(engine: &Engine, k: usize) {
    while let Some(mut items) = engine.scheduler.next_batch_for(k) {
        let fed = items.len() * items.iter().map(Item::cost).max().unwrap_or(0);
        let started = std::time::Instant::now();
        run_items(engine, k, &mut items);
        engine.scheduler.done(k, fed, started.elapsed());
    }
}

/// Runs a batch of queue items as worker `k` and hands each row to its request, after the
/// batch is counted in the stats. When the batch fails, each text (or image) runs again alone,
/// so one text (one caller's bad input) fails only its own call; a panic while running fails the
/// batch's items, and a panic anywhere else fails them as they drop (see `Item`).
fn run_items(engine: &Engine, k: usize, items: &mut [Item]) {
    // The batch's vectors in order, each item's rows one after another, and how many floats are
    // each item's. They are copied out of ONNX Runtime's output, and handed over only once the
    // batch succeeded, was counted, and the session is unlocked.
    let run = |batch: &[Item]| -> Result<(Vec<f32>, Vec<usize>)> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::forward::fault::hit(crate::forward::fault::Stage::Run);
            if batch.iter().any(|i| i.image_size().is_some()) {
                run_images(engine, batch)
            } else {
                run_texts(engine, k, batch)
            }
        }))
        .unwrap_or_else(|_| {
            Err(EmbedError::inference(InferenceKind::WorkerFailed, "a worker panicked running this batch"))
        })
    };
    let hand_over = |batch: &mut [Item], (rows, floats): (Vec<f32>, Vec<usize>)| {
        crate::forward::fault::hit(crate::forward::fault::Stage::HandOver);
        engine.scheduler.handing_over(k, batch.len());
        let mut at = 0;
        for (item, n) in batch.iter_mut().zip(floats) {
            item.finish(&rows[at..at + n]);
            at += n;
        }
    };
    let fail = |item: &mut Item, e: EmbedError| {
        engine.scheduler.handing_over(k, 1);
        item.fail(e);
    };
    match run(items) {
        Ok(rows) => hand_over(items, rows),
        Err(e) if items.len() == 1 => fail(&mut items[0], e),
        Err(e) => {
            let what = if items[0].image_size().is_some() { "images" } else { "texts" };
            tracing::warn!("a batch of {} {what} failed ({}); running each alone", items.len(), error_chain(&e));
            for i in 0..items.len() {
                match run(&items[i..=i]) {
                    Ok(rows) => hand_over(&mut items[i..=i], rows),
                    Err(e) => fail(&mut items[i], e),
                }
            }
        }
    }
}

/// A batch of texts on worker `k`'s session (a raw item's token rows are narrower than the Dense
/// modules' pooled rows).
fn run_texts(engine: &Engine, k: usize, batch: &[Item]) -> Result<(Vec<f32>, Vec<usize>)> {
    let rows: Vec<Row<'_>> = batch
        .iter()
        .map(|i| match &i.input {
            Input::Text(t) => {
                Ok(Row { ids: &t.ids, skip: t.skip, spans: &t.spans, types: &t.types, attend: t.attend(), raw: t.raw })
            }
            Input::Image(_) => Err(mixed()),
        })
        .collect::<Result<_>>()?;
    let mut out = Vec::with_capacity(batch.len() * engine.info.model_dimension);
    let mut floats = vec![0; batch.len()];
    engine.run_batch(k, &rows, |i, v| {
        out.extend_from_slice(v);
        floats[i] += v.len();
    })?;
    Ok((out, floats))
}

/// A batch of images of one size on the vision graph: a row each.
fn run_images(engine: &Engine, batch: &[Item]) -> Result<(Vec<f32>, Vec<usize>)> {
    let pixels: Vec<_> = batch
        .iter()
        .map(|i| match &i.input {
            Input::Image(p) => Ok(p),
            Input::Text(_) => Err(mixed()),
        })
        .collect::<Result<_>>()?;
    let out = engine.run_images(&pixels)?;
    Ok((out, vec![engine.info.model_dimension; batch.len()]))
}

/// The error of a batch that mixes texts and images, which the queue never makes.
fn mixed() -> EmbedError {
    EmbedError::Internal { reason: "a batch mixed texts and images".to_owned() }
}
