#!/usr/bin/env python3
"""An independent check of `nornir vector convert` for five encoder families that are not plain
BERT: NumPy float64 implementations written only from each family's published modeling code, run
on small random checkpoints laid out as the published checkpoints are (config.json keys and tensor
names), against ONNX Runtime running the converted model.onnx.

  families_reference.py synthetic NORNIR WORK  every family and variant; float32, float16 and
                                               bfloat16 safetensors and one pytorch_model.bin per
                                               family; fused and plain (--no-fuse) graphs; a padded
                                               batch of 600, 37 and 5 tokens and one of 12, 7, 3
  families_reference.py broken NORNIR WORK     the same comparison against a reference that is
                                               wrong in one way at a time: each must differ
  families_reference.py batch NORNIR WORK      batch invariance of the converted graphs: a short
                                               text alone and beside 600+ token texts
  families_reference.py surfaces NORNIR WORK [TOKENIZER]
                                               each family's converted folder on every surface:
                                               `nornir vector embed` (mean-pooled, normalised;
                                               jina-v3 under two tasks), `serve`'s /v1/embeddings,
                                               `rerank` (the classifier heads, one label) and the
                                               SPLADE sparse embed (masked-LM heads), against the
                                               reference on the ids of a real BERT tokenizer
                                               (TOKENIZER, default: the cached all-MiniLM-L6-v2's)
  families_reference.py selftest               the reference against itself (no nornir): ALiBi
                                               and rotary against brute force, padded rows
                                               against the same text alone, the shared encoder
                                               path against convert_reference.py's BERT

Prints one JSON object; exits 1 when not ok. Token-level outputs (hidden states, masked-LM
logits) are compared at the positions the attention mask keeps: what a padding position holds is
not defined the same way by the published implementations (some zero it, some compute it).
Both sides use the weights as the file stores them (rounded to its dtype); the .bin case of each
family (BIN_CASE) is float32. Random linear weights have std 1/sqrt(fan-in): with larger ones the
gated nets amplify float32 rounding to ~1e-4 and the check would measure rounding, not meaning.
The graph's output is `logits` or `last_hidden_state` if it has one, else its first output.

What was read, family by family (never copied; the NumPy below is written from the reading):

JinaBERT v2 (jina-embeddings-v2-small/base-en, -base-code)
  Read: the JinaBERT modeling_bert.py of the qk-post-norm ("code") implementation, a copy indexed
  from public GitHub (the 55,094-character file, `class JinaBertGLUMLP` with `up_gated_layer`);
  the original jinaai/jina-bert-implementation is not on GitHub, so its GLU MLP (`gated_layers`,
  `wo`, `layernorm`) was read in the MosaicBERT `BertGatedLinearUnitMLP` it derives from (same
  names, same forward) and cross-read in vLLM's jina_bert port (GeluAndMul on `gated_layers`).
  Config: model_type "bert", architectures JinaBertModel | JinaBertForMaskedLM, auto_map to
    jinaai/jina-bert-implementation (or jinaai/jina-bert-v2-qk-post-norm for the code variant),
    hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, hidden_act "gelu",
    max_position_embeddings, type_vocab_size 2, layer_norm_eps, pad_token_id 0,
    position_embedding_type "alibi", feed_forward_type "geglu" | "reglu", emb_pooler "mean".
  Tensors (no prefix, as jina-embeddings-v2 ships them even under JinaBertForMaskedLM):
    embeddings.{word_embeddings,token_type_embeddings}.weight, embeddings.LayerNorm.{weight,bias},
    encoder.layer.N.attention.self.{query,key,value}.{weight,bias},
    encoder.layer.N.attention.output.dense.{weight,bias}, ...attention.output.LayerNorm.*,
    base:  encoder.layer.N.mlp.gated_layers.weight [2I,H] (no bias), mlp.wo.{weight,bias},
           mlp.layernorm.{weight,bias}
    code:  encoder.layer.N.attention.self.layer_norm_q.*, layer_norm_k.*, layer_norm_1.*,
           layer_norm_2.*, mlp.up_gated_layer.weight [2I,H], mlp.down_layer.{weight,bias}
    pooler.dense.{weight,bias}; the masked-LM head variant: bert. prefix and
    cls.predictions.transform.dense.*, cls.predictions.transform.LayerNorm.*,
    cls.predictions.bias, decoder tied to the word embeddings.
  Choices: no position embeddings; ALiBi bias -slope_h * |i - j| added to the scaled scores (and
    to the padding mask); slopes: n a power of two -> start = 2^(-8/n), slope_k = start^(k+1);
    otherwise the power-of-two slopes of c = 2^floor(log2 n) followed by the even-indexed
    ([0::2]) slopes of 2c, first n - c of them. Base GLU: act(first half) * second half
    (act = exact GELU for geglu, ReLU for reglu), then wo, then layernorm(+ residual). Code
    variant: the query and key are LayerNorm-ed over the whole hidden size (before the head
    split); attention output = LayerNorm(dense(ctx) + x) as BERT, then layer_norm_1(x + that)
    (the residual is added a second time, as the published code does), GLU = first half *
    act(second half), down_layer, layer_norm_2(+ residual). The code variant has no config key:
    the published class always builds layer_norm_q/k; it is named by auto_map / _name_or_path and
    by its tensor names. With the head, JinaBertForMaskedLM returns BERT's MLM logits; without
    head tensors (as shipped) the reference returns last_hidden_state.

jina-embeddings-v3 (XLMRobertaLoRA)
  Read: jina's modeling_lora.py (`LoRAParametrization`, `XLMRobertaLoRA`) and embedding.py
  (`XLMRobertaEmbeddings` with adapter_mask) from the xlm-roberta-flash-implementation, copies
  indexed from public GitHub; for the attention layout (Wqkv viewed as (3, heads, head_dim),
  rotate-half rotary over the whole head, positions 0..L-1) transformers'
  models/jina_embeddings_v3/modular_jina_embeddings_v3.py, its port.
  Config: architectures ["XLMRobertaModel"], model_type "xlm-roberta", auto_map to
    jinaai/xlm-roberta-flash-implementation (AutoModel -> modeling_lora.XLMRobertaLoRA),
    position_embedding_type "rotary", rotary_emb_base, max_position_embeddings 8194,
    type_vocab_size 1, pad_token_id 1, layer_norm_eps 1e-5, hidden_act "gelu", lora_adaptations
    [retrieval.query, retrieval.passage, separation, classification, text-matching], lora_rank,
    lora_alpha, lora_dropout_p, lora_main_params_trainable, load_trained_adapters,
    task_instructions, use_flash_attn.
  Tensors (prefix roberta.): every nn.Linear and nn.Embedding is parametrized:
    X.parametrizations.weight.original, X.parametrizations.weight.0.lora_A,
    X.parametrizations.weight.0.lora_B, X.bias (linears), for X in embeddings.word_embeddings,
    embeddings.token_type_embeddings, encoder.layers.N.mixer.Wqkv, encoder.layers.N.mixer.out_proj,
    encoder.layers.N.mlp.fc1, encoder.layers.N.mlp.fc2, pooler.dense; plus emb_ln.{weight,bias},
    encoder.layers.N.norm1.*, encoder.layers.N.norm2.*.
    Linear: lora_A [tasks, rank, in], lora_B [tasks, out, rank], W_t = W + (B[t] @ A[t]) * s.
    Embedding: lora_A [tasks, vocab, rank], lora_B [tasks, rank, dim], E_t = E + (A[t] @ B[t]) * s.
    s = lora_alpha / lora_rank.
  Choices: the adapter index is the position of the task name in config.lora_adaptations (the
    published `_adaptation_map`); the graph's int64 input `task_id` is fed that index, shape [1]
    (a scalar if the graph declares rank 0). No position embeddings; token-type embeddings (with
    their adapter) are added; emb_ln; post-norm blocks: norm1(x + out_proj(attn)),
    norm2(h + fc2(gelu(fc1(h)))) with exact GELU; rotary base rotary_emb_base, not interleaved.

NomicBERT (nomic-embed-text-v1/v1.5, snowflake-arctic-embed-m-long)
  Read: modeling_hf_nomic_bert.py of nomic-ai/nomic-bert-2048 (copy indexed from public GitHub:
  NomicBertEmbeddings, NomciBertGatedMLP, NomicBertRotaryEmbedding,
  NomicBertDynamicNTKRotaryEmbedding, NomicBertAttention, NomicBertBlock, NomicBertModel).
  Config: architectures ["NomicBertModel"], model_type "nomic_bert", auto_map to
    nomic-ai/nomic-bert-2048, n_embd, n_head, n_layer, n_inner, n_positions, max_trained_positions,
    layer_norm_epsilon, activation_function "swiglu", qkv_proj_bias, mlp_fc1_bias, mlp_fc2_bias,
    prenorm false, rotary_emb_base, rotary_emb_fraction 1.0, rotary_emb_interleaved false,
    rotary_emb_scale_base null, rotary_scaling_factor (null | 2.0), type_vocab_size 2,
    pad_vocab_size_multiple.
  Tensors (no prefix): embeddings.word_embeddings.weight, embeddings.token_type_embeddings.weight,
    emb_ln.{weight,bias}, encoder.layers.N.attn.Wqkv.weight (+bias if qkv_proj_bias),
    encoder.layers.N.attn.out_proj.weight (+bias if qkv_proj_bias: the published code gives
    out_proj the qkv bias flag), encoder.layers.N.mlp.fc11/fc12 (+bias if mlp_fc1_bias),
    encoder.layers.N.mlp.fc2 (+bias if mlp_fc2_bias), encoder.layers.N.norm1.*, norm2.*.
  Choices: Wqkv rows are (three, heads, head_dim); swiglu = fc11(x) * silu(fc12(x)); post-norm
    (prenorm false); the gated MLP's width is n_inner rounded up to a multiple of 256 (the
    synthetic n_inner is already one). rotary_scaling_factor selects dynamic NTK: when the
    padded sequence length L of the call exceeds max_trained_positions (NOT n_positions),
    base' = base * (f * L / max_trained_positions - (f - 1)) ** (dim / (dim - 2)); for L at or
    under it the plain base is used. The published module also keeps that scaled inv_freq for
    later calls (it is state); the reference models a freshly loaded model per call. Because the
    test's long batch is only 600 tokens, the scaled synthetic variant sets
    max_trained_positions 512 so that the rule is exercised (real configs say 2048). The base
    thus depends on the padded batch length: that variant is not batch invariant by design.

GTE (gte-base-en-v1.5, gte-multilingual-base, gte-multilingual-reranker-base)
  Read: Alibaba-NLP/new-impl modeling.py (copy indexed from public GitHub: NewEmbeddings,
  RotaryEmbedding, NTKScalingRotaryEmbedding, NewAttention, NewGatedMLP, NewLayer, NewModel,
  NewPooler, NewForSequenceClassification).
  Config: architectures NewModel | NewForSequenceClassification, model_type "new", auto_map to
    Alibaba-NLP/new-impl, hidden_size, intermediate_size, num_attention_heads, num_hidden_layers,
    hidden_act "gelu", layer_norm_eps, layer_norm_type "layer_norm", logn_attention_scale false,
    logn_attention_clip1 false, max_position_embeddings, pack_qkv true,
    position_embedding_type "rope", rope_theta, rope_scaling {"type": "ntk", "factor": f},
    type_vocab_size (0 for base-en: no token-type table), unpad_inputs false,
    use_memory_efficient_attention false, pad_token_id, id2label (reranker: one label).
  Tensors (NewModel: no prefix; NewForSequenceClassification: new.): embeddings.word_embeddings,
    embeddings.token_type_embeddings (when type_vocab_size > 0), embeddings.LayerNorm,
    encoder.layer.N.attention.qkv_proj.{weight,bias}, encoder.layer.N.attention.o_proj.*,
    encoder.layer.N.attn_ln.*, encoder.layer.N.mlp.up_gate_proj.weight (no bias),
    encoder.layer.N.mlp.down_proj.{weight,bias}, encoder.layer.N.mlp_ln.*; reranker:
    new.pooler.dense.*, classifier.*.
  Choices: qkv_proj output split in q | k | v blocks of hidden size; GLU = first half ("up") *
    gelu(second half, "gate"); post-norm. NTK ("ntk", no mixed_b): the constructor rebuilds the
    table for max_position_embeddings * factor > max_position_embeddings, so the scaling is
    static, whatever the input length: inv_freq_i = (rope_theta * f) ** (-2i/d) / f ** (2/d).
    The classifier is BERT's: classifier(tanh(pooler.dense(h[:, 0]))).

ModernBERT
  Read: transformers src/transformers/models/modernbert/modeling_modernbert.py and
  configuration_modernbert.py (huggingface/transformers).
  Config: architectures ModernBertModel | ModernBertForMaskedLM | ModernBertForSequenceClassification,
    model_type "modernbert", hidden_size, intermediate_size, num_hidden_layers,
    num_attention_heads, hidden_activation "gelu", max_position_embeddings, norm_eps, norm_bias,
    attention_bias, mlp_bias, global_attn_every_n_layers, local_attention, global_rope_theta,
    local_rope_theta, classifier_pooling "cls" | "mean", classifier_activation, classifier_bias,
    decoder_bias, tie_word_embeddings, pad_token_id (and bos/eos/cls/sep).
  Tensors (ModernBertModel: no prefix; the heads: model.): embeddings.tok_embeddings.weight,
    embeddings.norm.weight (+bias), layers.N.attn_norm.* (N > 0: layer 0's is Identity),
    layers.N.attn.Wqkv.weight (+bias), layers.N.attn.Wo.*, layers.N.mlp_norm.*, layers.N.mlp.Wi.*,
    layers.N.mlp.Wo.*, final_norm.*; head.dense.weight (+bias if classifier_bias),
    head.norm.weight (+bias if norm_bias); decoder.weight (absent when tied to
    model.embeddings.tok_embeddings.weight), decoder.bias (if decoder_bias); classifier.{weight,bias}.
  Choices: pre-norm; GLU = act(first half "input") * second half "gate"; layer i is global when
    i % global_attn_every_n_layers == 0 (rope theta global_rope_theta), else local (theta
    local_rope_theta) and attends only to keys with |i - j| <= local_attention // 2 (both ends
    included, as the sdpa mask and flash-attention's window (w//2, w//2) do); final_norm on the
    last hidden state; MaskedLM: decoder(norm(act(dense(h)))); SequenceClassification: cls ->
    h[:, 0], mean -> masked mean over the kept positions, then the same head, then classifier.
"""

