//! An encoder family's tensor names, as data the graph builders read: where its embeddings, layers,
//! attention, feed-forward, norms and heads are, each name after the checkpoint's prefix (`bert.`,
//! `roberta.`, ...) unless it says otherwise. A family file fills one [`Names`].

/// Every name an encoder's graph reads.
#[derive(Debug)]
pub(crate) struct Names {
    /// The word embeddings (`embeddings.word_embeddings`), without `.weight`.
    pub(crate) word_embeddings: &'static str,
    /// The norm after the embeddings (`embeddings.LayerNorm`).
    pub(crate) embeddings_norm: &'static str,
    /// Layer `i`'s prefix is `{layers}.{i}` (`encoder.layer`).
    pub(crate) layers: &'static str,
    /// Within a layer.
    pub(crate) attention: Attention,
    /// Within a layer.
    pub(crate) mlp: Mlp,
    /// Where a layer has `{q}.weight`, its queries and keys are normalised (within a layer).
    pub(crate) qk_norms: Option<QkNorms>,
    /// The norm after the last layer (a pre-norm family's).
    pub(crate) final_norm: Option<&'static str>,
    pub(crate) masked_lm: MaskedLm,
    pub(crate) classifier: Classifier,
}

/// A layer's attention block.
#[derive(Debug)]
pub(crate) struct Attention {
    pub(crate) qkv: Qkv,
    /// The output projection.
    pub(crate) out: &'static str,
    /// The norm after the block (post-norm) or before it (pre-norm; the first layer has none).
    pub(crate) norm: &'static str,
}

/// Where the query, key and value projections are.
#[derive(Debug)]
pub(crate) enum Qkv {
    /// Three weights `[hidden, hidden]`.
    Separate { query: &'static str, key: &'static str, value: &'static str },
    /// One weight `[3 · hidden, hidden]`: queries, keys, values.
    Fused(&'static str),
}

/// A layer's feed-forward block.
#[derive(Debug)]
pub(crate) struct Mlp {
    /// The input projection of a plain feed-forward.
    pub(crate) plain: &'static str,
    /// The input projections of a gated one.
    pub(crate) gated: Gated,
    /// The output projection.
    pub(crate) down: &'static str,
    /// The norm after the block (post-norm) or before it (pre-norm).
    pub(crate) norm: &'static str,
}

/// Where a gated feed-forward's two input projections are.
#[derive(Debug)]
pub(crate) enum Gated {
    /// One weight `[2 · intermediate, hidden]`; the activated half first or second as `activated_first`
    /// says, else as the config's feed-forward says.
    Fused { weight: &'static str, activated_first: Option<bool> },
    /// Two weights `[intermediate, hidden]`.
    Split { activated: &'static str, linear: &'static str },
}

/// Query and key norms over the whole width, and what comes with them: the layer's output added
/// again and normalised before the feed-forward, and a feed-forward of its own
/// (jina-embeddings-v2-base-code).
#[derive(Debug)]
pub(crate) struct QkNorms {
    pub(crate) q: &'static str,
    pub(crate) k: &'static str,
    /// The norm of `attention output + layer input`, before the feed-forward.
    pub(crate) again: &'static str,
    pub(crate) mlp: Mlp,
}

/// The masked-language-model head: dense, activation, norm, decoder over the vocabulary. Its names
/// have no prefix, except `tied`.
#[derive(Debug)]
pub(crate) struct MaskedLm {
    pub(crate) dense: &'static str,
    pub(crate) activation: HeadActivation,
    pub(crate) norm: &'static str,
    pub(crate) decoder: &'static str,
    /// The decoder's bias: the first of these the checkpoint has (none where the config has no
    /// decoder bias).
    pub(crate) biases: &'static [&'static str],
    /// The decoder where the checkpoint has none of its own: the word embeddings (after the prefix).
    pub(crate) tied: &'static str,
}

/// Which activation a head applies.
#[derive(Debug, Clone, Copy)]
pub(crate) enum HeadActivation {
    /// GELU, whatever the config says.
    Gelu,
    /// The config's `hidden_act`.
    Hidden,
    /// The config's `classifier_activation`.
    Classifier,
}

/// The sequence classifier on the pooled tokens.
#[derive(Debug)]
pub(crate) enum Classifier {
    /// The pooler (dense, tanh; after the prefix), then `out`; where `optional`, a checkpoint
    /// without the pooler goes straight to `out`.
    Pooler { pooler: &'static str, out: &'static str, optional: bool },
    /// `dense`, tanh, `out`.
    DenseTanh { dense: &'static str, out: &'static str },
    /// `dense` (its bias as the config says), the classifier activation, `norm`, `out`.
    Head { dense: &'static str, norm: &'static str, out: &'static str },
}
