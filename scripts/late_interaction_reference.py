#!/usr/bin/env python3
"""An independent check of nornir's multi-vector (late-interaction) models: PyLate ColBERT folders,
Stanford ColBERT checkpoints (converted to PyLate folders) and BGE-M3's three outputs. A float64
NumPy reference, written from the published Python code (read, never copied), runs the encoders
of scripts/convert_reference.py (BERT, XLM-RoBERTa) and scripts/families_reference.py
(ModernBERT) on the same weights and compares with what nornir prints.

  late_interaction_reference.py selftest              no nornir: MaxSim against brute force, a
                                                      padded row against the same query alone,
                                                      the prefix/expansion/attention/skiplist
                                                      rules on a tiny tokenizer, BGE-M3's sparse
                                                      and ColBERT post-processing against loops,
                                                      and each deliberate mistake (below) changing
                                                      the reference's own output
  late_interaction_reference.py synthetic NORNIR WORK every case below, random small weights
  late_interaction_reference.py broken NORNIR WORK    the same nornir outputs against a reference
                                                      that is wrong in one way at a time: each
                                                      must differ, the right one must match
  late_interaction_reference.py real NORNIR WORK MINILM_ST_DIR
                                                      all-MiniLM-L6-v2's real weights under a
                                                      random 384->128 projection, PyLate layout

Prints one JSON object; exits 1 when not ok. NORNIR is the nornir binary, WORK a scratch folder.
ORT_DYLIB_PATH must name the ONNX Runtime library (the tests pass the one `cargo xtask fetch` put in
the cache); the MiniLM tokenizer is read from the nornir cache, found as nornir finds it
($NORNIR_HOME, else $XDG_CACHE_HOME/nornir, else ~/.cache/nornir).

nornir is called as (the flags are collected in `nornir_convert`, `nornir_embed`, `nornir_rerank`):
  nornir vector convert --model SRC --output DST --force
  nornir vector embed --quiet --device cpu --threads 2 --format jsonl --model DST [--query] TEXT...
      -> per text {"vectors": [[D floats], ...]}
  nornir vector embed ... --outputs dense,sparse,multi-vector TEXT...   (BGE-M3)
      -> per text {"embedding": [...], "indices": [...], "values": [...], "vectors": [...]}
  nornir vector rerank --device cpu --threads 2 --model DST --query QUERY --no-text DOC...
      -> {"index": i, "score": s} lines, best first
(The convert form is the one docs/cli.md documents; `--quiet` is embed's -q; rerank's query is
its `--query` option.) Each text is encoded alone by the reference (no batch); nornir may batch, so this also checks that
its padding does not leak into a text's vectors.

Tolerances: token vectors, BGE-M3 dense vectors and sparse values: max |nornir - reference|
<= 1e-5 (float32 graph against float64 reference; every vector is unit length). Vector counts and
sparse index sets must be equal exactly, except that an index whose weight is under 1e-5 on both
sides may be present on one side only (relu(x) of an x near 0 can fall either way in float32).
Scores: |nornir - reference| <= 1e-5 * max(1, |reference|) (a PyLate MaxSim is a sum of up to
query_length cosines, so its float32 error grows with it). Ranking: nornir's order, read on the
reference's scores, must never go up by more than that tolerance (exact ties may swap).

What was read (public snapshots of these repositories; the NumPy below is written from the reading):

PyLate (lightonai/pylate, commit 1f1f47ce): pylate/models/colbert.py (ColBERT.__init__,
  tokenize, insert_prefix_token, encode, skiplist_mask, save), pylate/models/Dense.py
  (forward, from_stanford_weights, from_sentence_transformers), pylate/scores/colbert.py
  (colbert_scores, colbert_scores_pairwise).
  Folder: modules.json [Transformer at "", pylate.models.Dense.Dense at 1_Dense];
    1_Dense/config.json {in_features, out_features, bias false, activation_function
    "torch.nn.modules.linear.Identity"}; 1_Dense/model.safetensors `linear.weight` [D, H];
    config_sentence_transformers.json: query_prefix, document_prefix, query_length,
    document_length, attend_to_expansion_tokens, skiplist_words, do_query_expansion,
    similarity_fn_name "MaxSim" (the keys ColBERT.save writes).
  Settings as __init__ resolves them: a value missing from the config falls back to query_prefix
    "[Q] ", document_prefix "[D] ", query_length 32, document_length 180, skiplist_words
    list(string.punctuation), do_query_expansion true, attend_to_expansion_tokens false; and
    attend_to_expansion_tokens is forced false when do_query_expansion is false.
  Prefix ids: tokenizer.convert_tokens_to_ids(prefix) after add_tokens([prefix]) (a token already
    in the vocabulary keeps its id; "[Q] "/"[D] " here are already added tokens of tokenizer.json,
    so the vocabulary and the word embeddings are 2 rows longer than the base tokenizer's).
  tokenize(is_query): the Transformer's max_seq_length is set to length - 1 (length =
    query_length or document_length) on every call, so sentence_bert_config.json's
    max_seq_length is never used (one case sets it to 256 to check that); the text is tokenized
    with truncation to length - 1 (the tokenizer's [CLS] ... [SEP] inside that count, [SEP]
    kept last) and, for queries when do_query_expansion, padding="max_length" with the pad id
    replaced by the MASK id (pad_token_id = mask_token_id), attention 0, token type 0; then the
    prefix id is inserted after the first token ([CLS] [Q] ...), attention 1, token type 0; then,
    for queries when attend_to_expansion_tokens, the whole attention mask is set to 1. The text
    is stripped of surrounding whitespace by the Transformer (none of the texts here has any).
  encode: token_embeddings = Dense(last_hidden_state) = h @ linear.weight.T (no bias, Identity);
    documents keep the positions whose attention is 1 and whose id is not a skiplist id
    (skiplist ids = convert_tokens_to_ids(word) per word; every string.punctuation character is
    a single token of the MiniLM vocabulary); queries keep every position when
    do_query_expansion (the MASK positions too, attended or not), else the attended positions;
    each kept vector is L2-normalised (F.normalize, eps 1e-12).
  MaxSim: score(q, d) = sum over query vectors of the max over document vectors of q_i . d_j,
    as colbert_scores_pairwise computes it on unpadded vectors. (The batched colbert_scores
    multiplies padded document positions by 0 instead of dropping them, so a query token whose
    every similarity is negative gets 0 there: the reference uses the exact per-pair form.)
  The hidden states at expansion positions that are not attended: the encoder still computes
    them (the attention mask masks keys only), as HF's eager and sdpa BERT/ModernBERT do.
    ModernBERT under flash-attention-2 unpads them to zero instead; the reference follows the
    eager/sdpa (CPU) path. The ModernBERT case uses local_attention 16 and query_length 12 so
    that no expansion position's local window is left without an attended key (a fully masked
    softmax row is defined differently by each implementation).

Stanford ColBERT as PyLate loads it (ColBERT.__init__ when config.architectures[0] is
  "HF_ColBERT"; Dense.from_stanford_weights): config.json {"architectures": ["HF_ColBERT"],
  "model_type": "bert", BERT keys}; model.safetensors (one case pytorch_model.bin) holding
  bert.embeddings.*, bert.encoder.* (the base model's prefix "bert.") and linear.weight [D, H]
  (bias false); artifact.metadata (JSON): query_token_id -> query_prefix, doc_token_id ->
  document_prefix, query_maxlen -> query_length, doc_maxlen -> document_length,
  attend_to_mask_tokens -> attend_to_expansion_tokens; the rest (mask_punctuation, dim,
  similarity) is not read: skiplist string.punctuation and do_query_expansion true by default.
  So the Stanford case's expected behaviour is exactly that of the PyLate settings above.
  Second opinion: vLLM's vllm/model_executor/models/colbert.py (ColBERTModel.load_weights) reads
  the same tensors: "bert." stripped from the encoder's names, linear.weight [dim, hidden] as a
  projection without bias (vLLM leaves prefixes, expansion and the skiplist to its caller).

BGE-M3 (FlagOpen/FlagEmbedding, commit 7ed43d67): FlagEmbedding/inference/embedder/encoder_only/
  m3.py (encode_single_device: _process_token_weights, _process_colbert_vecs; colbert_score) and
  FlagEmbedding/finetune/embedder/encoder_only/m3/modeling.py (_dense_embedding,
  _sparse_embedding, _colbert_embedding, EncoderOnlyEmbedderM3ModelForInference.forward).
  Folder: config.json XLMRobertaModel (model_type xlm-roberta, pad_token_id 1, positions
    cumsum(ids != pad) * (ids != pad) + pad), model.safetensors (no prefix), colbert_linear.pt
    {weight [H, H], bias [H]} and sparse_linear.pt {weight [1, H], bias [1]} as torch zip
    state dicts (written by families_reference.write_torch_bin), modules.json (Transformer,
    Pooling with pooling_mode_cls_token, Normalize), 1_Pooling/config.json, an XLM-R-style
    Unigram tokenizer built here (<s>=0, <pad>=1, </s>=2, <unk>=3, <mask> last; post-processor
    "<s> $A </s>"), special_tokens_map.json, tokenizer_config.json.
  dense = normalize(h[0]) (pooling "cls", normalize_embeddings true by default in the inference
    class). sparse: token weight relu(h_i . w + b) per position; ids of cls, eos, pad and unk
    (special_tokens_map's cls_token, eos_token, pad_token, unk_token: 0, 2, 1, 3) dropped; per
    token id the max weight; only weights > 0 kept; indices ascending. ColBERT:
    colbert_linear(h[1:]) masked, then _process_colbert_vecs keeps the first tokens_num - 1 rows:
    the vectors of positions 1 .. n-1 (</s> included, <s> not), each L2-normalised.
    colbert_score(q, p) = sum_i max_j q_i . p_j / (number of query vectors). A query is encoded
    as a document is (no prefix, no expansion). Texts here stay under max_seq_length (64): no
    truncation is exercised for BGE-M3 (FlagEmbedding cuts at its own passage_max_length, 8192
    by default, not at sentence_bert_config.json's value, so a cut would test a choice, not a
    reading). One text holds characters the tokenizer lacks (<unk>, kept as a ColBERT vector,
    dropped from the sparse output) and most texts repeat some token (max, not sum).

Deliberate mistakes (`broken`): no-prefix (the prefix never inserted), prefix-appended (the
  prefix after the text's last token instead of after the first), no-expansion (queries never
  padded with MASK), expansion-pad-id (queries padded with [PAD] instead of [MASK]), attend-expansion (expansion positions attended whatever the config says),
  skiplist-ignored, no-normalisation (token vectors left unnormalised), sparse-sum (BGE-M3
  sparse weights of a repeated id summed instead of maxed), colbert-first-token (BGE-M3
  ColBERT vectors of positions 0 .. n-2, i.e. <s> included and </s> left out: same count).
"""

