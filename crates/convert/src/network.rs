//! The encoder as ONNX nodes, from the published definitions of BERT and XLM-RoBERTa
//! (transformers' `modeling_bert.py` / `modeling_xlm_roberta.py`): embeddings, post-norm layers,
//! and the masked-LM or classification head on top.

use crate::ConvertError;
use crate::config::{Activation, Config, Family, Head};
use crate::graph::{Attr, FLOAT, Graph, INT64, MS_DOMAIN};
use crate::weights::Weights;

/// The graph's inputs, as nornir and the exporters name them.
pub(crate) const INPUT_IDS: &str = "input_ids";
pub(crate) const ATTENTION_MASK: &str = "attention_mask";
pub(crate) const TOKEN_TYPE_IDS: &str = "token_type_ids";

/// Reads tensors under one prefix (`bert.`, `roberta.` or none), with LayerNorm's old names.
struct Tensors<'w> {
    weights: &'w Weights,
    base: String,
}

impl Tensors<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ConvertError> {
        self.weights.f32(name, shape)
    }

    /// A `LayerNorm`'s scale and shift: `.weight`/`.bias`, or the older `.gamma`/`.beta`.
    fn norm(&self, prefix: &str, width: usize) -> Result<(Vec<f32>, Vec<f32>), ConvertError> {
        if self.weights.contains(&format!("{prefix}.gamma")) {
            Ok((self.get(&format!("{prefix}.gamma"), &[width])?, self.get(&format!("{prefix}.beta"), &[width])?))
        } else {
            Ok((self.get(&format!("{prefix}.weight"), &[width])?, self.get(&format!("{prefix}.bias"), &[width])?))
        }
    }
}

/// Writes the network into `g`: inputs, nodes, initializers, and its one output. `fused` writes
/// attention as `com.microsoft.MultiHeadAttention` and GELU as `com.microsoft.Gelu`/`FastGelu`.
pub(crate) fn build(g: &mut Graph, c: &Config, weights: &Weights, fused: bool) -> Result<(), ConvertError> {
    let base = ["", "bert.", "roberta.", "xlm_roberta.", "model."]
        .into_iter()
        .find(|p| weights.contains(&format!("{p}embeddings.word_embeddings.weight")))
        .ok_or_else(|| ConvertError::MissingTensor {
            tensor: "embeddings.word_embeddings.weight".to_owned(),
            files: weights.files().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>().join(", "),
        })?;
    let t = Tensors { weights, base: base.to_owned() };
    let mut net = Net { g, c, t, fused };
    let mut x = net.embeddings()?;
    let mask = net.attention_bias();
    for layer in 0..c.layers {
        x = net.layer(&x, &mask, layer)?;
    }
    let (output, axes): (String, &[&str]) = match c.head {
        Head::Encoder => (x, &["batch", "sequence", "hidden"]),
        Head::MaskedLm => (net.masked_lm(&x)?, &["batch", "sequence", "vocabulary"]),
        Head::SequenceClassification => (net.classifier(&x)?, &["batch", "labels"]),
    };
    let name = c.head.output_name();
    net.g.rename_value(&output, name);
    net.g.output(name, FLOAT, axes);
    Ok(())
}

struct Net<'a, 'w> {
    g: &'a mut Graph,
    c: &'a Config,
    t: Tensors<'w>,
    fused: bool,
}

impl Net<'_, '_> {
    fn p(&self, name: &str) -> String {
        format!("{}{name}", self.t.base)
    }

    /// A `Linear` layer's weight `[out, in]`, stored transposed as the `[in, out]` MatMul reads.
    fn weight_t(&mut self, prefix: &str, inputs: usize, outputs: usize) -> Result<String, ConvertError> {
        let w = self.t.get(&format!("{prefix}.weight"), &[outputs, inputs])?;
        let mut wt = vec![0f32; w.len()];
        for o in 0..outputs {
            for i in 0..inputs {
                wt[i * outputs + o] = w[o * inputs + i];
            }
        }
        Ok(self.g.f32(&format!("{prefix}.weight_t"), &[inputs, outputs], wt))
    }

