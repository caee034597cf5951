//! The heads on top of the encoder: the masked-language-model head (SPLADE) and the sequence
//! classifier (cross-encoders), with the family's names.

use super::Net;
use crate::ConvertError;
use crate::config::names::{Classifier, HeadActivation};
use crate::config::{Activation, ClassifierPooling};
use crate::graph::{Attr, FLOAT};

impl Net<'_, '_> {
    /// The masked-LM head: dense, activation, norm, then the decoder over the vocabulary (tied to
    /// the word embeddings when the checkpoint has no decoder weight of its own).
    pub(super) fn masked_lm(&mut self, x: &str) -> Result<String, ConvertError> {
        let c = self.c;
        let (h, v) = (c.hidden, c.vocab);
        let head = &self.names().masked_lm;
        let act = match head.activation {
            HeadActivation::Gelu => Activation::Gelu,
            HeadActivation::Hidden => c.activation,
            HeadActivation::Classifier => c.classifier_activation,
        };
        let biases: &[&str] = if c.decoder_bias { head.biases } else { &[] };
        let y = self.linear_rows(x, head.dense, h, h, 0..h, c.biases.classifier_dense)?;
        let y = self.activation(&y, act);
        let y = self.layer_norm(&y, head.norm)?;
        let decoder = head.decoder;
        let table = if self.t.has(&format!("{decoder}.weight")) { decoder.to_owned() } else { self.p(head.tied) };
        let w = self.weight_t(&table, h, v)?;
        let y = self.g.op("MatMul", &[&y, &w]);
        let Some(&first) = biases.first() else { return Ok(y) };
        let bias_name = biases.iter().find(|b| self.t.has(b)).copied().unwrap_or(first);
        let b = self.t.get(bias_name, &[v])?;
        let b = self.g.f32(bias_name, &[v], b);
        Ok(self.g.op("Add", &[&y, &b]))
    }

    /// The classifier on the first token (or the mean, where the config pools so): a pooler
    /// (dense, tanh) and the output layer; or dense, tanh, output layer; or a head (dense,
    /// activation, norm) and the output layer.
    pub(super) fn classifier(&mut self, x: &str) -> Result<String, ConvertError> {
        let c = self.c;
        let (h, labels) = (c.hidden, c.labels);
        let pooled = match c.classifier_pooling {
            ClassifierPooling::Mean => self.mean_over_tokens(x),
            ClassifierPooling::First => {
                let zero = self.g.i64("first_token", &[], &[0]);
                self.g.node("Gather", "", &[x, &zero], &[("axis", Attr::Int(1))], None)
            }
        };
        match self.names().classifier {
            Classifier::DenseTanh { dense, out } => {
                let y = self.linear(&pooled, dense, h, h)?;
                let y = self.g.op("Tanh", &[&y]);
                self.linear(&y, out, h, labels)
            }
            Classifier::Head { dense, norm, out } => {
                let y = self.linear_rows(&pooled, dense, h, h, 0..h, c.biases.classifier_dense)?;
                let y = self.activation(&y, c.classifier_activation);
                let y = self.layer_norm(&y, norm)?;
                self.linear(&y, out, h, labels)
            }
            Classifier::Pooler { pooler, out, optional: true } if !self.t.has(&self.t.weight_name(&self.p(pooler))) => {
                self.linear(&pooled, out, h, labels)
            }
            Classifier::Pooler { pooler, out, .. } => {
                let dense = self.p(pooler);
                let y = self.linear(&pooled, &dense, h, h)?;
                let y = self.g.op("Tanh", &[&y]);
                self.linear(&y, out, h, labels)
            }
        }
    }

    /// The mean of `x`'s tokens where `attention_mask` is 1: `[batch, hidden]`.
    pub(super) fn mean_over_tokens(&mut self, x: &str) -> String {
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
