//! Causal decoders without a KV cache, from transformers' `modeling_qwen3.py`,
//! `modeling_qwen2.py`, `modeling_llama.py` and `modeling_mistral.py`: the token embeddings, then
//! per layer `x + attention(rms_norm(x))` and `x + swiglu(rms_norm(x))`, then a final RMSNorm.
//! The families differ only in data ([`Decoder`]): Qwen3's per-head query and key norms,
//! Qwen2's query, key and value biases, Mistral's sliding window.
//!
//! Positions come from the attention mask (`cumsum(mask) - 1`, at least 0), so a left-padded
//! text gets the positions it has alone; a key is attended where it is not padding, not after the
//! query (and within the window); a padded query row attends to nothing and averages the values
//! (finite, never NaN); `causal.rs` writes that attention, and in a fused graph the
//! `GroupQueryAttention` a batch without padding runs instead. Weights are read one at a time:
//! the embedding table in slices of rows, a linear layer whole.

use super::causal::{Causal, Heads};
use super::{ATTENTION_MASK, Gate, INPUT_IDS, Net, Tensors};
use crate::ConvertError;
use crate::config::{Config, Decoder, Head, Positions, RopeScaling};
use crate::graph::{Attr, FLOAT, Graph, INT64};
use crate::weights::Weights;

/// Float32 elements per slice of the embedding table read and written at once.
const SLICE_ELEMENTS: usize = 1 << 22;

/// Writes the decoder into `g`: inputs `input_ids` and `attention_mask`, and its output
/// (`last_hidden_state`, or the yes/no `logits` of [`Head::YesNo`]). `fused` attends through
/// `GroupQueryAttention` where a batch has no padding.
pub(super) fn build(
    g: &mut Graph,
    c: &Config,
    d: &Decoder,
    weights: &Weights,
    fused: bool,
) -> Result<(), ConvertError> {
    let base =
        ["", "model."].into_iter().find(|p| weights.contains(&format!("{p}embed_tokens.weight"))).ok_or_else(|| {
            ConvertError::MissingTensor {
                tensor: "embed_tokens.weight".to_owned(),
                files: weights.files().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
            }
        })?;
    let t = Tensors { weights, base: base.to_owned() };
    let mut net = Net { g, c, names: None, t, fused, lora_low: std::collections::HashMap::new() };
    net.check_decoder_layers()?;
    let ids = net.g.input(INPUT_IDS, INT64, &["batch", "sequence"]);
    net.g.input(ATTENTION_MASK, INT64, &["batch", "sequence"]);
    let mut x = net.token_embeddings(&ids)?;
    let rotary = net.rotary_by_mask(d);
    let causal = net.causal(d);
    for i in 0..c.layers {
        x = net.decoder_layer(&x, d, &rotary, &causal, i)?;
    }
    let norm = net.p("norm.weight");
    let (output, axes): (String, &[&str]) = match (c.head, d.yes_no) {
        (Head::YesNo, Some((yes, no))) => {
            let last = net.last_attended(&x);
            let last = net.rms_norm(&last, &norm, c.hidden)?;
            (net.yes_minus_no(&last, d, yes, no)?, &["batch", "labels"])
        }
        _ => (net.rms_norm(&x, &norm, c.hidden)?, &["batch", "sequence", "hidden"]),
    };
    let name = c.head.output_name();
    net.g.rename_value(&output, name);
    net.g.output(name, FLOAT, axes);
    Ok(())
}

impl Net<'_, '_> {
    /// Refuses weights that hold another number of layers than `num_hidden_layers`.
    fn check_decoder_layers(&self) -> Result<(), ConvertError> {
        let held = |i: usize| {
            let prefix = self.p(&format!("layers.{i}."));
            self.t.weights.names().any(|n| n.starts_with(&prefix))
        };
        let layers = self.c.layers;
        if held(layers - 1) && !held(layers) {
            return Ok(());
        }
        let found = (0..).take_while(|&i| held(i)).count();
        Err(ConvertError::Config {
            file: "config.json".to_owned(),
            why: format!(
                "says num_hidden_layers {layers} but the weights hold {found} layers: the config and the weights do not belong together"
            ),
        })
    }

