//! [`CallOptions`]: what one call may choose for its own texts (prompt, normalisation,
//! dimensions, truncation) on an embedder built once. Calls with different options still share
//! batches: what the model reads is token ids, and the rest happens to each call's own rows.

use crate::precision::{Precision, Ranges};

/// A prompt put before every text: of an embedder (`EmbedderOptions::prompt`)
/// or of one call ([`CallOptions::prompt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// A prompt of the folder's `config_sentence_transformers.json`, by name (`"query"`).
    Name(String),
    /// This text before every text; `""` for none, not even the folder's default.
    Text(String),
}

/// What to do with a text longer than the model reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Truncation {
    /// Keep its first tokens (as sentence-transformers does).
    #[default]
    Right,
    /// Keep its last tokens (TEI's `truncation_direction: "Left"`). A prompt before the text is
    /// cut first, and the whole text is then pooled.
    Left,
    /// Fail the call with `EmbedError::TooLong`, naming the text
    /// and its token count.
    Refuse,
}

/// Options of one call of `Embedder::embed_with`; each `None`
/// keeps what the embedder was built with (`EmbedderOptions` and the
/// model folder).
///
/// ```
/// use nornir_options::{CallOptions, Truncation};
/// let query = CallOptions::new().with_prompt_name("query").with_dimensions(256);
/// let passage = CallOptions::new().with_prompt("").with_truncation(Truncation::Refuse);
/// # let _ = (query, passage);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallOptions {
    /// The prompt before each text (see [`Prompt`]).
    pub prompt: Option<Prompt>,
    /// L2-normalise each vector (after cutting it to `dimensions`).
    pub normalize: Option<bool>,
    /// Keep the first `dimensions` values of each vector (Matryoshka models); at most the model's
    /// width.
    pub dimensions: Option<usize>,
    /// What to do with a text longer than the model reads.
    pub truncation: Option<Truncation>,
    /// Cut a text longer than the window into overlapping chunks instead of truncating it; the
    /// row is then the document's vector, and `Embeddings::chunks`
    /// has each chunk's span and vector. `truncation` no longer applies.
    pub chunking: Option<Chunking>,
    /// Lets another thread stop this call (see [`CancelHandle`]).
    pub cancel: Option<CancelHandle>,
    /// Refuse the call at once with `EmbedError::WaitTooLong`
    /// when the texts queued ahead of it, with its own, are expected to take longer than this
    /// (estimated from their tokens and the run time per token of recent batches; before the first
    /// batch nothing is refused). What a server under overload wants: a quick 503 instead of a
    /// request that queues past its timeout.
    pub max_wait: Option<std::time::Duration>,
    /// The precision of `Embedder::embed_compact`'s vectors
    /// (`None`: the embedder's); `embed` always gives float32.
    pub precision: Option<Precision>,
    /// The ranges int8 and uint8 use (`None`: the embedder's).
    pub ranges: Option<std::sync::Arc<Ranges>>,
}

impl CallOptions {
    /// Everything as the embedder was built.
    pub fn new() -> Self {
        Self::default()
    }
    /// Use this named prompt of the folder's `config_sentence_transformers.json`.
    pub fn with_prompt_name(mut self, name: impl Into<String>) -> Self {
        self.prompt = Some(Prompt::Name(name.into()));
        self
    }
    /// Put this text before every text (`""`: no prompt at all).
    pub fn with_prompt(mut self, text: impl Into<String>) -> Self {
        self.prompt = Some(Prompt::Text(text.into()));
        self
    }
    /// L2-normalise each vector, or not.
    pub fn with_normalize(mut self, normalize: bool) -> Self {
        self.normalize = Some(normalize);
        self
    }
    /// Keep the first `dimensions` values of each vector.
    pub fn with_dimensions(mut self, dimensions: usize) -> Self {
        self.dimensions = Some(dimensions);
        self
    }
    /// Truncate on this side, or refuse.
    pub fn with_truncation(mut self, truncation: Truncation) -> Self {
        self.truncation = Some(truncation);
        self
    }
    /// Chunk long texts (see [`Chunking`]).
    pub fn with_chunking(mut self, chunking: Chunking) -> Self {
        self.chunking = Some(chunking);
        self
    }
    /// Refuse the call when the queue would keep it longer than `wait` (see `max_wait`).
    pub fn with_max_wait(mut self, wait: std::time::Duration) -> Self {
        self.max_wait = Some(wait);
        self
    }
    /// `Embedder::embed_compact`'s precision.
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = Some(precision);
        self
    }

    /// The ranges int8 and uint8 use.
    pub fn with_ranges(mut self, ranges: std::sync::Arc<Ranges>) -> Self {
        self.ranges = Some(ranges);
        self
    }

    /// Let `handle` cancel this call (and every other call given a clone of it).
    pub fn with_cancel(mut self, handle: &CancelHandle) -> Self {
        self.cancel = Some(handle.clone());
        self
    }
}