import json
import math
import os
import shutil
import string
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convert_reference as cr  # noqa: E402  (safetensors writer, BERT/XLM-R encoder)
import families_reference as fr  # noqa: E402  (ModernBERT, Gen, write_torch_bin, rounded)

TOLERANCE = 1e-5
SCORE_TOLERANCE = 1e-5  # relative to max(1, |score|)
NEAR_ZERO = 1e-5  # a sparse weight this small may be present on one side only
BERT_TOKENIZER_FILES = ["tokenizer.json", "special_tokens_map.json", "tokenizer_config.json", "vocab.txt"]


def nornir_home():
    """The nornir cache as nornir finds it: $NORNIR_HOME, else $XDG_CACHE_HOME/nornir, else ~/.cache/nornir."""
    if os.environ.get("NORNIR_HOME"):
        return Path(os.environ["NORNIR_HOME"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "nornir"
    return Path.home() / ".cache/nornir"


def minilm_dir():
    """all-MiniLM-L6-v2's sentence-transformers folder, as `cargo xtask fetch` unpacks it."""
    folder = nornir_home() / "models/all-MiniLM-L6-v2-st"
    if not (folder / "tokenizer.json").is_file():
        raise SystemExit(f"{folder} has no tokenizer.json: run `cargo xtask fetch` (or set NORNIR_HOME to its cache)")
    return folder
MISTAKES = [
    "no-prefix",
    "prefix-appended",
    "no-expansion",
    "expansion-pad-id",
    "attend-expansion",
    "skiplist-ignored",
    "no-normalisation",
    "sparse-sum",
    "colbert-first-token",
]

DOCUMENTS = [
    "A man is eating food.",
    "Fjords are long, narrow inlets with steep sides; glaciers carved them!",
    "Paris is the capital of France: art, food, fashion & more...",
    "Cats sleep.",
    "The quick brown fox jumps over the lazy dog while the farmer's children watch from the old "
    "wooden fence near the river bank at sunset, and nobody (not even the dog) minds.",
    "What is the capital of France? It is Paris, of course.",
    "Café crème at the bank of the river.",
]
QUERIES = [
    "what is a fjord?",
    "capital of France",
    "which animals sleep for most of the day, and why do cats sleep so much more than dogs or foxes do?",
]


# --- the reference: PyLate ---------------------------------------------------------------------


def pylate_settings(st):
    """config_sentence_transformers.json's values as ColBERT.__init__ resolves them."""
    s = {
        "query_prefix": st.get("query_prefix") if st.get("query_prefix") is not None else "[Q] ",
        "document_prefix": st.get("document_prefix") if st.get("document_prefix") is not None else "[D] ",
        "query_length": st.get("query_length") or 32,
        "document_length": st.get("document_length") or 180,
        "skiplist_words": st.get("skiplist_words") if st.get("skiplist_words") is not None else list(string.punctuation),
        "do_query_expansion": st.get("do_query_expansion") if st.get("do_query_expansion") is not None else True,
        "attend_to_expansion_tokens": bool(st.get("attend_to_expansion_tokens") or False),
    }
    if not s["do_query_expansion"]:
        s["attend_to_expansion_tokens"] = False
    return s


def stanford_settings(metadata):
    """artifact.metadata as ColBERT.__init__ reads it for an HF_ColBERT checkpoint."""
    return pylate_settings({
        "query_prefix": metadata.get("query_token_id") or "[unused0]",
        "document_prefix": metadata.get("doc_token_id") or "[unused1]",
        "query_length": metadata.get("query_maxlen"),
        "document_length": metadata.get("doc_maxlen"),
        "attend_to_expansion_tokens": metadata.get("attend_to_mask_tokens"),
    })


def token_id(tok, token):
    """convert_tokens_to_ids: the token's id, the unk id when it has none."""
    i = tok.token_to_id(token)
    if i is None:
        i = tok.token_to_id("[UNK]")
    return i


def mask_id(tok):
    """The MASK id, which ColBERT sets as the pad id for query expansion."""
    for name in ("[MASK]", "<mask>"):
        if tok.token_to_id(name) is not None:
            return tok.token_to_id(name)
    raise ValueError("no mask token")


def pylate_tokenize(tok, text, is_query, s, mistake=None):
    """(ids, attention, types) as three int64 [1, n] arrays, as ColBERT.tokenize gives them."""
    length = s["query_length"] if is_query else s["document_length"]
    prefix = s["query_prefix"] if is_query else s["document_prefix"]
    use_prefix = prefix != ""
    tok.no_padding()
    tok.enable_truncation(max_length=length - 1 if use_prefix else length)
    e = tok.encode(text)
    ids, att, types = list(e.ids), [1] * len(e.ids), list(e.type_ids)
    expand = is_query and s["do_query_expansion"] and mistake != "no-expansion"
    if expand:
        width = length - 1 if use_prefix else length
        n_pad = width - len(ids)
        ids += [mask_id(tok) if mistake != "expansion-pad-id" else tok.token_to_id("[PAD]")] * n_pad
        att += [0] * n_pad
        types += [0] * n_pad
    if use_prefix and mistake != "no-prefix":
        pid = token_id(tok, prefix)
        at = 1 if mistake != "prefix-appended" else sum(att)  # after the first / after the text
        ids.insert(at, pid)
        att.insert(at, 1)
        types.insert(at, 0)
    if is_query and (s["attend_to_expansion_tokens"] or mistake == "attend-expansion"):
        att = [1] * len(att)
    row = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
    return row(ids), row(att), row(types)


def keep_positions(tok, ids, att, is_query, s, mistake=None):
    """The positions whose vectors encode returns."""
    if is_query:
        if s["do_query_expansion"] and mistake != "no-expansion":
            return np.ones(ids.shape[1], dtype=bool)
        return att[0] == 1
    skip = {token_id(tok, w) for w in s["skiplist_words"]} if mistake != "skiplist-ignored" else set()
    return (att[0] == 1) & np.array([i not in skip for i in ids[0]])


def normalise(v):
    """F.normalize(p=2, dim=-1, eps=1e-12)."""
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def hidden_states(model, ids, att, types):
    """The encoder's last_hidden_state [B, L, H], float64."""
    cfg, w = model["config"], model["weights"]
    if cfg["model_type"] == "modernbert":
        return fr.modernbert(cfg, w, ids, att, types)
    return cr.encoder(w, cfg, cr.prefix_of(w), ids, att, types)


def pylate_vectors(model, text, is_query, mistake=None):
    """ColBERT.encode of one text: [n_kept, D]."""
    s, tok = model["settings"], model["tokenizer"]
    ids, att, types = pylate_tokenize(tok, text, is_query, s, mistake)
    if model["config"]["model_type"] == "modernbert":
        window_has_key(model["config"], att)
    h = hidden_states(model, ids, att, types)[0]
    v = (h @ model["dense"].T)[keep_positions(tok, ids, att, is_query, s, mistake)]
    return v if mistake == "no-normalisation" else normalise(v)


def window_has_key(cfg, att):
    """ModernBERT: every position's local window must hold an attended key (see the docstring)."""
    half, kept = cfg["local_attention"] // 2, np.flatnonzero(att[0])
    for p in range(att.shape[1]):
        if not np.any(np.abs(kept - p) <= half):
            raise ValueError(f"position {p}: no attended key within {half}: the case is ill-posed")


def maxsim(q, d, mean=False):
    """sum_i max_j q_i . d_j (PyLate); divided by the number of query vectors (FlagEmbedding)."""
    total = float((q @ d.T).max(1).sum())
    return total / q.shape[0] if mean else total


# --- the reference: BGE-M3 ---------------------------------------------------------------------


def m3_outputs(model, text, mistake=None):
    """(dense [H], sparse {id: weight}, ColBERT vectors [n-1, H]) as BGEM3FlagModel encodes."""
    tok = model["tokenizer"]
    tok.no_padding()
    tok.enable_truncation(max_length=model["max_length"])
    e = tok.encode(text)
    ids = np.array([e.ids], dtype=np.int64)
    att = np.ones_like(ids)
    h = hidden_states(model, ids, att, np.zeros_like(ids))[0]
    dense = normalise(h[0])
    weights = np.maximum(h @ model["sparse_weight"][0] + model["sparse_bias"][0], 0.0)
    sparse = {}
    for wt, i in zip(weights, e.ids):
        if i in model["unused_ids"] or not wt > 0:
            continue
        if mistake == "sparse-sum":
            sparse[i] = sparse.get(i, 0.0) + wt
        elif wt > sparse.get(i, 0.0):
            sparse[i] = wt
    n = len(e.ids)
    rows = h[0 : n - 1] if mistake == "colbert-first-token" else h[1:n]
    colbert = rows @ model["colbert_weight"].T + model["colbert_bias"]
    return dense, sparse, (colbert if mistake == "no-normalisation" else normalise(colbert))


# --- checkpoints on disk -----------------------------------------------------------------------


def bert_config(arch, vocab, hidden=32, layers=2, heads=4, inter=64, positions=64):
    return {
        "architectures": [arch],
        "model_type": "bert",
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": positions,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "type_vocab_size": 2,
        "vocab_size": vocab,
    }


def encoder_weights(cfg, prefix, rng):
    """BertModel / XLMRobertaModel tensors as transformers names them; std 1/sqrt(fan-in)."""
    g = fr.Gen(rng)
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    g.emb(prefix + "embeddings.word_embeddings", cfg["vocab_size"], h)
    g.emb(prefix + "embeddings.position_embeddings", cfg["max_position_embeddings"], h)
    g.emb(prefix + "embeddings.token_type_embeddings", cfg["type_vocab_size"], h)
    g.norm(prefix + "embeddings.LayerNorm", h)
    for i in range(cfg["num_hidden_layers"]):
        l = f"{prefix}encoder.layer.{i}."
        for n in ("query", "key", "value"):
            g.dense(l + "attention.self." + n, h, h)
        g.dense(l + "attention.output.dense", h, h)
        g.norm(l + "attention.output.LayerNorm", h)
        g.dense(l + "intermediate.dense", inter, h)
        g.dense(l + "output.dense", h, inter)
        g.norm(l + "output.LayerNorm", h)
    return g.w


def modernbert_checkpoint(vocab, rng):
    """families_reference's ModernBertModel, its vocabulary the BERT tokenizer's."""
    cfg, w = fr.synthetic_modernbert("model", "F32", rng)
    cfg = dict(cfg, vocab_size=vocab, pad_token_id=0, bos_token_id=101, cls_token_id=101, eos_token_id=102,
               sep_token_id=102, local_attention=16)
    w["embeddings.tok_embeddings.weight"] = rng.normal(0, 1.0, (vocab, cfg["hidden_size"]))
    return cfg, w


def copy_bert_tokenizer(folder, source, added=()):
    from tokenizers import Tokenizer

    for name in BERT_TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy(source / name, folder / name)
    if added:
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        before = tok.get_vocab_size(with_added_tokens=True)
        tok.add_tokens(list(added))
        assert tok.get_vocab_size(with_added_tokens=True) == before + len(added)
        tok.save(str(folder / "tokenizer.json"))
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def write_json(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1))


ST_VERSION = {"sentence_transformers": "4.1.0", "transformers": "4.48.0", "pytorch": "2.5.1", "pylate": "1.2.0"}


def write_pylate_folder(folder, cfg, w, dense, s, max_seq_length=None):
    """The PyLate layout: the encoder at the root, Dense in 1_Dense, PyLate's settings."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", cfg)
    cr.write_safetensors(folder / "model.safetensors", w, "F32")
    write_json(folder / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
    ])
    d, h = dense.shape
    write_json(folder / "1_Dense" / "config.json", {"in_features": h, "out_features": d, "bias": False,
                                                    "activation_function": "torch.nn.modules.linear.Identity"})
    cr.write_safetensors(folder / "1_Dense" / "model.safetensors", {"linear.weight": dense}, "F32")
    write_json(folder / "config_sentence_transformers.json", dict(
        {"__version__": ST_VERSION, "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "MaxSim"}, **s))
    length = max_seq_length or s["document_length"] - 1
    write_json(folder / "sentence_bert_config.json", {"max_seq_length": length, "do_lower_case": False})


def write_stanford_folder(folder, cfg, w, dense, metadata, torch_bin=False):
    """A Stanford ColBERT checkpoint: HF_ColBERT config, bert.* + linear.weight, artifact.metadata."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", cfg)
    tensors = {"bert." + k: v for k, v in w.items()}
    tensors["linear.weight"] = dense
    if torch_bin:
        fr.write_torch_bin(folder / "pytorch_model.bin", tensors)
    else:
        cr.write_safetensors(folder / "model.safetensors", tensors, "F32")
    write_json(folder / "artifact.metadata", metadata)


