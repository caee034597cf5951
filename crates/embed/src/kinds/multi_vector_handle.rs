//! The multi-vector kind's handle: a late-interaction model's calls (token vectors, BGE-M3's
//! outputs from one pass, MaxSim reranking) on a model checked once, when the handle is made.

use std::future::Future;

use crate::embedder::Embedder;
use crate::error::Result;
use crate::kinds::multi_vector::{Encoded, MultiVectors, Outputs};
use crate::kinds::multi_vector_tokens::MultiVectorOptions;
use crate::kinds::rerank::{PairOptions, Ranking};
use nornir_options::Ranges;

/// A multi-vector model's calls, from [`Embedder::multi_vector_encoder`]: the model was checked
/// once, when the handle was made, so these calls meet no wrong-kind error.
#[derive(Debug, Clone, Copy)]
pub struct MultiVectorEncoder<'a> {
    embedder: &'a Embedder,
}

impl Embedder {
    /// This model as a multi-vector model (a ColBERT model, or BGE-M3 converted with its
    /// `colbert_linear`); an error ([`EmbedError::WrongKind`](crate::EmbedError::WrongKind)) for
    /// one that makes no token vectors.
    pub fn multi_vector_encoder(&self) -> Result<MultiVectorEncoder<'_>> {
        self.token_rules("embed_multi_vector")?;
        Ok(MultiVectorEncoder { embedder: self })
    }
}

impl<'a> MultiVectorEncoder<'a> {
    /// [`Embedder::embed_multi_vector`].
    pub fn embed<S: AsRef<str>>(&self, texts: &[S], options: &MultiVectorOptions) -> Result<MultiVectors> {
        self.embedder.embed_multi_vector(texts, options)
    }

    /// [`Embedder::embed_multi_vector_async`].
    pub fn embed_async<S: AsRef<str>>(
        &self,
        texts: &[S],
        options: &MultiVectorOptions,
    ) -> impl Future<Output = Result<MultiVectors>> + 'a {
        self.embedder.embed_multi_vector_async(texts, options)
    }

    /// [`Embedder::encode`].
    pub fn encode<S: AsRef<str>>(
        &self,
        texts: &[S],
        outputs: Outputs,
        options: &MultiVectorOptions,
    ) -> Result<Encoded> {
        self.embedder.encode(texts, outputs, options)
    }

    /// [`Embedder::encode_async`].
    pub fn encode_async<S: AsRef<str>>(
        &self,
        texts: &[S],
        outputs: Outputs,
        options: &MultiVectorOptions,
    ) -> impl Future<Output = Result<Encoded>> + 'a {
        self.embedder.encode_async(texts, outputs, options)
    }

    /// [`Embedder::rerank`] by MaxSim.
    pub fn rerank<S: AsRef<str>>(
        &self,
        query: &str,
        documents: &[S],
        top_n: Option<usize>,
        options: &PairOptions,
    ) -> Result<Ranking> {
        self.embedder.rerank(query, documents, top_n, options)
    }

    /// [`Embedder::rerank_async`] by MaxSim.
    pub fn rerank_async<S: AsRef<str>>(
        &self,
        query: &str,
        documents: &[S],
        top_n: Option<usize>,
        options: &PairOptions,
    ) -> impl Future<Output = Result<Ranking>> + 'a {
        self.embedder.rerank_async(query, documents, top_n, options)
    }

    /// [`Embedder::multi_vector_ranges`].
    pub fn ranges<S: AsRef<str>>(&self, texts: &[S], options: &MultiVectorOptions, source: &str) -> Result<Ranges> {
        self.embedder.multi_vector_ranges(texts, options, source)
    }

    /// The embedder behind it.
    pub fn embedder(&self) -> &'a Embedder {
        self.embedder
    }
}