    /// `embed_tokens` gathered for each token: the table is read and written in slices of rows,
    /// stored as the graph's weight type and widened after the gather.
    fn token_embeddings(&mut self, ids: &str) -> Result<String, ConvertError> {
        let (vocab, h) = (self.c.vocab, self.c.hidden);
        let name = self.p("embed_tokens.weight");
        let rows = (SLICE_ELEMENTS / h).max(1);
        let weights = self.t.weights;
        let slices =
            (0..vocab).step_by(rows).map(|start| weights.f32_rows(&name, &[vocab, h], start..vocab.min(start + rows)));
        let table = self.g.stored_weight(&name, &[vocab, h], vocab * h, slices)?;
        let x = self.g.node("Gather", "", &[&table, ids], &[("axis", Attr::Int(0))], None);
        Ok(self.g.widened(&x))
    }

    /// transformers' RMSNorm over the last axis of `x` (`width` wide), in float32:
    /// `x / sqrt(mean(x²) + eps) * weight`.
    pub(super) fn rms_norm(&mut self, x: &str, weight: &str, width: usize) -> Result<String, ConvertError> {
        let w = self.t.get(weight, &[width])?;
        let w = self.g.f32(weight, &[width], w);
        let two = self.g.constant_f32("rms_two", 2.0);
        let eps = self.g.constant_f32("rms_eps", self.c.eps);
        let squares = self.g.op("Pow", &[x, &two]);
        let mean = self.g.node("ReduceMean", "", &[&squares], &[("axes", Attr::Ints(vec![-1]))], None);
        let variance = self.g.op("Add", &[&mean, &eps]);
        let rms = self.g.op("Sqrt", &[&variance]);
        let normed = self.g.op("Div", &[x, &rms]);
        Ok(self.g.op("Mul", &[&normed, &w]))
    }

    /// Each token's position, `cumsum(attention_mask) - 1` (0 for padding before the text), as
    /// int64 `[batch, sequence]`.
    fn positions_from_mask(&mut self) -> String {
        let axis = self.g.i64("position_cumsum_axis", &[], &[1]);
        let counted = self.g.op("CumSum", &[ATTENTION_MASK, &axis]);
        let one = self.g.i64("position_one", &[], &[1]);
        let zero = self.g.i64("position_zero", &[], &[0]);
        let position = self.g.op("Sub", &[&counted, &one]);
        self.g.node("Max", "", &[&position, &zero], &[], Some("position_ids"))
    }

    /// Rotary cosines and sines `[batch, sequence, 1, head width]` at the positions the mask
    /// gives: angles `position · inverse frequency` in float32, as transformers computes them.
    fn rotary_by_mask(&mut self, d: &Decoder) -> (String, String) {
        let (base, scaling) = match self.c.positions {
            Positions::Rotary { base, scaling } => (base, scaling),
            _ => (10_000.0, RopeScaling::None),
        };
        let half = d.head_dim / 2;
        let inv_freq: Vec<f32> =
            super::positions::inverse_frequencies(base, scaling, d.head_dim).into_iter().map(|f| f as f32).collect();
        let inv_freq = self.g.f32("rope_inverse_frequencies", &[half], inv_freq);
        let positions = self.positions_from_mask();
        let positions = self.g.node("Cast", "", &[&positions], &[("to", Attr::Int(FLOAT.into()))], None);
        let last = self.g.i64("rope_position_axis", &[1], &[2]);
        let positions = self.g.op("Unsqueeze", &[&positions, &last]);
        let angles = self.g.op("Mul", &[&positions, &inv_freq]);
        let angles = self.g.node("Concat", "", &[&angles, &angles], &[("axis", Attr::Int(-1))], None);
        let heads_axis = self.g.i64("rope_heads_axis", &[1], &[2]);
        let [cos, sin] = ["Cos", "Sin"].map(|op| {
            let t = self.g.op(op, &[&angles]);
            self.g.op("Unsqueeze", &[&t, &heads_axis])
        });
        (cos, sin)
    }

