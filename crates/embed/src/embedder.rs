//! [`Embedder`]: a call's texts are tokenized, then handed to one queue; a worker thread per
//! session packs whatever is waiting and runs it (see `scheduler.rs`), so concurrent calls share
//! batches. [`Embedder::embed`] blocks and tokenizes in the caller's thread;
//! [`Embedder::embed_async`] is a future any executor can await, whose texts are tokenized on the
//! embedder's own tokenizing threads, never on the executor's.

use std::path::Path;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use nornir_ep_select::Vendor;

use crate::call::future::{EmbedFuture, TOKENIZING_THREADS, TokenizeJob, Work, tokenizing_thread};
use crate::call::prepare;
use crate::call::runner::Runner;
use crate::engine::Engine;
use crate::error::{EmbedError, InferenceKind, Result};
use crate::load::multi_vector::TokenModel;
use crate::report::describe::{Calibrations, EmbedderReport};
use crate::schedule::stats::EmbedStats;
use crate::values::embeddings::Embeddings;
use crate::values::{ModelInfo, Placement, SessionReport, Token};
use nornir_options::CallOptions;
use nornir_options::EmbedderOptions;
use nornir_options::ModelKind;

/// A sentence embedder over a small pool of ONNX Runtime sessions. `Send + Sync`: share it with
/// `Arc`.
///
/// Every call's texts go into one queue; each worker thread packs what is waiting by length under
/// the token budget and runs it, so many small concurrent calls fill the same batches, and one
/// large call's batches run on all workers side by side. On the CPU the workers run one ONNX
/// Runtime session at once, so the weights are in memory once; on a GPU each has its own, built
/// when it first gets work. An idle embedder adds no wait. Dropping the embedder stops its
/// workers.
///
/// ```no_run
/// use std::sync::Arc;
/// use nornir_embed::{Embedder, EmbedderOptions};
///
/// let embedder = Arc::new(Embedder::new("models/all-MiniLM-L6-v2".as_ref(), &EmbedderOptions::default())?);
/// let rows = embedder.embed(&["A man is eating food.", "A man is riding a horse."])?;
/// assert_eq!((rows.len(), rows.row(0).len()), (2, embedder.dimension()));
/// // Which provider really runs the model, and why (the questions of docs/design.md):
/// println!("{} ({}), ROCm ready: {}", embedder.report().active_provider, embedder.gpu_vendor(), embedder.rocm_ready());
/// # Ok::<(), nornir_embed::EmbedError>(())
/// ```
#[derive(Debug)]
pub struct Embedder {
    pub(crate) engine: Arc<Engine>,
    /// What a model that makes token vectors adds (its rules, BGE-M3's sparse head): the
    /// multi-vector and sparse kinds' calls read it.
    pub(crate) tokens: TokenModel,
    /// The int8 and uint8 ranges its compact calls calibrated.
    pub(crate) calibrated: Calibrations,
    workers: Vec<JoinHandle<()>>,
    /// Texts of async calls for the tokenizing threads; `None` once the embedder is dropped.
    pub(crate) tokenize_jobs: Option<Sender<TokenizeJob>>,
    tokenizers: Vec<JoinHandle<()>>,
}

impl Embedder {
    /// Loads the model folder `dir`: probe -> plan -> ONNX Runtime -> session -> checks, then
    /// starts its worker threads (`EmbedderOptions::sessions`). Every mismatch between the folder and the graph is an
    /// error here, not at the first embed.
    pub fn new(dir: &Path, options: &EmbedderOptions) -> Result<Self> {
        let (engine, tokens) = Engine::new(dir, options)?;
        let engine = Arc::new(engine);
        let (jobs, receiver) = std::sync::mpsc::channel();
        let mut embedder = Self {
            engine,
            tokens,
            calibrated: Calibrations::default(),
            workers: Vec::new(),
            tokenize_jobs: Some(jobs),
            tokenizers: Vec::new(),
        };
        let receiver = Arc::new(Mutex::new(receiver));
        for i in 0..TOKENIZING_THREADS {
            let (engine, receiver) = (Arc::clone(&embedder.engine), Arc::clone(&receiver));
            let thread = std::thread::Builder::new()
                .name(format!("nornir-tokenize-{i}"))
                .spawn(move || tokenizing_thread(&engine, &receiver))
                .map_err(|e| {
                    EmbedError::inference_because(InferenceKind::WorkerFailed, "cannot start a tokenizing thread", e)
                })?;
            embedder.tokenizers.push(thread);
        }
        for k in 0..embedder.engine.workers {
            let engine = Arc::clone(&embedder.engine);
            let worker = std::thread::Builder::new()
                .name(format!("nornir-worker-{k}"))
                .spawn(move || crate::engine::worker::work(&engine, k))
                .map_err(|e| {
                    EmbedError::inference_because(InferenceKind::WorkerFailed, "cannot start a worker thread", e)
                })?;
            embedder.workers.push(worker);
        }
        Ok(embedder)
    }

