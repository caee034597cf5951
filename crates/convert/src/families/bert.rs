//! BERT and the embedders that share its layout (MiniLM, BGE, e5, GTE v1): absolute positions
//! 0, 1, 2..., post-norm layers, separate query, key and value projections, transformers'
//! `modeling_bert.py` names; and Stanford ColBERT's checkpoints (`HF_ColBERT`: BERT under
//! `bert.`, the projection beside it, read by `colbert.rs`). Its masked-LM head and pooler are
//! the other encoder families' too.

use super::{Family, Identity};
use crate::ConvertError;
use crate::config::encoder::{Encoder, Layout, Sizes, encoder};
use crate::config::names::{Attention, Classifier, Gated, HeadActivation, MaskedLm, Mlp, Names, Qkv};
use crate::config::{Head, Positions};

pub(super) const FAMILY: Family = Family {
    identity: Identity::encoder("BERT"),
    model_types: &["bert"],
    display: Some("BERT"),
    architectures: &[
        ("BertModel", Head::Encoder),
        ("BertForMaskedLM", Head::MaskedLm),
        ("BertForSequenceClassification", Head::SequenceClassification),
    ],
    claims: |architecture, _| architecture.starts_with("Bert"),
    read: |claim| encoder(claim, &ENCODER),
};

/// Stanford ColBERT's checkpoints, listed after the other encoders.
pub(super) const COLBERT: Family = Family {
    identity: Identity::encoder("BERT"),
    model_types: &[],
    display: None,
    architectures: &[("HF_ColBERT", Head::Encoder)],
    claims: |architecture, _| architecture == "HF_ColBERT",
    read: |claim| encoder(claim, &ENCODER),
};

const ENCODER: Encoder = Encoder {
    family: "bert",
    names: &NAMES,
    gated_activations: &[],
    pad_token_id: 0,
    type_vocab: 2,
    eps: 1e-12,
    layout: |sizes| absolute(sizes, false),
};

/// BERT's names (XLM-RoBERTa's but for its heads).
pub(super) const NAMES: Names = Names {
    word_embeddings: "embeddings.word_embeddings",
    embeddings_norm: "embeddings.LayerNorm",
    layers: "encoder.layer",
    attention: ATTENTION,
    mlp: Mlp {
        plain: "intermediate.dense",
        gated: Gated::Fused { weight: "intermediate.dense", activated_first: None },
        down: "output.dense",
        norm: "output.LayerNorm",
    },
    qk_norms: None,
    final_norm: None,
    masked_lm: MASKED_LM,
    classifier: POOLER,
};

/// BERT's attention block (JinaBERT v2's too).
pub(super) const ATTENTION: Attention = Attention {
    qkv: Qkv::Separate { query: "attention.self.query", key: "attention.self.key", value: "attention.self.value" },
    out: "attention.output.dense",
    norm: "attention.output.LayerNorm",
};

/// BERT's masked-LM head: `cls.predictions`, with the config's `hidden_act`.
pub(super) const MASKED_LM: MaskedLm = MaskedLm {
    dense: "cls.predictions.transform.dense",
    activation: HeadActivation::Hidden,
    norm: "cls.predictions.transform.LayerNorm",
    decoder: "cls.predictions.decoder",
    biases: &["cls.predictions.bias", "cls.predictions.decoder.bias"],
    tied: "embeddings.word_embeddings",
};

/// BERT's classifier: the pooler (dense, tanh), then `classifier`.
pub(super) const POOLER: Classifier = Classifier::Pooler { pooler: "pooler.dense", out: "classifier", optional: false };

/// Absolute positions (counted past the padding index where `from_padding`), post-norm layers
/// whose query, key and value biases the fused attention adds; any other
/// `position_embedding_type` refused.
pub(super) fn absolute(sizes: &Sizes<'_>, from_padding: bool) -> Result<Layout, ConvertError> {
    let kind = sizes.positions_kind;
    if kind != "absolute" {
        return Err(sizes.check().bad(format!(
            "has position_embedding_type {kind:?}; only \"absolute\" is converted for {}",
            sizes.claim.architecture
        )));
    }
    let mut layout = Layout::new(Positions::Absolute { from_padding }, sizes.feed_forward);
    layout.qkv_bias_in_attention = true;
    Ok(layout)
}
