//! The embeddings of every encoder family and the post-norm layers (`x = norm(x + attention(x))`,
//! then `x = norm(x + feed_forward(x))`), as transformers writes BERT's and as the other families
//! write theirs: the names, positions and feed-forward blocks come from the family's description.

use super::{ATTENTION_MASK, Bias, Gate, INPUT_IDS, Masks, Net, TASK_ID, TOKEN_TYPE_IDS};
use crate::ConvertError;
use crate::config::names::{Gated, Mlp, Qkv};
use crate::config::{FeedForward, Positions};
use crate::graph::{Attr, INT64};

impl Net<'_, '_> {
    /// Word (+ token-type) (+ absolute position) embeddings, then the family's norm.
    pub(super) fn embeddings(&mut self) -> Result<String, ConvertError> {
        let c = self.c;
        let h = c.hidden;
        let e = self.p("embeddings");
        let ids = self.g.input(INPUT_IDS, INT64, &["batch", "sequence"]);
        self.g.input(ATTENTION_MASK, INT64, &["batch", "sequence"]);
        match c.lora.as_ref().map(|lora| lora.fixed_task) {
            Some(None) => _ = self.g.input(TASK_ID, INT64, &[]),
            Some(Some(task)) => _ = self.g.i64(TASK_ID, &[], &[task as i64]),
            None => {}
        }
        let names = self.names();
        let (word_prefix, norm) = (self.p(names.word_embeddings), self.p(names.embeddings_norm));
        let word_name = self.t.weight_name(&word_prefix);
        let words = self.t.get(&word_name, &[c.vocab, h])?;
        let words = self.g.f32(&word_name, &[c.vocab, h], words);
        let mut sum = self.g.node("Gather", "", &[&words, &ids], &[("axis", Attr::Int(0))], None);
        if let Some(update) = self.embedding_lora(&word_prefix, c.vocab, &ids)? {
            sum = self.g.op("Add", &[&sum, &update]);
        }
        // Token types: a table read per token, or one row added to every token.
        let type_prefix = format!("{e}.token_type_embeddings");
        let type_name = self.t.weight_name(&type_prefix);
        let mut type_row = None;
        if c.type_vocab > 1 {
            let types = self.t.get(&type_name, &[c.type_vocab, h])?;
            let table = self.g.f32(&type_name, &[c.type_vocab, h], types);
            let type_ids = self.g.input(TOKEN_TYPE_IDS, INT64, &["batch", "sequence"]);
            let ty = self.g.node("Gather", "", &[&table, &type_ids], &[("axis", Attr::Int(0))], None);
            sum = self.g.op("Add", &[&sum, &ty]);
        } else if c.type_vocab == 1 && self.t.has(&type_name) {
            let row = self.t.get(&type_name, &[1, h])?;
            match self.type_row_per_task(&type_prefix, &row)? {
                Some(per_task) => sum = self.g.op("Add", &[&sum, &per_task]),
                None => type_row = Some(row),
            }
        }
        let position = match c.positions {
            Positions::Absolute { from_padding } => {
                Some(self.absolute_positions(&ids, type_row.take(), from_padding)?)
            }
            _ => None,
        };
        if let Some(row) = type_row {
            let row = self.g.f32(&type_name, &[h], row);
            sum = self.g.op("Add", &[&sum, &row]);
        }
        if let Some(position) = position {
            sum = self.g.op("Add", &[&sum, &position]);
        }
        self.layer_norm(&sum, &norm)
    }

    /// The position table's rows for each token (with the one token type's row added to every
    /// row): positions 0, 1, 2..., or where `from_padding` counted past the padding index.
    fn absolute_positions(
        &mut self,
        ids: &str,
        type_row: Option<Vec<f32>>,
        from_padding: bool,
    ) -> Result<String, ConvertError> {
        let c = self.c;
        let (h, e) = (c.hidden, self.p("embeddings"));
        let mut positions = self.t.get(&format!("{e}.position_embeddings.weight"), &[c.max_positions, h])?;
        if let Some(types) = type_row {
            for row in positions.chunks_exact_mut(h) {
                for (p, t) in row.iter_mut().zip(&types) {
                    *p += t;
                }
            }
        }
        let table = self.g.f32(&format!("{e}.position_embeddings.weight"), &[c.max_positions, h], positions);
        Ok(match from_padding {
            true => {
                // cumsum(ids != pad) * (ids != pad) + pad: pad tokens at the padding index.
                let pad = self.g.i64("pad_token_id", &[], &[c.pad_token_id]);
                let is_pad = self.g.op("Equal", &[ids, &pad]);
                let not_pad = self.g.op("Not", &[&is_pad]);
                let not_pad = self.g.node("Cast", "", &[&not_pad], &[("to", Attr::Int(INT64.into()))], None);
                let axis = self.g.i64("cumsum_axis", &[], &[1]);
                let count = self.g.op("CumSum", &[&not_pad, &axis]);
                let count = self.g.op("Mul", &[&count, &not_pad]);
                let ids = self.g.op("Add", &[&count, &pad]);
                self.g.node("Gather", "", &[&table, &ids], &[("axis", Attr::Int(0))], None)
            }
            false => {
                // Positions 0..sequence: the table's first `sequence` rows.
                let shape = self.g.op("Shape", &[ids]);
                let (one, two) = (self.g.i64("axis_one", &[1], &[1]), self.g.i64("axis_two", &[1], &[2]));
                let zero = self.g.i64("start_zero", &[1], &[0]);
                let len = self.g.op("Slice", &[&shape, &one, &two]);
                self.g.op("Slice", &[&table, &zero, &len])
            }
        })
    }