import collections
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convert_reference as cr  # noqa: E402  (helpers: safetensors, layer_norm, convert)

try:
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover
    _erf = np.vectorize(math.erf)

TOLERANCE = 1e-4
NEG = -1e30  # a masked score: finite, so a row with every key masked stays a number
TASKS = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]


# --- shared pieces (float64) -------------------------------------------------------------------


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def act(x, name):
    if name == "gelu":
        return gelu(x)
    if name == "relu":
        return np.maximum(x, 0.0)
    if name in ("silu", "swish"):
        return silu(x)
    return cr.activation(x, name)


def lin(w, x, name):
    """nn.Linear under `name`; the bias only where the checkpoint holds one."""
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if name + ".bias" in w else y


def ln(w, x, name, eps):
    """nn.LayerNorm under `name`; without a bias where the checkpoint has none."""
    b = w.get(name + ".bias", 0.0)
    return cr.layer_norm(x, w[name + ".weight"], b, eps)


def heads(t, n):
    """[B, L, n*d] -> [B, n, L, d]"""
    b, l, _ = t.shape
    return t.reshape(b, l, n, -1).transpose(0, 2, 1, 3)


def attend(q, k, v, bias):
    """Softmax attention, scores scaled by 1/sqrt(head_dim). q, k, v: [B, h, L, d]; bias adds to
    the scores. Returns [B, L, h*d]."""
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]) + bias
    s = np.exp(s - s.max(-1, keepdims=True))
    p = s / s.sum(-1, keepdims=True)
    o = p @ v
    return o.transpose(0, 2, 1, 3).reshape(o.shape[0], o.shape[2], -1)


def key_mask(mask):
    """[B, 1, 1, L]: 0 where a key is kept, NEG where it is padding."""
    return np.where(mask[:, None, None, :] == 1, 0.0, NEG)


