//! A cross-encoder's calls: query and document pairs tokenized as the tokenizer's own pair
//! encoding, queued as ordinary items (they batch by length with other calls' pairs), and their
//! scores activated as the configs say; `rerank` sorts one query's documents by their score.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::call::{CancelHandle, Truncation};
use crate::embedder::Embedder;
use crate::embeddings::{Embeddings, TextTokens};
use crate::engine::Engine;
use crate::error::{EmbedError, Result};
use crate::future::{EmbedFuture, Work};
use crate::kind::{ModelKind, ScoreActivation};
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

/// One document of a [`rerank`](Embedder::rerank): its index in the call and its score.
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
        && !handle.watch(&call.request)
    {
        return Err(EmbedError::Cancelled);
    }
    Ok(call)
}

impl Embedder {
    /// The scores of each (query, document) pair: row i holds pair i's score per label (one for
    /// a reranker), activated as the model's configs say (sigmoid for one label, softmax for
    /// several) unless `raw_scores`. Pairs share batches with other calls' pairs. An error
    /// ([`EmbedError::WrongKind`]) unless the model is a cross-encoder.
    pub fn predict<A: AsRef<str>, B: AsRef<str>>(&self, pairs: &[(A, B)], options: &PairOptions) -> Result<Embeddings> {
        let inputs: Vec<(&str, Option<&str>)> = pairs.iter().map(|(a, b)| (a.as_ref(), Some(b.as_ref()))).collect();
        self.score(&inputs, options)
    }

    /// [`predict`](Self::predict) and [`classify`](Self::classify) at once, for inputs that are
    /// each a pair (`Some` second text) or a text alone.
    pub fn score<A: AsRef<str>, B: AsRef<str>>(
        &self,
        inputs: &[(A, Option<B>)],
        options: &PairOptions,
    ) -> Result<Embeddings> {
        self.run_call(prepare_pairs(&self.engine, inputs, options)?)
    }

    /// [`predict`](Self::predict) for texts alone (a classifier of single texts: sentiment,
    /// topic), each encoded as the tokenizer encodes one text.
    pub fn classify<S: AsRef<str>>(&self, texts: &[S], options: &PairOptions) -> Result<Embeddings> {
        let inputs: Vec<(&str, Option<&str>)> = texts.iter().map(|t| (t.as_ref(), None)).collect();
        self.score(&inputs, options)
    }

    /// [`score`](Self::score) as a future, as [`embed_async`](Self::embed_async) is (dropping it
    /// cancels the call).
    pub fn score_async<A: AsRef<str>, B: AsRef<str>>(
        &self,
        inputs: &[(A, Option<B>)],
        options: &PairOptions,
    ) -> EmbedFuture<'_> {
        if let Err(e) = self.engine.expect_kind(ModelKind::CrossEncoder, "predict") {
            return EmbedFuture::refused(&self.engine, e);
        }
        let owned =
            inputs.iter().map(|(a, b)| (a.as_ref().to_owned(), b.as_ref().map(|b| b.as_ref().to_owned()))).collect();
        self.future(Work::Pairs(owned, options.clone()))
    }

    /// `documents` ranked by their score against `query`, best first (ties in input order), the
    /// first `top_n` when given. An error for an empty query, or unless the model is a
    /// cross-encoder with one label (use [`predict`](Self::predict) for several).
    pub fn rerank<S: AsRef<str>>(
        &self,
        query: &str,
        documents: &[S],
        top_n: Option<usize>,
        options: &PairOptions,
    ) -> Result<Vec<Ranked>> {
        self.can_rerank(query)?;
        let pairs: Vec<(&str, &str)> = documents.iter().map(|d| (query, d.as_ref())).collect();
        Ok(rank(&self.predict(&pairs, options)?, top_n))
    }

    /// [`rerank`](Self::rerank) as a future (dropping it cancels the call).
    pub fn rerank_async<S: AsRef<str>>(
        &self,
        query: &str,
        documents: &[S],
        top_n: Option<usize>,
        options: &PairOptions,
    ) -> impl Future<Output = Result<Vec<Ranked>>> + '_ {
        let pairs: Vec<(&str, Option<&str>)> = documents.iter().map(|d| (query, Some(d.as_ref()))).collect();
        let scores = self.can_rerank(query).map(|()| self.score_async(&pairs, options));
        async move { Ok(rank(&scores?.await?, top_n)) }
    }

    /// The checks [`rerank`](Self::rerank) makes before it scores anything: a cross-encoder
    /// with one label, and a query that is not empty.
    pub fn can_rerank(&self, query: &str) -> Result<()> {
        self.engine.expect_kind(ModelKind::CrossEncoder, "rerank")?;
        let labels = &self.engine.info.folder.kind.labels;
        if labels.len() != 1 {
            return Err(EmbedError::invalid(
                "rerank",
                format!(
                    "ranks by one score, and this cross-encoder gives {} ({}): call predict for every label's score",
                    labels.len(),
                    labels.join(", ")
                ),
            ));
        }
        if query.trim().is_empty() {
            return Err(EmbedError::invalid("query", "is empty: give the text to rank the documents against"));
        }
        Ok(())
    }
}