    /// An embedding's LoRA update for `ids`: `A[task][ids] B[task] · alpha / rank` (`lora_A`
    /// `[tasks, rows, rank]`, `lora_B` `[tasks, rank, width]`), where it has an adapter.
    fn embedding_lora(&mut self, prefix: &str, rows: usize, ids: &str) -> Result<Option<String>, ConvertError> {
        let h = self.c.hidden;
        let Some(ad) = self.adapters(prefix, |tasks, rank| ([tasks, rows, rank], [tasks, rank, h]))? else {
            return Ok(None);
        };
        let (tasks, rank, scaling) = (ad.tasks, ad.rank, ad.scaling as f32);
        let b: Vec<f32> = ad.b.into_iter().map(|v| v * scaling).collect();
        let a = self.g.f32(&ad.a_name, &[tasks, rows, rank], ad.a);
        let b = self.g.f32(&format!("{prefix}.lora_b_scaled"), &[tasks, rank, h], b);
        let a_task = self.g.node("Gather", "", &[&a, TASK_ID], &[("axis", Attr::Int(0))], None);
        let b_task = self.g.node("Gather", "", &[&b, TASK_ID], &[("axis", Attr::Int(0))], None);
        let low = self.g.node("Gather", "", &[&a_task, ids], &[("axis", Attr::Int(0))], None);
        Ok(Some(self.g.op("MatMul", &[&low, &b_task])))
    }

    /// The one token type's row with each task's LoRA update: a `[tasks, hidden]` table the task
    /// chooses from; `None` where the embedding has no adapter.
    fn type_row_per_task(&mut self, prefix: &str, row: &[f32]) -> Result<Option<String>, ConvertError> {
        let h = self.c.hidden;
        let Some(ad) = self.adapters(prefix, |tasks, rank| ([tasks, 1, rank], [tasks, rank, h]))? else {
            return Ok(None);
        };
        let (tasks, rank) = (ad.tasks, ad.rank);
        let mut table = Vec::with_capacity(tasks * h);
        for t in 0..tasks {
            for (j, &value) in row.iter().enumerate() {
                let update: f64 =
                    (0..rank).map(|r| f64::from(ad.a[t * rank + r]) * f64::from(ad.b[(t * rank + r) * h + j])).sum();
                table.push((f64::from(value) + update * ad.scaling) as f32);
            }
        }
        let table = self.g.f32(&format!("{prefix}.per_task"), &[tasks, h], table);
        Ok(Some(self.g.node("Gather", "", &[&table, TASK_ID], &[("axis", Attr::Int(0))], None)))
    }

    /// Post-norm layer `i`, with the query and key norms where the family has them and the
    /// layer holds them.
    pub(super) fn post_norm_layer(&mut self, x: &str, masks: &Masks, i: usize) -> Result<String, ConvertError> {
        let c = self.c;
        let h = c.hidden;
        let names = self.names();
        let l = self.layer_prefix(i);
        let context = match &names.attention.qkv {
            Qkv::Separate { query, key, value } if self.fused && c.qkv_bias_in_attention => {
                self.attention_adding_biases(x, [query, key, value], &masks.global, &l)?
            }
            _ => {
                let (mut q, mut k, v) = self.project_qkv(x, &l)?;
                let qk_norms = names.qk_norms.as_ref().filter(|n| self.t.has(&format!("{l}.{}.weight", n.q)));
                if let Some(norms) = qk_norms {
                    q = self.layer_norm(&q, &format!("{l}.{}", norms.q))?;
                    k = self.layer_norm(&k, &format!("{l}.{}", norms.k))?;
                }
                if let Some((cos, sin)) = &masks.rotary {
                    q = self.rotate(&q, cos, sin, &l);
                    k = self.rotate(&k, cos, sin, &l);
                }
                self.attend(&q, &k, &v, &masks.global, &l)
            }
        };
        let attention = &names.attention;
        let a = self.linear_rows(&context, &format!("{l}.{}", attention.out), h, h, 0..h, c.biases.attention_out)?;
        let a = self.g.op("Add", &[&a, x]);
        let mut y = self.layer_norm(&a, &format!("{l}.{}", attention.norm))?;
        let mut mlp = &names.mlp;
        if let Some(norms) = names.qk_norms.as_ref().filter(|n| self.t.has(&format!("{l}.{}.weight", n.q))) {
            // Its layer adds the layer's input once more and normalises again before the MLP.
            let again = self.g.op("Add", &[&y, x]);
            y = self.layer_norm(&again, &format!("{l}.{}", norms.again))?;
            mlp = &norms.mlp;
        }
        let f = self.feed_forward(&y, &l, mlp)?;
        let f = self.g.op("Add", &[&f, &y]);
        self.layer_norm(&f, &format!("{l}.{}", mlp.norm))
    }