XLMR_WORDS = sorted(set(
    "the a an is of and to in on at for with what which why how do does cats cat sleep sleeps dogs dog fox "
    "foxes day most much more than capital france paris fjord fjords long narrow inlet inlets steep sides "
    "glacier glaciers carved them man eating food art fashion it course quick brown jumps over lazy "
    "river bank sunset old wooden fence near nobody even minds farmer children watch from not while "
    "animals or so are".split()))
XLMR_CHARS = string.ascii_lowercase + string.ascii_uppercase + string.digits + string.punctuation


def xlmr_tokenizer(folder):
    """A small XLM-R-style Unigram tokenizer: <s>=0 <pad>=1 </s>=2 <unk>=3, pieces, <mask> last."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -4.0)]
    vocab += [("▁" + w, -2.0 - 0.01 * len(w)) for w in XLMR_WORDS]
    vocab += [(c, -8.0) for c in XLMR_CHARS] + [("▁" + c, -7.0) for c in XLMR_CHARS]
    vocab.append(("<mask>", 0.0))
    tok = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<s>", "<pad>", "</s>", "<unk>")]
                           + [AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
    tok.save(str(folder / "tokenizer.json"))
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
                "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}
    write_json(folder / "special_tokens_map.json", specials)
    write_json(folder / "tokenizer_config.json", dict(specials, tokenizer_class="XLMRobertaTokenizer",
                                                      model_max_length=8192, clean_up_tokenization_spaces=True))
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def bge_m3_case(work, rng):
    """A small BGE-M3 folder and its reference model."""
    folder = work / "bge-m3"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    tok = xlmr_tokenizer(folder)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    h, max_seq = 32, 64
    cfg = dict(bert_config("XLMRobertaModel", vocab, hidden=h, positions=max_seq + 2), model_type="xlm-roberta",
               pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1, layer_norm_eps=1e-5)
    w = encoder_weights(cfg, "", rng)
    heads = {"colbert_weight": rng.normal(0, 1 / math.sqrt(h), (h, h)), "colbert_bias": rng.normal(0, 0.1, (h,)),
             "sparse_weight": rng.normal(0, 1 / math.sqrt(h), (1, h)), "sparse_bias": np.array([0.05])}
    write_json(folder / "config.json", cfg)
    cr.write_safetensors(folder / "model.safetensors", w, "F32")
    fr.write_torch_bin(folder / "colbert_linear.pt", {"weight": heads["colbert_weight"], "bias": heads["colbert_bias"]})
    fr.write_torch_bin(folder / "sparse_linear.pt", {"weight": heads["sparse_weight"], "bias": heads["sparse_bias"]})
    write_json(folder / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    write_json(folder / "1_Pooling" / "config.json", {
        "word_embedding_dimension": h, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False})
    write_json(folder / "sentence_bert_config.json", {"max_seq_length": max_seq, "do_lower_case": False})
    model = {"kind": "bge-m3", "config": cfg, "weights": fr.rounded(w, "F32"), "tokenizer": tok,
             "max_length": max_seq, "unused_ids": {0, 2, 1, 3}}
    model.update({k: fr.rounded({"x": v}, "F32")["x"] for k, v in heads.items()})
    return {"name": "bge-m3", "source": folder, "model": model, "convert": True}


def pylate_cases(work, rng, tokenizer_source):
    """(name, source folder, reference model, needs convert) for each PyLate and Stanford case."""
    cases = []
    base = {"query_prefix": "[unused0]", "document_prefix": "[unused1]", "query_length": 12, "document_length": 20,
            "attend_to_expansion_tokens": False, "skiplist_words": list(string.punctuation),
            "do_query_expansion": True}
    variants = [
        ("pylate-bert-unused", "bert", {}, (), None),
        ("pylate-bert-QD-attend", "bert", {"query_prefix": "[Q] ", "document_prefix": "[D] ",
                                           "attend_to_expansion_tokens": True}, ("[Q] ", "[D] "), None),
        ("pylate-bert-no-expansion", "bert", {"do_query_expansion": False, "attend_to_expansion_tokens": True}, (), None),
        ("pylate-bert-custom-skiplist", "bert", {"skiplist_words": ["the", "of", "and", ","], "query_length": 16,
                                                 "document_length": 24}, (), 256),
        ("pylate-modernbert", "modernbert", {}, (), None),
    ]
    for name, kind, change, added, max_seq in variants:
        folder = work / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        tok = copy_bert_tokenizer(folder, tokenizer_source, added)
        vocab = tok.get_vocab_size(with_added_tokens=True)
        if kind == "bert":
            cfg = bert_config("BertModel", vocab)
            w = encoder_weights(cfg, "", rng)
        else:
            cfg, w = modernbert_checkpoint(vocab, rng)
        hidden = cfg["hidden_size"]
        dense = rng.normal(0, 1 / math.sqrt(hidden), (24, hidden))
        st = dict(base, **change)
        write_pylate_folder(folder, cfg, w, dense, st, max_seq)
        model = {"kind": "pylate", "config": cfg, "weights": fr.rounded(w, "F32"), "tokenizer": tok,
                 "dense": fr.rounded({"x": dense}, "F32")["x"], "settings": pylate_settings(st)}
        cases.append({"name": name, "source": folder, "model": model, "convert": True})
    for name, torch_bin in (("stanford-safetensors", False), ("stanford-bin", True)):
        folder = work / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        tok = copy_bert_tokenizer(folder, tokenizer_source)
        cfg = dict(bert_config("HF_ColBERT", tok.get_vocab_size(with_added_tokens=True)), _name_or_path="colbert-ir/colbertv2.0")
        w = encoder_weights(cfg, "", rng)
        dense = rng.normal(0, 1 / math.sqrt(cfg["hidden_size"]), (16, cfg["hidden_size"]))
        metadata = {"query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_token": "[Q]", "doc_token": "[D]",
                    "ncells": None, "centroid_score_threshold": None, "ndocs": None, "index_path": None, "nbits": 1,
                    "kmeans_niters": 20, "resume": False, "similarity": "cosine", "bsize": 32, "accumsteps": 1,
                    "lr": 3e-06, "maxsteps": 400000, "save_every": None, "warmup": 20000, "warmup_bert": None,
                    "relu": False, "nway": 64, "use_ib_negatives": True, "reranker": False, "distillation_alpha": 1.0,
                    "ignore_scores": False, "model_name": None, "query_maxlen": 12, "attend_to_mask_tokens": False,
                    "interaction": "colbert", "dim": 16, "doc_maxlen": 20, "mask_punctuation": True,
                    "checkpoint": "bert-base-uncased"}
        write_stanford_folder(folder, cfg, w, dense, metadata, torch_bin)
        weights = fr.rounded(w, "F32")
        model = {"kind": "pylate", "config": cfg, "weights": weights, "tokenizer": tok,
                 "dense": fr.rounded({"x": dense}, "F32")["x"], "settings": stanford_settings(metadata)}
        cases.append({"name": name, "source": folder, "model": model, "convert": True})
    return cases


# --- nornir ------------------------------------------------------------------------------------


def nornir_env():
    if not os.environ.get("ORT_DYLIB_PATH"):
        raise SystemExit("set ORT_DYLIB_PATH to the ONNX Runtime library nornir should load (the tests pass the cached CPU one)")
    return dict(os.environ, NORNIR_HOME=str(nornir_home()))


def nornir_call(nornir, *args):
    """`nornir vector ARGS`: (stdout, None) or (None, the error)."""
    done = subprocess.run([nornir, "vector", *args], capture_output=True, text=True, env=nornir_env())
    if done.returncode != 0:
        return None, f"nornir vector {args[0]}: exit {done.returncode}: {done.stderr.strip()[-1500:]}"
    return done.stdout, None


CPU = ["--device", "cpu", "--threads", "2"]


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def nornir_convert(nornir, source, out):
    return nornir_call(nornir, "convert", "--model", str(source), "--output", str(out), "--force")


def nornir_embed(nornir, folder, texts, query=False, outputs=None):
    args = ["embed", "--quiet", *CPU, "--format", "jsonl", "--model", str(folder)]
    args += ["--query"] if query else []
    args += ["--outputs", outputs] if outputs else []
    out, error = nornir_call(nornir, *args, *texts)
    return (json_lines(out), None) if error is None else (None, error)


def nornir_rerank(nornir, folder, query, documents):
    out, error = nornir_call(nornir, "rerank", *CPU, "--model", str(folder), "--query", query, "--no-text", *documents)
    return (json_lines(out), None) if error is None else (None, error)


def collect(nornir, case, work, documents, queries):
    """Everything nornir prints for a case: {"docs", "queries", "rerank", "error"}."""
    got = {"error": None}
    folder = case["source"]
    if case["convert"]:
        folder = work / (case["name"] + "-onnx")
        _, error = nornir_convert(nornir, case["source"], folder)
        if error:
            return dict(got, error=error)
    got["folder"] = str(folder)
    bge = case["model"]["kind"] == "bge-m3"
    got["docs"], error = nornir_embed(nornir, folder, documents, outputs="dense,sparse,multi-vector" if bge else None)
    if error:
        return dict(got, error=error)
    if not bge:
        got["queries"], error = nornir_embed(nornir, folder, queries, query=True)
        if error:
            return dict(got, error=error)
    got["rerank"] = []
    for q in queries:
        ranked, error = nornir_rerank(nornir, folder, q, documents)
        if error:
            return dict(got, error=error)
        got["rerank"].append(ranked)
    return got


# --- comparing ---------------------------------------------------------------------------------


def vectors_difference(got, want):
    """(max |got - want| over a list of texts' vector lists, counts got, counts wanted)."""
    counts_got = [len(g) if g is not None else None for g in got]
    counts_want = [len(v) for v in want]
    if counts_got != counts_want:
        return math.inf, counts_got, counts_want
    worst = 0.0
    for g, v in zip(got, want):
        g = np.array(g, dtype=np.float64).reshape(len(g), -1)
        if g.shape != v.shape:
            return math.inf, counts_got, counts_want
        if len(v):
            worst = max(worst, float(np.abs(g - v).max()))
    return worst, counts_got, counts_want


def rerank_difference(ranked, want):
    """(max relative score difference, whether nornir's order holds on the reference's scores)."""
    got = {r["index"]: r["score"] for r in ranked}
    if sorted(got) != list(range(len(want))):
        return math.inf, False
    diff = max(abs(got[i] - want[i]) / max(1.0, abs(want[i])) for i in range(len(want)))
    order = [r["index"] for r in ranked]
    scores = [got[i] for i in order]
    ordered = all(a >= b for a, b in zip(scores, scores[1:]))  # best first, as printed
    holds = all(want[a] >= want[b] - SCORE_TOLERANCE * max(1.0, abs(want[a])) for a, b in zip(order, order[1:]))
    return diff, ordered and holds


def sparse_difference(got, want):
    """(max value difference, index sets equal apart from near-zero reference weights)."""
    g = dict(zip(got["indices"], got["values"]))
    if list(got["indices"]) != sorted(got["indices"]):
        return math.inf, False
    only = set(g) ^ set(want)
    same = all(want.get(i, 0.0) < NEAR_ZERO and g.get(i, 0.0) < NEAR_ZERO for i in only)
    diff = max([abs(g.get(i, 0.0) - want.get(i, 0.0)) for i in set(g) | set(want)] or [0.0])
    return diff, same


def compare(case, got, documents, queries, mistake=None):
    """The case's nornir outputs against the reference (with `mistake`, a wrong one)."""
    model = case["model"]
    out = {"case": case["name"]}
    if got["error"]:
        return dict(out, error=got["error"], ok=False)
    ok = True
    if model["kind"] == "bge-m3":
        refs = [m3_outputs(model, t, mistake) for t in documents]
        if len(got["docs"]) != len(documents):
            return dict(out, error=f"{len(got['docs'])} lines for {len(documents)} texts", ok=False)
        dense = max(float(np.abs(np.array(g["embedding"]) - r[0]).max()) if len(g["embedding"]) == len(r[0]) else math.inf
                    for g, r in zip(got["docs"], refs))
        sparse = [sparse_difference(g, r[1]) for g, r in zip(got["docs"], refs)]
        vec, cg, cw = vectors_difference([g["vectors"] for g in got["docs"]], [r[2] for r in refs])
        out.update(dense_max_abs_diff=dense, sparse_max_abs_diff=max(d for d, _ in sparse),
                   sparse_same_indices=all(s for _, s in sparse), sparse_terms=[len(r[1]) for r in refs],
                   vectors_max_abs_diff=vec, vector_counts=cg, reference_counts=cw)
        ok = dense <= TOLERANCE and out["sparse_max_abs_diff"] <= TOLERANCE and out["sparse_same_indices"] and vec <= TOLERANCE
        query_vectors = [m3_outputs(model, q, mistake)[2] for q in queries]
        doc_vectors = [r[2] for r in refs]
        mean = True
    else:
        doc_vectors = [pylate_vectors(model, t, False, mistake) for t in documents]
        query_vectors = [pylate_vectors(model, q, True, mistake) for q in queries]
        d, cg, cw = vectors_difference([g.get("vectors") for g in got["docs"]], doc_vectors) \
            if len(got["docs"]) == len(documents) else (math.inf, None, None)
        q, qg, qw = vectors_difference([g.get("vectors") for g in got["queries"]], query_vectors) \
            if len(got["queries"]) == len(queries) else (math.inf, None, None)
        out.update(document_max_abs_diff=d, document_counts=cg, reference_document_counts=cw,
                   query_max_abs_diff=q, query_counts=qg, reference_query_counts=qw)
        ok = d <= TOLERANCE and q <= TOLERANCE
        mean = False
    scores, orders = [], []
    for ranked, qv in zip(got["rerank"], query_vectors):
        want = [maxsim(qv, dv, mean) for dv in doc_vectors]
        diff, holds = rerank_difference(ranked, want)
        scores.append(diff)
        orders.append(holds)
    out.update(score_max_rel_diff=max(scores), same_ranking=all(orders))
    out["ok"] = bool(ok and out["score_max_rel_diff"] <= SCORE_TOLERANCE and out["same_ranking"])
    return out


def clean(obj):
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clean(v) for v in obj]
    if isinstance(obj, float) and math.isinf(obj):
        return "inf"
    return obj


