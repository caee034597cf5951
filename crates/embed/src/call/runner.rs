//! One body per call: a call of several steps (parts of a long list, a calibration before the
//! rows, a query before its documents) is written once, as an async body over a [`Runner`]. The
//! blocking call drives that body with [`block_on`] on [`Runner::Blocking`], whose steps tokenize
//! on the caller's thread and wait in the queue; the async call returns the same body on
//! [`Runner::Queued`], whose steps are [`EmbedFuture`]s tokenized on the embedder's own threads.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::task::{Context, Poll, Wake, Waker};

use crate::call::future::{EmbedFuture, TokenizeJob, Work};
use crate::call::prepare;
use crate::engine::Engine;
use crate::error::{EmbedError, Result};
use crate::values::embeddings::Embeddings;

/// How a call's steps run: the only thing a blocking call and its async twin do differently.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Runner<'e> {
    /// On the caller's thread: tokenized there, then queued and waited for.
    Blocking(&'e Engine),
    /// As futures: tokenized on the embedder's tokenizing threads, then queued; dropping the
    /// call's future cancels the step in flight.
    Queued(&'e Engine, Option<&'e Sender<TokenizeJob>>),
}

impl<'e> Runner<'e> {
    /// One step: `work`'s rows, finished.
    pub(crate) async fn run(self, work: Work) -> Result<Embeddings> {
        match self {
            Runner::Blocking(engine) => run_call(engine, work.prepare(engine)?),
            Runner::Queued(engine, jobs) => EmbedFuture::new(engine, jobs, work).await,
        }
    }
}

/// Queues a prepared call and waits for its rows, finished.
pub(crate) fn run_call(engine: &Engine, mut call: prepare::Call) -> Result<Embeddings> {
    engine.scheduler.admit(&call.items, call.max_wait)?;
    engine.scheduler.submit(std::mem::take(&mut call.items), engine.queue_full)?;
    match call.request.wait() {
        Ok(rows) => Ok(call.finish(engine, rows)),
        Err(EmbedError::Cancelled) => {
            prepare::cancel_queued(engine, &call.request);
            Err(EmbedError::Cancelled)
        }
        Err(e) => Err(e),
    }
}

/// Wakes the thread that waits in [`block_on`].
struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `body` to its end on this thread. A body on [`Runner::Blocking`] never waits on a
/// waker (each step has finished when it returns), so this polls once; parking covers a body
/// that awaits something else.
pub(crate) fn block_on<F: Future>(body: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut body = pin!(body);
    loop {
        match body.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return out,
            Poll::Pending => std::thread::park(),
        }
    }
}
