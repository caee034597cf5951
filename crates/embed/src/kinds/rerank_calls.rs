//! A cross-encoder's calls on an [`Embedder`]: scores of pairs (or texts alone), activated as the
//! model's configs say, and one query's documents ranked by them.

use std::future::Future;

use crate::call::future::{EmbedFuture, Work};
use crate::call::runner::{Runner, block_on};
use crate::embedder::Embedder;
use crate::error::{EmbedError, Result};
use crate::kinds::multi_vector_calls::Planned;
use crate::kinds::rerank::{ChunkOf, ChunkedPairs, PairOptions, Ranking, chunk_pairs, pairs_work, prepare_pairs};
use crate::kinds::rerank::{rank, rank_chunks};
use crate::values::embeddings::Embeddings;
use nornir_options::ModelKind;

/// A rerank checked, before it runs.
enum RerankPlan {
    /// The query's token call and the documents'.
    MaxSim(Box<(Planned, Planned)>),
    /// Each (query, document) pair.
    Pairs(Work),
    /// Each (query, chunk) pair, with the chunk's document and span, of how many documents.
    Chunked(Work, Vec<ChunkOf>, usize),
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
        if let Err(e) = self.cross_encoder() {
            return EmbedFuture::refused(&self.engine, e);
        }
        let owned =
            inputs.iter().map(|(a, b)| (a.as_ref().to_owned(), b.as_ref().map(|b| b.as_ref().to_owned()))).collect();
        self.future(pairs_work(owned, options.clone()))
    }

    /// `documents` ranked by their score against `query`, best first (ties in input order), the
    /// first `top_n` when given, with the tokens every pair read. With chunking (the call's, or
    /// the embedder's default), a document longer than the model reads is scored by the best of
    /// its chunks, each the pair (query, chunk) in one window, and each result says which chunk
    /// scored. An error for an empty query, or unless the model is a cross-encoder with one
    /// label (use [`predict`](Self::predict) for several).
    pub fn rerank<S: AsRef<str>>(
        &self,
        query: &str,
        documents: &[S],
        top_n: Option<usize>,
        options: &PairOptions,
    ) -> Result<Ranking> {
        block_on(self.rerank_body(self.blocking(), self.plan_rerank(query, documents, options), top_n))
    }

    /// [`rerank`](Self::rerank) as a future (dropping it cancels the call).
    pub fn rerank_async<S: AsRef<str>>(
        &self,
        query: &str,
        documents: &[S],
        top_n: Option<usize>,
        options: &PairOptions,
    ) -> impl Future<Output = Result<Ranking>> + '_ {
        self.rerank_body(self.queued(), self.plan_rerank(query, documents, options), top_n)
    }

    /// A rerank checked: a model that makes token vectors ranks by MaxSim, a cross-encoder by
    /// the score of each (query, document) pair.
    fn plan_rerank<S: AsRef<str>>(&self, query: &str, documents: &[S], options: &PairOptions) -> Result<RerankPlan> {
        let chunking = self.engine.long_choice(&options.call).1;
        if self.ranks_by_max_sim() {
            if chunking.is_some() {
                return Err(EmbedError::invalid(
                    "chunking",
                    "a late-interaction model ranks a document by MaxSim over its token vectors, which it cuts to its length: leave chunking out",
                ));
            }
            return Ok(RerankPlan::MaxSim(Box::new(self.plan_max_sim(query, documents, options)?)));
        }
        self.can_rerank(query)?;
        if let Some(chunking) = chunking {
            let ChunkedPairs { pairs, owners } = chunk_pairs(&self.engine, query, documents, &chunking)?;
            // Every chunk fits its window; the pairs themselves are cut as a call cuts them.
            let mut call = options.call.clone();
            call.chunking = None;
            let work = pairs_work(pairs, options.clone().with_call(call));
            return Ok(RerankPlan::Chunked(work, owners, documents.len()));
        }
        let pairs = documents.iter().map(|d| (query.to_owned(), Some(d.as_ref().to_owned()))).collect();
        Ok(RerankPlan::Pairs(pairs_work(pairs, options.clone())))
    }

    /// A rerank's one body, run as `runner` says.
    async fn rerank_body(&self, runner: Runner<'_>, plan: Result<RerankPlan>, top_n: Option<usize>) -> Result<Ranking> {
        match plan? {
            RerankPlan::MaxSim(planned) => self.rerank_by_max_sim(runner, *planned, top_n).await,
            RerankPlan::Pairs(work) => Ok(rank(&runner.run(work).await?, top_n)),
            RerankPlan::Chunked(work, owners, documents) => {
                Ok(rank_chunks(&runner.run(work).await?, &owners, documents, top_n))
            }
        }
    }

    /// A model that makes token vectors and scores no pairs ranks by MaxSim.
    fn ranks_by_max_sim(&self) -> bool {
        self.tokens.rules.is_some() && self.engine.info.folder.kind.kind != ModelKind::CrossEncoder
    }

    /// The checks [`rerank`](Self::rerank) makes before it scores anything: a cross-encoder
    /// with one label, and a query that is not empty.
    fn can_rerank(&self, query: &str) -> Result<()> {
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

/// A cross-encoder's calls, from [`Embedder::cross_encoder`]: the model was checked once, when
/// the handle was made, so these calls meet no wrong-kind error.
#[derive(Debug, Clone, Copy)]
pub struct CrossEncoder<'a> {
    embedder: &'a Embedder,
}

impl Embedder {
    /// This model as a cross-encoder (a reranker or a classifier); an error
    /// ([`EmbedError::WrongKind`]) for any other.
    pub fn cross_encoder(&self) -> Result<CrossEncoder<'_>> {
        self.engine.expect_kind(ModelKind::CrossEncoder, "predict")?;
        Ok(CrossEncoder { embedder: self })
    }
}

impl<'a> CrossEncoder<'a> {
    /// [`Embedder::predict`].
    pub fn predict<A: AsRef<str>, B: AsRef<str>>(&self, pairs: &[(A, B)], options: &PairOptions) -> Result<Embeddings> {
        self.embedder.predict(pairs, options)
    }

    /// [`Embedder::score`].
    pub fn score<A: AsRef<str>, B: AsRef<str>>(
        &self,
        inputs: &[(A, Option<B>)],
        options: &PairOptions,
    ) -> Result<Embeddings> {
        self.embedder.score(inputs, options)
    }

    /// [`Embedder::classify`].
    pub fn classify<S: AsRef<str>>(&self, texts: &[S], options: &PairOptions) -> Result<Embeddings> {
        self.embedder.classify(texts, options)
    }

    /// [`Embedder::score_async`].
    pub fn score_async<A: AsRef<str>, B: AsRef<str>>(
        &self,
        inputs: &[(A, Option<B>)],
        options: &PairOptions,
    ) -> EmbedFuture<'a> {
        self.embedder.score_async(inputs, options)
    }

    /// [`Embedder::rerank`].
    pub fn rerank<S: AsRef<str>>(
        &self,
        query: &str,
        documents: &[S],
        top_n: Option<usize>,
        options: &PairOptions,
    ) -> Result<Ranking> {
        self.embedder.rerank(query, documents, top_n, options)
    }

    /// [`Embedder::rerank_async`].
    pub fn rerank_async<S: AsRef<str>>(
        &self,
        query: &str,
        documents: &[S],
        top_n: Option<usize>,
        options: &PairOptions,
    ) -> impl Future<Output = Result<Ranking>> + 'a {
        self.embedder.rerank_async(query, documents, top_n, options)
    }

    /// The embedder behind it.
    pub fn embedder(&self) -> &'a Embedder {
        self.embedder
    }
}
