//! The pre-norm layer (transformers' `modeling_modernbert.py`, `modeling_clip.py`,
//! `modeling_siglip.py`): `x + attention(norm(x))` then `x + feed_forward(norm(x))`, global or
//! sliding-window attention with its own rotary base. The first layer's attention norm is left
//! out where the checkpoint has none (ModernBERT's embeddings are normalised already).

use super::{Masks, Net};
use crate::ConvertError;

impl Net<'_, '_> {
    /// Pre-norm layer `i`.
    pub(super) fn pre_norm_layer(&mut self, x: &str, masks: &Masks, i: usize) -> Result<String, ConvertError> {
        let c = self.c;
        let h = c.hidden;
        let names = self.names();
        let l = self.layer_prefix(i);
        let norm = format!("{l}.{}", names.attention.norm);
        let has_norm = self.t.has(&format!("{norm}.weight")) || self.t.has(&format!("{norm}.gamma"));
        let normed = if i == 0 && !has_norm { x.to_owned() } else { self.layer_norm(x, &norm)? };
        let (mut q, mut k, v) = self.project_qkv(&normed, &l)?;
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
        let out = format!("{l}.{}", names.attention.out);
        let a = self.linear_rows(&context, &out, h, h, 0..h, c.biases.attention_out)?;
        let x = self.g.op("Add", &[x, &a]);
        let normed = self.layer_norm(&x, &format!("{l}.{}", names.mlp.norm))?;
        let f = self.feed_forward(&normed, &l, &names.mlp)?;
        Ok(self.g.op("Add", &[&x, &f]))
    }
}
