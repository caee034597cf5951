//! The async side of an [`Embedder`](crate::Embedder): the threads that tokenize async calls
//! off the caller's executor, and [`EmbedFuture`], which queues a call and resolves when its rows
//! are done (dropping it cancels the call).

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::call::prepare::{self, Call};
use crate::engine::Engine;
use crate::error::{EmbedError, InferenceKind, Result};
use crate::values::embeddings::Embeddings;
use nornir_options::CallOptions;
use nornir_options::QueueFull;

/// Threads that tokenize the texts of async calls: two, so that one huge text does not hold up
/// every small call behind it (a call of more than 16 texts also uses the tokenizer's own pool).
pub(crate) const TOKENIZING_THREADS: usize = 2;

/// What an async call tokenizes: texts, or what a kind prepares itself (pairs, a token call's
/// texts, images), run on a tokenizing thread.
#[derive(Debug)]
pub(crate) enum Work {
    Texts(Vec<String>, CallOptions),
    /// A call its kind prepares, and how many inputs it has.
    Prepared(usize, Preparer),
}

/// A kind's preparation of its call, run on a tokenizing thread as a text call's tokenizing is.
pub(crate) struct Preparer(Box<PrepareFn>);

type PrepareFn = dyn Fn(&Engine) -> Result<Call> + Send + Sync;

impl Work {
    /// The work of a call that `prepare` makes from its `inputs` inputs.
    pub(crate) fn prepared(inputs: usize, prepare: impl Fn(&Engine) -> Result<Call> + Send + Sync + 'static) -> Self {
        Self::Prepared(inputs, Preparer(Box::new(prepare)))
    }
}

impl std::fmt::Debug for Preparer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Preparer")
    }
}

impl Work {
    fn len(&self) -> usize {
        match self {
            Self::Texts(t, _) => t.len(),
            Self::Prepared(inputs, _) => *inputs,
        }
    }

    pub(crate) fn prepare(&self, engine: &Engine) -> Result<Call> {
        match self {
            Self::Texts(texts, options) => prepare::prepare(engine, texts, options),
            Self::Prepared(_, prepare) => (prepare.0)(engine),
        }
    }
}

/// An async call's work, to be tokenized off the caller's executor.
#[derive(Debug)]
pub(crate) struct TokenizeJob {
    work: Work,
    slot: Arc<Tokenized>,
}

/// Where a tokenizing thread leaves an async call's tokens, and whom to wake.
#[derive(Debug, Default)]
struct Tokenized {
    state: Mutex<TokenizedState>,
}

#[derive(Debug, Default)]
struct TokenizedState {
    result: Option<Result<Call>>,
    waker: Option<Waker>,
    /// The future was dropped: nothing to tokenize for.
    abandoned: bool,
}

impl Tokenized {
    fn lock(&self) -> std::sync::MutexGuard<'_, TokenizedState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A tokenizing thread: prepares each job's call until the embedder is dropped. A panic while
/// tokenizing fails that call, not the thread.
pub(crate) fn tokenizing_thread(engine: &Engine, jobs: &Mutex<Receiver<TokenizeJob>>) {
    loop {
        let job = match jobs.lock().unwrap_or_else(PoisonError::into_inner).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        if job.slot.lock().abandoned {
            continue;
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.work.prepare(engine)))
            .unwrap_or_else(|_| {
                Err(EmbedError::inference(InferenceKind::WorkerFailed, "tokenizing the call's texts panicked"))
            });
        let mut s = job.slot.lock();
        if !s.abandoned {
            s.result = Some(result);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    }
}

/// The future of [`Embedder::embed_async`](crate::Embedder::embed_async).
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited: its texts join the queue at its first poll"]
pub struct EmbedFuture<'a> {
    engine: &'a Engine,
    jobs: Option<&'a Sender<TokenizeJob>>,
    state: State,
}

impl<'a> EmbedFuture<'a> {
    pub(crate) fn new(engine: &'a Engine, jobs: Option<&'a Sender<TokenizeJob>>, work: Work) -> Self {
        Self { engine, jobs, state: State::Start(work) }
    }