    /// `x` `[batch, sequence, heads · head width]` as `[batch, sequence, heads, head width]`.
    fn split_heads(&mut self, x: &str, heads: usize, head_dim: usize) -> String {
        let shape =
            self.g.i64(&format!("heads_shape_{heads}x{head_dim}"), &[4], &[0, 0, heads as i64, head_dim as i64]);
        self.g.op("Reshape", &[x, &shape])
    }

    /// Rotary positions on `x` `[batch, sequence, heads, head width]`: each head's halves
    /// `(a, b)` become `(a cos - b sin, b cos + a sin)`.
    fn rotate_heads(&mut self, x: &str, (cos, sin): &(String, String), head_dim: usize) -> String {
        let axis = self.g.i64("rope_last_axis", &[1], &[3]);
        let zero = self.g.i64("rope_slice_start", &[1], &[0]);
        let mid = self.g.i64("rope_slice_mid", &[1], &[(head_dim / 2) as i64]);
        let end = self.g.i64("rope_slice_end", &[1], &[head_dim as i64]);
        let a = self.g.op("Slice", &[x, &zero, &mid, &axis]);
        let b = self.g.op("Slice", &[x, &mid, &end, &axis]);
        let minus_b = self.g.op("Neg", &[&b]);
        let rotated = self.g.node("Concat", "", &[&minus_b, &a], &[("axis", Attr::Int(3))], None);
        let x_cos = self.g.op("Mul", &[x, cos]);
        let r_sin = self.g.op("Mul", &[&rotated, sin]);
        self.g.op("Add", &[&x_cos, &r_sin])
    }

    /// Layer `i`: attention and the SwiGLU feed-forward, each after an RMSNorm and added back.
    fn decoder_layer(
        &mut self,
        x: &str,
        d: &Decoder,
        rotary: &(String, String),
        causal: &Causal,
        i: usize,
    ) -> Result<String, ConvertError> {
        let c = self.c;
        let (h, heads, kv, dim) = (c.hidden, c.heads, d.kv_heads, d.head_dim);
        let l = self.p(&format!("layers.{i}"));
        let normed = self.rms_norm(x, &format!("{l}.input_layernorm.weight"), h)?;
        let a = format!("{l}.self_attn");
        let qkv_bias = c.biases.qkv;
        let q = self.linear_rows(&normed, &format!("{a}.q_proj"), h, heads * dim, 0..heads * dim, qkv_bias)?;
        let k = self.linear_rows(&normed, &format!("{a}.k_proj"), h, kv * dim, 0..kv * dim, qkv_bias)?;
        let v = self.linear_rows(&normed, &format!("{a}.v_proj"), h, kv * dim, 0..kv * dim, qkv_bias)?;
        let mut q = self.split_heads(&q, heads, dim);
        let mut k = self.split_heads(&k, kv, dim);
        let v = self.split_heads(&v, kv, dim);
        if d.qk_norm {
            q = self.rms_norm(&q, &format!("{a}.q_norm.weight"), dim)?;
            k = self.rms_norm(&k, &format!("{a}.k_norm.weight"), dim)?;
        }
        let q = self.rotate_heads(&q, rotary, dim);
        let k = self.rotate_heads(&k, rotary, dim);
        let context = self.causal_attention([&q, &k, &v], causal, Heads { heads, kv, dim }, d.sliding_window, &l);
        let out = self.linear_rows(&context, &format!("{a}.o_proj"), heads * dim, h, 0..h, c.biases.attention_out)?;
        let x = self.g.op("Add", &[x, &out]);
        let normed = self.rms_norm(&x, &format!("{l}.post_attention_layernorm.weight"), h)?;
        let m = format!("{l}.mlp");
        let gate = Gate::Split { activated: &format!("{m}.gate_proj"), linear: &format!("{m}.up_proj") };
        let f = self.gated_mlp(&normed, gate, &format!("{m}.down_proj"), c.activation)?;
        Ok(self.g.op("Add", &[&x, &f]))
    }

