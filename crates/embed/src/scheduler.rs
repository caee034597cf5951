//! Batching across calls: every call hands its tokenized texts to one queue; the session workers
//! pack whatever is waiting (sorted by length, under the token budget) and run it, so concurrent
//! small calls fill the same batches. Results go back to each call in its own order.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::batch::pack;
use crate::error::EmbedError;

/// What a call waits on: its rows, filled in by the workers as batches finish.
#[derive(Debug)]
pub(crate) struct Request {
    state: Mutex<RequestState>,
    done: Condvar,
}

#[derive(Debug)]
struct RequestState {
    rows: Vec<f32>,
    remaining: usize,
    error: Option<EmbedError>,
    waker: Option<Waker>,
}

/// The outcome of a finished request: its rows, or the first error one of its texts met.
pub(crate) type Finished = Result<Vec<f32>, EmbedError>;

impl Request {
    pub(crate) fn new(texts: usize, dim: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(RequestState { rows: vec![0f32; texts * dim], remaining: texts, error: None, waker: None }),
            done: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, RequestState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Row `index` is done (`Ok(vector)`) or failed.
    pub(crate) fn finish_row(&self, index: usize, row: Result<&[f32], EmbedError>) {
        let mut s = self.lock();
        match row {
            Ok(v) => s.rows[index * v.len()..(index + 1) * v.len()].copy_from_slice(v),
            Err(e) => {
                s.error.get_or_insert(e);
            }
        }
        s.remaining -= 1;
        if s.remaining == 0 {
            self.done.notify_all();
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    }

    /// Blocks until every row is done.
    pub(crate) fn wait(&self) -> Finished {
        let mut s = self.lock();
        while s.remaining > 0 {
            s = self.done.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        Self::take(&mut s)
    }

    /// The result if every row is done, else remembers `waker` to be woken then.
    pub(crate) fn poll(&self, waker: &Waker) -> Option<Finished> {
        let mut s = self.lock();
        if s.remaining > 0 {
            s.waker = Some(waker.clone());
            return None;
        }
        Some(Self::take(&mut s))
    }

    fn take(s: &mut RequestState) -> Finished {
        match s.error.take() {
            Some(e) => Err(e),
            None => Ok(std::mem::take(&mut s.rows)),
        }
    }
}

/// One text waiting to run: its ids and where its row goes.
#[derive(Debug)]
pub(crate) struct Item {
    pub(crate) ids: Vec<u32>,
    pub(crate) request: Arc<Request>,
    pub(crate) index: usize,
}

/// What to do with a call that would take the queue past its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum QueueFull {
    /// Wait until there is room (the default for the library).
    #[default]
    Wait,
    /// Fail at once with [`EmbedError::Overloaded`] (what a server wants: answer 503 and let the
    /// client or the load balancer retry).
    Refuse,
}

#[derive(Debug, Default)]
struct Queue {
    /// Submitted, not yet packed.
    waiting: Vec<Item>,
    /// Packed batches, run first come first served.
    ready: VecDeque<Vec<Item>>,
    /// Texts in `waiting` and `ready`.
    queued: usize,
    /// Workers running a batch now, by worker number.
    busy: Vec<bool>,
    shutdown: bool,
}

/// The queue and the workers' signals.
#[derive(Debug)]
pub(crate) struct Scheduler {
    queue: Mutex<Queue>,
    /// Wakes workers: work arrived, or the first worker got busy (the others may now help).
    work: Condvar,
    /// Wakes blocked callers: room in the queue.
    room: Condvar,
    room_wakers: Mutex<Vec<Waker>>,
    token_budget: usize,
    max_queued: usize,
    batch_wait: Duration,
    pub(crate) any_waiting: AtomicBool,
}

/// A batch handed to a worker.
pub(crate) struct Taken {
    pub(crate) items: Vec<Item>,
}

impl Scheduler {
    pub(crate) fn new(workers: usize, token_budget: usize, max_queued: usize, batch_wait: Duration) -> Self {
        Self {
            queue: Mutex::new(Queue { busy: vec![false; workers], ..Queue::default() }),
            work: Condvar::new(),
            room: Condvar::new(),
            room_wakers: Mutex::new(Vec::new()),
            token_budget,
            max_queued,
            batch_wait,
            any_waiting: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Texts waiting now (queued, not running).
    pub(crate) fn queued(&self) -> usize {
        self.lock().queued
    }

    /// Whether `n` more texts fit: under the limit, or the queue empty (a call larger than the
    /// limit runs alone rather than never).
    fn fits(&self, q: &Queue, n: usize) -> bool {
        q.queued == 0 || q.queued + n <= self.max_queued
    }

    fn overloaded(&self, queued: usize) -> EmbedError {
        EmbedError::Overloaded { queued, limit: self.max_queued }
    }

    /// Queues `items`, waiting for room or refusing as `full` says.
    pub(crate) fn submit(&self, items: Vec<Item>, full: QueueFull) -> Result<(), EmbedError> {
        let mut q = self.lock();
        while !self.fits(&q, items.len()) {
            if full == QueueFull::Refuse {
                return Err(self.overloaded(q.queued));
            }
            q = self.room.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        self.push(&mut q, items);
        Ok(())
    }

    /// Queues `items` if they fit now; else hands them back, with `waker` to be woken on room.
    pub(crate) fn try_submit(&self, items: Vec<Item>, waker: &Waker) -> Result<(), Vec<Item>> {
        let mut q = self.lock();
        if !self.fits(&q, items.len()) {
            self.room_wakers.lock().unwrap_or_else(PoisonError::into_inner).push(waker.clone());
            return Err(items);
        }
        self.push(&mut q, items);
        Ok(())
    }

    fn push(&self, q: &mut Queue, items: Vec<Item>) {
        if items.is_empty() {
            return;
        }
        q.queued += items.len();
        q.waiting.extend(items);
        self.any_waiting.store(true, Ordering::Relaxed);
        self.work.notify_all();
    }

    /// The next batch for worker `k`, or `None` at shutdown. Worker 0 takes any work; the others
    /// only while worker 0 is busy, so a lone call never builds a second session.
    pub(crate) fn take(&self, k: usize) -> Option<Taken> {
        let mut q = self.lock();
        loop {
            if q.shutdown {
                return None;
            }
            let eligible = k == 0 || q.busy[0];
            if eligible {
                if q.ready.is_empty() && !q.waiting.is_empty() {
                    q = self.fill_wait(q, k);
                    self.pack_waiting(&mut q);
                }
                if let Some(items) = q.ready.pop_front() {
                    q.queued -= items.len();
                    q.busy[k] = true;
                    self.any_waiting.store(!q.waiting.is_empty() || !q.ready.is_empty(), Ordering::Relaxed);
                    // Room for blocked callers; other workers may help with what is left.
                    self.room.notify_all();
                    for w in self.room_wakers.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
                        w.wake();
                    }
                    self.work.notify_all();
                    return Some(Taken { items });
                }
            }
            q = self.work.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Under load (another worker busy) and with less than a full batch waiting, waits up to
    /// `batch_wait` for more texts to fill it. An idle embedder never waits.
    fn fill_wait<'a>(&'a self, mut q: MutexGuard<'a, Queue>, k: usize) -> MutexGuard<'a, Queue> {
        if self.batch_wait.is_zero() {
            return q;
        }
        let deadline = Instant::now() + self.batch_wait;
        loop {
            let others_busy = q.busy.iter().enumerate().any(|(i, &b)| b && i != k);
            let tokens: usize = q.waiting.iter().map(|i| i.ids.len().max(1)).sum();
            let now = Instant::now();
            if !others_busy || tokens >= self.token_budget || now >= deadline || q.shutdown {
                return q;
            }
            q = self.work.wait_timeout(q, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Packs everything waiting into batches (longest first, under the token budget) at the end
    /// of the ready queue.
    fn pack_waiting(&self, q: &mut Queue) {
        let mut items: Vec<Option<Item>> = std::mem::take(&mut q.waiting).into_iter().map(Some).collect();
        let lengths: Vec<usize> = items.iter().map(|i| i.as_ref().map_or(0, |i| i.ids.len())).collect();
        for batch in pack(&lengths, self.token_budget) {
            q.ready.push_back(batch.indices.iter().filter_map(|&i| items[i].take()).collect());
        }
    }

    /// Worker `k` finished its batch.
    pub(crate) fn done(&self, k: usize) {
        let mut q = self.lock();
        q.busy[k] = false;
        drop(q);
        self.work.notify_all();
    }

    /// Tells the workers to stop once they finish what they run.
    pub(crate) fn shut_down(&self) {
        self.lock().shutdown = true;
        self.work.notify_all();
    }
}
