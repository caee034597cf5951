//! Batching across calls: every call hands its tokenized texts to one queue; each worker
//! takes the next batch from whatever is waiting (the most due call's longest text, with texts of
//! similar length from calls due soon after, under the token budget; queue.rs says what "due"
//! is), so concurrent small calls fill the same batches and the most due call is always served
//! next. An image call's images wait in the same queue, in batches of their own (see queue.rs).
//! Results go back to each call in its own order.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::error::{EmbedError, InferenceKind};
use crate::schedule::queue::{BatchPolicy, CallKey, Queue};
use crate::schedule::request::{Item, Request};
use nornir_options::QueueFull;

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
                    crate::forward::fault::hit(crate::forward::fault::Stage::Scheduler);
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

    /// Worker `k` panicked and starts again: it runs nothing now.
    pub(crate) fn worker_restarted(&self, k: usize) {
        self.done(k, 0, Duration::ZERO);
    }

    /// Worker `k` is about to hand `n` texts to their callers: they stop counting as running
    /// first, so a caller that reads the stats after its call returned sees them gone.
    pub(crate) fn handing_over(&self, k: usize, n: usize) {
        let mut q = self.lock();
        q.running[k] = q.running[k].saturating_sub(n);
    }

    /// Worker `k` finished its batch of `tokens` tokens fed (padding included) in `elapsed`.
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
    use crate::schedule::queue::Tiling;
    use crate::schedule::request::TextInput;

    fn call(request: &Arc<Request>, texts: &[(usize, usize)]) -> Vec<Item> {
        texts.iter().map(|&(index, len)| Item::text(TextInput::new(vec![1; len]), request, index)).collect()
    }

    /// A call of images: (its index in the request, (height, width)).
    fn images(request: &Arc<Request>, sizes: &[(usize, (u32, u32))]) -> Vec<Item> {
        sizes
            .iter()
            .map(|&(index, (height, width))| {
                let pixels = nornir_image::PixelTensor { height, width, values: Vec::new() };
                Item::image(pixels, request, index)
            })
            .collect()
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
    fn with_tiled_attention_long_texts_of_one_length_share_a_batch_and_padded_ones_are_bounded() {
        let r = Request::new(6, 1);
        let mut q = Queue::new(1);
        q.push(call(&r, &[(0, 1024), (1, 1024), (2, 1024), (3, 1024), (4, 1000), (5, 1000)]));
        let tiled = BatchPolicy::GPU.with_attention(Tiling::Unpadded);
        // Four texts of one length run without padding: the token budget alone.
        assert_eq!(indices(q.next_batch(4096, tiled)), [0, 1, 2, 3]);
        assert_eq!(indices(q.next_batch(4096, tiled)), [4, 5]);
        // 1,024 with 1,000 is padded: the attention bound again (2 x 1024² fits 4096 x 512, 3 not).
        q.push(call(&r, &[(0, 1024), (1, 1000), (2, 1000)]));
        assert_eq!([q.next_batch(4096, tiled), q.next_batch(4096, tiled)].map(indices), [vec![0, 1], vec![2]]);
        // Attention in tiles whatever the padding (nornir's kernels): the token budget alone.
        q.push(call(&r, &[(0, 1024), (1, 1000), (2, 1000), (3, 1000), (4, 1000)]));
        let kernel = BatchPolicy::GPU.with_attention(Tiling::Always);
        assert_eq!([q.next_batch(4096, kernel), q.next_batch(4096, kernel)].map(indices), [vec![0, 1, 2, 3], vec![4]]);
    }

    /// Images batch with images of their size alone, oldest first, up to IMAGES_PER_RUN; texts
    /// batch around them as if they were not there.
    #[test]
    fn images_batch_by_size_alone_and_texts_batch_as_without_them() {
        let r = Request::new(64, 1);
        let mut q = Queue::new(1);
        q.micros_per_token = 1.0;
        // 224 x 224 is 196 patches of 16; 200 x 250 (a shortest-edge resize without a crop) is 13 x 16 = 208.
        let (square, tall) = ((224, 224), (250, 200));
        q.push(images(&r, &[(0, square), (1, tall), (2, square)]));
        q.push(call(&r, &[(3, 196), (4, 190), (5, 208)]));
        let mut many: Vec<(usize, (u32, u32))> = (6..26).map(|i| (i, square)).collect();
        many.insert(3, (26, tall));
        q.push(images(&r, &many));
        assert_eq!(q.tokens, 196 * 22 + 208 * 2 + 196 + 190 + 208);
        // The first call's largest image, with the other of its size; the first call's square
        // images, then the next call's, oldest first, 16 at most.
        assert_eq!(indices(q.next_batch(1 << 20, BatchPolicy::GPU)), [1, 26]);
        assert_eq!(
            indices(q.next_batch(1 << 20, BatchPolicy::GPU)),
            [0, 2, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
        );
        // The texts, as they batch alone: no image of 196 or 208 patches joins them.
        assert_eq!(indices(q.next_batch(1 << 20, BatchPolicy::CPU)), [5, 3, 4]);
        assert_eq!(indices(q.next_batch(1 << 20, BatchPolicy::GPU)), [20, 21, 22, 23, 24, 25]);
        assert!(q.next_batch(1 << 20, BatchPolicy::GPU).is_none() && q.tokens == 0 && q.by_call.is_empty());
    }

    /// Cancelling an image call takes its images out of the queue, as a text call's texts.
    #[test]
    fn images_leave_the_queue_with_their_call() {
        let s = Scheduler::new(1, 256, BatchPolicy::CPU, 1000, Duration::ZERO);
        let (a, b) = (Request::new(2, 1), Request::new(1, 1));
        s.submit(images(&a, &[(0, (224, 224)), (1, (224, 224))]), QueueFull::Refuse).expect("room");
        s.submit(call(&b, &[(0, 5)]), QueueFull::Refuse).expect("room");
        assert_eq!(s.cancel(&a), 2);
        assert_eq!((s.load(), s.lock().tokens), ((1, 0), 5));
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
        // A wait the test sits through, and one so long that only a wait could reach it.
        let (wait, forever) = (Duration::from_millis(300), Duration::from_secs(600));
        let waited = |busy: bool, lengths: &[(usize, usize)], wait: Duration| {
            let s = Scheduler::new(2, 10, BatchPolicy::GPU, 100, wait);
            let r = Request::new(lengths.len(), 1);
            s.submit(call(&r, lengths), QueueFull::Wait).expect("room");
            s.lock().busy[1] = busy;
            let started = Instant::now();
            drop(s.fill_wait(s.lock(), 0));
            started.elapsed()
        };
        assert!(waited(true, &[(0, 4)], wait) >= wait, "4 of 10 tokens under load: waits");
        assert!(waited(true, &[(0, 4), (1, 4), (2, 4)], forever) < forever, "12 of 10 tokens: a full batch, no wait");
        assert!(waited(false, &[(0, 4)], forever) < forever, "no other worker busy: no wait");
    }
}
