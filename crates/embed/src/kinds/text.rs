//! The dense text embedder's handle, and [`KindHandle`]: the handle of the kind a model is,
//! known when it opens, so a caller matches on the kind once and then holds calls of that
//! kind alone.

use std::future::Future;

use crate::call::future::EmbedFuture;
use crate::embedder::Embedder;
use crate::error::Result;
use crate::kinds::compact::CompactVectors;
use crate::kinds::multi_vector_handle::MultiVectorEncoder;
use crate::kinds::rerank_calls::CrossEncoder;
use crate::kinds::sparse_calls::SparseEncoder;
use crate::values::embeddings::Embeddings;
use nornir_options::{CallOptions, ModelKind};

/// A dense text embedder's calls, from [`Embedder::text_embedder`]: the model was checked once,
/// when the handle was made, so these calls meet no wrong-kind error.
#[derive(Debug, Clone, Copy)]
pub struct TextEmbedder<'a> {
    embedder: &'a Embedder,
}

/// The handle of the kind a model is, from [`Embedder::by_kind`]. A model may also take calls of
/// another kind: BGE-M3 is an embedder that also makes token vectors and term weights
/// ([`Embedder::multi_vector_encoder`], [`Embedder::sparse_encoder`]), and a dual encoder also
/// embeds images ([`Embedder::image_embedder`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum KindHandle<'a> {
    /// A dense text embedder.
    Embedder(TextEmbedder<'a>),
    /// A sparse encoder (SPLADE).
    SparseEncoder(SparseEncoder<'a>),
    /// A cross-encoder: a reranker or a classifier.
    CrossEncoder(CrossEncoder<'a>),
    /// A late-interaction model (ColBERT).
    MultiVector(MultiVectorEncoder<'a>),
}

impl Embedder {
    /// This model as a dense text embedder; an error
    /// ([`EmbedError::WrongKind`](crate::EmbedError::WrongKind)) for any other kind.
    pub fn text_embedder(&self) -> Result<TextEmbedder<'_>> {
        self.engine.expect_kind(ModelKind::Embedder, "embed")?;
        Ok(TextEmbedder { embedder: self })
    }

    /// The handle of this model's own kind (`model_info().folder.kind`).
    pub fn by_kind(&self) -> Result<KindHandle<'_>> {
        Ok(match self.engine.info.folder.kind.kind {
            ModelKind::Embedder => KindHandle::Embedder(self.text_embedder()?),
            ModelKind::SparseEncoder => KindHandle::SparseEncoder(self.sparse_encoder()?),
            ModelKind::CrossEncoder => KindHandle::CrossEncoder(self.cross_encoder()?),
            ModelKind::MultiVector => KindHandle::MultiVector(self.multi_vector_encoder()?),
        })
    }
}

impl<'a> TextEmbedder<'a> {
    /// [`Embedder::embed`].
    pub fn embed<S: AsRef<str>>(&self, texts: &[S]) -> Result<Embeddings> {
        self.embedder.embed(texts)
    }

    /// [`Embedder::embed_with`].
    pub fn embed_with<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions) -> Result<Embeddings> {
        self.embedder.embed_with(texts, options)
    }

    /// [`Embedder::embed_with_async`].
    pub fn embed_with_async<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions) -> EmbedFuture<'a> {
        self.embedder.embed_with_async(texts, options)
    }

    /// [`Embedder::embed_compact`].
    pub fn embed_compact<S: AsRef<str>>(&self, texts: &[S], options: &CallOptions) -> Result<CompactVectors> {
        self.embedder.embed_compact(texts, options)
    }

    /// [`Embedder::embed_compact_async`].
    pub fn embed_compact_async<S: AsRef<str>>(
        &self,
        texts: &[S],
        options: &CallOptions,
    ) -> impl Future<Output = Result<CompactVectors>> + 'a {
        self.embedder.embed_compact_async(texts, options)
    }

    /// [`Embedder::token_vectors`].
    pub fn token_vectors(&self, text: &str, options: &CallOptions) -> Result<Embeddings> {
        self.embedder.token_vectors(text, options)
    }

    /// [`Embedder::token_vectors_async`].
    pub fn token_vectors_async(&self, text: &str, options: &CallOptions) -> EmbedFuture<'a> {
        self.embedder.token_vectors_async(text, options)
    }

    /// The embedder behind it.
    pub fn embedder(&self) -> &'a Embedder {
        self.embedder
    }
}
