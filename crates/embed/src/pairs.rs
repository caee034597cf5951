//! A cross-encoder's call before the queue: its options, its query and document pairs tokenized
//! as the tokenizer's own pair encoding into ordinary queue items (they batch by length with
//! other calls' pairs), and, after, one query's documents sorted by their score.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use nornir_options::{CancelHandle, Truncation};
use crate::embeddings::{Embeddings, TextTokens};
use crate::engine::Engine;
use crate::error::{EmbedError, Result};
use nornir_options::{ModelKind, ScoreActivation};
use crate::prepare::Call;
use crate::request::{Item, Request};

/// How a call scores its pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PairOptions {
    /// The model's raw scores (logits), without the activation its configs name.
    pub raw_scores: bool,
    /// A pair longer than the model reads: cut on the right (the default; the document first,
    /// the query too only when it alone is too long), on the left, or refused with
    /// [`EmbedError::TooLong`].
    pub truncation: Truncation,
    /// Refuse the call when the queue ahead of it would keep it longer.
    pub max_wait: Option<Duration>,
    /// Cancels the call from another thread (see [`CallOptions::with_cancel`](crate::CallOptions::with_cancel)).
    pub cancel: Option<CancelHandle>,
}

impl PairOptions {
    /// The defaults: activated scores, pairs cut on the right.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raw scores (logits) instead of activated ones.
    pub fn with_raw_scores(mut self, raw: bool) -> Self {
        self.raw_scores = raw;
        self
    }

    /// How a pair longer than the model reads is cut, or refused.
    pub fn with_truncation(mut self, truncation: Truncation) -> Self {
        self.truncation = truncation;
        self
    }

    /// Refuse the call when the queue ahead would keep it longer than `wait`.
    pub fn with_max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = Some(wait);
        self
    }

    /// Lets `handle` cancel the call.
    pub fn with_cancel(mut self, handle: &CancelHandle) -> Self {
        self.cancel = Some(handle.clone());
        self
    }
}

/// One document of a [`rerank`](crate::Embedder::rerank): its index in the call and its score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    /// The document's index among the call's documents.
    pub index: usize,
    /// Its score: the model's one label, activated unless raw scores were asked for.
    pub score: f32,
}

/// `scores` (one row of one score per document) as documents best first, ties in input order,
/// the first `top_n` when given.
pub fn rank(scores: &Embeddings, top_n: Option<usize>) -> Vec<Ranked> {
    let mut ranked: Vec<Ranked> = scores.rows().enumerate().map(|(index, r)| Ranked { index, score: r[0] }).collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    ranked.truncate(top_n.unwrap_or(usize::MAX));
    ranked
}

/// A call's inputs, each a pair or a text alone, as queue items with the request they fill.
pub(crate) fn prepare_pairs<A: AsRef<str>, B: AsRef<str>>(
    engine: &Engine,
    inputs: &[(A, Option<B>)],
    options: &PairOptions,
) -> Result<Call> {
    engine.expect_kind(ModelKind::CrossEncoder, "predict")?;
    let tokenizer = &engine.tokenizer;
    let labels = engine.info.model_dimension;
    let request = Request::new(inputs.len(), labels);
    let mut items = Vec::with_capacity(inputs.len());
    let mut tokens = Vec::with_capacity(inputs.len());
    for (index, (first, second)) in inputs.iter().enumerate() {
        let (first, second) = (first.as_ref(), second.as_ref().map(AsRef::as_ref));
        if options.truncation == Truncation::Refuse
            && let Some(count) = tokenizer.pair_too_long(first, second)?
        {
            let max_length = engine.info.max_length;
            return Err(EmbedError::TooLong { index, tokens: count, exact: true, max_length });
        }
        let enc = tokenizer.encode_pair(first, second, options.truncation)?;
        let count = u32::try_from(enc.len()).unwrap_or(u32::MAX);
        tokens.push(TextTokens { count, truncated: !enc.get_overflowing().is_empty() });
        items.push(Item::pair(enc.get_ids().to_vec(), enc.get_type_ids().to_vec(), &request, index));
    }
    let activation = match (options.raw_scores, engine.info.folder.kind.activation) {
        (false, Some(a)) => a,
        _ => ScoreActivation::Identity,
    };
    let call = Call::of_pairs(request, items, tokens, labels, activation, options.max_wait);
    if let Some(handle) = &options.cancel
        && !handle.watch(call.request.watchable())
    {
        return Err(EmbedError::Cancelled);
    }
    Ok(call)
}
