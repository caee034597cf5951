//! The heads on top of the encoder: the masked-language-model head (SPLADE) and the sequence
//! classifier (cross-encoders), each as its family writes it.

use super::Net;
use crate::ConvertError;
use crate::config::{Activation, ClassifierPooling, Family};
use crate::graph::{Attr, FLOAT};

impl Net<'_, '_> {
    /// The masked-LM head: dense, activation, norm, then the decoder over the vocabulary (tied to
    /// the word embeddings when the checkpoint has no decoder weight of its own).
    pub(super) fn masked_lm(&mut self, x: &str) -> Result<String, ConvertError> {
        let c = self.c;
        let (h, v) = (c.hidden, c.vocab);
        let (dense, norm, decoder, act, biases, tied, dense_bias) = match c.family {
            Family::XlmRoberta => (
                "lm_head.dense",
                "lm_head.layer_norm",
                "lm_head.decoder",
                Activation::Gelu,
                vec!["lm_head.bias", "lm_head.decoder.bias"],
                "embeddings.word_embeddings",
                true,
            ),
            Family::ModernBert => (
                "head.dense",
                "head.norm",
                "decoder",
                c.classifier_activation,
                if c.decoder_bias { vec!["decoder.bias"] } else { Vec::new() },
                "embeddings.tok_embeddings",
                c.biases.classifier_dense,
            ),
            _ => (
                "cls.predictions.transform.dense",
                "cls.predictions.transform.LayerNorm",
                "cls.predictions.decoder",
                c.activation,
                vec!["cls.predictions.bias", "cls.predictions.decoder.bias"],
                "embeddings.word_embeddings",
                true,
            ),
        };
        let y = self.linear_rows(x, dense, h, h, 0..h, dense_bias)?;
        let y = self.activation(&y, act);
        let y = self.layer_norm(&y, norm)?;
        let table = if self.t.has(&format!("{decoder}.weight")) { decoder.to_owned() } else { self.p(tied) };
        let w = self.weight_t(&table, h, v)?;
        let y = self.g.op("MatMul", &[&y, &w]);
        let Some(&first) = biases.first() else { return Ok(y) };
        let bias_name = biases.iter().find(|b| self.t.has(b)).copied().unwrap_or(first);
        let b = self.t.get(bias_name, &[v])?;
        let b = self.g.f32(bias_name, &[v], b);
        Ok(self.g.op("Add", &[&y, &b]))
    }

    /// The classifier: BERT's pooler (dense, tanh) and `classifier`; XLM-RoBERTa's
    /// `classifier.dense`, tanh, `classifier.out_proj`; GTE's optional pooler and `classifier`;
    /// ModernBERT's pooling (first token or mean), head (dense, activation, norm) and `classifier`.
    pub(super) fn classifier(&mut self, x: &str) -> Result<String, ConvertError> {
        let c = self.c;
        let (h, labels) = (c.hidden, c.labels);
        let pooled = match (c.family, c.classifier_pooling) {
            (Family::ModernBert, ClassifierPooling::Mean) => self.mean_over_tokens(x),
            _ => {
                let zero = self.g.i64("first_token", &[], &[0]);
                self.g.node("Gather", "", &[x, &zero], &[("axis", Attr::Int(1))], None)
            }
        };
        match c.family {
            Family::XlmRoberta => {
                let y = self.linear(&pooled, "classifier.dense", h, h)?;
                let y = self.g.op("Tanh", &[&y]);
                self.linear(&y, "classifier.out_proj", h, labels)
            }
            Family::ModernBert => {
                let y = self.linear_rows(&pooled, "head.dense", h, h, 0..h, c.biases.classifier_dense)?;
                let y = self.activation(&y, c.classifier_activation);
                let y = self.layer_norm(&y, "head.norm")?;
                self.linear(&y, "classifier", h, labels)
            }
            Family::Gte if !self.t.has(&self.t.weight_name(&self.p("pooler.dense"))) => {
                self.linear(&pooled, "classifier", h, labels)
            }
            _ => {
                let dense = self.p("pooler.dense");
                let y = self.linear(&pooled, &dense, h, h)?;
                let y = self.g.op("Tanh", &[&y]);
                self.linear(&y, "classifier", h, labels)
            }
        }
    }

    /// The mean of `x`'s tokens where `attention_mask` is 1: `[batch, hidden]`.
    fn mean_over_tokens(&mut self, x: &str) -> String {
        let m = self.g.node("Cast", "", &[super::ATTENTION_MASK], &[("to", Attr::Int(FLOAT.into()))], None);
        let last = self.g.i64("mean_mask_axis", &[1], &[2]);
        let m3 = self.g.op("Unsqueeze", &[&m, &last]);
        let weighted = self.g.op("Mul", &[x, &m3]);
        let axis = self.g.i64("mean_token_axis", &[1], &[1]);
        let sum = self.g.node("ReduceSum", "", &[&weighted, &axis], &[("keepdims", Attr::Int(0))], None);
        let count = self.g.node("ReduceSum", "", &[&m3, &axis], &[("keepdims", Attr::Int(0))], None);
        self.g.op("Div", &[&sum, &count])
    }
}