    fn bias(&mut self, prefix: &str, width: usize) -> Result<String, ConvertError> {
        let b = self.t.get(&format!("{prefix}.bias"), &[width])?;
        Ok(self.g.f32(&format!("{prefix}.bias"), &[width], b))
    }

    /// `x Wᵀ + b`.
    fn linear(&mut self, x: &str, prefix: &str, inputs: usize, outputs: usize) -> Result<String, ConvertError> {
        let w = self.weight_t(prefix, inputs, outputs)?;
        let b = self.bias(prefix, outputs)?;
        let y = self.g.op("MatMul", &[x, &w]);
        Ok(self.g.op("Add", &[&y, &b]))
    }

    fn layer_norm(&mut self, x: &str, prefix: &str) -> Result<String, ConvertError> {
        let (scale, shift) = self.t.norm(prefix, self.c.hidden)?;
        let h = self.c.hidden;
        let scale = self.g.f32(&format!("{prefix}.scale"), &[h], scale);
        let shift = self.g.f32(&format!("{prefix}.shift"), &[h], shift);
        Ok(self.g.node(
            "LayerNormalization",
            "",
            &[x, &scale, &shift],
            &[("axis", Attr::Int(-1)), ("epsilon", Attr::Float(self.c.eps))],
            None,
        ))
    }

    fn scalar(&mut self, name: &str, v: f32) -> String {
        self.g.f32(name, &[], vec![v])
    }

    fn activation(&mut self, x: &str, act: Activation) -> String {
        match (act, self.fused) {
            (Activation::Relu, _) => self.g.op("Relu", &[x]),
            (Activation::Gelu, true) => self.g.node("Gelu", MS_DOMAIN, &[x], &[], None),
            (Activation::GeluTanh, true) => self.g.node("FastGelu", MS_DOMAIN, &[x], &[], None),
            (Activation::Gelu, false) => {
                // x * 0.5 * (1 + erf(x / sqrt 2))
                let r = self.scalar("gelu_sqrt2", std::f32::consts::SQRT_2);
                let (half, one) = (self.scalar("gelu_half", 0.5), self.scalar("gelu_one", 1.0));
                let e = self.g.op("Div", &[x, &r]);
                let e = self.g.op("Erf", &[&e]);
                let e = self.g.op("Add", &[&e, &one]);
                let y = self.g.op("Mul", &[x, &e]);
                self.g.op("Mul", &[&y, &half])
            }
            (Activation::GeluTanh, false) => {
                // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
                let (half, one) = (self.scalar("gelu_half", 0.5), self.scalar("gelu_one", 1.0));
                let k = self.scalar("gelu_cubic", 0.044715);
                let s = self.scalar("gelu_sqrt_2_over_pi", (2.0 / std::f32::consts::PI).sqrt());
                let x2 = self.g.op("Mul", &[x, x]);
                let x3 = self.g.op("Mul", &[&x2, x]);
                let x3 = self.g.op("Mul", &[&x3, &k]);
                let inner = self.g.op("Add", &[x, &x3]);
                let inner = self.g.op("Mul", &[&inner, &s]);
                let th = self.g.op("Tanh", &[&inner]);
                let th = self.g.op("Add", &[&th, &one]);
                let y = self.g.op("Mul", &[x, &th]);
                self.g.op("Mul", &[&y, &half])
            }
        }
    }