def all_cases(work, rng, tokenizer_source=None):
    return pylate_cases(work, rng, tokenizer_source or minilm_dir()) + [bge_m3_case(work, rng)]


def run_synthetic(nornir, work, mistakes=()):
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(50)
    cases = all_cases(work, rng)
    collected = [(c, collect(nornir, c, work, DOCUMENTS, QUERIES)) for c in cases]
    results = [compare(c, g, DOCUMENTS, QUERIES) for c, g in collected]
    result = {"mode": "synthetic", "cases": results, "ok": all(r["ok"] for r in results)}
    if mistakes:
        broken = {}
        for m in mistakes:
            per_case = [compare(c, g, DOCUMENTS, QUERIES, m) for c, g in collected if not g["error"]]
            differ = [r["case"] for r in per_case if not r["ok"]]
            broken[m] = {"differs": bool(differ) and len(per_case) == len(cases), "cases_that_differ": differ,
                         "details": [r for r in per_case if not r["ok"]]}
        result.update(mode="broken", right_reference_ok=result["ok"], mistakes=broken)
        result["ok"] = result["ok"] and all(b["differs"] for b in broken.values())
    return result


def run_broken(nornir, work):
    return run_synthetic(nornir, work, MISTAKES)


REAL_DOCUMENTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "Fjords are long, narrow inlets with steep sides, created by glacial erosion.",
    "Norway's coastline is famous for its deep fjords and high mountains.",
    "Paris is the capital and most populous city of France.",
    "The Eiffel Tower was completed in 1889 for the World's Fair.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "The mitochondria is the powerhouse of the cell.",
    "Python is a popular programming language for data science.",
    "Rust guarantees memory safety without a garbage collector.",
    "The stock market fell sharply after the announcement.",
    "A cheetah can run faster than any other land animal.",
    "Mount Everest is the highest mountain above sea level.",
]
REAL_QUERIES = ["what is a fjord?", "which city is the capital of France?", "someone playing a musical instrument"]


