//! XLM-RoBERTa (bge-m3, multilingual-e5, bge-reranker): BERT's layers and names, positions
//! counted from the padding index + 1 (padding tokens at the padding index), its own masked-LM
//! head (`lm_head`) and classifier (`classifier.dense`, tanh, `classifier.out_proj`).

use super::{Family, Identity, bert};
use crate::config::Head;
use crate::config::encoder::{Encoder, encoder};
use crate::config::names::{Classifier, HeadActivation, MaskedLm, Names};

pub(super) const FAMILY: Family = Family {
    identity: Identity::encoder("XLM-RoBERTa"),
    model_types: &["xlm-roberta"],
    display: Some("XLM-RoBERTa"),
    architectures: &[
        ("XLMRobertaModel", Head::Encoder),
        ("XLMRobertaForMaskedLM", Head::MaskedLm),
        ("XLMRobertaForSequenceClassification", Head::SequenceClassification),
    ],
    claims: |architecture, _| architecture.starts_with("XLMRoberta"),
    read: |claim| encoder(claim, &ENCODER),
};

const ENCODER: Encoder = Encoder {
    family: "xlm-roberta",
    names: &Names {
        masked_lm: MaskedLm {
            dense: "lm_head.dense",
            activation: HeadActivation::Gelu,
            norm: "lm_head.layer_norm",
            decoder: "lm_head.decoder",
            biases: &["lm_head.bias", "lm_head.decoder.bias"],
            tied: "embeddings.word_embeddings",
        },
        classifier: Classifier::DenseTanh { dense: "classifier.dense", out: "classifier.out_proj" },
        ..bert::NAMES
    },
    gated_activations: &[],
    pad_token_id: 1,
    type_vocab: 2,
    eps: 1e-12,
    layout: |sizes| bert::absolute(sizes, true),
};
