//! A sparse encoder's calls (SPLADE): each text's weight per vocabulary term, pooled from the
//! masked-language-model head's logits one batch at a time, kept as the terms it weighs.

use serde::{Deserialize, Serialize};

use crate::error::{EmbedError, Result};
use crate::values::embeddings::{Embeddings, Usage};
use nornir_options::CallOptions;

/// Texts per internal call: a call's rows are vocabulary-wide until they are made sparse, so
/// a long list goes in parts of this many (30,522 terms x 256 texts is 31 MB).
pub(crate) const TEXTS_PER_PART: usize = 256;

/// One text's sparse vector: the vocabulary terms it weighs, ascending, and their weights.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SparseVector {
    /// Term ids (the tokenizer's), ascending.
    pub indices: Vec<u32>,
    /// The weight of each term, above 0.
    pub values: Vec<f32>,
}

/// How a sparse call prunes its vectors, beside the options of any call.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SparseOptions {
    /// Prompt and truncation, as for dense calls (dimensions do not apply).
    pub call: CallOptions,
    /// Keep only the this many heaviest terms of each text.
    pub top_k: Option<usize>,
    /// Keep only terms weighing more than this.
    pub threshold: Option<f32>,
}

impl SparseOptions {
    /// Every term above 0, the call's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The call's prompt and truncation.
    pub fn with_call(mut self, call: CallOptions) -> Self {
        self.call = call;
        self
    }

    /// Keeps the `k` heaviest terms of each text.
    pub fn with_top_k(mut self, k: usize) -> Self {
        self.top_k = Some(k);
        self
    }

    /// Keeps the terms weighing more than `threshold`.
    pub fn with_threshold(mut self, threshold: f32) -> Self {
        self.threshold = Some(threshold);
        self
    }

    /// One vocabulary-wide row as a sparse vector, pruned as asked.
    pub fn sparsify(&self, row: &[f32]) -> SparseVector {
        let floor = self.threshold.unwrap_or(0.0).max(0.0);
        let mut kept: Vec<(u32, f32)> =
            row.iter().enumerate().filter(|&(_, &w)| w > floor).map(|(i, &w)| (i as u32, w)).collect();
        if let Some(k) = self.top_k
            && kept.len() > k
        {
            kept.select_nth_unstable_by(k, |a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            kept.truncate(k);
            kept.sort_unstable_by_key(|&(i, _)| i);
        }
        SparseVector { indices: kept.iter().map(|&(i, _)| i).collect(), values: kept.iter().map(|&(_, w)| w).collect() }
    }

    /// A sparse vector pruned as asked (BGE-M3's, which is sparse from the start).
    pub fn prune(&self, v: SparseVector) -> SparseVector {
        if self.top_k.is_none() && self.threshold.is_none_or(|t| t <= 0.0) {
            return v;
        }
        let mut row: Vec<(u32, f32)> = v.indices.into_iter().zip(v.values).collect();
        let floor = self.threshold.unwrap_or(0.0).max(0.0);
        row.retain(|&(_, w)| w > floor);
        if let Some(k) = self.top_k
            && row.len() > k
        {
            row.select_nth_unstable_by(k, |a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            row.truncate(k);
            row.sort_unstable_by_key(|&(i, _)| i);
        }
        SparseVector { indices: row.iter().map(|&(i, _)| i).collect(), values: row.iter().map(|&(_, w)| w).collect() }
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.call.dimensions.is_some() {
            return Err(EmbedError::invalid("dimensions", "cuts dense vectors; a sparse vector keeps its terms"));
        }
        if self.call.chunking.is_some() {
            return Err(EmbedError::invalid(
                "chunking",
                "a sparse encoder weighs a text's first tokens (or refuses a long text): chunking makes dense document vectors; truncate or refuse instead",
            ));
        }
        if self.call.precision.is_some() || self.call.ranges.is_some() {
            return Err(EmbedError::invalid(
                "precision",
                "is for dense vectors; a sparse vector keeps its weights as float32",
            ));
        }
        if self.top_k == Some(0) {
            return Err(EmbedError::invalid("top_k", "must be at least 1"));
        }
        Ok(())
    }
}

/// A sparse call's vectors, one per text in order, with what the call read.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SparseVectors {
    /// Each text's sparse vector.
    pub vectors: Vec<SparseVector>,
    /// The tokens the model read and how many texts were cut.
    pub usage: Usage,
}

impl SparseVectors {
    /// One part's rows, sparsified.
    pub(crate) fn add(&mut self, rows: &Embeddings, options: &SparseOptions) {
        self.vectors.extend(rows.rows().map(|r| options.sparsify(r)));
        self.usage += rows.usage();
    }
}