    /// Each row's hidden state at its last attended token `[batch, hidden]` (the highest index
    /// where `attention_mask` is 1: right or left padding alike; index 0 for an empty row).
    fn last_attended(&mut self, x: &str) -> String {
        let r = self.position_range();
        let attended = self.g.op("Mul", &[ATTENTION_MASK, &r]);
        let last = self.g.node(
            "ReduceMax",
            "",
            &[&attended],
            &[("axes", Attr::Ints(vec![1])), ("keepdims", Attr::Int(1))],
            Some("last_token"),
        );
        self.g.node("GatherND", "", &[x, &last], &[("batch_dims", Attr::Int(1))], None)
    }

    /// `x · (w_yes - w_no)` `[batch, 1]`, the rows of `lm_head.weight` (or of the tied embedding
    /// table) for the tokens `yes` and `no`: the difference of their two logits, without the
    /// vocabulary's other rows.
    fn yes_minus_no(&mut self, x: &str, d: &Decoder, yes: usize, no: usize) -> Result<String, ConvertError> {
        let (vocab, h) = (self.c.vocab, self.c.hidden);
        let head = if self.t.has("lm_head.weight") {
            "lm_head.weight".to_owned()
        } else if d.tied {
            self.p("embed_tokens.weight")
        } else {
            return Err(ConvertError::MissingTensor {
                tensor: "lm_head.weight".to_owned(),
                files: format!(
                    "{} (and config.json's tie_word_embeddings is not true): a reranker needs the language-model head",
                    self.t.weights.files().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                ),
            });
        };
        let w_yes = self.t.weights.f32_rows(&head, &[vocab, h], yes..yes + 1)?;
        let w_no = self.t.weights.f32_rows(&head, &[vocab, h], no..no + 1)?;
        let diff: Vec<f32> = w_yes.iter().zip(&w_no).map(|(&y, &n)| (f64::from(y) - f64::from(n)) as f32).collect();
        let diff = self.g.f32("lm_head_yes_minus_no", &[h, 1], diff);
        Ok(self.g.op("MatMul", &[x, &diff]))
    }
}

#[cfg(test)]
mod tests {
    //! The blocks' structure on a small graph; their numbers are checked end to end against an
    //! independent NumPy forward (`scripts/decoders_reference.py`).

    use super::super::causal::{causal_bias, repeat_kv};
    use super::*;
    use crate::config::Config;

