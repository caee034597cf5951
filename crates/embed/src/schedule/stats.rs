//! What an embedder has done: counters shared by its sessions, read as [`EmbedStats`].

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Counters since the embedder was built (or since [`Embedder::reset_stats`](crate::Embedder::reset_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct EmbedStats {
    /// Texts embedded (each unique text of a call once).
    pub texts: u64,
    /// Images embedded (a dual encoder's image calls).
    pub images: u64,
    /// Batches run (of texts, or of images).
    pub batches: u64,
    /// Real tokens, after truncation.
    pub tokens: u64,
    /// Tokens fed to the model, padding included.
    pub padded_tokens: u64,
    /// Seconds spent inside `Session::run`.
    pub ort_seconds: f64,
    /// Batches by their number of texts (or images): entry i counts batches of at most
    /// [`BATCH_SIZE_BOUNDS`]`[i]` texts (cumulative, as a Prometheus histogram); `batches` is the
    /// count of all.
    pub batch_sizes: [u64; BATCH_SIZE_BOUNDS.len()],
    /// Texts waiting in the queue now, not yet running (images count one each).
    pub queued_texts: u64,
    /// Texts in the batches running now (images count one each).
    pub running_texts: u64,
    /// Texts whose future was dropped before they ran (a server's client that went away): taken
    /// out of the queue, or never put in it (images count one each).
    pub cancelled_texts: u64,
    /// Texts run in batches (the sum of the batch sizes; identical texts of a call run once;
    /// images count one each).
    pub batched_texts: u64,
}

/// The upper bounds of [`EmbedStats::batch_sizes`].
pub const BATCH_SIZE_BOUNDS: [usize; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) texts: AtomicU64,
    pub(crate) images: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) tokens: AtomicU64,
    pub(crate) padded_tokens: AtomicU64,
    pub(crate) ort_nanos: AtomicU64,
    pub(crate) batched_texts: AtomicU64,
    pub(crate) cancelled_texts: AtomicU64,
    /// Batches per bucket of [`BATCH_SIZE_BOUNDS`], not cumulative.
    pub(crate) batch_sizes: [AtomicU64; BATCH_SIZE_BOUNDS.len()],
}

impl Counters {
    pub(crate) fn count_batch(&self, texts: usize) {
        self.batched_texts.fetch_add(texts as u64, Ordering::Relaxed);
        if let Some(i) = BATCH_SIZE_BOUNDS.iter().position(|&b| texts <= b) {
            self.batch_sizes[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn read(&self, queued_texts: usize, running_texts: usize) -> EmbedStats {
        let mut batch_sizes = [0u64; BATCH_SIZE_BOUNDS.len()];
        let mut sum = 0;
        for (out, n) in batch_sizes.iter_mut().zip(&self.batch_sizes) {
            sum += n.load(Ordering::Relaxed);
            *out = sum;
        }
        EmbedStats {
            texts: self.texts.load(Ordering::Relaxed),
            images: self.images.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            tokens: self.tokens.load(Ordering::Relaxed),
            padded_tokens: self.padded_tokens.load(Ordering::Relaxed),
            ort_seconds: self.ort_nanos.load(Ordering::Relaxed) as f64 * 1e-9,
            batch_sizes,
            queued_texts: queued_texts as u64,
            running_texts: running_texts as u64,
            cancelled_texts: self.cancelled_texts.load(Ordering::Relaxed),
            batched_texts: self.batched_texts.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn reset(&self) {
        for a in [
            &self.texts,
            &self.images,
            &self.batches,
            &self.tokens,
            &self.padded_tokens,
            &self.ort_nanos,
            &self.batched_texts,
            &self.cancelled_texts,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        for a in &self.batch_sizes {
            a.store(0, Ordering::Relaxed);
        }
    }
}
