//! ModernBERT's pre-norm layer (transformers' `modeling_modernbert.py`): `x + attention(norm(x))`
//! then `x + feed_forward(norm(x))`, no norm before the first layer's attention (the embeddings
//! are normalised), global or sliding-window attention with its own rotary base.

use super::{Gate, Masks, Net};
use crate::ConvertError;
use crate::config::FeedForward;

impl Net<'_, '_> {
    /// ModernBERT's layer `i`.
    pub(super) fn pre_norm_layer(&mut self, x: &str, masks: &Masks, i: usize) -> Result<String, ConvertError> {
        let c = self.c;
        let h = c.hidden;
        let l = self.layer_prefix(i);
        let normed = if i == 0 { x.to_owned() } else { self.layer_norm(x, &format!("{l}.attn_norm"))? };
        let qkv = format!("{l}.attn.Wqkv");
        let bias = c.biases.qkv;
        let mut q = self.linear_rows(&normed, &qkv, h, 3 * h, 0..h, bias)?;
        let mut k = self.linear_rows(&normed, &qkv, h, 3 * h, h..2 * h, bias)?;
        let v = self.linear_rows(&normed, &qkv, h, 3 * h, 2 * h..3 * h, bias)?;
        let local = c.local.as_ref().is_some_and(|local| local.layers[i]);
        let (mask, rotary) = match (local, &masks.local, &masks.local_rotary) {
            (true, Some(mask), Some(rotary)) => (mask, Some(rotary)),
            _ => (&masks.global, masks.rotary.as_ref()),
        };
        if let Some((cos, sin)) = rotary {
            q = self.rotate(&q, cos, sin, &l);
            k = self.rotate(&k, cos, sin, &l);
        }
        let context = self.attend(&q, &k, &v, mask, &l);
        let a = self.linear_rows(&context, &format!("{l}.attn.Wo"), h, h, 0..h, c.biases.attention_out)?;
        let x = self.g.op("Add", &[x, &a]);
        let normed = self.layer_norm(&x, &format!("{l}.mlp_norm"))?;
        let (activated_first, activation) = match c.feed_forward {
            FeedForward::Gated { activated_first, activation } => (activated_first, activation),
            FeedForward::Plain => (true, c.activation),
        };
        let f = self.gated_mlp(
            &normed,
            Gate::Fused { weight: &format!("{l}.mlp.Wi"), activated_first },
            &format!("{l}.mlp.Wo"),
            activation,
        )?;
        Ok(self.g.op("Add", &[&x, &f]))
    }
}
