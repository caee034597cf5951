//! A call's side of the queue: the `Request` a call waits on (its rows, filled in by the workers
//! as batches finish, or its first error) and the queue `Item`s that carry its texts' token ids,
//! or its images' pixels. An item dropped before its rows were handed over fails them, so no
//! caller waits forever.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use nornir_image::PixelTensor;

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

    /// This call as a [`CancelHandle`](nornir_options::CancelHandle) holds it: weakly, so a
    /// handle kept after the call ends keeps nothing alive.
    pub(crate) fn watchable(self: &Arc<Self>) -> std::sync::Weak<dyn nornir_options::Cancel> {
        let weak: std::sync::Weak<Self> = Arc::downgrade(self);
        weak
    }
}

impl nornir_options::Cancel for Request {
    fn cancel(&self) {
        Request::cancel(self);
    }
}

/// The side of an image's square patch in its queue cost (see [`Item::cost`]).
const COST_PATCH: usize = 16;

/// One text (or image) waiting to run: what the model reads of it, and where its rows go.
/// Dropped before its rows were handed over (a worker that panicked, at any stage), it fails
/// them, so that no caller waits forever.
#[derive(Debug)]
pub(crate) struct Item {
    pub(crate) input: Input,
    pub(crate) request: Arc<Request>,
    /// Its first row in the request.
    pub(crate) index: usize,
    /// Its rows were handed over (or failed, or nobody waits for them).
    pub(crate) settled: bool,
}

/// What the model reads of an item: the two inputs there are, whatever the kind that queued it.
#[derive(Debug)]
pub(crate) enum Input {
    Text(TextInput),
    /// An image's preprocessed pixels: one row, from the vision graph, in a batch of images of
    /// its size alone.
    Image(PixelTensor),
}

/// A text's token ids as the model reads them, and which rows come back (see `forward::run::Row`).
#[derive(Debug, Default)]
pub(crate) struct TextInput {
    pub(crate) ids: Vec<u32>,
    /// Token type ids (a query and document pair's); empty: all 0.
    pub(crate) types: Vec<u32>,
    /// Tokens attended to, from the first; `None`: all.
    pub(crate) attend: Option<usize>,
    /// Prompt tokens at its start that the pooling leaves out.
    pub(crate) skip: usize,
    /// Token ranges pooled into a row each (late chunking, or a token each); empty: the whole
    /// text, one row.
    pub(crate) spans: Vec<(usize, usize)>,
    /// Its spans are single tokens handed over as the graph gives them, neither pooled nor
    /// through the Dense modules (TEI's token vectors).
    pub(crate) raw: bool,
}

impl TextInput {
    /// `ids`, pooled whole into one row.
    pub(crate) fn new(ids: Vec<u32>) -> Self {
        Self { ids, ..Self::default() }
    }

    /// The tokens attended to, from the first.
    pub(crate) fn attend(&self) -> usize {
        self.attend.unwrap_or(self.ids.len())
    }
}

impl Drop for Item {
    fn drop(&mut self) {
        if !self.settled {
            self.request.fail_rows(
                self.rows(),
                EmbedError::inference(
                    InferenceKind::WorkerFailed,
                    "a worker failed (it panicked) before this text was done; retry",
                ),
            );
        }
    }
}

impl Item {
    pub(crate) fn new(input: Input, request: &Arc<Request>, index: usize) -> Self {
        Self { input, request: Arc::clone(request), index, settled: false }
    }

    /// A text's `input`.
    pub(crate) fn text(input: TextInput, request: &Arc<Request>, index: usize) -> Self {
        Self::new(Input::Text(input), request, index)
    }

    /// An image's preprocessed pixels: one row.
    pub(crate) fn image(pixels: PixelTensor, request: &Arc<Request>, index: usize) -> Self {
        Self::new(Input::Image(pixels), request, index)
    }

    /// An image's pixel size, `(height, width)`; `None` for a text.
    pub(crate) fn image_size(&self) -> Option<(u32, u32)> {
        match &self.input {
            Input::Image(p) => Some((p.height, p.width)),
            Input::Text(_) => None,
        }
    }

    /// How many rows it fills.
    pub(crate) fn rows(&self) -> usize {
        match &self.input {
            Input::Text(t) => t.spans.len().max(1),
            Input::Image(_) => 1,
        }
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

    /// What it costs to run, in tokens: a text's tokens; an image's 16-pixel patches. A vision
    /// transformer attends over patches as a text tower over tokens, so a patch costs about a
    /// token, and the queue's one run time per token (admission, due times) covers both kinds;
    /// 16 pixels is the common patch (SigLIP, CLIP B/16, jina-clip), and a model with larger
    /// patches only has its images counted dearer in those estimates. Batches of images are cut
    /// by size and count (see `queue.rs`), never by this.
    pub(crate) fn cost(&self) -> usize {
        match &self.input {
            Input::Image(p) => (p.height as usize).div_ceil(COST_PATCH) * (p.width as usize).div_ceil(COST_PATCH),
            Input::Text(t) => t.ids.len(),
        }
    }

    /// Its length in the queue: its cost, and at least 1 (an empty text still takes a row).
    pub(crate) fn length(&self) -> usize {
        self.cost().max(1)
    }
}