    /// Embeds `texts`; row i of the result is text i. Identical texts are embedded once. Blocks
    /// until every row is done; with [`QueueFull::Refuse`](crate::QueueFull::Refuse), fails with
    /// [`EmbedError::Overloaded`] instead of waiting for room in a full queue.
    pub fn embed<S: AsRef<str>>(&self, texts: &[S]) -> Result<Embeddings> {
        self.embed_with(texts, &CallOptions::default())
    }

    /// [`embed`](Self::embed) with this call's own prompt, normalisation, dimensions and
    /// truncation. Its texts share batches with every other call's: the options change the
    /// token ids (prompt, truncation) and the finishing of its own rows, not the batches.
    ///
    /// ```no_run
    /// # use nornir_embed::{CallOptions, Embedder, EmbedderOptions};
    /// # let embedder = Embedder::new("models/bge".as_ref(), &EmbedderOptions::default())?;
    /// let queries = embedder.embed_with(&["what is a fjord?"], &CallOptions::new().with_prompt_name("query"))?;
    /// let passages = embedder.embed_with(&["A fjord is a long, narrow inlet."], &CallOptions::new().with_prompt(""))?;
    /// # Ok::<(), nornir_embed::EmbedError>(())
    /// ```
    pub fn embed_with<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions) -> Result<Embeddings> {
        self.engine.expect_kind(ModelKind::Embedder, "embed")?;
        self.run_call(prepare::prepare(&self.engine, texts, options)?)
    }

    /// Queues a prepared call and waits for its rows, finished.
    pub(crate) fn run_call(&self, call: prepare::Call) -> Result<Embeddings> {
        crate::call::runner::run_call(&self.engine, call)
    }

    /// The runner of blocking calls: their steps tokenize on the caller's thread and wait.
    pub(crate) fn blocking(&self) -> Runner<'_> {
        Runner::Blocking(&self.engine)
    }

    /// The runner of async calls: their steps are futures tokenized on the embedder's threads.
    pub(crate) fn queued(&self) -> Runner<'_> {
        Runner::Queued(&self.engine, self.tokenize_jobs.as_ref())
    }

    /// [`embed`](Self::embed) as a future that any executor can await; it needs no runtime.
    /// At its first poll it copies the texts to the embedder's tokenizing threads, so the
    /// executor's thread does no tokenizing; then its texts join the queue, and it resolves when
    /// the workers have run every row. Dropping it cancels it: before the first poll nothing
    /// happened; after, its texts that have not started leave the queue (counted in
    /// [`EmbedStats::cancelled_texts`]), and those already running finish unread. A server whose
    /// client goes away drops its future.
    pub fn embed_async<S: AsRef<str>>(&self, texts: &[S]) -> EmbedFuture<'_> {
        self.embed_with_async(texts, &CallOptions::default())
    }

    /// [`embed_with`](Self::embed_with) as a future, as [`embed_async`](Self::embed_async) is.
    pub fn embed_with_async<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions) -> EmbedFuture<'_> {
        if let Err(e) = self.engine.expect_kind(ModelKind::Embedder, "embed") {
            return EmbedFuture::refused(&self.engine, e);
        }
        self.future(Work::Texts(texts.iter().map(|t| t.as_ref().to_owned()).collect(), options.clone()))
    }

    /// The future of an async call's `work`.
    pub(crate) fn future(&self, work: Work) -> EmbedFuture<'_> {
        EmbedFuture::new(&self.engine, self.tokenize_jobs.as_ref(), work)
    }

    /// Every token of `text` with this call's prompt (its truncation is not applied: a text longer
    /// than the model gets all its tokens), special tokens included when `special_tokens`. Runs
    /// in the caller's thread.
    pub fn tokenize(&self, text: &str, options: &CallOptions, special_tokens: bool) -> Result<Vec<Token>> {
        prepare::tokens(&self.engine, text, options, special_tokens)
    }

    /// The text of the model's token ids; an id outside the vocabulary is an error.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.engine.tokenizer.decode(ids, skip_special_tokens)
    }

    /// Embeds a stream of texts `per_call` at a time, yielding each call's rows in input order.
    /// Memory stays bounded by `per_call`, whatever the length of the stream. (Long-document
    /// chunks are [`CallOptions::with_chunking`](crate::CallOptions::with_chunking).)
    pub fn embed_stream<'a, I>(&'a self, texts: I, per_call: usize) -> impl Iterator<Item = Result<Embeddings>> + 'a
    where
        I: IntoIterator<Item = String>,
        I::IntoIter: 'a,
    {
        let mut it = texts.into_iter();
        let per_call = per_call.max(1);
        std::iter::from_fn(move || {
            let part: Vec<String> = it.by_ref().take(per_call).collect();
            (!part.is_empty()).then(|| self.embed(&part))
        })
    }

    /// Builds every session now instead of at its first work, so that the first calls do not
    /// wait for it and `report().memory` counts each; returns how many sessions the workers run
    /// on: one on the CPU, which every worker shares, and on a GPU one per worker (fewer when one
    /// could not be built: the log says why).
    pub fn warm_up(&self) -> usize {
        1 + self.engine.extra_sessions().len()
    }

    /// Work done so far: texts, tokens, padding, time inside ONNX Runtime, batch sizes, texts
    /// cancelled, and the texts waiting and running now.
    pub fn stats(&self) -> EmbedStats {
        self.engine.stats()
    }

    /// Sets the counters of [`stats`](Self::stats) back to zero.
    pub fn reset_stats(&self) {
        self.engine.reset_stats()
    }

    /// The width of the vectors a call gets unless it asks for fewer (`dim` when given).
    pub fn dimension(&self) -> usize {
        self.engine.dimension()
    }

    /// What the embedder read from the model folder and the graph, and decided from them.
    pub fn model_info(&self) -> &ModelInfo {
        self.engine.model_info()
    }

    /// What the session build did (the plan, each provider's outcome) and what runs the model
    /// now: after a GPU failure at run time, the CPU, with the reason in `fallback`.
    pub fn report(&self) -> SessionReport {
        self.engine.report()
    }

    /// The vendor the plan aimed at.
    pub fn requested_vendor(&self) -> Vendor {
        self.engine.requested_vendor()
    }

    /// The vendor really running the model now: "rocm" (an AMD GPU), "cuda", "cpu", or "other"
    /// (a plugin provider's device of another vendor): [`Vendor::label`] of [`vendor`](Self::vendor).
    pub fn gpu_vendor(&self) -> &'static str {
        self.engine.gpu_vendor()
    }

    /// Where the model really runs, typed: `gpu_vendor()` as a [`Vendor`].
    pub fn vendor(&self) -> Vendor {
        self.engine.vendor()
    }

    /// True when an AMD GPU is ready: an AMD provider (MIGraphX or ROCm) runs the model now.
    pub fn rocm_ready(&self) -> bool {
        self.engine.rocm_ready()
    }

    /// How many workers embed batches side by side (`EmbedderOptions::workers`; on the CPU they
    /// share one session).
    pub fn workers(&self) -> usize {
        self.engine.workers
    }

    /// The whole report (the session, the model, workers, precision), as every surface writes
    /// it; without node placement.
    pub fn describe(&self) -> EmbedderReport {
        EmbedderReport::of(&self.engine, &self.calibrated, self.image_settings())
    }

    /// [`describe`](Self::describe) with the node placement of one profiled run (a session
    /// build: `doctor` asks for it), and what really runs read from it.
    pub fn describe_with_placement(&self) -> EmbedderReport {
        self.describe().with_placement(self.placement())
    }

    /// Which provider ran each node, from ONNX Runtime's profiling output of one run of a fresh
    /// session built the same way. Costs a session build; call it on demand (`doctor`).
    pub fn placement(&self) -> Placement {
        crate::engine::placement::profile(&self.engine)
    }
}

impl Drop for Embedder {
    fn drop(&mut self) {
        self.tokenize_jobs = None;
        for t in self.tokenizers.drain(..) {
            let _ = t.join();
        }
        self.engine.scheduler.shut_down();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