    /// A future that fails at its first poll (a call refused before it started).
    pub(crate) fn refused(engine: &'a Engine, e: EmbedError) -> Self {
        Self { engine, jobs: None, state: State::Refused(e) }
    }
}

#[derive(Debug)]
enum State {
    /// Not polled yet.
    Start(Work),
    /// Refused before it started.
    Refused(EmbedError),
    /// With a tokenizing thread: where its tokens go, and how many texts.
    Tokenizing(Arc<Tokenized>, usize),
    /// Tokenized, waiting for room in the queue.
    Queueing(Call),
    Running(Call),
    Done,
}

impl Drop for EmbedFuture<'_> {
    fn drop(&mut self) {
        match &self.state {
            State::Running(call) => prepare::cancel_queued(self.engine, &call.request),
            // Its texts never reach the queue: a job still waiting is skipped.
            State::Tokenizing(slot, texts) => {
                let mut s = slot.lock();
                s.abandoned = true;
                s.result = None;
                self.engine.counters.cancelled_texts.fetch_add(*texts as u64, std::sync::atomic::Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

impl Future for EmbedFuture<'_> {
    type Output = Result<Embeddings>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            match std::mem::replace(&mut this.state, State::Done) {
                State::Refused(e) => return Poll::Ready(Err(e)),
                State::Start(work) => {
                    let count = work.len();
                    let slot = Arc::new(Tokenized::default());
                    slot.lock().waker = Some(cx.waker().clone());
                    let sent =
                        this.jobs.is_some_and(|jobs| jobs.send(TokenizeJob { work, slot: Arc::clone(&slot) }).is_ok());
                    if !sent {
                        return Poll::Ready(Err(EmbedError::inference(
                            InferenceKind::WorkerFailed,
                            "the embedder's tokenizing threads have stopped",
                        )));
                    }
                    this.state = State::Tokenizing(slot, count);
                    return Poll::Pending;
                }
                State::Tokenizing(slot, count) => {
                    let mut s = slot.lock();
                    match s.result.take() {
                        Some(Ok(call)) => {
                            drop(s);
                            this.state = State::Queueing(call);
                        }
                        Some(Err(e)) => return Poll::Ready(Err(e)),
                        None => {
                            s.waker = Some(cx.waker().clone());
                            drop(s);
                            this.state = State::Tokenizing(slot, count);
                            return Poll::Pending;
                        }
                    }
                }
                State::Queueing(mut call) => {
                    if let Err(e) = this.engine.scheduler.admit(&call.items, call.max_wait) {
                        return Poll::Ready(Err(e));
                    }
                    let items = std::mem::take(&mut call.items);
                    let queued = match this.engine.queue_full {
                        QueueFull::Refuse => this.engine.scheduler.submit(items, QueueFull::Refuse).map_err(Ok),
                        _ => this.engine.scheduler.try_submit(items, cx.waker()).map_err(Err),
                    };
                    match queued {
                        Ok(()) => this.state = State::Running(call),
                        Err(Ok(refused)) => return Poll::Ready(Err(refused)),
                        Err(Err(items)) => {
                            call.items = items;
                            this.state = State::Queueing(call);
                            return Poll::Pending;
                        }
                    }
                }
                State::Running(call) => match call.request.poll(cx.waker()) {
                    None => {
                        this.state = State::Running(call);
                        return Poll::Pending;
                    }
                    Some(Err(EmbedError::Cancelled)) => {
                        prepare::cancel_queued(this.engine, &call.request);
                        return Poll::Ready(Err(EmbedError::Cancelled));
                    }
                    Some(rows) => return Poll::Ready(rows.map(|rows| call.finish(this.engine, rows))),
                },
                State::Done => {
                    return Poll::Ready(Err(EmbedError::inference(
                        InferenceKind::Misuse,
                        "the embed future was polled after it finished",
                    )));
                }
            }
        }
    }
}
