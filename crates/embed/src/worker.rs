//! The session workers: worker `k` takes its next batch from the queue, runs it (on the CPU on
//! the one session all workers share, on a GPU on session `k`, with the GPU-to-CPU fallback), and
//! hands each row to its call's request. Also TEI's token vectors, which run on the first session
//! outside the queue through the same fallback.

use std::sync::atomic::Ordering;
use std::sync::{PoisonError, RwLock};

use nornir_ep_select::Vendor;
use ort::session::Session;

use crate::call::{CallOptions, Truncation};
use crate::engine::{Engine, Slot};
use crate::error::{EmbedError, InferenceKind, Result, error_chain};
use crate::graph_io::{Row, forward, run_and_pool};
use crate::scheduler::Item;
use crate::session;

/// Worker `k`: runs batches until the embedder is dropped. A panic anywhere in
/// it (building a session, running, handing rows over, taking work) fails the texts it holds,
/// as they drop, and the worker starts again.
pub(crate) fn work(engine: &Engine, k: usize) {
    while std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_batches(engine, k))).is_err() {
        tracing::error!("session worker {k} panicked; the texts it held failed, and it starts again");
        engine.scheduler.worker_restarted(k);
        // A fault that comes back at once is not run at full speed.
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn run_batches(engine: &Engine, k: usize) {
    while let Some(mut items) = engine.scheduler.next_batch_for(k) {
        let slot = engine.slot_for(k);
        let fed = items.len() * items.iter().map(|i| i.ids.len()).max().unwrap_or(0);
        let started = std::time::Instant::now();
        engine.run_items(slot, &mut items);
        engine.scheduler.done(k, fed, started.elapsed());
    }
}

impl Engine {
    /// Runs a batch of queue items on `slot` and hands each row to its request, after the
    /// batch is counted in the stats. When the batch fails, each text runs again alone, so one
    /// text (one caller's bad input) fails only its own call; a panic while running fails the
    /// batch's texts, and a panic anywhere else fails them as they drop (see `Item`).
    pub(crate) fn run_items(&self, slot: &RwLock<Slot>, items: &mut [Item]) {
        let run = |batch: &[Item]| -> Result<Vec<f32>> {
            let rows: Vec<Row<'_>> = batch.iter().map(|i| Row { ids: &i.ids, skip: i.skip, spans: &i.spans }).collect();
            // The batch's rows are copied out of ONNX Runtime's output here, and handed over only
            // once the batch succeeded, was counted, and the session is unlocked.
            let mut out = Vec::with_capacity(batch.len() * self.info.model_dimension);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::fault::hit(crate::fault::Stage::Run);
                self.run_batch(slot, &rows, |_, v| out.extend_from_slice(v))
            }))
            .unwrap_or_else(|_| {
                Err(EmbedError::inference(InferenceKind::WorkerFailed, "a session worker panicked running this batch"))
            })?;
            Ok(out)
        };
        // The batch's vectors in order: each item's rows, one after another.
        let hand_over = |batch: &mut [Item], rows: Vec<f32>| {
            crate::fault::hit(crate::fault::Stage::HandOver);
            let dim = rows.len() / batch.iter().map(Item::rows).sum::<usize>().max(1);
            let mut at = 0;
            for item in batch {
                let n = item.rows() * dim;
                item.finish(&rows[at..at + n]);
                at += n;
            }
        };
        match run(items) {
            Ok(rows) => hand_over(items, rows),
            Err(e) if items.len() == 1 => items[0].fail(e),
            Err(e) => {
                tracing::warn!("a batch of {} texts failed ({}); running each alone", items.len(), error_chain(&e));
                for k in 0..items.len() {
                    match run(&items[k..=k]) {
                        Ok(rows) => hand_over(&mut items[k..=k], rows),
                        Err(e) => items[k].fail(e),
                    }
                }
            }
        }
    }

    /// Runs one batch on `slot`. When a GPU session fails, and the device was not forced, the
    /// slot's session is replaced by a CPU session and the same batch runs again: `emit` sees
    /// each text once, from the run that succeeded.
    pub(crate) fn run_batch(
        &self,
        slot: &RwLock<Slot>,
        rows: &[Row<'_>],
        mut emit: impl FnMut(usize, &[f32]),
    ) -> Result<usize> {
        let (settings, nanos) = (self.settings, &self.counters.ort_nanos);
        self.run_on(slot, rows, |session| run_and_pool(session, &self.io, settings, rows, nanos, &mut emit))
    }

    /// Runs `run` on the slot's session, then counts the batch of `rows`. Pooled rows and token
    /// vectors both go this way. A CPU session runs under the read lock, beside the other
    /// workers' runs; a GPU session under the write lock (see `run_exclusive`).
    pub(crate) fn run_on(
        &self,
        slot: &RwLock<Slot>,
        rows: &[Row<'_>],
        mut run: impl FnMut(&Session) -> Result<usize>,
    ) -> Result<usize> {
        let shared = slot.read().unwrap_or_else(PoisonError::into_inner);
        let dim = if shared.vendor == Vendor::Cpu {
            run(&shared.session)?
        } else {
            drop(shared);
            self.run_exclusive(slot, &mut run)?
        };
        let c = &self.counters;
        let longest = rows.iter().map(|r| r.ids.len()).max().unwrap_or(0).max(1);
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.count_batch(rows.len());
        c.tokens.fetch_add(rows.iter().map(|r| r.ids.len() as u64).sum(), Ordering::Relaxed);
        c.padded_tokens.fetch_add((rows.len() * longest) as u64, Ordering::Relaxed);
        Ok(dim)
    }

    /// Runs `run` on the slot's session alone, and when a GPU session fails (and the device was
    /// not forced), replaces it with a CPU session under the same lock and runs again there.
    fn run_exclusive(&self, slot: &RwLock<Slot>, run: &mut impl FnMut(&Session) -> Result<usize>) -> Result<usize> {
        let mut slot = slot.write().unwrap_or_else(PoisonError::into_inner);
        match run(&slot.session) {
            Err(e) if slot.vendor != Vendor::Cpu => {
                let e = error_chain(&e);
                let active = &self.report.active_provider;
                let hint = session::run_time_hint(&self.report.registrations, active);
                let why = format!("running a batch on {active} failed: {e}{hint}");
                if self.report.plan.forced {
                    return Err(EmbedError::ForcedDeviceFailed {
                        vendor: self.report.plan.vendor,
                        details: why,
                        registrations: Vec::new(),
                    });
                }
                tracing::warn!("{why}; running it and the rest on CPU");
                slot.session = self.cpu_session()?;
                slot.vendor = Vendor::Cpu;
                self.run_fallback()
                    .get_or_insert_with(|| format!("{why}; rebuilt on CPUExecutionProvider and ran that batch again"));
                run(&slot.session)
            }
            other => other,
        }
    }

    /// The model's token vectors for one text (TEI's `/embed_all`): `tokens x width`, raw, with
    /// the call's prompt and truncation. Runs on the first session, outside the queue.
    pub(crate) fn token_vectors(&self, text: &str, options: &CallOptions) -> Result<(Vec<f32>, usize)> {
        if self.io.pooled {
            return Err(EmbedError::invalid(
                "output_name",
                format!("the model's output {:?} is one vector per text, so it has no token vectors", self.info.output),
            ));
        }
        let plan = self.plan_call(options)?;
        let enc = self.tokenize(&[text], &plan)?.remove(0);
        if plan.truncation == Truncation::Refuse && !enc.get_overflowing().is_empty() {
            return Err(self.too_long(0, text, plan.prompt));
        }
        let rows = [Row { ids: enc.get_ids(), skip: 0, spans: &[] }];
        let mut out = Vec::new();
        let width = self.run_on(&self.session, &rows, |session| {
            out.clear();
            forward(session, &self.io, self.settings, &rows, &self.counters.ort_nanos, |_, v, _| {
                out.extend_from_slice(v)
            })
        })?;
        Ok((out, width))
    }
}