    /// Word + position + token-type embeddings, then LayerNorm.
    fn embeddings(&mut self) -> Result<String, ConvertError> {
        let c = self.c;
        let (h, e) = (c.hidden, self.p("embeddings"));
        let ids = self.g.input(INPUT_IDS, INT64, &["batch", "sequence"]);
        self.g.input(ATTENTION_MASK, INT64, &["batch", "sequence"]);
        let words = self.t.get(&format!("{e}.word_embeddings.weight"), &[c.vocab, h])?;
        let words = self.g.f32(&format!("{e}.word_embeddings.weight"), &[c.vocab, h], words);
        let word = self.g.node("Gather", "", &[&words, &ids], &[("axis", Attr::Int(0))], None);
        let mut positions = self.t.get(&format!("{e}.position_embeddings.weight"), &[c.max_positions, h])?;
        let types = self.t.get(&format!("{e}.token_type_embeddings.weight"), &[c.type_vocab, h])?;
        let with_types = if c.type_vocab > 1 {
            let table = self.g.f32(&format!("{e}.token_type_embeddings.weight"), &[c.type_vocab, h], types);
            let type_ids = self.g.input(TOKEN_TYPE_IDS, INT64, &["batch", "sequence"]);
            let ty = self.g.node("Gather", "", &[&table, &type_ids], &[("axis", Attr::Int(0))], None);
            Some(ty)
        } else {
            // One token type: its row is a constant, added to every position's row.
            for row in positions.chunks_exact_mut(h) {
                for (p, t) in row.iter_mut().zip(&types) {
                    *p += t;
                }
            }
            None
        };
        let table = self.g.f32(&format!("{e}.position_embeddings.weight"), &[c.max_positions, h], positions);
        let position = match c.family {
            Family::Bert => {
                // Positions 0..sequence: the table's first `sequence` rows.
                let shape = self.g.op("Shape", &[&ids]);
                let (one, two) = (self.g.i64("axis_one", &[1], &[1]), self.g.i64("axis_two", &[1], &[2]));
                let zero = self.g.i64("start_zero", &[1], &[0]);
                let len = self.g.op("Slice", &[&shape, &one, &two]);
                self.g.op("Slice", &[&table, &zero, &len])
            }
            Family::XlmRoberta => {
                // cumsum(ids != pad) * (ids != pad) + pad: pad tokens at the padding index.
                let pad = self.g.i64("pad_token_id", &[], &[c.pad_token_id]);
                let is_pad = self.g.op("Equal", &[&ids, &pad]);
                let not_pad = self.g.op("Not", &[&is_pad]);
                let not_pad = self.g.node("Cast", "", &[&not_pad], &[("to", Attr::Int(INT64.into()))], None);
                let axis = self.g.i64("cumsum_axis", &[], &[1]);
                let count = self.g.op("CumSum", &[&not_pad, &axis]);
                let count = self.g.op("Mul", &[&count, &not_pad]);
                let ids = self.g.op("Add", &[&count, &pad]);
                self.g.node("Gather", "", &[&table, &ids], &[("axis", Attr::Int(0))], None)
            }
        };
        let mut sum = self.g.op("Add", &[&word, &position]);
        if let Some(ty) = with_types {
            sum = self.g.op("Add", &[&sum, &ty]);
        }
        self.layer_norm(&sum, &format!("{e}.LayerNorm"))
    }

    /// The additive mask `[batch, 1, 1, keys]` (0 where attended, the float minimum elsewhere, as
    /// transformers does), or for MultiHeadAttention `[batch, 1, queries, keys]`.
    fn attention_bias(&mut self) -> String {
        let m = self.g.node("Cast", "", &[ATTENTION_MASK], &[("to", Attr::Int(FLOAT.into()))], None);
        let one = self.scalar("mask_one", 1.0);
        let min = self.scalar("mask_min", f32::MIN);
        let off = self.g.op("Sub", &[&one, &m]);
        let bias = self.g.op("Mul", &[&off, &min]);
        let axes = self.g.i64("mask_axes", &[2], &[1, 2]);
        let bias = self.g.op("Unsqueeze", &[&bias, &axes]);
        if !self.fused {
            return bias;
        }
        // MultiHeadAttention takes [batch or 1, heads or 1, queries, keys].
        let shape = self.g.op("Shape", &[ATTENTION_MASK]);
        let (one_i, two_i) = (self.g.i64("mask_slice_one", &[1], &[1]), self.g.i64("mask_slice_two", &[1], &[2]));
        let queries = self.g.op("Slice", &[&shape, &one_i, &two_i]);
        let ones = self.g.i64("mask_ones", &[2], &[1, 1]);
        let target = self.g.node("Concat", "", &[&ones, &queries, &one_i], &[("axis", Attr::Int(0))], None);
        self.g.op("Expand", &[&bias, &target])
    }

