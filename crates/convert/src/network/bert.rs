//! The embeddings of every family and the post-norm layers (`x = norm(x + attention(x))`, then
//! `x = norm(x + feed_forward(x))`): BERT and XLM-RoBERTa as transformers writes them, and
//! JinaBERT v2, jina-embeddings-v3, NomicBERT and GTE with their own names, positions and
//! feed-forward blocks.

use super::{ATTENTION_MASK, Gate, INPUT_IDS, Masks, Net, TASK_ID, TOKEN_TYPE_IDS};
use crate::ConvertError;
use crate::config::{Family, FeedForward, Positions};
use crate::graph::{Attr, INT64, MS_DOMAIN};

impl Net<'_, '_> {
    /// Word (+ token-type) (+ absolute position) embeddings, then the family's norm.
    pub(super) fn embeddings(&mut self) -> Result<String, ConvertError> {
        let c = self.c;
        let h = c.hidden;
        let e = self.p("embeddings");
        let ids = self.g.input(INPUT_IDS, INT64, &["batch", "sequence"]);
        self.g.input(ATTENTION_MASK, INT64, &["batch", "sequence"]);
        if c.lora.is_some() {
            self.g.input(TASK_ID, INT64, &[]);
        }
        let (word_prefix, norm) = match c.family {
            Family::ModernBert => (format!("{e}.tok_embeddings"), format!("{e}.norm")),
            Family::JinaXlmRoberta | Family::NomicBert => (format!("{e}.word_embeddings"), self.p("emb_ln")),
            _ => (format!("{e}.word_embeddings"), format!("{e}.LayerNorm")),
        };
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
            Positions::Absolute => Some(self.absolute_positions(&ids, type_row.take())?),
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
    /// row): positions 0, 1, 2... for BERT, counted past the padding index for XLM-RoBERTa.
    fn absolute_positions(&mut self, ids: &str, type_row: Option<Vec<f32>>) -> Result<String, ConvertError> {
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
        Ok(match c.family {
            Family::XlmRoberta => {
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
            _ => {
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

    /// One BERT / XLM-RoBERTa layer, as transformers writes it.
    pub(super) fn bert_layer(&mut self, x: &str, mask: &str, i: usize) -> Result<String, ConvertError> {
        let (h, heads) = (self.c.hidden, self.c.heads);
        let head_dim = h / heads;
        let l = self.layer_prefix(i);
        let scale = 1.0 / (head_dim as f32).sqrt();
        let context = if self.fused {
            // The three biases go into MultiHeadAttention, which adds them itself.
            let mut projected = Vec::new();
            let mut biases = Vec::new();
            for which in ["query", "key", "value"] {
                let prefix = format!("{l}.attention.self.{which}");
                let w = self.weight_t(&prefix, h, h)?;
                projected.push(self.g.op("MatMul", &[x, &w]));
                biases.extend(self.t.get(&format!("{prefix}.bias"), &[h])?);
            }
            let bias = self.g.f32(&format!("{l}.attention.self.qkv_bias"), &[3 * h], biases);
            self.g.node(
                "MultiHeadAttention",
                MS_DOMAIN,
                &[&projected[0], &projected[1], &projected[2], &bias, "", mask],
                &[("num_heads", Attr::Int(heads as i64)), ("scale", Attr::Float(scale))],
                None,
            )
        } else {
            let q = self.linear(x, &format!("{l}.attention.self.query"), h, h)?;
            let k = self.linear(x, &format!("{l}.attention.self.key"), h, h)?;
            let v = self.linear(x, &format!("{l}.attention.self.value"), h, h)?;
            self.attend(&q, &k, &v, mask, &l)
        };
        let a = self.linear(&context, &format!("{l}.attention.output.dense"), h, h)?;
        let a = self.g.op("Add", &[&a, x]);
        let x = self.layer_norm(&a, &format!("{l}.attention.output.LayerNorm"))?;
        let inter = self.c.intermediate;
        let f = self.linear(&x, &format!("{l}.intermediate.dense"), h, inter)?;
        let f = self.activation(&f, self.c.activation);
        let f = self.linear(&f, &format!("{l}.output.dense"), inter, h)?;
        let f = self.g.op("Add", &[&f, &x]);
        self.layer_norm(&f, &format!("{l}.output.LayerNorm"))
    }

    /// One post-norm layer of JinaBERT v2, jina-embeddings-v3, NomicBERT or GTE.
    pub(super) fn post_norm_layer(&mut self, x: &str, masks: &Masks, i: usize) -> Result<String, ConvertError> {
        let c = self.c;
        let h = c.hidden;
        let l = self.layer_prefix(i);
        let qkv_bias = c.biases.qkv;
        let (mut q, mut k, v) = if c.family == Family::JinaBert {
            (
                self.linear(x, &format!("{l}.attention.self.query"), h, h)?,
                self.linear(x, &format!("{l}.attention.self.key"), h, h)?,
                self.linear(x, &format!("{l}.attention.self.value"), h, h)?,
            )
        } else {
            let fused = match c.family {
                Family::JinaXlmRoberta => format!("{l}.mixer.Wqkv"),
                Family::NomicBert => format!("{l}.attn.Wqkv"),
                _ => format!("{l}.attention.qkv_proj"),
            };
            (
                self.linear_rows(x, &fused, h, 3 * h, 0..h, qkv_bias)?,
                self.linear_rows(x, &fused, h, 3 * h, h..2 * h, qkv_bias)?,
                self.linear_rows(x, &fused, h, 3 * h, 2 * h..3 * h, qkv_bias)?,
            )
        };
        // jina-embeddings-v2-base-code normalises queries and keys over the whole width.
        let code_variant =
            c.family == Family::JinaBert && self.t.has(&format!("{l}.attention.self.layer_norm_q.weight"));
        if code_variant {
            q = self.layer_norm(&q, &format!("{l}.attention.self.layer_norm_q"))?;
            k = self.layer_norm(&k, &format!("{l}.attention.self.layer_norm_k"))?;
        }
        if let Some((cos, sin)) = &masks.rotary {
            q = self.rotate(&q, cos, sin, &l);
            k = self.rotate(&k, cos, sin, &l);
        }
        let context = self.attend(&q, &k, &v, &masks.global, &l);
        let (out, out_norm) = match c.family {
            Family::JinaBert => (format!("{l}.attention.output.dense"), format!("{l}.attention.output.LayerNorm")),
            Family::JinaXlmRoberta => (format!("{l}.mixer.out_proj"), format!("{l}.norm1")),
            Family::NomicBert => (format!("{l}.attn.out_proj"), format!("{l}.norm1")),
            _ => (format!("{l}.attention.o_proj"), format!("{l}.attn_ln")),
        };
        let a = self.linear_rows(&context, &out, h, h, 0..h, c.biases.attention_out)?;
        let a = self.g.op("Add", &[&a, x]);
        let mut y = self.layer_norm(&a, &out_norm)?;
        if code_variant {
            // Its layer adds the layer's input once more and normalises again before the MLP.
            let again = self.g.op("Add", &[&y, x]);
            y = self.layer_norm(&again, &format!("{l}.layer_norm_1"))?;
        }
        let (f, mlp_norm) = match (c.family, c.feed_forward) {
            (Family::JinaBert, FeedForward::Gated { activation, .. }) if code_variant => (
                self.gated_mlp(
                    &y,
                    Gate::Fused { weight: &format!("{l}.mlp.up_gated_layer"), activated_first: false },
                    &format!("{l}.mlp.down_layer"),
                    activation,
                )?,
                format!("{l}.layer_norm_2"),
            ),
            (Family::JinaBert, FeedForward::Gated { activated_first, activation }) => (
                self.gated_mlp(
                    &y,
                    Gate::Fused { weight: &format!("{l}.mlp.gated_layers"), activated_first },
                    &format!("{l}.mlp.wo"),
                    activation,
                )?,
                format!("{l}.mlp.layernorm"),
            ),
            (Family::NomicBert, FeedForward::Gated { activation, .. }) => (
                self.gated_mlp(
                    &y,
                    Gate::Split { activated: &format!("{l}.mlp.fc12"), linear: &format!("{l}.mlp.fc11") },
                    &format!("{l}.mlp.fc2"),
                    activation,
                )?,
                format!("{l}.norm2"),
            ),
            (Family::Gte, FeedForward::Gated { activated_first, activation }) => (
                self.gated_mlp(
                    &y,
                    Gate::Fused { weight: &format!("{l}.mlp.up_gate_proj"), activated_first },
                    &format!("{l}.mlp.down_proj"),
                    activation,
                )?,
                format!("{l}.mlp_ln"),
            ),
            _ => {
                // fc1, activation, fc2 (jina-embeddings-v3, NomicBERT with GELU).
                let inter = c.intermediate;
                let f = self.linear_rows(&y, &format!("{l}.mlp.fc1"), h, inter, 0..inter, c.biases.mlp_in)?;
                let f = self.activation(&f, c.activation);
                (self.linear_rows(&f, &format!("{l}.mlp.fc2"), inter, h, 0..h, c.biases.mlp_out)?, format!("{l}.norm2"))
            }
        };
        let f = self.g.op("Add", &[&f, &y]);
        self.layer_norm(&f, &mlp_norm)
    }
}
