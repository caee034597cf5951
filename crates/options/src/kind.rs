//! The kinds of model nornir runs, and how a cross-encoder's raw scores become the scores it
//! returns. Which kind a folder is, is read by the embedder (`nornir-embed`'s `kind.rs`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The kinds of model a retrieval stack runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// A dense vector per text (`embed`).
    #[default]
    Embedder,
    /// A sparse vector per text: a weight per vocabulary term (`embed_sparse`).
    SparseEncoder,
    /// Scores per (query, document) pair (`rerank`, `predict`).
    CrossEncoder,
    /// A small vector per token (late interaction, ColBERT): `embed_multi_vector`, and
    /// `rerank` by MaxSim.
    MultiVector,
}

impl ModelKind {
    /// The name used in reports and errors: `embedder`, `sparse-encoder`, `cross-encoder`,
    /// `multi-vector`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Embedder => "embedder",
            Self::SparseEncoder => "sparse-encoder",
            Self::CrossEncoder => "cross-encoder",
            Self::MultiVector => "multi-vector",
        }
    }
}

impl ModelKind {
    /// The label with its article: `an embedder`, `a sparse-encoder`, `a cross-encoder`, `a
    /// multi-vector model`.
    pub fn with_article(self) -> &'static str {
        match self {
            Self::Embedder => "an embedder",
            Self::SparseEncoder => "a sparse-encoder",
            Self::CrossEncoder => "a cross-encoder",
            Self::MultiVector => "a multi-vector model",
        }
    }
}

/// The calls that serve a kind of model, in each surface's words: where a call for another kind
/// sends its caller. The one table every surface's "wrong kind" hint reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KindCalls {
    /// The library's (and the Python package's) methods.
    pub library: &'static str,
    /// The server's routes.
    pub routes: &'static str,
    /// `nornir`'s commands.
    pub commands: &'static str,
}

impl ModelKind {
    /// The calls that serve this kind, on each surface.
    pub fn calls(self) -> KindCalls {
        let (library, routes, commands) = match self {
            Self::Embedder => ("embed", "/embed or /v1/embeddings", "nornir vector embed"),
            Self::SparseEncoder => ("embed_sparse", "/embed_sparse", "nornir vector embed"),
            Self::CrossEncoder => (
                "rerank or predict",
                "/rerank, /predict, /v1/rerank or /v2/rerank",
                "nornir vector rerank or nornir vector predict",
            ),
            Self::MultiVector => (
                "embed_multi_vector or rerank",
                "/v1/multi-vector, /embed_all or /rerank",
                "nornir vector embed or nornir vector rerank",
            ),
        };
        KindCalls { library, routes, commands }
    }
}

/// What a kind's output rows are as wide as: what the embedder checks a graph's output against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputWidth {
    /// The model's hidden size, or its last Dense module's `out_features`: a vector per text (or
    /// per token).
    Hidden,
    /// The vocabulary: a weight per term for each token (a sparse encoder's logits).
    Vocabulary,
    /// A score per label.
    Labels,
}

impl ModelKind {
    /// How wide its graph's output rows are.
    pub fn output_width(self) -> OutputWidth {
        match self {
            Self::Embedder | Self::MultiVector => OutputWidth::Hidden,
            Self::SparseEncoder => OutputWidth::Vocabulary,
            Self::CrossEncoder => OutputWidth::Labels,
        }
    }

    /// Whether its rows are normalised whatever the folder's modules say, and why; `None`: as
    /// they say (an embedder).
    pub fn fixed_normalization(self) -> Option<(bool, &'static str)> {
        match self {
            Self::Embedder => None,
            Self::SparseEncoder => Some((false, "a sparse encoder's term weights are not normalised")),
            Self::CrossEncoder => Some((false, "a cross-encoder's scores are not normalised")),
            Self::MultiVector => Some((true, "token vectors are normalised, as PyLate does")),
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What turns a cross-encoder's raw scores (logits) into the scores it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScoreActivation {
    /// `1 / (1 + e^-x)` per score: sentence-transformers' default for one label.
    Sigmoid,
    /// Over the labels of a pair: the default for several labels.
    Softmax,
    /// The raw scores.
    Identity,
}

impl ScoreActivation {
    /// Applies the activation to one pair's scores in place.
    pub fn apply(self, scores: &mut [f32]) {
        match self {
            Self::Identity => {}
            Self::Sigmoid => scores.iter_mut().for_each(|s| *s = 1.0 / (1.0 + (-*s).exp())),
            Self::Softmax => {
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0;
                for s in scores.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                scores.iter_mut().for_each(|s| *s /= sum);
            }
        }
    }
}
