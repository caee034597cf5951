//! Batching across calls: every call hands its tokenized texts to one queue; each session worker
//! takes the next batch from whatever is waiting (the oldest call's longest text, with the texts
//! of any call closest below it in length, under the token budget), so concurrent small calls
//! fill the same batches and the oldest call is always served next. Results go back to each call
//! in its own order.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::batch;
use crate::error::{EmbedError, InferenceKind};

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
    /// Its [`CancelHandle`](crate::CancelHandle) was used: the caller stops waiting, and rows
    /// still running land here unread.
    cancelled: bool,
}

/// The outcome of a finished request: its rows, or the first error one of its texts met.
pub(crate) type Finished = Result<Vec<f32>, EmbedError>;

impl Request {
    pub(crate) fn new(texts: usize, dim: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(RequestState {
                rows: vec![0f32; texts * dim],
                remaining: texts,
                error: None,
                waker: None,
                cancelled: false,
            }),
            done: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, RequestState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Row `index` is done (`Ok(vector)`) or failed.
    pub(crate) fn finish_row(&self, index: usize, row: Result<&[f32], EmbedError>) {
        match row {
            Ok(v) => {
                let mut s = self.lock();
                s.rows[index * v.len()..(index + 1) * v.len()].copy_from_slice(v);
                self.count_done(&mut s, 1);
            }
            Err(e) => self.fail_rows(1, e),
        }
    }

    /// `count` rows failed with `e` (the first error a request meets is the one it returns).
    pub(crate) fn fail_rows(&self, count: usize, e: EmbedError) {
        let mut s = self.lock();
        s.error.get_or_insert(e);
        self.count_done(&mut s, count);
    }

    fn count_done(&self, s: &mut RequestState, count: usize) {
        if s.remaining == 0 {
            return;
        }
        s.remaining = s.remaining.saturating_sub(count);
        if s.remaining == 0 {
            self.done.notify_all();
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    }

    /// Blocks until every row is done, or the call is cancelled.
    pub(crate) fn wait(&self) -> Finished {
        let mut s = self.lock();
        while s.remaining > 0 && !s.cancelled {
            s = self.done.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        Self::outcome(&mut s)
    }

    /// The result if every row is done (or the call is cancelled), else remembers `waker` to be
    /// woken then.
    pub(crate) fn poll(&self, waker: &Waker) -> Option<Finished> {
        let mut s = self.lock();
        if s.remaining > 0 && !s.cancelled {
            s.waker = Some(waker.clone());
            return None;
        }
        Some(Self::outcome(&mut s))
    }

    fn outcome(s: &mut RequestState) -> Finished {
        if s.cancelled && s.remaining > 0 {
            // The rows stay: texts still running write theirs.
            return Err(EmbedError::Cancelled);
        }
        match s.error.take() {
            Some(e) => Err(e),
            None => Ok(std::mem::take(&mut s.rows)),
        }
    }

    /// Stops the wait of its caller, who then takes its texts out of the queue.
    pub(crate) fn cancel(&self) {
        let mut s = self.lock();
        s.cancelled = true;
        self.done.notify_all();
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
}

/// One text waiting to run: its ids and where its rows go. Dropped before its rows were handed
/// over (a worker that panicked, at any stage), it fails them, so that no caller waits forever.
#[derive(Debug)]
pub(crate) struct Item {
    pub(crate) ids: Vec<u32>,
    /// Prompt tokens at its start that the pooling leaves out (see `graph_io::Row`).
    pub(crate) skip: usize,
    /// Token ranges pooled into a row each (late chunking); empty: the whole text, one row.
    pub(crate) spans: Vec<(usize, usize)>,
    pub(crate) request: Arc<Request>,
    /// Its first row in the request.
    pub(crate) index: usize,
    /// Its rows were handed over (or failed, or nobody waits for them).
    pub(crate) settled: bool,
}

impl Drop for Item {
    fn drop(&mut self) {
        if !self.settled {
            self.request.fail_rows(
                self.rows(),
                EmbedError::inference(
                    InferenceKind::WorkerFailed,
                    "a session worker failed (it panicked) before this text was done; retry",
                ),
            );
        }
    }
}

impl Item {
    pub(crate) fn new(
        ids: Vec<u32>,
        skip: usize,
        spans: Vec<(usize, usize)>,
        request: &Arc<Request>,
        index: usize,
    ) -> Self {
        Self { ids, skip, spans, request: Arc::clone(request), index, settled: false }
    }

    /// How many rows it fills.
    pub(crate) fn rows(&self) -> usize {
        self.spans.len().max(1)
    }

    /// Hands over its rows: `vectors` holds `rows()` vectors one after another.
    pub(crate) fn finish(&mut self, vectors: &[f32]) {
        let dim = vectors.len() / self.rows();
        for (j, v) in vectors.chunks_exact(dim.max(1)).enumerate() {
            self.request.finish_row(self.index + j, Ok(v));
        }
        self.settled = true;
    }

    /// Fails every row it fills with `e`.
    pub(crate) fn fail(&mut self, e: EmbedError) {
        self.request.fail_rows(self.rows(), e);
        self.settled = true;
    }

    /// Its length in the queue: its tokens, and at least 1 (an empty text still takes a row).
    fn length(&self) -> usize {
        self.ids.len().max(1)
    }
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

/// How batches are cut, by where they run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BatchPolicy {
    /// Padding a batch may carry, as a fraction of its longest text (plus 2 tokens).
    max_padding: f32,
    /// How far past the most due call a batch reaches for company, in runs of a full batch.
    horizon_batches: f64,
}

impl BatchPolicy {
    /// On the CPU every padded token costs as much as a real one and batch size hardly matters
    /// (on the corpus, batches of 2.6 texts ran at 300 texts/s and of 9 at 322): batches keep to
    /// similar lengths (10% padding) and to calls due within half a batch's run, which keeps
    /// latency even (16 one-text callers: p99 under 2x p50). A GPU gains more from large batches
    /// than it loses to padding: no bounds there but the token budget.
    pub(crate) const CPU: Self = Self { max_padding: 0.1, horizon_batches: 0.5 };
    pub(crate) const GPU: Self = Self { max_padding: f32::INFINITY, horizon_batches: f64::INFINITY };

    fn horizon_micros(self, micros_per_token: f64, token_budget: usize) -> i64 {
        (self.horizon_batches * micros_per_token * token_budget as f64).min(i64::MAX as f64 / 4.0) as i64
    }
}

/// A call's place in line: its arrival less its longest text's expected run time (so a long text
/// starts early enough to finish about when a short one that came with it does), then its number.
type CallKey = (i64, u64);

/// Texts waiting to run, indexed two ways: by length, to cut batches of similar lengths, and by
/// call, in [`CallKey`] order, so the call that is most due is always served next.
#[derive(Debug)]
struct Queue {
    /// Waiting texts by id, with their call.
    items: HashMap<u64, (CallKey, Item)>,
    /// (length, u64::MAX - id): descending order visits longer texts first, older first among equals.
    by_length: BTreeSet<(usize, u64)>,
    /// Per call, most due first: its waiting texts, keyed as in `by_length`.
    by_call: BTreeMap<CallKey, BTreeSet<(usize, u64)>>,
    next_id: u64,
    next_call: u64,
    /// When the queue was made: arrivals are microseconds since.
    epoch: Instant,
    /// Run time per token fed, in microseconds, averaged over recent batches.
    micros_per_token: f64,
    /// Tokens of the waiting texts.
    tokens: usize,
    /// Workers running a batch now, by worker number.
    busy: Vec<bool>,
    /// Texts in the batch each worker runs now.
    running: Vec<usize>,
    shutdown: bool,
}

impl Queue {
    fn new(workers: usize) -> Self {
        Self {
            items: HashMap::new(),
            by_length: BTreeSet::new(),
            by_call: BTreeMap::new(),
            next_id: 0,
            next_call: 0,
            epoch: Instant::now(),
            micros_per_token: 0.0,
            tokens: 0,
            busy: vec![false; workers],
            running: vec![0; workers],
            shutdown: false,
        }
    }

    /// The next batch: the longest text of the most due call, with the waiting texts closest
    /// below it in length from calls due within the policy's horizon, while they fit the token
    /// budget, the attention bound and the padding bound.
    fn next_batch(&mut self, token_budget: usize, policy: BatchPolicy) -> Option<Vec<Item>> {
        let (&(due, _), texts) = self.by_call.iter().next()?;
        let &(longest, anchor_key) = texts.last()?;
        let anchor = u64::MAX - anchor_key;
        let horizon = due.saturating_add(policy.horizon_micros(self.micros_per_token, token_budget));
        let floor = longest.saturating_sub((policy.max_padding * longest as f32).min(longest as f32) as usize + 2);
        let mut chosen = vec![anchor];
        for &(len, key) in self.by_length.range(..=(longest, u64::MAX)).rev() {
            let id = u64::MAX - key;
            if id == anchor {
                continue;
            }
            if self.items.get(&id).is_some_and(|(call, _)| call.0 > horizon) {
                continue;
            }
            let n = chosen.len() + 1;
            if len < floor || !batch::fits(n, longest, token_budget) {
                break;
            }
            chosen.push(id);
        }
        Some(chosen.into_iter().filter_map(|id| self.remove(id)).collect())
    }

    fn remove(&mut self, id: u64) -> Option<Item> {
        let (call, item) = self.items.remove(&id)?;
        let len = item.length();
        self.tokens -= len;
        self.by_length.remove(&(len, u64::MAX - id));
        if let Some(texts) = self.by_call.get_mut(&call) {
            texts.remove(&(len, u64::MAX - id));
            if texts.is_empty() {
                self.by_call.remove(&call);
            }
        }
        Some(item)
    }

    fn push(&mut self, items: Vec<Item>) {
        let longest = items.iter().map(|i| i.ids.len()).max().unwrap_or(0);
        let arrival = i64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(i64::MAX);
        let call = (arrival - (self.micros_per_token * longest as f64) as i64, self.next_call);
        self.next_call += 1;
        let texts = self.by_call.entry(call).or_default();
        for item in items {
            let (id, len) = (self.next_id, item.length());
            self.next_id += 1;
            self.by_length.insert((len, u64::MAX - id));
            texts.insert((len, u64::MAX - id));
            self.tokens += len;
            self.items.insert(id, (call, item));
        }
    }
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
    policy: BatchPolicy,
    max_queued: usize,
    batch_wait: Duration,
}

impl Scheduler {
    pub(crate) fn new(
        workers: usize,
        token_budget: usize,
        policy: BatchPolicy,
        max_queued: usize,
        batch_wait: Duration,
    ) -> Self {
        Self {
            queue: Mutex::new(Queue::new(workers)),
            work: Condvar::new(),
            room: Condvar::new(),
            room_wakers: Mutex::new(Vec::new()),
            token_budget,
            policy,
            max_queued,
            batch_wait,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Texts waiting now, and texts in the batches running now.
    pub(crate) fn load(&self) -> (usize, usize) {
        let q = self.lock();
        (q.items.len(), q.running.iter().sum())
    }

    /// Whether `n` more texts fit: under the limit, or the queue empty (a call larger than the
    /// limit runs alone rather than never).
    fn fits(&self, q: &Queue, n: usize) -> bool {
        q.items.is_empty() || q.items.len() + n <= self.max_queued
    }

    /// Refuses a call of `items` when the texts waiting, with its own, are expected to take
    /// longer than `max_wait` on every worker together (at the recent run time per token). Only
    /// an estimate: before the first batch, or with an empty queue, it admits.
    pub(crate) fn admit(&self, items: &[Item], max_wait: Option<Duration>) -> Result<(), EmbedError> {
        let Some(max_wait) = max_wait else { return Ok(()) };
        let q = self.lock();
        if q.items.is_empty() || q.micros_per_token == 0.0 {
            return Ok(());
        }
        let tokens = q.tokens + items.iter().map(Item::length).sum::<usize>();
        let expected = Duration::from_secs_f64(tokens as f64 * q.micros_per_token / 1e6 / q.busy.len() as f64);
        if expected > max_wait {
            return Err(EmbedError::WaitTooLong { expected, max_wait });
        }
        Ok(())
    }

    /// Queues `items` (one call), waiting for room or refusing as `full` says.
    pub(crate) fn submit(&self, items: Vec<Item>, full: QueueFull) -> Result<(), EmbedError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut q = self.lock();
        while !self.fits(&q, items.len()) {
            if full == QueueFull::Refuse {
                return Err(EmbedError::Overloaded { queued: q.items.len(), limit: self.max_queued });
            }
            q = self.room.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        q.push(items);
        self.work.notify_all();
        Ok(())
    }

    /// Queues `items` (one call) if they fit now; else hands them back, with `waker` to be woken
    /// when there is room.
    pub(crate) fn try_submit(&self, items: Vec<Item>, waker: &Waker) -> Result<(), Vec<Item>> {
        if items.is_empty() {
            return Ok(());
        }
        let mut q = self.lock();
        if !self.fits(&q, items.len()) {
            self.room_wakers.lock().unwrap_or_else(PoisonError::into_inner).push(waker.clone());
            return Err(items);
        }
        q.push(items);
        self.work.notify_all();
        Ok(())
    }

    /// The next batch for worker `k`, or `None` at shutdown. Worker 0 takes any work; the others
    /// only while worker 0 is busy, so a lone call never builds a second session.
    pub(crate) fn next_batch_for(&self, k: usize) -> Option<Vec<Item>> {
        let mut q = self.lock();
        loop {
            if q.shutdown {
                return None;
            }
            if (k == 0 || q.busy[0]) && !q.items.is_empty() {
                q = self.fill_wait(q, k);
                if let Some(items) = q.next_batch(self.token_budget, self.policy) {
                    q.busy[k] = true;
                    q.running[k] = items.len();
                    drop(q);
                    crate::fault::hit(crate::fault::Stage::Scheduler);
                    // Room for blocked callers; other workers may help with what is left.
                    self.room.notify_all();
                    for w in self.room_wakers.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
                        w.wake();
                    }
                    self.work.notify_all();
                    return Some(items);
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
            // Stops counting at a full budget: the queue can hold thousands of texts.
            let mut tokens = 0;
            let full = q.by_length.iter().any(|&(len, _)| {
                tokens += len;
                tokens >= self.token_budget
            });
            let now = Instant::now();
            if !others_busy || full || now >= deadline || q.shutdown {
                return q;
            }
            q = self.work.wait_timeout(q, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Worker `k` finished its batch of `tokens` tokens fed (padding included) in `elapsed`.
    /// Worker `k` panicked and starts again: it runs nothing now.
    pub(crate) fn worker_restarted(&self, k: usize) {
        self.done(k, 0, Duration::ZERO);
    }

    pub(crate) fn done(&self, k: usize, tokens: usize, elapsed: Duration) {
        let mut q = self.lock();
        q.busy[k] = false;
        q.running[k] = 0;
        if tokens > 0 {
            let sample = elapsed.as_secs_f64() * 1e6 / tokens as f64;
            q.micros_per_token =
                if q.micros_per_token == 0.0 { sample } else { 0.9 * q.micros_per_token + 0.1 * sample };
        }
        drop(q);
        self.work.notify_all();
    }

    /// Takes the texts of `request` that are still waiting out of the queue (a dropped future's:
    /// nobody will read them) and returns how many. Texts already running finish, unread.
    pub(crate) fn cancel(&self, request: &Arc<Request>) -> usize {
        let mut q = self.lock();
        let calls: Vec<CallKey> = q
            .by_call
            .iter()
            .filter(|(_, texts)| {
                texts
                    .first()
                    .and_then(|&(_, rev)| q.items.get(&(u64::MAX - rev)))
                    .is_some_and(|(_, item)| Arc::ptr_eq(&item.request, request))
            })
            .map(|(&call, _)| call)
            .collect();
        let mut cancelled = 0;
        for call in calls {
            let ids: Vec<u64> = q
                .by_call
                .get(&call)
                .map_or_else(Vec::new, |texts| texts.iter().map(|&(_, rev)| u64::MAX - rev).collect());
            for id in ids {
                if let Some(mut item) = q.remove(id) {
                    item.settled = true;
                    cancelled += 1;
                }
            }
        }
        drop(q);
        if cancelled > 0 {
            self.room.notify_all();
            for w in self.room_wakers.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
                w.wake();
            }
        }
        cancelled
    }

    /// Tells the workers to stop once they finish what they run; texts still queued fail (no
    /// call can be waiting on them: calls borrow the embedder).
    pub(crate) fn shut_down(&self) {
        let mut q = self.lock();
        q.shutdown = true;
        let left: Vec<Item> = q.items.drain().map(|(_, (_, item))| item).collect();
        q.by_length.clear();
        q.by_call.clear();
        q.tokens = 0;
        drop(q);
        for mut item in left {
            item.fail(EmbedError::inference(InferenceKind::EmbedderDropped, "the embedder was dropped"));
        }
        self.work.notify_all();
        self.room.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(request: &Arc<Request>, texts: &[(usize, usize)]) -> Vec<Item> {
        texts.iter().map(|&(index, len)| Item::new(vec![1; len], 0, Vec::new(), request, index)).collect()
    }

    fn indices(batch: Option<Vec<Item>>) -> Vec<usize> {
        batch.expect("a batch").iter().map(|i| i.index).collect()
    }

    #[test]
    fn oldest_call_first_then_similar_lengths_from_any_call() {
        let r = Request::new(8, 1);
        let mut q = Queue::new(1);
        q.push(call(&r, &[(0, 10)]));
        q.push(call(&r, &[(1, 100), (2, 95), (3, 50)]));
        q.push(call(&r, &[(4, 10), (5, 9)]));
        // No padding or horizon bound: the oldest call's text, then the longest below it.
        assert_eq!(indices(q.next_batch(256, BatchPolicy::GPU)), [0, 4, 5]);
        // 3 x 100 tokens would pass the budget.
        assert_eq!(indices(q.next_batch(256, BatchPolicy::GPU)), [1, 2]);
        assert_eq!(indices(q.next_batch(256, BatchPolicy::GPU)), [3]);
        assert!(q.next_batch(256, BatchPolicy::GPU).is_none() && q.items.is_empty() && q.by_call.is_empty());
    }

    #[test]
    fn on_the_cpu_batches_keep_to_similar_lengths_and_due_calls() {
        let r = Request::new(8, 1);
        let mut q = Queue::new(1);
        q.micros_per_token = 1.0; // horizon: half of 256 tokens' run, 128 microseconds
        q.push(call(&r, &[(0, 40), (1, 37), (2, 30)]));
        q.push(call(&r, &[(3, 39)]));
        std::thread::sleep(Duration::from_millis(5));
        q.push(call(&r, &[(4, 40)]));
        // 30 is more than 10% + 2 below 40; call 4 came 5 ms later, past the horizon.
        assert_eq!(indices(q.next_batch(256, BatchPolicy::CPU)), [0, 3, 1]);
        assert_eq!(indices(q.next_batch(256, BatchPolicy::CPU)), [2]);
        assert_eq!(indices(q.next_batch(256, BatchPolicy::CPU)), [4]);
    }

    #[test]
    fn a_long_text_is_due_earlier_by_its_run_time() {
        let r = Request::new(2, 1);
        let mut q = Queue::new(1);
        q.micros_per_token = 1000.0;
        q.push(call(&r, &[(0, 10)]));
        q.push(call(&r, &[(1, 200)]));
        assert_eq!(indices(q.next_batch(256, BatchPolicy::CPU)), [1]);
        assert_eq!(indices(q.next_batch(256, BatchPolicy::CPU)), [0]);
    }

    #[test]
    fn long_texts_are_bounded_by_attention_and_an_overlong_text_runs_alone() {
        let r = Request::new(6, 1);
        let mut q = Queue::new(1);
        q.push(call(&r, &[(0, 1024), (1, 1024), (2, 1024), (3, 1024), (4, 5000), (5, 5000)]));
        // Budget 4096: 4 x 1024 tokens fit, but 4 x 1024² cells pass 4096 x 512.
        assert_eq!(indices(q.next_batch(4096, BatchPolicy::GPU)), [4]);
        assert_eq!(indices(q.next_batch(4096, BatchPolicy::GPU)), [5]);
        assert_eq!(indices(q.next_batch(4096, BatchPolicy::GPU)), [0, 1]);
    }

    #[test]
    fn rows_reach_their_request_and_the_first_error_wins() {
        let r = Request::new(2, 2);
        r.finish_row(1, Ok(&[3.0, 4.0]));
        r.finish_row(0, Ok(&[1.0, 2.0]));
        assert_eq!(r.wait().expect("rows"), [1.0, 2.0, 3.0, 4.0]);
        let r = Request::new(2, 2);
        r.finish_row(0, Err(EmbedError::inference(InferenceKind::Runtime, "first")));
        r.finish_row(1, Err(EmbedError::inference(InferenceKind::Runtime, "second")));
        assert!(r.wait().unwrap_err().to_string().contains("first"));
    }

    #[test]
    fn a_full_queue_refuses_or_admits_a_call_alone() {
        let s = Scheduler::new(1, 256, BatchPolicy::CPU, 3, Duration::ZERO);
        let r = Request::new(8, 1);
        s.submit(call(&r, &[(0, 5), (1, 5)]), QueueFull::Refuse).expect("room");
        let e = s.submit(call(&r, &[(2, 5), (3, 5)]), QueueFull::Refuse).unwrap_err();
        assert!(matches!(e, EmbedError::Overloaded { queued: 2, limit: 3 }), "{e}");
        s.submit(call(&r, &[(4, 5)]), QueueFull::Refuse).expect("one more fits");
        let s = Scheduler::new(1, 256, BatchPolicy::CPU, 3, Duration::ZERO);
        s.submit(call(&r, &[(0, 5), (1, 5), (2, 5), (3, 5), (4, 5)]), QueueFull::Refuse)
            .expect("alone, a large call runs");
    }

    /// A call is refused when the tokens waiting ahead, with its own, would take longer than its
    /// max_wait on all workers at the measured rate; the count follows what leaves the queue.
    #[test]
    fn a_call_that_would_wait_too_long_is_refused() {
        let s = Scheduler::new(2, 256, BatchPolicy::CPU, 1000, Duration::ZERO);
        let r = Request::new(8, 1);
        let wait = Some(Duration::from_millis(100));
        s.admit(&call(&r, &[(0, 100)]), wait).expect("an empty queue admits");
        s.submit(call(&r, &[(0, 100), (1, 100)]), QueueFull::Refuse).expect("room");
        s.admit(&call(&r, &[(2, 100)]), wait).expect("no run time measured yet");
        s.lock().micros_per_token = 500.0; // 300 tokens on 2 workers: 75 ms
        s.admit(&call(&r, &[(2, 100)]), wait).expect("75 ms fits in 100");
        s.admit(&call(&r, &[(2, 200)]), wait).expect("exactly 100 ms fits");
        let e = s.admit(&call(&r, &[(2, 202)]), wait).unwrap_err();
        assert!(matches!(e, EmbedError::WaitTooLong { expected, .. } if expected.as_micros() == 100_500), "{e}");
        s.admit(&call(&r, &[(2, 202)]), None).expect("no max_wait, no estimate");
        assert_eq!(s.cancel(&r), 2);
        assert_eq!(s.lock().tokens, 0);
        s.admit(&call(&r, &[(2, 10_000)]), wait).expect("an empty queue admits anything");
    }

    /// With another worker busy, a free one waits for a full budget of tokens, up to batch_wait;
    /// with none busy, or a full budget waiting, it takes what is there at once.
    #[test]
    fn a_free_worker_waits_to_fill_a_batch_only_under_load() {
        let wait = Duration::from_millis(300);
        let waited = |busy: bool, lengths: &[(usize, usize)]| {
            let s = Scheduler::new(2, 10, BatchPolicy::GPU, 100, wait);
            let r = Request::new(lengths.len(), 1);
            s.submit(call(&r, lengths), QueueFull::Wait).expect("room");
            s.lock().busy[1] = busy;
            let started = Instant::now();
            drop(s.fill_wait(s.lock(), 0));
            started.elapsed()
        };
        assert!(waited(true, &[(0, 4)]) >= wait, "4 of 10 tokens under load: waits");
        assert!(waited(true, &[(0, 4), (1, 4), (2, 4)]) < wait, "12 of 10 tokens: a full batch, no wait");
        assert!(waited(false, &[(0, 4)]) < wait, "no other worker busy: no wait");
    }
}