    /// One post-norm encoder layer.
    fn layer(&mut self, x: &str, mask: &str, i: usize) -> Result<String, ConvertError> {
        let (h, heads) = (self.c.hidden, self.c.heads);
        let head_dim = h / heads;
        let l = self.p(&format!("encoder.layer.{i}"));
        let scale = 1.0 / (head_dim as f32).sqrt();
        let context = if self.fused {
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
            let split = self.g.i64(&format!("{l}.heads_shape"), &[4], &[0, 0, heads as i64, head_dim as i64]);
            let mut per_head = Vec::new();
            for (which, perm) in [("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])] {
                let y = self.linear(x, &format!("{l}.attention.self.{which}"), h, h)?;
                let y = self.g.op("Reshape", &[&y, &split]);
                per_head.push(self.g.node("Transpose", "", &[&y], &[("perm", Attr::Ints(perm.to_vec()))], None));
            }
            let scores = self.g.op("MatMul", &[&per_head[0], &per_head[1]]);
            let s = self.scalar(&format!("{l}.attention.scale"), scale);
            let scores = self.g.op("Mul", &[&scores, &s]);
            let scores = self.g.op("Add", &[&scores, mask]);
            let probs = self.g.node("Softmax", "", &[&scores], &[("axis", Attr::Int(-1))], None);
            let ctx = self.g.op("MatMul", &[&probs, &per_head[2]]);
            let ctx = self.g.node("Transpose", "", &[&ctx], &[("perm", Attr::Ints(vec![0, 2, 1, 3]))], None);
            let merge = self.g.i64(&format!("{l}.merge_shape"), &[3], &[0, 0, h as i64]);
            self.g.op("Reshape", &[&ctx, &merge])
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

    /// The masked-LM head: dense, activation, LayerNorm, then the decoder over the vocabulary
    /// (tied to the word embeddings when the checkpoint has no decoder weight of its own).
    fn masked_lm(&mut self, x: &str) -> Result<String, ConvertError> {
        let (h, v) = (self.c.hidden, self.c.vocab);
        let (dense, norm, decoder, act, biases) = match self.c.family {
            Family::Bert => (
                "cls.predictions.transform.dense",
                "cls.predictions.transform.LayerNorm",
                "cls.predictions.decoder",
                self.c.activation,
                ["cls.predictions.bias", "cls.predictions.decoder.bias"],
            ),
            Family::XlmRoberta => (
                "lm_head.dense",
                "lm_head.layer_norm",
                "lm_head.decoder",
                Activation::Gelu,
                ["lm_head.bias", "lm_head.decoder.bias"],
            ),
        };
        let y = self.linear(x, dense, h, h)?;
        let y = self.activation(&y, act);
        let y = self.layer_norm(&y, norm)?;
        let own = format!("{decoder}.weight");
        let table = if self.t.weights.contains(&own) { own } else { self.p("embeddings.word_embeddings.weight") };
        let table = table.strip_suffix(".weight").unwrap_or(&table).to_owned();
        let w = self.weight_t(&table, h, v)?;
        let bias_name = biases.iter().find(|b| self.t.weights.contains(b)).copied().unwrap_or(biases[0]);
        let b = self.t.get(bias_name, &[v])?;
        let b = self.g.f32(bias_name, &[v], b);
        let y = self.g.op("MatMul", &[&y, &w]);
        Ok(self.g.op("Add", &[&y, &b]))
    }

    /// The classifier on the first token: BERT's pooler (dense, tanh) and `classifier`, or
    /// XLM-RoBERTa's `classifier.dense`, tanh, `classifier.out_proj`.
    fn classifier(&mut self, x: &str) -> Result<String, ConvertError> {
        let (h, labels) = (self.c.hidden, self.c.labels);
        let zero = self.g.i64("first_token", &[], &[0]);
        let first = self.g.node("Gather", "", &[x, &zero], &[("axis", Attr::Int(1))], None);
        let (dense, out) = match self.c.family {
            Family::Bert => (self.p("pooler.dense"), "classifier".to_owned()),
            Family::XlmRoberta => ("classifier.dense".to_owned(), "classifier.out_proj".to_owned()),
        };
        let y = self.linear(&first, &dense, h, h)?;
        let y = self.g.op("Tanh", &[&y]);
        self.linear(&y, &out, h, labels)
    }
}
