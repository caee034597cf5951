//! The sparse-encoder kind's calls on an [`Embedder`]: a SPLADE model's texts in parts, each
//! part's vocabulary-wide rows made sparse; or BGE-M3's term weights from its token pass.

use std::future::Future;

use crate::call::future::Work;
use crate::call::runner::{Runner, block_on};
use crate::embedder::Embedder;
use crate::error::Result;
use crate::kinds::multi_vector_calls::{Planned, SPARSE_ONLY, as_tokens, pruned};
use crate::kinds::sparse::{SparseOptions, SparseVectors, TEXTS_PER_PART};
use nornir_options::ModelKind;

/// A sparse call checked and cut into parts.
enum SparsePlan {
    /// BGE-M3's sparse head: a token call.
    ByHead(Box<Planned>, SparseOptions),
    /// A SPLADE model's texts, in parts of [`TEXTS_PER_PART`].
    Texts(Vec<Vec<String>>, SparseOptions),
}

impl Embedder {
    /// Each text's sparse vector (SPLADE: `log(1 + relu(logits))` over the vocabulary, the
    /// maximum over its tokens), pruned as `options` say. A long list runs in parts, so memory
    /// stays bounded. An error ([`EmbedError::WrongKind`](crate::EmbedError::WrongKind)) unless the model is a sparse encoder.
    pub fn embed_sparse<S: AsRef<str>>(&self, texts: &[S], options: &SparseOptions) -> Result<SparseVectors> {
        block_on(self.sparse_body(self.blocking(), self.plan_sparse(texts, options)))
    }

    /// [`embed_sparse`](Self::embed_sparse) as a future (dropping it cancels the call).
    pub fn embed_sparse_async<S: AsRef<str>>(
        &self,
        texts: &[S],
        options: &SparseOptions,
    ) -> impl Future<Output = Result<SparseVectors>> + '_ {
        self.sparse_body(self.queued(), self.plan_sparse(texts, options))
    }

    /// A sparse call checked, its texts in parts: BGE-M3's sparse head runs them as a token
    /// call, a SPLADE model as texts.
    fn plan_sparse<S: AsRef<str>>(&self, texts: &[S], options: &SparseOptions) -> Result<SparsePlan> {
        self.sparse_encoder()?;
        options.check()?;
        if self.tokens.sparse_head.is_some() {
            let planned = self.plan_parts(texts, SPARSE_ONLY, &as_tokens(options), "embed_sparse")?;
            return Ok(SparsePlan::ByHead(Box::new(planned), options.clone()));
        }
        let parts = texts.chunks(TEXTS_PER_PART).map(|p| p.iter().map(|t| t.as_ref().to_owned()).collect());
        Ok(SparsePlan::Texts(parts.collect(), options.clone()))
    }

    /// A sparse call's one body, run as `runner` says.
    async fn sparse_body(&self, runner: Runner<'_>, plan: Result<SparsePlan>) -> Result<SparseVectors> {
        match plan? {
            SparsePlan::ByHead(planned, options) => Ok(pruned(self.run_planned(runner, *planned).await?, &options)),
            SparsePlan::Texts(parts, options) => {
                let mut out = SparseVectors::default();
                for part in parts {
                    let rows = runner.run(Work::Texts(part, options.call.clone())).await?;
                    out.add(&rows, &options);
                }
                Ok(out)
            }
        }
    }

    /// The token of vocabulary term `id` (a sparse vector's index), or `None` outside it.
    pub fn vocabulary_term(&self, id: u32) -> Option<String> {
        self.engine.tokenizer.truncating().id_to_token(id)
    }
}

/// A sparse encoder's calls, from [`Embedder::sparse_encoder`]: the model was checked once, when
/// the handle was made, so these calls meet no wrong-kind error.
#[derive(Debug, Clone, Copy)]
pub struct SparseEncoder<'a> {
    embedder: &'a Embedder,
}

impl Embedder {
    /// This model as a sparse encoder (a SPLADE model, or BGE-M3 with its sparse head); an error
    /// ([`EmbedError::WrongKind`](crate::EmbedError::WrongKind)) for any other.
    pub fn sparse_encoder(&self) -> Result<SparseEncoder<'_>> {
        if self.tokens.sparse_head.is_none() {
            self.engine.expect_kind(ModelKind::SparseEncoder, "embed_sparse")?;
        }
        Ok(SparseEncoder { embedder: self })
    }
}

impl<'a> SparseEncoder<'a> {
    /// [`Embedder::embed_sparse`].
    pub fn embed<S: AsRef<str>>(&self, texts: &[S], options: &SparseOptions) -> Result<SparseVectors> {
        self.embedder.embed_sparse(texts, options)
    }

    /// [`Embedder::embed_sparse_async`].
    pub fn embed_async<S: AsRef<str>>(
        &self,
        texts: &[S],
        options: &SparseOptions,
    ) -> impl Future<Output = Result<SparseVectors>> + 'a {
        self.embedder.embed_sparse_async(texts, options)
    }

    /// [`Embedder::vocabulary_term`].
    pub fn vocabulary_term(&self, id: u32) -> Option<String> {
        self.embedder.vocabulary_term(id)
    }

    /// The embedder behind it.
    pub fn embedder(&self) -> &'a Embedder {
        self.embedder
    }
}