    fn qwen3(extra: &str) -> Config {
        let text = format!(
            r#"{{"architectures":["Qwen3ForCausalLM"],"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":4,
            "num_key_value_heads":2,"head_dim":4,"intermediate_size":16,"vocab_size":10{extra}}}"#
        );
        crate::families::parse(&text, "config.json", None).expect("parses")
    }

    fn net_graph(c: &Config, f: impl FnOnce(&mut Net<'_, '_>)) -> Graph {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = safetensors::tensor::serialize(Vec::<(String, safetensors::tensor::TensorView<'_>)>::new(), None)
            .expect("empty safetensors");
        std::fs::write(dir.path().join("model.safetensors"), bytes).expect("write");
        let weights = Weights::open(dir.path()).expect("opens");
        let mut g = Graph::new("test");
        let t = Tensors { weights: &weights, base: String::new() };
        let mut net = Net { g: &mut g, c, names: None, t, fused: false, lora_low: std::collections::HashMap::new() };
        f(&mut net);
        g
    }

    fn ops(g: &Graph) -> Vec<String> {
        g.op_counts().into_iter().flat_map(|(op, n)| std::iter::repeat_n(op, n)).collect()
    }

    fn i64s(g: &Graph, name: &str) -> Vec<i64> {
        let (_, ty, raw) = g.initializer_data(name).expect("initializer");
        assert_eq!(ty, INT64);
        raw.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
    }

    #[test]
    fn positions_are_the_running_count_of_attended_tokens_minus_one_and_never_negative() {
        let c = qwen3("");
        let g = net_graph(&c, |net| {
            net.positions_from_mask();
        });
        assert_eq!(ops(&g), ["CumSum", "Sub", "Max"]);
        assert_eq!(i64s(&g, "position_cumsum_axis"), [1], "counted along the sequence");
        assert_eq!((i64s(&g, "position_one"), i64s(&g, "position_zero")), (vec![1], vec![0]));
        assert!(g.has_value("position_ids"));
    }

    #[test]
    fn the_causal_mask_allows_earlier_attended_keys_in_one_where() {
        let c = qwen3("");
        let g = net_graph(&c, |net| {
            let r = net.position_range();
            causal_bias(net.g, &r, None);
        });
        let written = ops(&g);
        assert_eq!(written.iter().filter(|o| *o == "Where").count(), 1, "one Where: no sum of two minimums (-inf)");
        assert!(written.contains(&"LessOrEqual".to_owned()) && !written.contains(&"Less".to_owned()), "{written:?}");
        assert_eq!(i64s(&g, "causal_mask_axes"), [1, 2], "the padding mask is [batch, 1, 1, keys]");
        let windowed = net_graph(&c, |net| {
            let r = net.position_range();
            causal_bias(net.g, &r, Some(3));
        });
        assert_eq!(i64s(&windowed, "sliding_window"), [3]);
        assert!(ops(&windowed).contains(&"Less".to_owned()));
    }

    #[test]
    fn grouped_query_attention_repeats_each_kv_head_for_consecutive_query_heads() {
        let c = qwen3("");
        let g = net_graph(&c, |net| {
            assert_eq!(repeat_kv(net.g, "k", 4, 4, 4), "k", "no repetition where every query head has its own");
            repeat_kv(net.g, "k", 8, 2, 4);
        });
        assert_eq!(ops(&g), ["Unsqueeze", "Expand", "Reshape"]);
        // [b, s, kv, 1, d] -> [b, s, kv, repeats, d] -> [b, s, kv · repeats, d]: query head h
        // reads kv head h / repeats, as transformers' repeat_kv.
        assert_eq!(i64s(&g, "kv_repeat_axis"), [3]);
        assert_eq!(i64s(&g, "kv_repeat_2x4"), [1, 1, 2, 4, 4]);
        assert_eq!(i64s(&g, "kv_merge_8x4"), [0, 0, 8, 4]);
    }

    #[test]
    fn rms_norm_divides_by_the_root_mean_square_over_the_last_axis() {
        let c = qwen3(r#","rms_norm_eps":1e-5"#);
        let dir = tempfile::tempdir().expect("tempdir");
        let w = [1f32, 2.0, 3.0, 4.0];
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view =
            safetensors::tensor::TensorView::new(safetensors::tensor::Dtype::F32, vec![4], &bytes).expect("view");
        let st = safetensors::tensor::serialize(vec![("n.weight".to_owned(), view)], None).expect("serialize");
        std::fs::write(dir.path().join("model.safetensors"), st).expect("write");
        let weights = Weights::open(dir.path()).expect("opens");
        let mut g = Graph::new("test");
        let t = Tensors { weights: &weights, base: String::new() };
        let mut net =
            Net { g: &mut g, c: &c, names: None, t, fused: false, lora_low: std::collections::HashMap::new() };
        net.rms_norm("x", "n.weight", 4).expect("norm");
        net.rms_norm("y", "n.weight", 4).expect("norm");
        // In order of first appearance, two of each.
        let expected = ["Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul"].map(|op| (op.to_owned(), 2));
        assert_eq!(g.op_counts(), expected);
        let (_, _, eps) = g.initializer_data("rms_eps").expect("eps");
        assert_eq!(eps, 1e-5f32.to_le_bytes(), "rms_norm_eps, written once");
        let (dims, _, raw) = g.initializer_data("n.weight").expect("scale");
        assert_eq!((dims, raw), (vec![4], &bytes[..]));
    }
}