def run_real(nornir, work, minilm):
    work, minilm = Path(work), Path(minilm)
    from tokenizers import Tokenizer

    folder = work / "real-minilm-colbert"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cfg = json.loads((minilm / "config.json").read_text())
    shutil.copy(minilm / "model.safetensors", folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    copy_bert_tokenizer(folder, minilm)
    hidden = cfg["hidden_size"]
    rng = np.random.default_rng(384)
    dense = fr.rounded({"x": rng.normal(0, 1 / math.sqrt(hidden), (128, hidden))}, "F32")["x"]
    st = {"query_prefix": "[unused0]", "document_prefix": "[unused1]", "query_length": 32, "document_length": 180,
          "attend_to_expansion_tokens": False, "skiplist_words": list(string.punctuation), "do_query_expansion": True}
    d, h = dense.shape
    write_json(folder / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
    ])
    write_json(folder / "1_Dense" / "config.json", {"in_features": h, "out_features": d, "bias": False,
                                                    "activation_function": "torch.nn.modules.linear.Identity"})
    cr.write_safetensors(folder / "1_Dense" / "model.safetensors", {"linear.weight": dense}, "F32")
    write_json(folder / "config_sentence_transformers.json", dict(
        {"__version__": ST_VERSION, "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "MaxSim"}, **st))
    write_json(folder / "sentence_bert_config.json", {"max_seq_length": 179, "do_lower_case": False})
    model = {"kind": "pylate", "config": cfg, "weights": cr.read_safetensors(minilm / "model.safetensors"),
             "tokenizer": Tokenizer.from_file(str(folder / "tokenizer.json")), "dense": dense,
             "settings": pylate_settings(st)}
    case = {"name": "real-minilm", "source": folder, "model": model, "convert": True}
    got = collect(nornir, case, work, REAL_DOCUMENTS, REAL_QUERIES)
    r = compare(case, got, REAL_DOCUMENTS, REAL_QUERIES)
    if not got["error"]:
        r["rankings"] = [[x["index"] for x in ranked] for ranked in got["rerank"]]
    return {"mode": "real", "cases": [r], "ok": r["ok"]}


# --- selftest ----------------------------------------------------------------------------------


def tiny_tokenizer():
    """An in-memory BERT-style WordPiece tokenizer: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4
    [unused0]=5 [unused1]=6, then words and punctuation."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]
    words += "a b c d e f g the of and".split() + list(string.punctuation)
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok, {w: i for i, w in enumerate(words)}


def selftest():
    checks = []
    rng = np.random.default_rng(7)

    def record(name, value, limit=1e-10):
        checks.append({"check": name, "value": float(value), "ok": bool(value <= limit)})

    def equal(name, got, want):
        checks.append({"check": name, "got": got, "want": want, "ok": got == want})

    # MaxSim against loops
    for nq, nd in ((1, 1), (5, 9), (12, 3)):
        q, d = normalise(rng.normal(size=(nq, 8))), normalise(rng.normal(size=(nd, 8)))
        brute = sum(max(sum(q[i, k] * d[j, k] for k in range(8)) for j in range(nd)) for i in range(nq))
        record(f"maxsim sum {nq}x{nd}", abs(maxsim(q, d) - brute))
        record(f"maxsim mean {nq}x{nd}", abs(maxsim(q, d, mean=True) - brute / nq))

    # the tokenization rules on a tiny tokenizer
    tok, v = tiny_tokenizer()
    s = pylate_settings({"query_prefix": "[unused0]", "document_prefix": "[unused1]", "query_length": 8,
                         "document_length": 6, "attend_to_expansion_tokens": False})
    ids, att, types = pylate_tokenize(tok, "a b", True, s)
    equal("query: [CLS] [Q] a b [SEP] then MASK to query_length", ids[0].tolist(), [2, 5, v["a"], v["b"], 3, 4, 4, 4])
    equal("query: expansion not attended", att[0].tolist(), [1, 1, 1, 1, 1, 0, 0, 0])
    equal("query: token types 0", types[0].tolist(), [0] * 8)
    equal("query: every position kept", keep_positions(tok, ids, att, True, s).tolist(), [True] * 8)
    ids, att, _ = pylate_tokenize(tok, "a b", True, dict(s, attend_to_expansion_tokens=True))
    equal("query: attend_to_expansion_tokens attends all", att[0].tolist(), [1] * 8)
    ids, att, _ = pylate_tokenize(tok, "a b c d e f g a b", True, s)
    equal("long query: cut to query_length - 1, [SEP] last, then the prefix",
          ids[0].tolist(), [2, 5, v["a"], v["b"], v["c"], v["d"], v["e"], 3])
    ns = pylate_settings({"query_prefix": "[unused0]", "query_length": 8, "do_query_expansion": False,
                          "attend_to_expansion_tokens": True})
    equal("no expansion forces attend_to_expansion_tokens false", ns["attend_to_expansion_tokens"], False)
    ids, att, _ = pylate_tokenize(tok, "a b", True, ns)
    equal("query without expansion: no MASK", ids[0].tolist(), [2, 5, v["a"], v["b"], 3])
    ids, att, _ = pylate_tokenize(tok, "a , b . c d e", False, s)
    equal("document: cut to document_length - 1 then [D] after [CLS]", ids[0].tolist(),
          [2, 6, v["a"], v[","], v["b"], 3])
    equal("document: punctuation skipped", keep_positions(tok, ids, att, False, s).tolist(),
          [True, True, True, False, True, True])
    cs = dict(s, skiplist_words=["the", "of"])
    ids, att, _ = pylate_tokenize(tok, "the a, of", False, dict(cs, document_length=10))
    equal("custom skiplist: only its words skipped", keep_positions(tok, ids, att, False, cs).tolist(),
          [True, True, False, True, True, False, True])
    d = pylate_settings({})
    equal("defaults", [d["query_prefix"], d["document_prefix"], d["query_length"], d["document_length"],
                       d["do_query_expansion"], d["attend_to_expansion_tokens"], len(d["skiplist_words"])],
          ["[Q] ", "[D] ", 32, 180, True, False, 32])
    st = stanford_settings({"query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_maxlen": 12,
                            "doc_maxlen": 20, "attend_to_mask_tokens": False, "mask_punctuation": True})
    equal("stanford metadata", [st["query_prefix"], st["document_prefix"], st["query_length"], st["document_length"],
                                st["attend_to_expansion_tokens"], st["do_query_expansion"]],
          ["[unused0]", "[unused1]", 12, 20, False, True])
    tok2 = tiny_tokenizer()[0]
    n = tok2.get_vocab_size(with_added_tokens=True)
    tok2.add_tokens(["[Q] ", "[D] "])
    equal("added [Q] / [D]: ids n and n+1", [tok2.token_to_id("[Q] "), tok2.token_to_id("[D] ")], [n, n + 1])

    # the encoders: a padded row equals the same text alone (expansion rows included)
    vocab = len(v)
    bert = bert_config("BertModel", vocab)
    models = {"bert": (bert, fr.rounded(encoder_weights(bert, "", rng), "F32"))}
    mcfg, mw = modernbert_checkpoint(vocab, rng)
    models["modernbert"] = (mcfg, fr.rounded(mw, "F32"))
    xcfg = dict(bert, architectures=["XLMRobertaModel"], model_type="xlm-roberta", pad_token_id=1, type_vocab_size=1,
                layer_norm_eps=1e-5)
    models["xlm-roberta"] = (xcfg, fr.rounded(encoder_weights(xcfg, "", rng), "F32"))
    q = pylate_tokenize(tok, "a b", True, s)
    for name, (cfg, w) in models.items():
        m = {"config": cfg, "weights": w}
        alone = hidden_states(m, *q)[0]
        pad = cfg["pad_token_id"]
        ids = np.concatenate([np.concatenate([q[0], np.full((1, 5), pad)], 1), rng.integers(7, vocab, (1, 13))])
        att = np.concatenate([np.concatenate([q[1], np.zeros((1, 5), np.int64)], 1), np.ones((1, 13), np.int64)])
        both = hidden_states(m, ids, att, np.zeros_like(ids))[0, :8]
        record(f"{name}: padded query row = alone (expansion rows too)", np.abs(both - alone).max())

    # BGE-M3 post-processing against loops, on a tiny XLM-R model
    m3 = {"config": xcfg, "weights": models["xlm-roberta"][1], "max_length": 16, "unused_ids": {0, 2, 1, 3},
          "colbert_weight": rng.normal(0, 0.2, (32, 32)), "colbert_bias": rng.normal(0, 0.1, (32,)),
          "sparse_weight": rng.normal(0, 0.2, (1, 32)), "sparse_bias": np.array([0.05])}

    class Ids:  # a stand-in tokenizer: fixed ids with a repeated one, an <unk> and a <pad>-free row
        ids = [0, 9, 12, 9, 3, 15, 9, 2]

        def no_padding(self):
            pass

        def enable_truncation(self, max_length):
            pass

        def encode(self, text):
            return self

    m3["tokenizer"] = Ids()
    dense, sparse, colbert = m3_outputs(m3, "x")
    h = hidden_states(m3, np.array([Ids.ids]), np.ones((1, 8), np.int64), np.zeros((1, 8), np.int64))[0]
    loop = {}
    for p, i in enumerate(Ids.ids):
        wt = max(0.0, float(h[p] @ m3["sparse_weight"][0] + 0.05))
        if i not in (0, 1, 2, 3) and wt > 0:
            loop[i] = max(loop.get(i, 0.0), wt)
    equal("bge-m3 sparse ids", sorted(sparse), sorted(loop))
    record("bge-m3 sparse values", max([abs(sparse[i] - loop[i]) for i in loop] or [0.0]))
    record("bge-m3 dense = normalised h[0]", np.abs(dense - h[0] / np.linalg.norm(h[0])).max())
    equal("bge-m3 colbert: tokens_num - 1 vectors", len(colbert), len(Ids.ids) - 1)
    c = h[1:] @ m3["colbert_weight"].T + m3["colbert_bias"]
    record("bge-m3 colbert: positions 1..n-1, normalised", np.abs(colbert - c / np.linalg.norm(c, axis=1, keepdims=True)).max())

    # each mistake changes the reference's output somewhere (so `broken` can catch it)
    pm = {"kind": "pylate", "config": bert, "weights": models["bert"][1], "tokenizer": tok,
          "dense": rng.normal(0, 0.2, (12, 32)), "settings": s}
    texts = ["a , b . c", "a b"]

    def pylate_out(mistake, settings):
        mm = dict(pm, settings=settings)
        return [pylate_vectors(mm, t, False, mistake) for t in texts] + [pylate_vectors(mm, t, True, mistake) for t in texts]

    def differs(a, b):
        return any(x.shape != y.shape or np.abs(x - y).max() > 1e-6 for x, y in zip(a, b))

    for mistake in MISTAKES:
        if mistake in ("sparse-sum", "colbert-first-token"):
            a, b = m3_outputs(m3, "x"), m3_outputs(m3, "x", mistake)
            diff = a[1] != b[1] or a[2].shape != b[2].shape or np.abs(a[2] - b[2]).max() > 1e-6
        else:
            settings = dict(s, attend_to_expansion_tokens=False)
            diff = differs(pylate_out(None, settings), pylate_out(mistake, settings))
        checks.append({"check": f"mistake {mistake} changes the reference", "ok": bool(diff)})
    return {"mode": "selftest", "checks": checks, "ok": all(c["ok"] for c in checks)}


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "selftest":
        result = selftest()
    elif len(sys.argv) == 4 and sys.argv[1] in ("synthetic", "broken"):
        result = (run_synthetic if sys.argv[1] == "synthetic" else run_broken)(sys.argv[2], sys.argv[3])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "real":
        result = run_real(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) == 5 else minilm_dir())
    else:
        raise SystemExit(__doc__)
    print(json.dumps(clean(result), indent=1, default=float))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