/// Cancels, from any thread, the calls whose options carry a clone of it: a blocking
/// `embed_with` waiting in another thread, or a future (which a
/// drop cancels too). The call returns `EmbedError::Cancelled`
/// at once; its texts still queued leave the queue (counted in
/// `EmbedStats::cancelled_texts`), and those already
/// running finish unread. A call given a handle that is already cancelled fails before it queues
/// anything. A blocking call that waits for room in a full queue ([`QueueFull::Wait`](crate::QueueFull::Wait))
/// sees the cancellation once it has queued.
///
/// ```
/// use nornir_options::{CallOptions, CancelHandle};
/// let handle = CancelHandle::new();
/// // Give `options` to a call (`embedder.embed_with(&texts, &options)`) in one thread...
/// let options = CallOptions::new().with_cancel(&handle);
/// // ...and from another, when the user gives up:
/// handle.cancel();
/// assert!(options.cancel.is_some_and(|h| h.is_cancelled()));
/// ```
#[derive(Debug, Clone, Default)]
pub struct CancelHandle(std::sync::Arc<std::sync::Mutex<CancelState>>);

#[derive(Debug, Default)]
struct CancelState {
    cancelled: bool,
    /// The calls waiting now.
    requests: Vec<std::sync::Weak<dyn Cancel>>,
}

/// A waiting call a [`CancelHandle`] can stop: the embedder's side of a call.
pub trait Cancel: Send + Sync + std::fmt::Debug {
    /// Stops the call: it fails as cancelled, and its texts still queued leave the queue.
    fn cancel(&self);
}

impl CancelHandle {
    /// A handle that has cancelled nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every call given this handle, now and later.
    pub fn cancel(&self) {
        let mut s = self.lock();
        s.cancelled = true;
        for request in s.requests.drain(..).filter_map(|r| r.upgrade()) {
            request.cancel();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.lock().cancelled
    }

    /// Lets `cancel` reach `call` (a waiting call of the embedder); `false` (and nothing kept)
    /// when the handle was already cancelled.
    pub fn watch(&self, call: std::sync::Weak<dyn Cancel>) -> bool {
        let mut s = self.lock();
        if s.cancelled {
            return false;
        }
        s.requests.retain(|r| r.strong_count() > 0);
        s.requests.push(call);
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CancelState> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Handles are equal when they are clones of one another.
impl PartialEq for CancelHandle {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CancelHandle {}

/// How a document's vector is made from its chunks' vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DocumentVector {
    /// Their mean, each chunk weighted by its tokens, normalised if the call normalises.
    #[default]
    Mean,
    /// Their element-wise maximum, normalised if the call normalises.
    Max,
}

/// Cutting long texts into chunks of the model's token ids.
///
/// A text is cut into windows of at most `window` tokens (counted as the model's length is: with
/// the special tokens and the call's prompt, which every chunk gets), overlapping by `overlap`
/// tokens; a cut falls on the start of a word where the tokenizer knows words. A text that fits
/// one window is one chunk, whose vector is the one it gets without chunking.
///
/// With `late`, each chunk's vector pools the token vectors of one run over as much of the
/// document as the model reads (Jina AI's late chunking), so it keeps the context around it; a
/// document that fits the model's length costs one run. It suits mean-pooled models with a long
/// context (jina-embeddings-v2/v3, nomic-embed); a CLS-pooled model has no token to stand for a
/// span, and a model whose graph pools (a `sentence_embedding` output) cannot do it at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Chunking {
    /// Tokens per chunk; `None` = the model's length.
    pub window: Option<usize>,
    /// Tokens shared by neighbouring chunks.
    pub overlap: usize,
    /// Late chunking: each chunk pools one run over the whole document (see above).
    pub late: bool,
    /// How the document's vector is made from its chunks'.
    pub document: DocumentVector,
}

impl Default for Chunking {
    /// Windows of the model's length, overlapping by 32 tokens, each run on its own, and the
    /// document as their token-weighted mean.
    fn default() -> Self {
        Self { window: None, overlap: 32, late: false, document: DocumentVector::Mean }
    }
}

impl Chunking {
    /// The defaults (see `Default`).
    pub fn new() -> Self {
        Self::default()
    }
    /// Chunks of at most `tokens` tokens, special tokens and prompt included.
    pub fn with_window(mut self, tokens: usize) -> Self {
        self.window = Some(tokens);
        self
    }
    /// Neighbouring chunks share `tokens` tokens.
    pub fn with_overlap(mut self, tokens: usize) -> Self {
        self.overlap = tokens;
        self
    }
    /// Late chunking (see above).
    pub fn with_late(mut self, late: bool) -> Self {
        self.late = late;
        self
    }
    /// The document's vector from its chunks' (mean or max).
    pub fn with_document(mut self, document: DocumentVector) -> Self {
        self.document = document;
        self
    }
}