    /// The query, key and value projections of layer `l`, each with its bias where the family has
    /// them.
    pub(super) fn project_qkv(&mut self, x: &str, l: &str) -> Result<(String, String, String), ConvertError> {
        let (h, bias) = (self.c.hidden, self.c.biases.qkv);
        Ok(match &self.names().attention.qkv {
            Qkv::Separate { query, key, value } => (
                self.linear_rows(x, &format!("{l}.{query}"), h, h, 0..h, bias)?,
                self.linear_rows(x, &format!("{l}.{key}"), h, h, 0..h, bias)?,
                self.linear_rows(x, &format!("{l}.{value}"), h, h, 0..h, bias)?,
            ),
            Qkv::Fused(weight) => {
                let fused = format!("{l}.{weight}");
                (
                    self.linear_rows(x, &fused, h, 3 * h, 0..h, bias)?,
                    self.linear_rows(x, &fused, h, 3 * h, h..2 * h, bias)?,
                    self.linear_rows(x, &fused, h, 3 * h, 2 * h..3 * h, bias)?,
                )
            }
        })
    }

    /// Attention as `MultiHeadAttention` on the projections without their biases, which the
    /// operator adds itself (`{parent}.qkv_bias`, where the query projection is `{parent}.query`).
    fn attention_adding_biases(
        &mut self,
        x: &str,
        projections: [&str; 3],
        bias: &Bias,
        l: &str,
    ) -> Result<String, ConvertError> {
        let h = self.c.hidden;
        let mut projected = Vec::new();
        let mut biases = Vec::new();
        for which in projections {
            let prefix = format!("{l}.{which}");
            let w = self.weight_t(&prefix, h, h)?;
            projected.push(self.g.op("MatMul", &[x, &w]));
            biases.extend(self.t.get(&format!("{prefix}.bias"), &[h])?);
        }
        let parent = projections[0].rsplit_once('.').map_or("", |(parent, _)| parent);
        let qkv_bias = self.g.f32(&format!("{l}.{parent}.qkv_bias"), &[3 * h], biases);
        Ok(self.multi_head_attention([&projected[0], &projected[1], &projected[2], &qkv_bias], bias, l))
    }

    /// Layer `l`'s feed-forward as the config says: gated (`mlp.gated`) or plain (`mlp.plain`,
    /// the config's activation), then `mlp.down`.
    pub(super) fn feed_forward(&mut self, x: &str, l: &str, mlp: &Mlp) -> Result<String, ConvertError> {
        let c = self.c;
        let (h, inter) = (c.hidden, c.intermediate);
        let down = format!("{l}.{}", mlp.down);
        match c.feed_forward {
            FeedForward::Gated { activated_first, activation } => match mlp.gated {
                Gated::Fused { weight, activated_first: fixed } => {
                    let weight = format!("{l}.{weight}");
                    let gate = Gate::Fused { weight: &weight, activated_first: fixed.unwrap_or(activated_first) };
                    self.gated_mlp(x, gate, &down, activation)
                }
                Gated::Split { activated, linear } => {
                    let (activated, linear) = (format!("{l}.{activated}"), format!("{l}.{linear}"));
                    self.gated_mlp(x, Gate::Split { activated: &activated, linear: &linear }, &down, activation)
                }
            },
            FeedForward::Plain => {
                let plain = format!("{l}.{}", mlp.plain);
                let f = self.linear_rows(x, &plain, h, inter, 0..inter, c.biases.mlp_in)?;
                let f = self.activation(&f, c.activation);
                self.linear_rows(&f, &down, inter, h, 0..h, c.biases.mlp_out)
            }
        }
    }
}