def inv_freq(base, dim):
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def rotary(x, freqs, positions):
    """Rotate-half rotary on the first 2*len(freqs) channels of x [..., L, d]."""
    r = 2 * len(freqs)
    ang = positions[:, None] * freqs[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)
    sin = np.concatenate([np.sin(ang)] * 2, -1)
    xr = x[..., :r]
    x1, x2 = xr[..., : r // 2], xr[..., r // 2 :]
    turned = np.concatenate([-x2, x1], -1)
    return np.concatenate([xr * cos + turned * sin, x[..., r:]], -1)


def alibi_slopes(n, naive=False):
    """The published _get_alibi_head_slopes (naive=True: the power-of-two rule for any n)."""

    def power_of_two(m):
        start = 2.0 ** (-(2.0 ** -(math.log2(m) - 3)))
        return [start ** (i + 1) for i in range(m)]

    if naive or math.log2(n).is_integer():
        return power_of_two(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_two(c) + alibi_slopes(2 * c)[0::2][: n - c]


def alibi(n, length, naive=False):
    """[n, L, L]: -slope_h * |i - j|."""
    pos = np.arange(length)
    dist = np.abs(pos[None, :] - pos[:, None]).astype(np.float64)
    return -np.array(alibi_slopes(n, naive))[:, None, None] * dist[None]


# --- JinaBERT v2 -------------------------------------------------------------------------------


def jina_v2(cfg, w, ids, mask, types, task=None, mistake=None):
    code = "layer_norm_1" in "".join(w) or "qk-post-norm" in json.dumps(cfg.get("auto_map", {}))
    p = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
    eps, n, inter = cfg["layer_norm_eps"], cfg["num_attention_heads"], cfg["intermediate_size"]
    glu_act = "relu" if cfg["feed_forward_type"] == "reglu" else "gelu"
    e = p + "embeddings."
    x = w[e + "word_embeddings.weight"][ids] + w[e + "token_type_embeddings.weight"][types]
    x = ln(w, x, e + "LayerNorm", eps)
    bias = key_mask(mask) + alibi(n, ids.shape[1], naive=mistake == "alibi-naive-slopes")
    for i in range(cfg["num_hidden_layers"]):
        l = f"{p}encoder.layer.{i}."
        a = l + "attention.self."
        q, k, v = (lin(w, x, a + t) for t in ("query", "key", "value"))
        if code:
            q, k = ln(w, q, a + "layer_norm_q", eps), ln(w, k, a + "layer_norm_k", eps)
        ctx = attend(heads(q, n), heads(k, n), heads(v, n), bias)
        h = ln(w, lin(w, ctx, l + "attention.output.dense") + x, l + "attention.output.LayerNorm", eps)
        if code:
            h = ln(w, x + h, l + "layer_norm_1", eps)
            g = lin(w, h, l + "mlp.up_gated_layer")
            m = lin(w, g[..., :inter] * act(g[..., inter:], glu_act), l + "mlp.down_layer")
            x = ln(w, h + m, l + "layer_norm_2", eps)
        else:
            g = lin(w, h, l + "mlp.gated_layers")
            first, second = g[..., :inter], g[..., inter:]
            if mistake == "glu-halves-swapped":
                first, second = second, first
            m = lin(w, act(first, glu_act) * second, l + "mlp.wo")
            x = ln(w, m + h, l + "mlp.layernorm", eps)
    if "cls.predictions.bias" in w:  # BertForMaskedLM's head; decoder tied unless stored
        t = "cls.predictions.transform."
        hh = ln(w, act(lin(w, x, t + "dense"), cfg["hidden_act"]), t + "LayerNorm", eps)
        table = w.get("cls.predictions.decoder.weight", w[e + "word_embeddings.weight"])
        return hh @ table.T + w["cls.predictions.bias"]
    return x


def synthetic_jina_v2(variant, dtype, rng):
    code = variant == "code"
    hidden, n = (32, 4) if code else (48, 6)  # 6 heads: the non-power-of-two slope rule
    inter, layers, vocab = 64, 3, 100
    arch = "JinaBertForMaskedLM" if variant.startswith("masked-lm") else "JinaBertModel"
    impl = "jinaai/jina-bert-v2-qk-post-norm" if code else "jinaai/jina-bert-implementation"
    cfg = {
        "_name_or_path": impl,
        "architectures": [arch],
        "auto_map": {
            "AutoConfig": f"{impl}--configuration_bert.JinaBertConfig",
            "AutoModel": f"{impl}--modeling_bert.JinaBertModel",
            "AutoModelForMaskedLM": f"{impl}--modeling_bert.JinaBertForMaskedLM",
            "AutoModelForSequenceClassification": f"{impl}--modeling_bert.JinaBertForSequenceClassification",
        },
        "model_type": "bert",
        "attention_probs_dropout_prob": 0.0,
        "classifier_dropout": None,
        "emb_pooler": "mean",
        "feed_forward_type": "reglu" if variant == "reglu" else "geglu",
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": 8192,
        "num_attention_heads": n,
        "num_hidden_layers": layers,
        "pad_token_id": 0,
        "position_embedding_type": "alibi",
        "type_vocab_size": 2,
        "use_cache": True,
        "vocab_size": vocab,
    }
    p = "bert." if variant == "masked-lm-head" else ""
    g = Gen(rng)
    g.emb(p + "embeddings.word_embeddings", vocab, hidden)
    g.emb(p + "embeddings.token_type_embeddings", 2, hidden)
    g.norm(p + "embeddings.LayerNorm", hidden)
    for i in range(layers):
        l = f"{p}encoder.layer.{i}."
        for t in ("query", "key", "value"):
            g.dense(l + "attention.self." + t, hidden, hidden)
        g.dense(l + "attention.output.dense", hidden, hidden)
        g.norm(l + "attention.output.LayerNorm", hidden)
        if code:
            g.norm(l + "attention.self.layer_norm_q", hidden)
            g.norm(l + "attention.self.layer_norm_k", hidden)
            g.norm(l + "layer_norm_1", hidden)
            g.norm(l + "layer_norm_2", hidden)
            g.dense(l + "mlp.up_gated_layer", 2 * inter, hidden, bias=False)
            g.dense(l + "mlp.down_layer", hidden, inter)
        else:
            g.dense(l + "mlp.gated_layers", 2 * inter, hidden, bias=False)
            g.dense(l + "mlp.wo", hidden, inter)
            g.norm(l + "mlp.layernorm", hidden)
    if variant == "masked-lm-head":
        g.dense("cls.predictions.transform.dense", hidden, hidden)
        g.norm("cls.predictions.transform.LayerNorm", hidden)
        g.w["cls.predictions.bias"] = rng.normal(0, 0.1, (vocab,))
    else:
        g.dense(p + "pooler.dense", hidden, hidden)
    return cfg, g.w


# --- jina-embeddings-v3 ------------------------------------------------------------------------


def adapted(w, name, t, scaling, embedding):
    """The weight of parametrized module `name` under adapter t (None: the original)."""
    base = w[name + ".parametrizations.weight.original"]
    if t is None:
        return base
    a = w[name + ".parametrizations.weight.0.lora_A"][t]
    b = w[name + ".parametrizations.weight.0.lora_B"][t]
    return base + (a @ b if embedding else b @ a) * scaling


def jina_v3(cfg, w, ids, mask, types, task=None, mistake=None):
    t = TASKS.index(task) if isinstance(task, str) else task
    p = "roberta."
    s = cfg["lora_alpha"] / cfg["lora_rank"]
    eps, n = cfg["layer_norm_eps"], cfg["num_attention_heads"]
    hd = cfg["hidden_size"] // n
    base = cfg["rotary_emb_base"] * (1.1 if mistake == "rotary-base-x1.1" else 1.0)
    freqs = inv_freq(base, hd)
    pos = np.arange(ids.shape[1], dtype=np.float64)
    if mistake == "no-rotary":  # selftest only: BERT with zero position embeddings
        pos = np.zeros_like(pos)

    def linear(x, name):
        return x @ adapted(w, p + name, t, s, False).T + w[p + name + ".bias"]

    x = adapted(w, p + "embeddings.word_embeddings", t, s, True)[ids]
    x = x + adapted(w, p + "embeddings.token_type_embeddings", t, s, True)[types]
    x = ln(w, x, p + "emb_ln", eps)
    bias = key_mask(mask)
    for i in range(cfg["num_hidden_layers"]):
        l = f"encoder.layers.{i}."
        qkv = linear(x, l + "mixer.Wqkv")
        b, length, _ = qkv.shape
        qkv = qkv.reshape(b, length, 3, n, hd).transpose(2, 0, 3, 1, 4)  # 3, B, h, L, d
        q, k = rotary(qkv[0], freqs, pos), rotary(qkv[1], freqs, pos)
        h = ln(w, x + linear(attend(q, k, qkv[2], bias), l + "mixer.out_proj"), p + l + "norm1", eps)
        m = linear(act(linear(h, l + "mlp.fc1"), cfg["hidden_act"]), l + "mlp.fc2")
        x = ln(w, h + m, p + l + "norm2", eps)
    return x


def synthetic_jina_v3(variant, dtype, rng):
    hidden, n, inter, layers, vocab, rank = 48, 6, 96, 3, 100, 4
    impl = "jinaai/xlm-roberta-flash-implementation"
    cfg = {
        "architectures": ["XLMRobertaModel"],
        "auto_map": {
            "AutoConfig": f"{impl}--configuration_xlm_roberta.XLMRobertaFlashConfig",
            "AutoModel": f"{impl}--modeling_lora.XLMRobertaLoRA",
            "AutoModelForMaskedLM": f"{impl}--modeling_xlm_roberta.XLMRobertaForMaskedLM",
            "AutoModelForPreTraining": f"{impl}--modeling_xlm_roberta.XLMRobertaForPreTraining",
        },
        "model_type": "xlm-roberta",
        "attention_probs_dropout_prob": 0.1,
        "bos_token_id": 0,
        "classifier_dropout": None,
        "emb_pooler": None,
        "eos_token_id": 2,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_norm_eps": 1e-5,
        "load_trained_adapters": True,
        "lora_adaptations": TASKS,
        "lora_alpha": 1,
        "lora_dropout_p": 0.0,
        "lora_main_params_trainable": False,
        "lora_rank": rank,
        "matryoshka_dimensions": [16, 32, 48],
        "max_position_embeddings": 8194,
        "num_attention_heads": n,
        "num_hidden_layers": layers,
        "output_past": True,
        "pad_token_id": 1,
        "position_embedding_type": "rotary",
        "rotary_emb_base": 20000.0,
        "task_instructions": {
            "retrieval.query": "Represent the query for retrieving evidence documents: ",
            "retrieval.passage": "Represent the document for retrieval: ",
            "separation": "",
            "classification": "",
            "text-matching": "",
        },
        "type_vocab_size": 1,
        "use_cache": True,
        "use_flash_attn": True,
        "vocab_size": vocab,
    }
    g = Gen(rng)
    p, tasks = "roberta.", len(TASKS)

    def lora_linear(name, n_out, n_in):
        q = p + name + ".parametrizations.weight."
        g.w[q + "original"] = rng.normal(0, 1.0 / math.sqrt(n_in), (n_out, n_in))
        g.w[q + "0.lora_A"] = rng.normal(0, 0.5, (tasks, rank, n_in))
        g.w[q + "0.lora_B"] = rng.normal(0, 0.5, (tasks, n_out, rank))
        g.w[p + name + ".bias"] = rng.normal(0, 0.1, (n_out,))

    def lora_embedding(name, rows, dim):
        q = p + name + ".parametrizations.weight."
        g.w[q + "original"] = rng.normal(0, 1.0, (rows, dim))
        g.w[q + "0.lora_A"] = rng.normal(0, 0.5, (tasks, rows, rank))
        g.w[q + "0.lora_B"] = rng.normal(0, 0.5, (tasks, rank, dim))

    lora_embedding("embeddings.word_embeddings", vocab, hidden)
    lora_embedding("embeddings.token_type_embeddings", 1, hidden)
    g.norm(p + "emb_ln", hidden)
    for i in range(layers):
        l = f"encoder.layers.{i}."
        lora_linear(l + "mixer.Wqkv", 3 * hidden, hidden)
        lora_linear(l + "mixer.out_proj", hidden, hidden)
        g.norm(p + l + "norm1", hidden)
        lora_linear(l + "mlp.fc1", inter, hidden)
        lora_linear(l + "mlp.fc2", hidden, inter)
        g.norm(p + l + "norm2", hidden)
    lora_linear("pooler.dense", hidden, hidden)
    return cfg, g.w


# --- NomicBERT ---------------------------------------------------------------------------------


def nomic_base(cfg, length, ignore_scaling=False):
    """The rotary base for a call whose padded length is `length` (NomicBertDynamicNTK...)."""
    base = float(cfg["rotary_emb_base"])
    f = cfg.get("rotary_scaling_factor")
    trained = cfg.get("max_trained_positions", 2048)
    hd = cfg["n_embd"] // cfg["n_head"]
    dim = hd * cfg.get("rotary_emb_fraction", 1.0)
    if f and length > trained and not ignore_scaling:
        base = base * ((f * length / trained) - (f - 1)) ** (dim / (dim - 2))
    return base


def nomic(cfg, w, ids, mask, types, task=None, mistake=None):
    eps, n = cfg["layer_norm_epsilon"], cfg["n_head"]
    hd = cfg["n_embd"] // n
    dim = int(hd * cfg.get("rotary_emb_fraction", 1.0))
    freqs = inv_freq(nomic_base(cfg, ids.shape[1], mistake == "dynamic-ntk-ignored"), dim)
    pos = np.arange(ids.shape[1], dtype=np.float64)
    x = w["embeddings.word_embeddings.weight"][ids]
    if "embeddings.token_type_embeddings.weight" in w:
        x = x + w["embeddings.token_type_embeddings.weight"][types]
    x = ln(w, x, "emb_ln", eps)
    bias = key_mask(mask)
    mlp_act = {"swiglu": "silu", "geglu": "gelu"}[cfg["activation_function"]]
    for i in range(cfg["n_layer"]):
        l = f"encoder.layers.{i}."
        qkv = lin(w, x, l + "attn.Wqkv")
        b, length, _ = qkv.shape
        qkv = qkv.reshape(b, length, 3, n, hd).transpose(2, 0, 3, 1, 4)
        q, k = rotary(qkv[0], freqs, pos), rotary(qkv[1], freqs, pos)
        h = ln(w, lin(w, attend(q, k, qkv[2], bias), l + "attn.out_proj") + x, l + "norm1", eps)
        m = lin(w, lin(w, h, l + "mlp.fc11") * act(lin(w, h, l + "mlp.fc12"), mlp_act), l + "mlp.fc2")
        x = ln(w, m + h, l + "norm2", eps)
    return x


def synthetic_nomic(variant, dtype, rng):
    hidden, n, inner, layers, vocab = 48, 6, 256, 3, 128
    scaled = variant == "scaled"
    impl = "nomic-ai/nomic-bert-2048"
    cfg = {
        "_name_or_path": impl,
        "activation_function": "swiglu",
        "architectures": ["NomicBertModel"],
        "attn_pdrop": 0.0,
        "auto_map": {
            "AutoConfig": f"{impl}--configuration_hf_nomic_bert.NomicBertConfig",
            "AutoModel": f"{impl}--modeling_hf_nomic_bert.NomicBertModel",
            "AutoModelForMaskedLM": f"{impl}--modeling_hf_nomic_bert.NomicBertForPreTraining",
        },
        "bos_token_id": None,
        "causal": False,
        "dense_seq_output": True,
        "embd_pdrop": 0.0,
        "eos_token_id": None,
        "fused_bias_fc": True,
        "fused_dropout_add_ln": True,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-12,
        # real configs: 2048; 512 here so that the 600-token batch crosses it
        "max_trained_positions": 512 if scaled else 2048,
        "mlp_fc1_bias": scaled,
        "mlp_fc2_bias": scaled,
        "model_type": "nomic_bert",
        "n_embd": hidden,
        "n_head": n,
        "n_inner": inner,
        "n_layer": layers,
        "n_positions": 8192,
        "pad_vocab_size_multiple": 64,
        "parallel_block": False,
        "parallel_block_tied_norm": False,
        "prenorm": False,
        "qkv_proj_bias": scaled,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.0,
        "rotary_emb_base": 1000,
        "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False,
        "rotary_emb_scale_base": None,
        "rotary_scaling_factor": 2.0 if scaled else None,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "type_vocab_size": 2,
        "use_cache": True,
        "use_flash_attn": True,
        "use_rms_norm": False,
        "use_xentropy": True,
        "vocab_size": vocab,
    }
    g = Gen(rng)
    g.emb("embeddings.word_embeddings", vocab, hidden)
    g.emb("embeddings.token_type_embeddings", 2, hidden)
    g.norm("emb_ln", hidden)
    for i in range(layers):
        l = f"encoder.layers.{i}."
        g.dense(l + "attn.Wqkv", 3 * hidden, hidden, bias=scaled)
        g.dense(l + "attn.out_proj", hidden, hidden, bias=scaled)
        g.dense(l + "mlp.fc11", inner, hidden, bias=scaled)
        g.dense(l + "mlp.fc12", inner, hidden, bias=scaled)
        g.dense(l + "mlp.fc2", hidden, inner, bias=scaled)
        g.norm(l + "norm1", hidden)
        g.norm(l + "norm2", hidden)
    return cfg, g.w


# --- GTE (Alibaba-NLP/new-impl) ----------------------------------------------------------------


def gte_freqs(cfg, ignore_ntk=False):
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    scaling = cfg.get("rope_scaling")
    if not scaling or ignore_ntk:
        return inv_freq(cfg["rope_theta"], hd)
    assert scaling["type"] == "ntk" and scaling.get("mixed_b") is None
    f = scaling["factor"]
    return inv_freq(cfg["rope_theta"] * f, hd) / f ** (2.0 / hd)


def gte(cfg, w, ids, mask, types, task=None, mistake=None):
    p = "new." if "new.embeddings.word_embeddings.weight" in w else ""
    eps, n, inter, hidden = cfg["layer_norm_eps"], cfg["num_attention_heads"], cfg["intermediate_size"], cfg["hidden_size"]
    freqs = gte_freqs(cfg, mistake == "ntk-ignored")
    pos = np.arange(ids.shape[1], dtype=np.float64)
    e = p + "embeddings."
    x = w[e + "word_embeddings.weight"][ids]
    if cfg.get("type_vocab_size", 0) > 0:
        x = x + w[e + "token_type_embeddings.weight"][types]
    x = ln(w, x, e + "LayerNorm", eps)
    bias = key_mask(mask)
    for i in range(cfg["num_hidden_layers"]):
        l = f"{p}encoder.layer.{i}."
        qkv = lin(w, x, l + "attention.qkv_proj")
        q, k, v = (heads(qkv[..., j * hidden : (j + 1) * hidden], n) for j in range(3))
        q, k = rotary(q, freqs, pos), rotary(k, freqs, pos)
        h = ln(w, x + lin(w, attend(q, k, v, bias), l + "attention.o_proj"), l + "attn_ln", eps)
        ug = lin(w, h, l + "mlp.up_gate_proj")
        m = lin(w, ug[..., :inter] * act(ug[..., inter:], cfg["hidden_act"]), l + "mlp.down_proj")
        x = ln(w, h + m, l + "mlp_ln", eps)
    if cfg["architectures"][0] == "NewForSequenceClassification":
        return lin(w, np.tanh(lin(w, x[:, 0], p + "pooler.dense")), "classifier")
    return x


def synthetic_gte(variant, dtype, rng):
    hidden, n, inter, layers, vocab = 48, 6, 64, 3, 100
    english = variant == "base-en"
    arch = "NewForSequenceClassification" if variant == "reranker" else "NewModel"
    impl = "Alibaba-NLP/new-impl"
    cfg = {
        "architectures": [arch],
        "auto_map": {
            "AutoConfig": f"{impl}--configuration.NewConfig",
            "AutoModel": f"{impl}--modeling.NewModel",
            "AutoModelForMaskedLM": f"{impl}--modeling.NewForMaskedLM",
            "AutoModelForMultipleChoice": f"{impl}--modeling.NewForMultipleChoice",
            "AutoModelForQuestionAnswering": f"{impl}--modeling.NewForQuestionAnswering",
            "AutoModelForSequenceClassification": f"{impl}--modeling.NewForSequenceClassification",
            "AutoModelForTokenClassification": f"{impl}--modeling.NewForTokenClassification",
        },
        "model_type": "new",
        "attention_probs_dropout_prob": 0.0,
        "classifier_dropout": 0.0,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_norm_eps": 1e-12,
        "layer_norm_type": "layer_norm",
        "logn_attention_clip1": False,
        "logn_attention_scale": False,
        "max_position_embeddings": 8192,
        "num_attention_heads": n,
        "num_hidden_layers": layers,
        "pack_qkv": True,
        "pad_token_id": 0 if english else 1,
        "position_embedding_type": "rope",
        "rope_scaling": {"factor": 2.0 if english else 8.0, "type": "ntk"},
        "rope_theta": 500000 if english else 160000,
        "type_vocab_size": 0 if english else 1,
        "unpad_inputs": False,
        "use_memory_efficient_attention": False,
        "vocab_size": vocab,
    }
    if arch == "NewForSequenceClassification":
        cfg["id2label"] = {"0": "LABEL_0"}
        cfg["label2id"] = {"LABEL_0": 0}
    p = "new." if arch == "NewForSequenceClassification" else ""
    g = Gen(rng)
    g.emb(p + "embeddings.word_embeddings", vocab, hidden)
    if cfg["type_vocab_size"] > 0:
        g.emb(p + "embeddings.token_type_embeddings", cfg["type_vocab_size"], hidden)
    g.norm(p + "embeddings.LayerNorm", hidden)
    for i in range(layers):
        l = f"{p}encoder.layer.{i}."
        g.dense(l + "attention.qkv_proj", 3 * hidden, hidden)
        g.dense(l + "attention.o_proj", hidden, hidden)
        g.norm(l + "attn_ln", hidden)
        g.dense(l + "mlp.up_gate_proj", 2 * inter, hidden, bias=False)
        g.dense(l + "mlp.down_proj", hidden, inter)
        g.norm(l + "mlp_ln", hidden)
    if arch == "NewForSequenceClassification":
        g.dense(p + "pooler.dense", hidden, hidden)
        g.dense("classifier", 1, hidden)
    return cfg, g.w


# --- ModernBERT --------------------------------------------------------------------------------


def modernbert(cfg, w, ids, mask, types, task=None, mistake=None):
    arch = cfg["architectures"][0]
    p = "model." if "model.embeddings.tok_embeddings.weight" in w else ""
    eps, n = cfg["norm_eps"], cfg["num_attention_heads"]
    hd = cfg["hidden_size"] // n
    length = ids.shape[1]
    pos = np.arange(length, dtype=np.float64)
    x = ln(w, w[p + "embeddings.tok_embeddings.weight"][ids], p + "embeddings.norm", eps)
    glob = key_mask(mask)
    dist = np.abs(pos[:, None] - pos[None, :])
    half = cfg["local_attention"] // 2
    inside = dist <= half if mistake != "window-off-by-one" else dist <= half + 1
    local = glob + np.where(inside, 0.0, NEG)[None, None]
    for i in range(cfg["num_hidden_layers"]):
        l = f"{p}layers.{i}."
        is_global = i % cfg["global_attn_every_n_layers"] == 0
        freqs = inv_freq(cfg["global_rope_theta"] if is_global else cfg["local_rope_theta"], hd)
        a = x if i == 0 else ln(w, x, l + "attn_norm", eps)
        qkv = lin(w, a, l + "attn.Wqkv")
        b = qkv.shape[0]
        qkv = qkv.reshape(b, length, 3, n, hd).transpose(2, 0, 3, 1, 4)
        q, k = rotary(qkv[0], freqs, pos), rotary(qkv[1], freqs, pos)
        x = x + lin(w, attend(q, k, qkv[2], glob if is_global else local), l + "attn.Wo")
        wi = lin(w, ln(w, x, l + "mlp_norm", eps), l + "mlp.Wi")
        inter = wi.shape[-1] // 2
        x = x + lin(w, act(wi[..., :inter], cfg["hidden_activation"]) * wi[..., inter:], l + "mlp.Wo")
    x = ln(w, x, p + "final_norm", eps)
    if arch == "ModernBertModel":
        return x

    def head(h):
        return ln(w, act(lin(w, h, "head.dense"), cfg["classifier_activation"]), "head.norm", eps)

    if arch == "ModernBertForMaskedLM":
        table = w.get("decoder.weight", w[p + "embeddings.tok_embeddings.weight"])
        out = head(x) @ table.T
        return out + w["decoder.bias"] if "decoder.bias" in w else out
    if cfg["classifier_pooling"] == "cls":
        pooled = x[:, 0]
    else:
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return lin(w, head(pooled), "classifier")


def synthetic_modernbert(variant, dtype, rng):
    hidden, n, inter, layers, vocab = 48, 6, 64, 4, 100
    arch = {
        "model": "ModernBertModel",
        "model-biases": "ModernBertModel",
        "masked-lm-tied": "ModernBertForMaskedLM",
        "masked-lm-own-decoder": "ModernBertForMaskedLM",
        "classifier-cls": "ModernBertForSequenceClassification",
        "classifier-mean": "ModernBertForSequenceClassification",
    }[variant]
    biases = variant in ("model-biases", "masked-lm-own-decoder", "classifier-mean")
    labels = 3 if variant == "classifier-cls" else 2
    cfg = {
        "architectures": [arch],
        "model_type": "modernbert",
        "attention_bias": biases,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "classifier_activation": "gelu",
        "classifier_bias": biases,
        "classifier_dropout": 0.0,
        "classifier_pooling": "mean" if variant == "classifier-mean" else "cls",
        "cls_token_id": 1,
        "decoder_bias": True,
        "deterministic_flash_attn": False,
        "embedding_dropout": 0.0,
        "eos_token_id": 2,
        "global_attn_every_n_layers": 3,
        "global_rope_theta": 160000.0,
        "gradient_checkpointing": False,
        "hidden_activation": "gelu",
        "hidden_size": hidden,
        "initializer_cutoff_factor": 2.0,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_norm_eps": 1e-05,
        "local_attention": 8,
        "local_rope_theta": 10000.0,
        "max_position_embeddings": 8192,
        "mlp_bias": biases,
        "mlp_dropout": 0.0,
        "norm_bias": biases,
        "norm_eps": 1e-05,
        "num_attention_heads": n,
        "num_hidden_layers": layers,
        "pad_token_id": 3,
        "sep_token_id": 2,
        "sparse_pred_ignore_index": -100,
        "sparse_prediction": False,
        "tie_word_embeddings": variant != "masked-lm-own-decoder",
        "vocab_size": vocab,
    }
    if arch.endswith("SequenceClassification"):
        cfg["id2label"] = {str(i): f"LABEL_{i}" for i in range(labels)}
        cfg["label2id"] = {f"LABEL_{i}": i for i in range(labels)}
    p = "" if arch == "ModernBertModel" else "model."
    g = Gen(rng)
    g.emb(p + "embeddings.tok_embeddings", vocab, hidden)
    g.norm(p + "embeddings.norm", hidden, bias=biases)
    for i in range(layers):
        l = f"{p}layers.{i}."
        if i > 0:
            g.norm(l + "attn_norm", hidden, bias=biases)
        g.dense(l + "attn.Wqkv", 3 * hidden, hidden, bias=biases)
        g.dense(l + "attn.Wo", hidden, hidden, bias=biases)
        g.norm(l + "mlp_norm", hidden, bias=biases)
        g.dense(l + "mlp.Wi", 2 * inter, hidden, bias=biases)
        g.dense(l + "mlp.Wo", hidden, inter, bias=biases)
    g.norm(p + "final_norm", hidden, bias=biases)
    if arch != "ModernBertModel":
        g.dense("head.dense", hidden, hidden, bias=biases)
        g.norm("head.norm", hidden, bias=biases)
    if arch == "ModernBertForMaskedLM":
        if not cfg["tie_word_embeddings"]:
            g.w["decoder.weight"] = rng.normal(0, 1.0 / math.sqrt(hidden), (vocab, hidden))
        g.w["decoder.bias"] = rng.normal(0, 0.1, (vocab,))
    if arch.endswith("SequenceClassification"):
        g.dense("classifier", labels, hidden)
    return cfg, g.w


# --- the families ------------------------------------------------------------------------------


class Gen:
    """Random tensors by name."""

    def __init__(self, rng):
        self.rng, self.w = rng, {}

    def dense(self, name, n_out, n_in, bias=True, std=None):
        # 1/sqrt(fan-in): activations stay near unit size, so float32 rounding in the graph
        # stays well under the tolerance (at 0.3 the GLU nets amplify it to ~1e-4)
        std = 1.0 / math.sqrt(n_in) if std is None else std
        self.w[name + ".weight"] = self.rng.normal(0, std, (n_out, n_in))
        if bias:
            self.w[name + ".bias"] = self.rng.normal(0, 0.1, (n_out,))

    def norm(self, name, n, bias=True):
        self.w[name + ".weight"] = 1.0 + self.rng.normal(0, 0.1, (n,))
        if bias:
            self.w[name + ".bias"] = self.rng.normal(0, 0.1, (n,))

    def emb(self, name, rows, n):
        self.w[name + ".weight"] = self.rng.normal(0, 1.0, (rows, n))


FAMILIES = {
    "jina-bert-v2": (synthetic_jina_v2, jina_v2, ["model", "masked-lm-shipped", "masked-lm-head", "code", "reglu"]),
    "jina-embeddings-v3": (synthetic_jina_v3, jina_v3, ["lora"]),
    "nomic-bert": (synthetic_nomic, nomic, ["model", "scaled"]),
    "gte": (synthetic_gte, gte, ["base-en", "multilingual", "reranker"]),
    "modernbert": (
        synthetic_modernbert,
        modernbert,
        ["model", "model-biases", "masked-lm-tied", "masked-lm-own-decoder", "classifier-cls", "classifier-mean"],
    ),
}


def reference(config, tensors, ids, mask, types, task=None, mistake=None):
    """The family's output for a padded batch, from the config's model_type."""
    mt = config["model_type"]
    if mt == "bert" and config.get("position_embedding_type") == "alibi":
        return jina_v2(config, tensors, ids, mask, types, task, mistake)
    if mt == "xlm-roberta" and "lora_adaptations" in config:
        return jina_v3(config, tensors, ids, mask, types, task, mistake)
    family = {"nomic_bert": nomic, "new": gte, "modernbert": modernbert}[mt]
    return family(config, tensors, ids, mask, types, task, mistake)


def pad_id(cfg):
    return cfg.get("pad_token_id") or 0


def make_batch(cfg, lengths, rng):
    """Random ids for texts of `lengths`, right-padded to the longest, as a tokenizer pads."""
    width, rows = max(lengths), len(lengths)
    vocab = cfg.get("vocab_size")
    ids = rng.integers(4, vocab, (rows, width)).astype(np.int64)
    mask = np.zeros((rows, width), dtype=np.int64)
    types = np.zeros((rows, width), dtype=np.int64)
    two_types = cfg.get("type_vocab_size", 0) > 1
    for r, n in enumerate(lengths):
        mask[r, :n] = 1
        ids[r, n:] = pad_id(cfg)
        if two_types:
            types[r, n // 2 : n] = 1
    return ids, mask, types


# --- checkpoints on disk -----------------------------------------------------------------------


def rounded(tensors, dtype):
    """What both sides compute with: the weights as a file of `dtype` holds them."""
    return {k: cr.stored(v, dtype)[1] for k, v in tensors.items()}


def write_folder(folder, cfg, tensors, dtype, torch_bin=False):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    for old in ("model.safetensors", "pytorch_model.bin"):
        (folder / old).unlink(missing_ok=True)
    if torch_bin:
        write_torch_bin(folder / "pytorch_model.bin", tensors)
    else:
        cr.write_safetensors(folder / "model.safetensors", tensors, dtype)


def write_torch_bin(path, tensors):
    """float32 tensors as torch.save writes a state dict, with make_torch_checkpoint's writer."""
    import make_torch_checkpoint as mtc

    sd = collections.OrderedDict()
    for key, (name, value) in enumerate(tensors.items()):
        flat = np.ascontiguousarray(value, dtype=np.float32).ravel().tolist()
        sd[name] = mtc.Tensor(mtc.Storage("FloatStorage", str(key), flat), 0, value.shape)
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    # the writer's stand-in torch modules, in sys.modules only while the pickler needs them
    sys.modules["torch"], sys.modules["torch._utils"] = mtc.torch, mtc.torch_utils
    try:
        mtc.save(sd, str(path))
    finally:
        sys.modules.pop("torch._utils", None)
        sys.modules.pop("torch", None)


# --- running a converted graph -----------------------------------------------------------------


class Graph:
    def __init__(self, folder):
        self.session = ort.InferenceSession(str(Path(folder) / "model.onnx"), providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        names = [o.name for o in self.session.get_outputs()]
        self.output = next((n for n in ("logits", "last_hidden_state") if n in names), names[0])

    def run(self, ids, mask, types, task=None):
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = types
        if "task_id" in self.inputs:
            shape = self.inputs["task_id"].shape
            t = TASKS.index(task) if isinstance(task, str) else int(task or 0)
            value = np.array(t, dtype=np.int64) if shape == [] else np.array([t], dtype=np.int64)
            try:
                feed["task_id"] = value
                return self.session.run([self.output], feed)[0]
            except Exception:  # the other convention: [1] <-> scalar
                feed["task_id"] = value.reshape(()) if value.ndim else value.reshape(1)
        return self.session.run([self.output], feed)[0]


def difference(got, expected, mask):
    """Largest |got - expected|; token-level outputs only where the mask keeps the position."""
    if got.shape != expected.shape:
        return float("inf")
    d = np.abs(got.astype(np.float64) - expected)
    if d.ndim == 3:
        d = d[mask == 1]
    return float(d.max())


def converted(nornir, source, out, flags):
    """(output folder, None) or (None, the converter's error)."""
    try:
        cr.convert(nornir, source, out, *flags)
    except SystemExit as e:  # convert_reference.convert exits with the converter's stderr
        return None, str(e)[-2000:]
    # a fused graph whose vectors differ from the plain one's is written plain: that is a fault
    # of the fused path (windowed blocks, the mask-free branch), not a pass
    record = json.loads((Path(out) / "conversion.json").read_text())
    if "--no-fuse" not in flags and not record["fused"]:
        return None, "the fused graph was not kept: its vectors differ from the plain graph's"
    return out, None


LONG, SHORT = [600, 37, 5], [12, 7, 3]
BIN_CASE = {"jina-bert-v2": "model", "jina-embeddings-v3": "lora", "nomic-bert": "model", "gte": "reranker", "modernbert": "masked-lm-tied"}


def tasks_of(cfg):
    return list(range(len(cfg["lora_adaptations"]))) if "lora_adaptations" in cfg else [None]


def run_synthetic(nornir, work):
    work = Path(work)
    rng = np.random.default_rng(7)
    cases, worst = [], 0.0
    for family, (make, _, variants) in FAMILIES.items():
        for variant in variants:
            for dtype in ("F32", "F16", "BF16", "bin"):
                if dtype == "bin" and BIN_CASE[family] != variant:
                    continue
                cfg, w = make(variant, "F32" if dtype == "bin" else dtype, rng)
                source = work / f"{family}-{variant}-{dtype}"
                write_folder(source, cfg, w, dtype, torch_bin=dtype == "bin")
                weights = rounded(w, "F32" if dtype == "bin" else dtype)
                batches = [make_batch(cfg, LONG, rng), make_batch(cfg, SHORT, rng)]
                expected = {
                    (b, t): reference(cfg, weights, *batches[b], task=t) for b in range(2) for t in tasks_of(cfg)
                }
                graphs = [("fused", [])] if dtype == "bin" else [("fused", []), ("plain", ["--no-fuse"])]
                for graph, flags in graphs:
                    out, error = converted(nornir, source, work / f"{source.name}-{graph}", flags)
                    for (b, t), exp in expected.items():
                        case = {
                            "family": family,
                            "variant": variant,
                            "dtype": dtype,
                            "graph": graph,
                            "batch": [LONG, SHORT][b],
                            "largest_value": float(np.abs(exp).max()),
                        }
                        if t is not None:
                            case["task_id"] = t
                            case["task"] = cfg["lora_adaptations"][t]
                        if error is None:
                            try:
                                got = Graph(out).run(*batches[b], task=t)
                                case["output"] = list(got.shape)
                                case["max_abs_diff"] = difference(got, exp, batches[b][1])
                            except Exception as e:  # a graph that does not run
                                case["error"] = f"onnxruntime: {e}"[-2000:]
                                case["max_abs_diff"] = float("inf")
                        else:
                            case["error"] = error
                            case["max_abs_diff"] = float("inf")
                        worst = max(worst, case["max_abs_diff"])
                        cases.append(case)
                        if error is not None:
                            break  # one failed case per failed conversion is enough
    return {"cases": cases, "max_abs_diff": worst, "ok": worst <= TOLERANCE}


# --- the check can fail ------------------------------------------------------------------------

MISTAKES = [
    ("alibi-naive-slopes", "jina-bert-v2", "model", "ALiBi slopes by the power-of-two rule for 6 heads"),
    ("glu-halves-swapped", "jina-bert-v2", "model", "GELU on the second half of gated_layers"),
    ("rotary-base-x1.1", "jina-embeddings-v3", "lora", "rotary_emb_base * 1.1"),
    ("dynamic-ntk-ignored", "nomic-bert", "scaled", "rotary_scaling_factor ignored past max_trained_positions"),
    ("ntk-ignored", "gte", "base-en", "rope_scaling ntk ignored"),
    ("window-off-by-one", "modernbert", "model", "local window |i-j| <= w/2 + 1"),
]


def run_broken(nornir, work):
    work = Path(work)
    rng = np.random.default_rng(11)
    cases = []
    for mistake, family, variant, what in MISTAKES:
        make = FAMILIES[family][0]
        cfg, w = make(variant, "F32", rng)
        source = work / f"broken-{family}-{variant}"
        write_folder(source, cfg, w, "F32")
        weights = rounded(w, "F32")
        ids, mask, types = make_batch(cfg, LONG, rng)
        task = 0 if "lora_adaptations" in cfg else None
        wrong = reference(cfg, weights, ids, mask, types, task=task, mistake=mistake)
        right = reference(cfg, weights, ids, mask, types, task=task)
        case = {"mistake": mistake, "what": what, "family": family, "variant": variant,
                "reference_moves_by": difference(wrong, right, mask)}
        out, error = converted(nornir, source, work / f"{source.name}-fused", [])
        if error is None:
            got = Graph(out).run(ids, mask, types, task=task)
            case["max_abs_diff"] = difference(got, wrong, mask)
            case["right_reference_diff"] = difference(got, right, mask)
        else:
            case["error"] = error
            case["max_abs_diff"] = None
        cases.append(case)
    ok = all(c["max_abs_diff"] is not None and c["max_abs_diff"] > TOLERANCE for c in cases)
    return {"cases": cases, "ok": ok}


# --- batch invariance --------------------------------------------------------------------------

BATCH_CASES = [
    ("jina-bert-v2", "model"),
    ("jina-bert-v2", "code"),
    ("jina-embeddings-v3", "lora"),
    ("nomic-bert", "model"),
    ("nomic-bert", "scaled"),
    ("gte", "base-en"),
    ("gte", "reranker"),
    ("modernbert", "model"),
    ("modernbert", "classifier-mean"),
]


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def pooled(out, mask, row):
    """(first-token vector, mean-pooled vector) of one row; a [B, labels] output as both."""
    if out.ndim == 2:
        return out[row], out[row]
    keep = mask[row] == 1
    return out[row, 0], out[row, keep].mean(0)


def run_batch(nornir, work):
    work = Path(work)
    rng = np.random.default_rng(13)
    cases, ok = [], True
    for family, variant in BATCH_CASES:
        cfg, w = FAMILIES[family][0](variant, "F32", rng)
        source = work / f"batch-{family}-{variant}"
        write_folder(source, cfg, w, "F32")
        short = 9
        ids, mask, types = make_batch(cfg, [700, short, 650], rng)
        alone = tuple(t[1:2, :short] for t in (ids, mask, types))
        # nomic "scaled": the published dynamic NTK picks the base from the padded length
        by_design = family == "nomic-bert" and variant == "scaled"
        case = {"family": family, "variant": variant, "short": short, "beside": [700, 650]}
        out, error = converted(nornir, source, work / f"{source.name}-fused", [])
        if error is not None:
            case.update(error=error, ok=False)
            ok = False
            cases.append(case)
            continue
        graph = Graph(out)
        task = 0 if "lora_adaptations" in cfg else None
        together = graph.run(ids, mask, types, task=task).astype(np.float64)
        single = graph.run(*alone, task=task).astype(np.float64)
        f1, m1 = pooled(together, mask, 1)
        f0, m0 = pooled(single, alone[1], 0)
        row = together[1, :short] if together.ndim == 3 else together[1]
        case.update(
            first_token_cosine=cosine(f1, f0),
            mean_cosine=cosine(m1, m0),
            max_abs_diff=float(np.abs(row - single[0]).max()),
        )
        good = case["first_token_cosine"] >= 0.99999 and case["mean_cosine"] >= 0.99999
        if by_design:
            case["note"] = "dynamic NTK depends on the padded length by the published design; not counted"
        else:
            ok = ok and good
        case["ok"] = good
        cases.append(case)
    return {"cases": cases, "ok": ok}


# --- the reference against itself --------------------------------------------------------------


def brute_slopes(n):
    """The published slope recursion, spelled out with loops."""
    if float(math.log2(n)).is_integer():
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        out, s = [], start
        for _ in range(n):
            out.append(s)
            s *= start
        return out
    c = 1
    while c * 2 <= n:
        c *= 2
    extra = brute_slopes(2 * c)
    return brute_slopes(c) + [extra[i] for i in range(0, len(extra), 2)][: n - c]


def selftest():
    checks = []
    rng = np.random.default_rng(3)

    def record(name, value, limit=1e-10):
        checks.append({"check": name, "value": float(value), "ok": bool(value <= limit)})

    # ALiBi: slopes and the bias matrix against loops
    for n in (1, 2, 4, 6, 8, 12, 16, 24):
        record(f"alibi slopes n={n}", max(abs(a - b) for a, b in zip(alibi_slopes(n), brute_slopes(n))))
        m = alibi(n, 7)
        loop = max(abs(m[h, i, j] + brute_slopes(n)[h] * abs(i - j)) for h in range(n) for i in range(7) for j in range(7))
        record(f"alibi bias n={n}", loop)
    record("alibi 12 heads: 2^-1..2^-8 then 2^-0.5..2^-3.5",
           max(abs(a - b) for a, b in zip(alibi_slopes(12), [2.0**-k for k in range(1, 9)] + [2.0**-e for e in (0.5, 1.5, 2.5, 3.5)])))
    record("alibi naive differs for 6 heads (must be > 0: shown as -diff)",
           -max(abs(a - b) for a, b in zip(alibi_slopes(6), alibi_slopes(6, naive=True))), limit=-1e-3)

    # rotary against a rotation of complex numbers: (x_j, x_{j+d/2}) -> z_j * e^{i p f_j}
    x = rng.normal(size=(2, 3, 11, 16))
    f = inv_freq(500.0, 16)
    pos = np.arange(11, dtype=np.float64)
    z = (x[..., :8] + 1j * x[..., 8:]) * np.exp(1j * pos[:, None] * f[None, :])
    record("rotary vs complex rotation", np.abs(rotary(x, f, pos) - np.concatenate([z.real, z.imag], -1)).max())
    # GTE's NTK frequencies, written out per channel
    cfg = {"hidden_size": 16, "num_attention_heads": 2, "rope_theta": 1000.0, "rope_scaling": {"type": "ntk", "factor": 4.0}}
    manual = [1.0 / (4000.0 ** (2 * i / 8)) / 4.0 ** (2 / 8) for i in range(4)]
    record("gte ntk inv_freq", np.abs(gte_freqs(cfg) - manual).max())
    # nomic dynamic NTK: plain base at or under max_trained_positions, scaled past it
    ncfg = {"rotary_emb_base": 1000, "rotary_scaling_factor": 2.0, "max_trained_positions": 512, "n_embd": 48, "n_head": 6}
    record("nomic base unchanged at 512", abs(nomic_base(ncfg, 512) - 1000.0))
    record("nomic base at 600", abs(nomic_base(ncfg, 600) - 1000.0 * (2 * 600 / 512 - 1) ** (8 / 6)))

    # each family: a padded row equals the same text alone (the short batch: no length rule)
    for family, (make, ref, variants) in FAMILIES.items():
        for variant in variants:
            cfg, w = make(variant, "F32", rng)
            w = rounded(w, "F32")
            ids, mask, types = make_batch(cfg, [12, 7, 3], rng)
            for t in tasks_of(cfg)[:2]:
                full = ref(cfg, w, ids, mask, types, t)
                worst = 0.0
                for r, n in enumerate([12, 7, 3]):
                    one = ref(cfg, w, ids[r : r + 1, :n], mask[r : r + 1, :n], types[r : r + 1, :n], t)
                    worst = max(worst, np.abs((full[r, :n] if full.ndim == 3 else full[r]) - one[0]).max())
                record(f"{family}/{variant} padded row == alone" + (f" task {t}" if t is not None else ""), worst, 1e-9)
            # the long batch runs and gives finite numbers
            long_ids, long_mask, long_types = make_batch(cfg, [600, 37, 5], rng)
            out = ref(cfg, w, long_ids, long_mask, long_types, tasks_of(cfg)[0])
            record(f"{family}/{variant} finite at 600", 0.0 if np.isfinite(out).all() else 1.0)

    # the shared post-norm encoder path against convert_reference.py's BERT: a BertModel with
    # zero position embeddings, renamed to jina-v3 names, rotary off, adapters with zero B
    bcfg, bw = cr.synthetic("BertModel", "F32", rng)
    bw["embeddings.position_embeddings.weight"][:] = 0.0
    bw = rounded(bw, "F32")
    jcfg = {"lora_alpha": 1, "lora_rank": 4, "layer_norm_eps": bcfg["layer_norm_eps"], "hidden_act": "gelu",
            "num_attention_heads": bcfg["num_attention_heads"], "hidden_size": bcfg["hidden_size"],
            "num_hidden_layers": bcfg["num_hidden_layers"], "rotary_emb_base": 10000.0}
    jw = {}

    def param(name, weight, bias=None):
        jw[f"roberta.{name}.parametrizations.weight.original"] = weight
        if bias is not None:
            jw[f"roberta.{name}.bias"] = bias

    param("embeddings.word_embeddings", bw["embeddings.word_embeddings.weight"])
    param("embeddings.token_type_embeddings", bw["embeddings.token_type_embeddings.weight"])
    jw["roberta.emb_ln.weight"], jw["roberta.emb_ln.bias"] = bw["embeddings.LayerNorm.weight"], bw["embeddings.LayerNorm.bias"]
    for i in range(bcfg["num_hidden_layers"]):
        b, l = f"encoder.layer.{i}.", f"encoder.layers.{i}."
        qkv = [bw[b + f"attention.self.{t}.weight"] for t in ("query", "key", "value")]
        qkvb = [bw[b + f"attention.self.{t}.bias"] for t in ("query", "key", "value")]
        param(l + "mixer.Wqkv", np.concatenate(qkv), np.concatenate(qkvb))
        param(l + "mixer.out_proj", bw[b + "attention.output.dense.weight"], bw[b + "attention.output.dense.bias"])
        param(l + "mlp.fc1", bw[b + "intermediate.dense.weight"], bw[b + "intermediate.dense.bias"])
        param(l + "mlp.fc2", bw[b + "output.dense.weight"], bw[b + "output.dense.bias"])
        for src, dst in (("attention.output.LayerNorm", "norm1"), ("output.LayerNorm", "norm2")):
            jw[f"roberta.{l}{dst}.weight"], jw[f"roberta.{l}{dst}.bias"] = bw[b + src + ".weight"], bw[b + src + ".bias"]
    ids, mask, types = cr.batch(bcfg, rng)
    bert = cr.reference(bw, bcfg, ids, mask, types)
    mine = jina_v3(jcfg, jw, ids, mask, types, task=None, mistake="no-rotary")
    record("encoder path == convert_reference BERT", np.abs(bert - mine)[mask == 1].max(), 1e-9)
    return {"checks": checks, "ok": all(c["ok"] for c in checks)}



# --- every surface nornir has ------------------------------------------------------------------

# Each family's encoder as a sentence-transformers folder with a real BERT tokenizer (the cached
# all-MiniLM-L6-v2's), its vocabulary widened to hold that tokenizer's ids; the heads as
# cross-encoder and SPLADE folders. What nornir's embed, rerank and serve give is compared with the
# float64 reference on the token ids the `tokenizers` library gives for the same texts, each text
# run alone (the graphs' batch invariance is the `batch` mode's).

SURFACE_VOCAB = 30528  # the tokenizer's 30,522 ids, rounded up to NomicBERT's multiple of 64
MAX_SEQ = 64  # sentence_bert_config.json's max_seq_length: the long text below is cut there
SURFACE_TEXTS = [
    "A man is eating food.",
    "The capital of France is Paris.",
    "Fjords are long, narrow inlets with steep sides, created by glacial erosion.",
    " ".join(["The quick brown fox jumps over the lazy dog while the band plays on."] * 8),
]
SURFACE_ENCODERS = [
    ("jina-bert-v2", "model"),
    ("jina-bert-v2", "code"),
    ("jina-embeddings-v3", "lora"),
    ("nomic-bert", "model"),
    ("gte", "base-en"),
    ("gte", "multilingual"),
    ("modernbert", "model"),
]
SURFACE_RERANKERS = [("gte", "reranker"), ("modernbert", "classifier-cls"), ("modernbert", "classifier-mean")]
SURFACE_SPARSE = [("jina-bert-v2", "masked-lm-head"), ("modernbert", "masked-lm-tied")]
QUERY = "what is a fjord?"
DOCUMENTS = [
    "A fjord is a long, narrow inlet with steep sides, created by a glacier.",
    "Paris is the capital of France.",
    "The quick brown fox jumps over the lazy dog.",
    "Norway's coast is famous for its fjords.",
]
COSINE = 0.99999
SCORE_TOLERANCE = 1e-5
JINA_TASKS = ("retrieval.passage", "retrieval.query")  # the first is the embed and serve task


def widened(cfg, w, vocab, rng):
    """The checkpoint with `vocab` rows wherever it has a row per token (the word embeddings, their
    adapters, the masked-LM decoder and bias), the new rows drawn like the old ones."""
    old = cfg["vocab_size"]
    cfg = dict(cfg, vocab_size=vocab)
    out = {}
    for name, t in w.items():
        axis = None
        if ("word_embeddings" in name or "tok_embeddings" in name) and not name.endswith("lora_B"):
            axis = 1 if name.endswith("lora_A") else 0
        elif name in ("cls.predictions.bias", "cls.predictions.decoder.weight", "decoder.bias", "decoder.weight"):
            axis = 0
        if axis is not None:
            assert t.shape[axis] == old, (name, t.shape)
            shape = list(t.shape)
            shape[axis] = vocab - old
            t = np.concatenate([t, rng.normal(0, float(t.std()), shape)], axis)
        out[name] = t
    return cfg, out


def one_label(cfg, w, rng):
    """A classification checkpoint with one label (a reranker's)."""
    cfg = dict(cfg, id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    hidden = w["classifier.weight"].shape[1]
    w = dict(w)
    w["classifier.weight"] = rng.normal(0, 1.0 / math.sqrt(hidden), (1, hidden))
    w["classifier.bias"] = rng.normal(0, 0.1, (1,))
    return cfg, w


def two_token_types(cfg, w, rng):
    """A GTE checkpoint whose token-type table has the two rows a BERT tokenizer's pairs use (the
    real multilingual reranker has one, with XLM-RoBERTa's tokenizer, which gives pairs type 0)."""
    name = next(k for k in w if k.endswith("embeddings.token_type_embeddings.weight"))
    w = dict(w)
    w[name] = np.concatenate([w[name], rng.normal(0, 1.0, (1, w[name].shape[1]))])
    return dict(cfg, type_vocab_size=2), w


ST_MODULE = "sentence_transformers.models."


def write_st_files(folder, tokenizer, modules, hidden, splade=False):
    """tokenizer.json and the sentence-transformers files: modules.json with `modules`."""
    shutil.copy(tokenizer, folder / "tokenizer.json")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": MAX_SEQ, "do_lower_case": False}))
    if modules is None:
        (folder / "modules.json").unlink(missing_ok=True)
        return
    (folder / "modules.json").write_text(json.dumps(modules, indent=1))
    if splade:
        module, config = "1_SpladePooling", {"pooling_strategy": "max", "activation_function": "relu",
                                             "word_embedding_dimension": SURFACE_VOCAB}
    else:
        module, config = "1_Pooling", {"word_embedding_dimension": hidden, "pooling_mode_cls_token": False,
                                       "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                                       "pooling_mode_mean_sqrt_len_tokens": False}
    (folder / module).mkdir(exist_ok=True)
    (folder / module / "config.json").write_text(json.dumps(config, indent=1))


EMBEDDER_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": ST_MODULE + "Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": ST_MODULE + "Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": ST_MODULE + "Normalize"},
]
SPARSE_MODULE = "sentence_transformers.sparse_encoder.models."
SPARSE_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": SPARSE_MODULE + "MLMTransformer"},
    {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": SPARSE_MODULE + "SpladePooling"},
]


def hidden_of(cfg):
    return cfg.get("hidden_size") or cfg["n_embd"]


def surface_checkpoint(family, variant, rng, head=None):
    """(config, float64 weights as stored) of a family's variant with the tokenizer's vocabulary."""
    cfg, w = FAMILIES[family][0](variant, "F32", rng)
    cfg, w = widened(cfg, w, SURFACE_VOCAB, rng)
    if head == "reranker":
        if "classifier.weight" in w and w["classifier.weight"].shape[0] != 1:
            cfg, w = one_label(cfg, w, rng)
        if any(k.endswith("token_type_embeddings.weight") for k in w) and cfg.get("type_vocab_size", 0) < 2:
            cfg, w = two_token_types(cfg, w, rng)
    return cfg, w


def nornir_run(nornir, *args):
    """`nornir vector ARGS`; (stdout, None) or (None, its error)."""
    done = subprocess.run([nornir, "vector", *args], capture_output=True, text=True)
    if done.returncode != 0:
        return None, f"nornir vector {args[0]}: exit {done.returncode}: {done.stderr.strip()[-2000:]}"
    return done.stdout, None


CPU = ["--device", "cpu", "--threads", "2"]


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def encode(tok, text, pair=None):
    """(ids, mask, types) of one text (or pair) as [1, n] arrays."""
    e = tok.encode(text, pair) if pair is not None else tok.encode(text)
    row = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
    return row(e.ids), row(e.attention_mask), row(e.type_ids)


def reference_vector(cfg, w, tok, text, task=None):
    """The reference's last_hidden_state, mean-pooled over the text's tokens and L2-normalised."""
    ids, mask, types = encode(tok, text)
    h = reference(cfg, w, ids, mask, types, task=task)[0]
    v = h[mask[0] == 1].mean(0)
    return v / np.linalg.norm(v), int(ids.shape[1])


def prompt_of(cfg, task):
    return cfg.get("task_instructions", {}).get(task, "") if task else ""


def check_embeddings(nornir, folder, cfg, w, tok, task=None, note=None):
    """nornir vector embed on SURFACE_TEXTS against the reference: the case and the vectors."""
    args = ["embed", "--quiet", *CPU, "--model", str(folder), *(["--task", task] if task else []), *SURFACE_TEXTS]
    out, error = nornir_run(nornir, *args)
    case = {"task": task} if task else {}
    if error:
        return dict(case, error=error, min_cosine=None), None
    got = [np.array(v["embedding"], dtype=np.float64) for v in json_lines(out)]
    prompt = prompt_of(cfg, task)
    if prompt:
        case["prompt"] = prompt
    want, tokens = zip(*(reference_vector(cfg, w, tok, prompt + t, task=task) for t in SURFACE_TEXTS))
    if len(got) != len(want) or any(g.shape != v.shape for g, v in zip(got, want)):
        return dict(case, error=f"{len(got)} vectors of {[g.shape for g in got]}", min_cosine=None), None
    case.update(tokens=list(tokens), cosines=[cosine(g, v) for g, v in zip(got, want)],
                norms=[float(np.linalg.norm(g)) for g in got])
    case["min_cosine"] = min(case["cosines"])
    return case, got


def check_serve(nornir, models, texts, expected, task=None):
    """`nornir vector serve` with `models` (name -> folder): /v1/embeddings for each against
    `expected` (name -> the vectors nornir vector embed wrote)."""
    args = [nornir, "vector", "serve", "--port", "0", "--device", "cpu", "--threads", "2"]
    for name, folder in models.items():
        args += ["--model", f"{name}={folder}"]
    if task:
        args += ["--task", task]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log, url = [], None
    try:
        for line in proc.stderr:
            log.append(line)
            if "listening on " in line:
                url = line.split("listening on ", 1)[1].split()[0]
                break
        if url is None:
            return {"models": list(models), "error": "the server ended before listening: " + "".join(log)[-2000:]}
        threading.Thread(target=lambda: [log.append(x) for x in proc.stderr], daemon=True).start()

        def call(path, body=None):
            data = None if body is None else json.dumps(body).encode()
            req = urllib.request.Request(url + path, data=data, headers={"content-type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()
            except OSError as e:
                return None, str(e)

        start = time.monotonic()
        while call("/health")[0] != 200:
            if proc.poll() is not None or time.monotonic() - start > 120:
                return {"models": list(models), "error": "not ready: " + "".join(log)[-2000:]}
            time.sleep(0.1)
        cases = []
        for name in models:
            status, text = call("/v1/embeddings", {"model": name, "input": texts})
            case = {"model": name, "status": status}
            if status != 200:
                case.update(error=text[-2000:], min_cosine=None)
            else:
                data = sorted(json.loads(text)["data"], key=lambda d: d["index"])
                got = [np.array(d["embedding"], dtype=np.float64) for d in data]
                case["cosines"] = [cosine(g, e) for g, e in zip(got, expected[name])]
                case["max_abs_diff"] = max(float(np.abs(g - e).max()) for g, e in zip(got, expected[name]))
                case["min_cosine"] = min(case["cosines"]) if len(got) == len(expected[name]) else None
            cases.append(case)
        return {"models": list(models), "task": task, "cases": cases}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def check_rerank(nornir, folder, cfg, w, tok):
    """nornir vector rerank (default: sigmoid for one label; and --raw-scores) against the reference's
    logits for each (query, document) pair as the tokenizer pairs them."""
    logits, tokens = [], []
    for d in DOCUMENTS:
        ids, mask, types = encode(tok, QUERY, d)
        logits.append(float(reference(cfg, w, ids, mask, types)[0, 0]))
        tokens.append(int(ids.shape[1]))
    case = {"reference_logits": logits, "tokens": tokens}
    for key, flags, want in (("scores", [], [float(sigmoid(x)) for x in logits]), ("raw", ["--raw-scores"], logits)):
        out, error = nornir_run(nornir, "rerank", *CPU, "--model", str(folder), "--query", QUERY, *flags, *DOCUMENTS)
        if error:
            case[key] = {"error": error}
            case["max_abs_diff"] = None
            return case
        ranked = json_lines(out)
        got = {r["index"]: r["score"] for r in ranked}
        order = [r["index"] for r in ranked]
        diff = max(abs(got[i] - want[i]) for i in range(len(DOCUMENTS))) if len(got) == len(DOCUMENTS) else float("inf")
        case[key] = {"nornir": [got.get(i) for i in range(len(DOCUMENTS))], "order": order,
                     "reference_order": sorted(range(len(want)), key=lambda i: -want[i]), "max_abs_diff": diff}
    case["max_abs_diff"] = max(case["scores"]["max_abs_diff"], case["raw"]["max_abs_diff"])
    case["same_order"] = case["scores"]["order"] == case["scores"]["reference_order"] == case["raw"]["order"]
    return case


def check_sparse(nornir, folder, cfg, w, tok):
    """nornir vector embed on a SPLADE folder against log(1 + relu(logits)) max-pooled over the
    text's tokens: every term weighed above 1e-4 on either side, within 1e-4."""
    out, error = nornir_run(nornir, "embed", "--quiet", *CPU, "--model", str(folder), *SURFACE_TEXTS)
    if error:
        return {"error": error, "max_abs_diff": None}
    got = json_lines(out)
    worst, terms, top = 0.0, [], []
    for line, text in zip(got, SURFACE_TEXTS):
        ids, mask, types = encode(tok, text)
        want = np.log1p(np.maximum(reference(cfg, w, ids, mask, types)[0], 0.0)).max(0)
        mine = np.zeros_like(want)
        mine[np.array(line["indices"], dtype=np.int64)] = line["values"]
        keep = (want > 1e-4) | (mine > 1e-4)
        worst = max(worst, float(np.abs(mine - want)[keep].max()))
        terms.append(int(keep.sum()))
        top.append([int(i) for i in np.argsort(-want)[:3]] == [int(i) for i in np.argsort(-mine)[:3]])
    whole = len(got) == len(SURFACE_TEXTS)
    return {"texts": len(got), "terms": terms, "same_top3": top, "max_abs_diff": worst if whole else None}


def run_surfaces(nornir, work, tokenizer=None):
    from tokenizers import Tokenizer  # this mode only: the other modes need no tokenizer

    work = Path(work)
    home = Path(os.environ.get("NORNIR_HOME", Path.home() / ".cache/nornir"))
    tokenizer = Path(tokenizer or home / "models/all-MiniLM-L6-v2/tokenizer.json")
    tok = Tokenizer.from_file(str(tokenizer))
    tok.no_padding()
    tok.enable_truncation(MAX_SEQ)
    rng = np.random.default_rng(17)
    result = {"tokenizer": str(tokenizer), "vocab_size": SURFACE_VOCAB, "max_seq_length": MAX_SEQ,
              "embed": [], "rerank": [], "sparse": []}
    served, vectors = {}, {}
    for family, variant in SURFACE_ENCODERS:
        cfg, w = surface_checkpoint(family, variant, rng)
        source = work / f"surface-{family}-{variant}"
        write_folder(source, cfg, w, "F32")
        write_st_files(source, tokenizer, EMBEDDER_MODULES, hidden_of(cfg))
        w = rounded(w, "F32")
        base = {"family": family, "variant": variant}
        out, error = converted(nornir, source, work / f"{source.name}-onnx", [])
        if error:
            result["embed"].append(dict(base, error=error, min_cosine=None))
            continue
        tasks = JINA_TASKS if "lora_adaptations" in cfg else (None,)
        got = {}
        for task in tasks:
            case, got[task] = check_embeddings(nornir, out, cfg, w, tok, task)
            result["embed"].append(dict(base, **case))
        if "lora_adaptations" in cfg:
            a, b = got[JINA_TASKS[0]], got[JINA_TASKS[1]]
            if a is not None and b is not None:
                # the same text under another task: another adapter and another instruction
                result["embed"][-1]["cosine_to_first_task"] = [cosine(x, y) for x, y in zip(a, b)]
            _, error = nornir_run(nornir, "embed", "--quiet", *CPU, "--model", str(out), SURFACE_TEXTS[0])
            result["jina_without_task"] = error or "accepted"
            # --task is the server's, for every model it serves: this one alone
            result["jina_serve"] = (
                check_serve(nornir, {"jina-v3": out}, SURFACE_TEXTS, {"jina-v3": a}, task=JINA_TASKS[0])
                if a is not None
                else {"error": "no vectors from embed"}
            )
        elif got[None] is not None:
            name = f"{family}-{variant}"
            served[name], vectors[name] = out, got[None]
    result["serve"] = check_serve(nornir, served, SURFACE_TEXTS, vectors)

    for family, variant in SURFACE_RERANKERS:
        cfg, w = surface_checkpoint(family, variant, rng, head="reranker")
        source = work / f"surface-{family}-{variant}"
        write_folder(source, cfg, w, "F32")
        write_st_files(source, tokenizer, None, hidden_of(cfg))
        w = rounded(w, "F32")
        base = {"family": family, "variant": variant, "architecture": cfg["architectures"][0]}
        out, error = converted(nornir, source, work / f"{source.name}-onnx", [])
        result["rerank"].append(
            dict(base, error=error, max_abs_diff=None) if error else dict(base, **check_rerank(nornir, out, cfg, w, tok))
        )

    for family, variant in SURFACE_SPARSE:
        cfg, w = surface_checkpoint(family, variant, rng)
        source = work / f"surface-{family}-{variant}"
        write_folder(source, cfg, w, "F32")
        write_st_files(source, tokenizer, SPARSE_MODULES, hidden_of(cfg), splade=True)
        w = rounded(w, "F32")
        base = {"family": family, "variant": variant, "architecture": cfg["architectures"][0]}
        out, error = converted(nornir, source, work / f"{source.name}-onnx", [])
        result["sparse"].append(
            dict(base, error=error, max_abs_diff=None) if error else dict(base, **check_sparse(nornir, out, cfg, w, tok))
        )

    def good(c, key, ok):
        return c.get(key) is not None and ok(c[key])

    serve_cases = result["serve"].get("cases", []) + result.get("jina_serve", {}).get("cases", [])
    jina = [c for c in result["embed"] if "cosine_to_first_task" in c]

    def all_good(cs, key, ok, extra=lambda c: True):
        return bool(cs) and all(good(c, key, ok) and extra(c) for c in cs)

    checks = {
        "embed": all_good(result["embed"], "min_cosine", lambda v: v >= COSINE),
        "jina_tasks_differ": bool(jina) and all(max(c["cosine_to_first_task"]) < 0.999 for c in jina),
        "serve": len(serve_cases) == len(SURFACE_ENCODERS)
        and all_good(serve_cases, "min_cosine", lambda v: v >= COSINE),
        "rerank": all_good(result["rerank"], "max_abs_diff", lambda v: v <= SCORE_TOLERANCE, lambda c: c["same_order"]),
        "sparse": all_good(result["sparse"], "max_abs_diff", lambda v: v <= TOLERANCE),
    }
    result["checks"] = checks
    result["ok"] = all(checks.values())
    return result


def main():
    if len(sys.argv) == 4 and sys.argv[1] in ("synthetic", "broken", "batch"):
        run = {"synthetic": run_synthetic, "broken": run_broken, "batch": run_batch}[sys.argv[1]]
        result = run(sys.argv[2], sys.argv[3])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "surfaces":
        result = run_surfaces(*sys.argv[2:])
    elif len(sys.argv) == 2 and sys.argv[1] == "selftest":
        result = selftest()
    else:
        raise SystemExit(__doc__)
    print(json.dumps(result, indent=1, default=float))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
