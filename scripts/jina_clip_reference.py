#!/usr/bin/env python3
"""An independent NumPy reference for jina-clip (JinaCLIPModel: jina-clip-v2, an EVA02 vision tower
and the XLM-RoBERTa-flash / jina-embeddings-v3 text tower with LoRA adapters): small random
checkpoints laid out as the published one, open_clip/torchvision image preprocessing on Pillow,
and float64 get_image_features / get_text_features. No nornir code used, no torch.

  jina_clip_reference.py make VARIANT OUT [--seed N] [--rope-buffers]
                        jina-clip | jina-clip-head | jina-clip-proj: config.json,
                        model.safetensors (float32), preprocessor_config.json, tokenizer.json,
                        tokenizer_config.json, special_tokens_map.json
  jina_clip_reference.py images OUT               image_reference.py's image set (fixed seed)
  jina_clip_reference.py pixels FOLDER OUT.npy IMAGE... [--entry processor|encode_image]
                        pixel_values [N,3,S,S] float32 (np.save)
  jina_clip_reference.py embed FOLDER --images .. --texts .. [--mistake NAME] [--entry ..]
                        {"images", "texts"} unnormalised features, input_ids, the attention mask
                        HFTextEncoder derives, and the largest batched-vs-alone difference
  jina_clip_reference.py selftest WORK            all of it, batch invariance, every mistake
Prints one JSON object; exits 1 on failure. Mistakes: mean-std-swapped, bilinear, no-subln,
no-rope, rope-halves, convert-first, wrong-pool, no-lora, plus no-intp-freq and crop-floor.

Read (search index; written from the reading, not copied):
  jina's modeling_clip.py (JinaCLIPModel, _build_text_tower, _build_vision_tower,
  get_text_features / get_image_features, encode_text / encode_image), configuration_clip.py
  (JinaCLIPConfig / JinaCLIPTextConfig / JinaCLIPVisionConfig defaults), hf_model.py
  (HFTextEncoder, poolers, proj), processing_clip.py (JinaCLIPImageProcessor), custom_st.py
  (jina's sentence-transformers wrapper); jina's xlm-roberta-flash-implementation:
  configuration_xlm_roberta.py (XLMRobertaFlashConfig, the newer defaults), modeling_lora.py
  (LoRAParametrization, XLMRobertaLoRA), modeling_xlm_roberta.py (XLMRobertaModel, encoder,
  create_mixer_cls / create_mlp_cls / create_block), embedding.py (XLMRobertaEmbeddings).
  jina's eva_model.py, rope_embeddings.py and transform.py themselves are not in the index; they
  were read in a vLLM port that pastes jina's files into one module unchanged in substance
  (configuration, "ROPE EMBEDDINGS", "TRANSFORM", "HF MODEL", "EVA MODEL" sections, with jina's
  proj_type switch that EVA-CLIP lacks), cross-read against EVA-CLIP's eva_vit_model.py / rope.py
  (baaivision/EVA), open_clip's image_transform, and torchvision's transforms.functional
  (resize, _compute_resized_output_size, center_crop, pad) and functional_pil (resize, pad,
  _parse_fill, crop). transformers.js's JinaCLIPImageProcessor for the processor config keys.

Text tower (HFTextEncoder over XLMRobertaLoRA(XLMRobertaFlashConfig(**hf_model_config_kwargs))):
  * The XLMRobertaFlashConfig is built from text_config.hf_model_config_kwargs alone: anything
    absent takes that class's default (vocab 250002, hidden 1024, 24 layers, 16 heads, 4096, gelu,
    type_vocab_size 1, layer_norm_eps 1e-5, pad_token_id 1, position_embedding_type rotary,
    rotary_emb_base 10000.0, lora_rank 4, lora_alpha 1). The fixtures leave pad_token_id,
    layer_norm_eps, type_vocab_size and hidden_act to those defaults (as jina-clip-v2 does) and
    set rotary_emb_base 20000.0 so that a reader ignoring the key is caught.
  * attention_mask = (input_ids != pad_token_id): derived from the ids, no mask is passed in.
  * LoRA: XLMRobertaLoRA registers a LoRAParametrization on every nn.Linear and nn.Embedding of
    the XLMRobertaModel (word and token-type embeddings, mixer.Wqkv, mixer.out_proj, mlp.fc1,
    mlp.fc2; no pooler: HFTextEncoder builds it with add_pooling_layer=False). Linear:
    W + (B[t] @ A[t]) * alpha / rank, A [tasks, rank, in], B [tasks, out, rank]; embedding:
    E + (A[t] @ B[t]) * alpha / rank, A [tasks, vocab, rank], B [tasks, rank, dim]. t is the
    index of text_config.default_lora_task in hf_model_config_kwargs.lora_adaptations (HFTextEncoder
    fills adapter_mask with it for every row when none is given, which get_text_features never
    does). XLMRobertaLoRA requires task_instructions with exactly the lora_adaptations' keys.
  * No instruction prefix: get_text_features takes ids as they are; only encode_text prepends
    task_instructions[task] (or the default_instruction_task's, null in jina-clip-v2).
  * Body (as families_reference.py's jina-v3): word + token-type(0) embeddings, no position
    embeddings (rotary), emb_ln, post-norm blocks norm1(x + out_proj(attn)), norm2(h +
    fc2(gelu(fc1(h)))) with exact GELU (tanh for gelu_new / gelu_fast / gelu_pytorch_tanh),
    Wqkv rows (three, heads, head_dim), non-interleaved (split halves) rotary over the whole head,
    positions 0..L-1, padded keys masked (flash_attn's -10000 is exp-underflow, identical here).
  * Pooler: pooler_type (null -> the arch default, mean_pooler for xlm-roberta): mean_pooler =
    sum(h * mask) / mask.sum(); cls_pooler = h[:, 0] (no pooler layer, so no pooler_output);
    max_pooler would crash in the published code (masked_fill with a long mask): refused.
  * proj (HFTextEncoder): hidden == embed_dim and proj_type null -> identity; hidden !=
    embed_dim or proj_type "linear" -> Linear(hidden, embed_dim, bias=proj_bias) ("proj.weight",
    "proj.bias"); else "mlp" -> Linear, GELU (exact), Linear, all bias=proj_bias ("proj.0.*",
    "proj.2.*"), width (hidden + embed_dim) // 2. So "mlp" only happens when hidden == embed_dim.

Vision tower (EVAVisionTransformer as _build_vision_tower calls it):
  * num_heads = width // head_width, head_dim = width // num_heads, norm layers LayerNorm eps 1e-6
    everywhere (norm1, norm2, inner_attn_ln, ffn_ln, norm), use_mean_pooling False.
  * patch_embed.proj: Conv2d(3, width, patch, stride patch) WITH bias; patches in row-major order;
    pixels must be image_size x image_size (PatchEmbed asserts it). cls_token, pos_embed
    [1, 1 + grid^2, width] added to all tokens.
  * Attention with subln: q = x Wq^T + q_bias, k = x Wk^T (no bias), v = x Wv^T + v_bias
    (q_proj/k_proj/v_proj have no bias; q_bias/v_bias exist when qkv_bias); rotary on q and k of
    the patch tokens only (token 0 untouched); softmax(q * head_dim^-0.5 k^T) v; inner_attn_ln
    over the concatenated heads; proj (with bias). Pre-norm block x + attn(norm1 x),
    x + mlp(norm2 x) (post_norm false, ls_init_value null: no gamma).
  * naive_swiglu: w3(ffn_ln(silu(w1 x) * w2 x)), all three Linear with bias, hidden
    int(width * mlp_ratio) (truncation: 1024 * 2.6667 -> 2730; the fixtures' 64 * 2.6667 = 170.67
    -> 170, where rounding would give 171).
  * VisionRotaryEmbeddingFast(dim = head_dim // 2, pt_seq_len = pt_hw_seq_len, ft_seq_len =
    image_size // patch_size if intp_freq else None): freqs = 10000^-(arange(0, dim, 2)[:dim//2]
    / dim), t = arange(ft) / ft * pt, angles repeated pairwise ((n r), r=2), a row-index half and a
    column-index half concatenated -> [grid^2, head_dim]; x * cos + rotate_half(x) * sin with the
    interleaved rotate_half (pairs (x0, x1) -> (-x1, x0)). head_dim must be a multiple of 4.
  * Output: norm over all tokens, token 0, head. head: Identity when embed_dim == width and
    proj_type null; proj_type "linear" -> Linear(width, embed_dim, bias=qkv_bias) ("head.weight",
    "head.bias"); "mlp" (and embed_dim != width with proj_type null) leave the published module
    without a head attribute (it fails to build): refused here.
  * rope buffers: jina's VisionRotaryEmbeddingFast (as the port shows it) registers freqs_cos /
    freqs_sin with persistent=False, where EVA-CLIP's rope.py registers them persistently. A
    public jina-clip-v2 CPU workaround found in the index recomputes exactly these buffers and
    resets lora_dropout_mask (certainly non-persistent) because both come back as garbage after
    loading, which is what happens to non-persistent buffers, not to stored ones. So the
    published checkpoint is taken to have no rope tensor, and `make` writes none;
    `make --rope-buffers` adds vision_model.rope.freqs_cos / freqs_sin (float32, the name
    EVA-CLIP's persistent layout would keep for the module shared by every block) so that a
    reader's tolerance of them can be tested. This is the one layout point not seen directly.
  * Unsupported here (not used by jina-clip-v2, refused rather than guessed): subln false,
    naive_swiglu false, post_norm true, ls_init_value, mean pooling.

JinaCLIPModel: visual_projection / text_projection are nn.Identity unless add_projections, then
Linear(embed_dim, projection_dim, bias=False) ("visual_projection.weight",
"text_projection.weight"); logit_scale is a 0-d parameter. Features are not normalised.

Pixels (JinaCLIPImageProcessor -> open_clip image_transform(is_train=False), torchvision on PIL):
  * Settings from preprocessor_config.json: size (default 224; an int or [h, w]), mean / std
    (null or absent -> OPENAI_CLIP_MEAN / STD; a scalar -> three copies), resize_mode (null ->
    "shortest"; shortest | longest | squash), interpolation (null -> "bicubic"; "bilinear" ->
    BILINEAR, "bicubic" and "random" -> BICUBIC), fill_color (default 0).
  * shortest, square size S: Resize(S) = shortest edge S, long side int(S * long / short), PIL
    Image.resize((w, h), resample) (nothing when the size already matches); then CenterCrop(S):
    top = int(round((h - S) / 2.0)), Python's round, half to even (HF's CLIP processor floors).
    shortest, size [h, w] with h != w: _ResizeKeepRatio(size) with its default BICUBIC whatever
    interpolation says, sides round(x / min(h / th, w / tw)), then CenterCrop([h, w]).
    squash: Resize([S, S]). longest: _ResizeKeepRatio(longest=1): sides round(x / max ratio),
    then _center_crop_or_pad with fill_color: pad (d // 2 left/top, (d + 1) // 2 right/bottom)
    through torchvision's F_pil.pad (ImageOps.expand; P keeps its palette and fills index
    fill_color), then the rounded center crop. torchvision's CenterCrop pads with 0 likewise.
  * Then _convert_to_rgb = image.convert("RGB"), ToTensor (uint8 -> float32 / 255), Normalize
    (float32 (x - mean) / std). So with a PIL image handed to the processor the resize and crop
    run in the image's own mode: Pillow resizes "P" and "1" with NEAREST and "RGBA"/"LA"
    premultiplied, and "I;16" before its clipping conversion.
  * BUT jina's own entry points convert first: JinaCLIPModel.encode_image and custom_st.py's
    tokenize both call Image.open(..).convert("RGB") (or img.convert("RGB")) before the processor.
    `--entry processor` (default) is the processor on the image as opened; `--entry
    encode_image` is encode_image / sentence-transformers, identical to the "convert-first"
    mistake. Which one a server should match is a product decision; they differ only for
    non-RGB images (P, RGBA, LA, I;16, 1, ...).
  * Image.open: first frame of a GIF, EXIF orientation not applied (neither path applies it).

Tokenizer (fixture): WordLevel over image_reference.py's words, XLM-R's specials <s>=0, <pad>=1,
</s>=2, <unk>=3 (and <mask> last), NFC + Lowercase, Whitespace, TemplateProcessing "<s> $A </s>",
longest padding with <pad>, truncation at 512 (encode_text's max_length default; our texts are
shorter). tokenizer_class PreTrainedTokenizerFast (XLMRobertaTokenizer needs sentencepiece).

Weights: linear std 1/sqrt(fan_in), biases N(0, .1), norms 1 + .1 N and .1 N, embeddings N(0, 1),
cls/pos N(0, .5), LoRA A/B N(0, .3); float32 on disk, float64 forward (rope tables in float64
too; jina builds them in float32). Geometry of every variant: text hidden 64, 4 heads, 2 layers,
intermediate 128, vocab 259; vision width 64, head_width 16 (4 heads of 16), 2 layers, mlp_ratio
2.6667 (hidden 170), patch 4, image_size 32 (8 x 8 grid, 65 tokens), pt_hw_seq_len 6 (so the
interpolated positions t = i * 6 / 8 are not integers); processor size 32. Variants:
  jina-clip       v2's layout: proj_type null on both sides, embed_dim == width == hidden (64),
                  one adapter ["retrieval.query"], lora_alpha 2 / rank 4 (scaling 0.5).
  jina-clip-head  embed_dim 24: vision head Linear(64, 24) with bias, text proj Linear(64, 24)
                  with proj_bias true; adapters ["retrieval.passage", "retrieval.query"] so the
                  default task is index 1.
  jina-clip-proj  add_projections true (projection_dim 20), text proj_type "mlp".

selftest: makes the three variants and the images; pixels shape and finiteness; the exact 32x32
image against (x / 255 - mean) / std by hand; the palette image's pixels are palette colours
(resized in mode P, NEAREST); embed with batch-vs-alone differences; every mistake must move the
images or texts by more than 1e-2; the vision rope against a rotation of complex numbers; the
text hidden states against families_reference.py's separately written jina-v3 forward (same
weights renamed to roberta.*); crop-floor on landscape_97x41 (crop excess 43: round(21.5) = 22,
floor 21); squash shape; longest: 18 black rows on 97x41 and palette index 0 as the P fill;
size [24, 32] under shortest ignores interpolation; which images the encode_image entry changes.
"""

import argparse
import json
import math
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

sys.path.insert(0, str(Path(__file__).resolve().parent))
import image_reference as ir  # noqa: E402  (the image set, its word list and test texts)

OPENAI_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_STD = [0.26862954, 0.26130258, 0.27577711]
MISTAKES = ("mean-std-swapped", "bilinear", "no-subln", "no-rope", "rope-halves", "convert-first",
            "wrong-pool", "no-lora", "no-intp-freq", "crop-floor")
TEXTS = ir.TEXTS
QUERY = "Represent the query for retrieving evidence documents: "
PASSAGE = "Represent the document for retrieval: "
# XLMRobertaFlashConfig's defaults (the newer configuration_xlm_roberta.py)
FLASH_DEFAULTS = dict(vocab_size=250002, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                      intermediate_size=4096, hidden_act="gelu", max_position_embeddings=8194, type_vocab_size=1,
                      layer_norm_eps=1e-5, pad_token_id=1, position_embedding_type="rotary",
                      rotary_emb_base=10000.0, lora_adaptations=None, task_instructions=None, lora_rank=4,
                      lora_alpha=1)
IMPL = "jinaai/jina-clip-implementation"
VARIANTS = ("jina-clip", "jina-clip-head", "jina-clip-proj")
SIZE = dict(hidden=64, heads=4, inter=128, text_layers=2, width=64, head_width=16, vision_layers=2,
            mlp_ratio=2.6667, patch=4, image=32, pt_hw_seq_len=6)


# --------------------------------------------------------------------------------------------- make
def vocabulary():
    words = ["<s>", "<pad>", "</s>", "<unk>"] + ir.vocabulary_words() + ["<mask>"]
    return {w: i for i, w in enumerate(words)}


def build_tokenizer():
    vocab = vocabulary()
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok, vocab


def variant_configs(variant, vocab_size):
    """config.json and preprocessor_config.json of a variant."""
    s = SIZE
    head, proj = variant == "jina-clip-head", variant == "jina-clip-proj"
    tasks = ["retrieval.passage", "retrieval.query"] if head else ["retrieval.query"]
    embed = 24 if head else s["hidden"]
    kwargs = dict(hidden_size=s["hidden"], num_hidden_layers=s["text_layers"], num_attention_heads=s["heads"],
                  intermediate_size=s["inter"], vocab_size=vocab_size, max_position_embeddings=8194,
                  rotary_emb_base=20000.0, lora_adaptations=tasks,
                  task_instructions={t: (QUERY if t == "retrieval.query" else PASSAGE) for t in tasks},
                  lora_rank=4, lora_alpha=2, lora_dropout_p=0.0, lora_main_params_trainable=False,
                  load_trained_adapters=False, use_flash_attn=True)
    text = dict(model_type="jina_clip_text", embed_dim=embed, hf_model_name_or_path="jinaai/jina-embeddings-v3",
                hf_model_config_kwargs=kwargs, default_instruction_task=None, default_lora_task="retrieval.query",
                pooler_type="mean_pooler", proj_type="linear" if head else ("mlp" if proj else None),
                proj_bias=head)
    vision = dict(model_type="jina_clip_vision", embed_dim=embed, width=s["width"], image_size=s["image"],
                  patch_size=s["patch"], layers=s["vision_layers"], head_width=s["head_width"],
                  mlp_ratio=s["mlp_ratio"], ls_init_value=None, patch_dropout=0.0, qkv_bias=True,
                  fused_layer_norm=False, x_attention=False, post_norm=False, rope_embeddings=True,
                  pt_hw_seq_len=s["pt_hw_seq_len"], intp_freq=True, naive_swiglu=True, subln=True,
                  drop_path_rate=0.0, proj_type="linear" if head else None)
    config = dict(architectures=["JinaCLIPModel"], model_type="jina_clip",
                  auto_map={"AutoConfig": f"{IMPL}--configuration_clip.JinaCLIPConfig",
                            "AutoModel": f"{IMPL}--modeling_clip.JinaCLIPModel"},
                  add_projections=proj, projection_dim=20 if proj else embed, logit_scale_init_value=2.6592,
                  matryoshka_dimensions=[8, 16, embed], truncate_dim=None, use_text_flash_attn=None,
                  use_vision_xformers=None, initializer_factor=1.0, torch_dtype="float32",
                  text_config=text, vision_config=vision)
    pre = dict(auto_map={"AutoProcessor": f"{IMPL}--processing_clip.JinaCLIPProcessor",
                         "AutoImageProcessor": f"{IMPL}--processing_clip.JinaCLIPImageProcessor"},
               image_processor_type="JinaCLIPImageProcessor", processor_class="JinaCLIPProcessor",
               size=s["image"], mean=None, std=None, resize_mode="shortest", interpolation="bicubic", fill_color=0)
    return config, pre


def random_weights(rng, config):
    W = {}
    tc, vc = config["text_config"], config["vision_config"]
    kw = flash_settings(tc)
    h, inter, r = kw["hidden_size"], kw["intermediate_size"], kw["lora_rank"]
    n_tasks = len(kw["lora_adaptations"])

    def lin(name, n_out, n_in, bias=True):
        W[name + ".weight"] = rng.normal(0, n_in ** -0.5, (n_out, n_in))
        if bias:
            W[name + ".bias"] = rng.normal(0, 0.1, n_out)

    def norm(name, n):
        W[name + ".weight"] = 1 + 0.1 * rng.normal(size=n)
        W[name + ".bias"] = 0.1 * rng.normal(size=n)

    def lora_linear(name, n_out, n_in):
        q = name + ".parametrizations.weight."
        W[q + "original"] = rng.normal(0, n_in ** -0.5, (n_out, n_in))
        W[q + "0.lora_A"] = rng.normal(0, 0.3, (n_tasks, r, n_in))
        W[q + "0.lora_B"] = rng.normal(0, 0.3, (n_tasks, n_out, r))
        W[name + ".bias"] = rng.normal(0, 0.1, n_out)

    def lora_embedding(name, rows, dim):
        q = name + ".parametrizations.weight."
        W[q + "original"] = rng.normal(0, 1.0, (rows, dim))
        W[q + "0.lora_A"] = rng.normal(0, 0.3, (n_tasks, rows, r))
        W[q + "0.lora_B"] = rng.normal(0, 0.3, (n_tasks, r, dim))

    t = "text_model.transformer.roberta."
    lora_embedding(t + "embeddings.word_embeddings", kw["vocab_size"], h)
    lora_embedding(t + "embeddings.token_type_embeddings", kw["type_vocab_size"], h)
    norm(t + "emb_ln", h)
    for i in range(kw["num_hidden_layers"]):
        p = f"{t}encoder.layers.{i}."
        lora_linear(p + "mixer.Wqkv", 3 * h, h)
        lora_linear(p + "mixer.out_proj", h, h)
        norm(p + "norm1", h)
        lora_linear(p + "mlp.fc1", inter, h)
        lora_linear(p + "mlp.fc2", h, inter)
        norm(p + "norm2", h)
    kind = text_proj_kind(tc, h)
    if kind == "linear":
        lin("text_model.proj", tc["embed_dim"], h, tc.get("proj_bias", False))
    elif kind == "mlp":
        mid = (h + tc["embed_dim"]) // 2
        lin("text_model.proj.0", mid, h, tc.get("proj_bias", False))
        lin("text_model.proj.2", tc["embed_dim"], mid, tc.get("proj_bias", False))

    d, ps, v = vc["width"], vc["patch_size"], "vision_model."
    grid = vc["image_size"] // ps
    hidden = int(d * vc["mlp_ratio"])
    W[v + "cls_token"] = rng.normal(0, 0.5, (1, 1, d))
    W[v + "pos_embed"] = rng.normal(0, 0.5, (1, grid * grid + 1, d))
    W[v + "patch_embed.proj.weight"] = rng.normal(0, (3 * ps * ps) ** -0.5, (d, 3, ps, ps))
    W[v + "patch_embed.proj.bias"] = rng.normal(0, 0.1, d)
    for i in range(vc["layers"]):
        p = f"{v}blocks.{i}."
        norm(p + "norm1", d)
        for x in "qkv":
            lin(p + f"attn.{x}_proj", d, d, bias=False)
        W[p + "attn.q_bias"] = rng.normal(0, 0.1, d)
        W[p + "attn.v_bias"] = rng.normal(0, 0.1, d)
        norm(p + "attn.inner_attn_ln", d)
        lin(p + "attn.proj", d, d)
        norm(p + "norm2", d)
        lin(p + "mlp.w1", hidden, d)
        lin(p + "mlp.w2", hidden, d)
        norm(p + "mlp.ffn_ln", hidden)
        lin(p + "mlp.w3", d, hidden)
    norm(v + "norm", d)
    if vision_head_kind(vc) == "linear":
        lin(v + "head", vc["embed_dim"], d, vc["qkv_bias"])
    if config.get("add_projections"):
        lin("visual_projection", config["projection_dim"], vc["embed_dim"], bias=False)
        lin("text_projection", config["projection_dim"], tc["embed_dim"], bias=False)
    W["logit_scale"] = np.array(config["logit_scale_init_value"])
    return {k: np.asarray(x, dtype=np.float32).copy() for k, x in W.items()}  # copy(): logit_scale stays 0-d


def cmd_make(variant, out, seed, rope_buffers=False):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok, vocab = build_tokenizer()
    config, pre = variant_configs(variant, max(vocab.values()) + 1)
    W = random_weights(np.random.default_rng(seed), config)
    if rope_buffers:
        cos, sin = vision_rope_tables(config["vision_config"])
        W["vision_model.rope.freqs_cos"] = cos.astype(np.float32)
        W["vision_model.rope.freqs_sin"] = sin.astype(np.float32)
    save_file(W, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    tok.save(str(out / "tokenizer.json"))
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
               "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
    (out / "tokenizer_config.json").write_text(json.dumps(dict(
        special, tokenizer_class="PreTrainedTokenizerFast", model_max_length=8192, padding_side="right"), indent=2))
    dim = config["projection_dim"] if config["add_projections"] else config["text_config"]["embed_dim"]
    return {"folder": str(out), "variant": variant, "embedding_dim": dim, "image_size": pre["size"],
            "tensors": {k: list(v.shape) for k, v in sorted(W.items())}}


# ------------------------------------------------------------------------------------------- pixels
def processor_settings(folder):
    pc = json.loads((Path(folder) / "preprocessor_config.json").read_text())
    size = pc.get("size", 224)
    if size is None:
        raise ValueError("preprocessor size null: image_transform cannot build a Resize")
    mean = pc.get("mean") or OPENAI_MEAN  # image_transform: `mean or OPENAI_DATASET_MEAN`
    std = pc.get("std") or OPENAI_STD
    mean = list(mean) if isinstance(mean, (list, tuple)) else [mean] * 3
    std = list(std) if isinstance(std, (list, tuple)) else [std] * 3
    interpolation = pc.get("interpolation") or "bicubic"
    if interpolation not in ("bicubic", "bilinear", "random"):
        raise ValueError(f"interpolation {interpolation!r}: image_transform asserts bicubic|bilinear|random")
    resize_mode = pc.get("resize_mode") or "shortest"
    if resize_mode not in ("shortest", "longest", "squash"):
        raise ValueError(f"resize_mode {resize_mode!r}: image_transform asserts shortest|longest|squash")
    fill = pc.get("fill_color", 0)
    return dict(size=size, mean=mean, std=std, resample=Image.BILINEAR if interpolation == "bilinear" else Image.BICUBIC,
                resize_mode=resize_mode, fill=fill)


def pair(size):
    """torchvision's _setup_size: int -> (s, s); [s] -> (s, s); [h, w] -> (h, w)."""
    if isinstance(size, int):
        return size, size
    if len(size) == 1:
        return size[0], size[0]
    if len(size) != 2:
        raise ValueError("Please provide only two dimensions (h, w) for size.")
    return tuple(size)


def tv_resize(im, size, resample):
    """torchvision F.resize on a PIL image: [s] = shortest edge s, long int(s * long / short);
    [h, w] exact; the image itself when the size already matches; else PIL resize((w, h))."""
    w, h = im.size
    if len(size) == 1:
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = size[0], int(size[0] * long / short)
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    else:
        new_h, new_w = size
    if (h, w) == (new_h, new_w):
        return im
    return im.resize((new_w, new_h), resample)


def resize_keep_ratio(im, target, longest, resample):
    """open_clip's ResizeKeepRatio (eval: no random scale or aspect): round(x / ratio)."""
    w, h = im.size
    rh, rw = h / target[0], w / target[1]
    ratio = max(rh, rw) * longest + min(rh, rw) * (1.0 - longest)
    return tv_resize(im, [round(h * 1.0 / ratio), round(w * 1.0 / ratio)], resample)


def tv_pad(im, ltrb, fill):
    """torchvision F_pil.pad, constant mode: _parse_fill, then ImageOps.expand (P keeps palette)."""
    n = len(im.getbands())
    fill = 0 if fill is None else fill
    if isinstance(fill, (int, float)) and n > 1:
        fill = tuple([fill] * n)
    if isinstance(fill, (list, tuple)):
        if len(fill) == 1:
            fill = tuple(fill) * n
        elif len(fill) != n:
            raise ValueError(f"fill has {len(fill)} values for an image with {n} channels")
        fill = tuple(fill)
    if im.mode != "F":
        fill = tuple(int(x) for x in fill) if isinstance(fill, tuple) else int(fill)
    if im.mode == "P":
        palette = im.getpalette()
        out = ImageOps.expand(im, border=tuple(ltrb), fill=fill)
        out.putpalette(palette)
        return out
    return ImageOps.expand(im, border=tuple(ltrb), fill=fill)


def center_crop_or_pad(im, size, fill, mistake=None):
    """torchvision center_crop (fill 0) and jina/open_clip _center_crop_or_pad (fill_color)."""
    ch, cw = pair(size)
    w, h = im.size
    if cw > w or ch > h:
        ltrb = [(cw - w) // 2 if cw > w else 0, (ch - h) // 2 if ch > h else 0,
                (cw - w + 1) // 2 if cw > w else 0, (ch - h + 1) // 2 if ch > h else 0]
        im = tv_pad(im, ltrb, fill)
        w, h = im.size
        if (cw, ch) == (w, h):
            return im
    if mistake == "crop-floor":
        top, left = (h - ch) // 2, (w - cw) // 2
    else:
        top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))  # half to even
    return im.crop((left, top, left + cw, top + ch))


def transform(im, s, mistake=None):
    """image_transform(is_train=False) on one PIL image in its own mode."""
    resample = Image.BILINEAR if mistake == "bilinear" else s["resample"]
    size = s["size"]
    if s["resize_mode"] == "longest":
        im = resize_keep_ratio(im, pair(size), 1.0, resample)
        im = center_crop_or_pad(im, size, s["fill"], mistake)
    elif s["resize_mode"] == "squash":
        im = tv_resize(im, list(pair(size)), resample)
    else:
        hw = pair(size)
        if hw[0] == hw[1]:
            im = tv_resize(im, [hw[0]], resample)
        else:  # _ResizeKeepRatio(image_size): its own default BICUBIC, interpolation ignored
            im = resize_keep_ratio(im, hw, 0.0, Image.BILINEAR if mistake == "bilinear" else Image.BICUBIC)
        im = center_crop_or_pad(im, hw, 0, mistake)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        im = im.convert("RGB")  # _convert_to_rgb
    x = np.asarray(im, dtype=np.uint8).astype(np.float32) / np.float32(255)  # ToTensor
    mean, std = s["mean"], s["std"]
    if mistake == "mean-std-swapped":
        mean, std = std, mean
    x = (x - np.array(mean, np.float32)) / np.array(std, np.float32)  # Normalize
    return x.transpose(2, 0, 1)


def open_image(path, entry):
    im = Image.open(path)
    if entry == "encode_image":  # JinaCLIPModel.encode_image / custom_st.py: convert first
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im = im.convert("RGB")
    return im


def pixel_values(folder, paths, mistake=None, entry="processor"):
    s = processor_settings(folder)
    entry = "encode_image" if mistake == "convert-first" else entry
    out = [transform(open_image(p, entry), s, mistake) for p in paths]
    if len({o.shape for o in out}) > 1:
        raise ValueError(f"images of different sizes cannot be stacked: {[o.shape for o in out]}")
    return np.stack(out).astype(np.float32) if out else np.zeros((0, 3, 0, 0), np.float32)


def cmd_pixels(folder, out, images, entry):
    px = pixel_values(folder, images, entry=entry)
    np.save(out, px)
    return {"shape": list(px.shape), "out": out, "entry": entry}


# -------------------------------------------------------------------------------------------- model
def load_model(folder):
    cfg = json.loads((Path(folder) / "config.json").read_text())
    W = {k: v.astype(np.float64) for k, v in load_file(str(Path(folder) / "model.safetensors")).items()}
    return cfg, W


def layer_norm(x, W, name, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * W[name + ".weight"] + W[name + ".bias"]


def linear(x, W, name):
    y = x @ W[name + ".weight"].T
    return y + W[name + ".bias"] if name + ".bias" in W else y


_erf = np.vectorize(math.erf)


def gelu(x, name="gelu"):
    if name in ("gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if name != "gelu":
        raise ValueError(f"hidden_act {name}: XLMRobertaModel asserts a gelu variant")
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def softmax(s):
    p = np.exp(s - s.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


# --- text tower ---
def flash_settings(tc):
    """XLMRobertaFlashConfig(**hf_model_config_kwargs): the kwargs over the class defaults."""
    kw = dict(FLASH_DEFAULTS)
    kw.update(tc.get("hf_model_config_kwargs") or {})
    if kw["position_embedding_type"] != "rotary":
        raise ValueError("only position_embedding_type rotary (jina-embeddings-v3's) is modelled")
    if not isinstance(kw["lora_adaptations"], list) or not kw["lora_adaptations"]:
        raise ValueError("XLMRobertaLoRA: lora_adaptations must be a non-empty list")
    ti = kw["task_instructions"]
    if not isinstance(ti, dict) or len(ti) != len(kw["lora_adaptations"]) or \
            not all(k in kw["lora_adaptations"] for k in ti):
        raise ValueError("XLMRobertaLoRA: task_instructions must have the lora_adaptations as keys")
    return kw


def text_proj_kind(tc, hidden):
    """HFTextEncoder's proj: identity | linear | mlp."""
    proj_type = tc.get("proj_type")
    if hidden == tc.get("embed_dim", 768) and proj_type is None:
        return "identity"
    if hidden != tc.get("embed_dim", 768) or proj_type == "linear":
        return "linear"
    if proj_type == "mlp":
        return "mlp"
    raise ValueError(f"text proj_type {proj_type!r}: HFTextEncoder builds no proj")


def lora_task(tc, kw, mistake):
    task = tc.get("default_lora_task")
    if task is None or mistake == "no-lora":
        return None
    if task not in kw["lora_adaptations"]:
        raise ValueError(f"default_lora_task {task!r} not in lora_adaptations {kw['lora_adaptations']}")
    return kw["lora_adaptations"].index(task)


def adapted(W, name, task, scaling, embedding):
    """Weight of a LoRA-parametrized module under adapter `task` (None: the original)."""
    base = W[name + ".parametrizations.weight.original"]
    if task is None:
        return base
    a = W[name + ".parametrizations.weight.0.lora_A"][task]
    b = W[name + ".parametrizations.weight.0.lora_B"][task]
    return base + (a @ b if embedding else b @ a) * scaling


def text_rotary(x, base):
    """Non-interleaved rotary over the whole head, positions 0..L-1. x: [B, h, L, d]."""
    d, length = x.shape[-1], x.shape[-2]
    inv = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(length, dtype=np.float64)[:, None] * inv[None]
    cos, sin = np.concatenate([np.cos(ang)] * 2, -1), np.concatenate([np.sin(ang)] * 2, -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


def text_hidden(W, cfg, ids, mistake=None):
    """XLMRobertaLoRA's last_hidden_state and the attention mask HFTextEncoder derives."""
    tc = cfg["text_config"]
    kw = flash_settings(tc)
    mask = ids != kw["pad_token_id"]
    task = lora_task(tc, kw, mistake)
    s = kw["lora_alpha"] / kw["lora_rank"]
    p = "text_model.transformer.roberta."
    eps, heads = kw["layer_norm_eps"], kw["num_attention_heads"]
    b, length = ids.shape

    def lin(x, name):
        return x @ adapted(W, p + name, task, s, False).T + W[p + name + ".bias"]

    x = adapted(W, p + "embeddings.word_embeddings", task, s, True)[ids]
    if kw["type_vocab_size"] > 0:  # token_type_ids default to zeros
        x = x + adapted(W, p + "embeddings.token_type_embeddings", task, s, True)[0]
    x = layer_norm(x, W, p + "emb_ln", eps)
    allowed = mask[:, None, None, :]
    for i in range(kw["num_hidden_layers"]):
        l = f"encoder.layers.{i}."
        qkv = lin(x, l + "mixer.Wqkv").reshape(b, length, 3, heads, -1).transpose(2, 0, 3, 1, 4)
        q, k, v = text_rotary(qkv[0], kw["rotary_emb_base"]), text_rotary(qkv[1], kw["rotary_emb_base"]), qkv[2]
        scores = np.where(allowed, q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]), -np.inf)
        a = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, length, -1)
        h = layer_norm(x + lin(a, l + "mixer.out_proj"), W, p + l + "norm1", eps)
        m = lin(gelu(lin(h, l + "mlp.fc1"), kw["hidden_act"]), l + "mlp.fc2")
        x = layer_norm(h + m, W, p + l + "norm2", eps)
    return x, mask


def text_features(W, cfg, ids, mistake=None):
    """get_text_features: HFTextEncoder (pool, proj), then text_projection."""
    tc = cfg["text_config"]
    x, mask = text_hidden(W, cfg, ids, mistake)
    pooler = tc.get("pooler_type") or "mean_pooler"
    if mistake == "wrong-pool":
        pooler = "cls_pooler" if pooler == "mean_pooler" else "mean_pooler"
    if pooler == "mean_pooler":
        m = mask[..., None].astype(np.float64)
        pooled = (x * m).sum(1) / m.sum(1)
    elif pooler in ("cls_pooler", "cls_last_hidden_state_pooler"):
        pooled = x[:, 0]
    else:
        raise ValueError(f"pooler_type {pooler!r} is not modelled (max_pooler fails in the published code)")
    kind = text_proj_kind(tc, x.shape[-1])
    if kind == "linear":
        pooled = linear(pooled, W, "text_model.proj")
    elif kind == "mlp":
        pooled = linear(gelu(linear(pooled, W, "text_model.proj.0")), W, "text_model.proj.2")
    return linear(pooled, W, "text_projection") if cfg.get("add_projections") else pooled


# --- vision tower ---
def vision_head_kind(vc):
    if vc.get("embed_dim", 768) == vc.get("width", 768) and vc.get("proj_type") is None:
        return "identity"
    if vc.get("proj_type") == "linear":
        return "linear"
    raise ValueError(f"vision proj_type {vc.get('proj_type')!r} with embed_dim {vc.get('embed_dim')} and width "
                     f"{vc.get('width')}: the published EVAVisionTransformer builds no head")


def vision_rope_tables(vc, mistake=None):
    """VisionRotaryEmbeddingFast's freqs_cos / freqs_sin: [grid^2, head_dim]."""
    heads = vc["width"] // vc["head_width"]
    dim = vc["width"] // heads // 2  # half_head_dim
    pt = vc["pt_hw_seq_len"]
    ft = vc["image_size"] // vc["patch_size"] if vc.get("intp_freq") else pt
    freqs = 1.0 / 10000.0 ** (np.arange(0, dim, 2, dtype=np.float64)[: dim // 2] / dim)
    t = np.arange(ft, dtype=np.float64) / ft * pt
    if mistake == "no-intp-freq":  # the grid index itself, not rescaled to pt_hw_seq_len
        t = np.arange(ft, dtype=np.float64)
    f = np.repeat(t[:, None] * freqs[None], 2, axis=-1)  # '... n -> ... (n r)', r=2
    grid = np.concatenate([np.broadcast_to(f[:, None, :], (ft, ft, f.shape[-1])),
                           np.broadcast_to(f[None, :, :], (ft, ft, f.shape[-1]))], -1).reshape(ft * ft, -1)
    return np.cos(grid), np.sin(grid)


def rotate_half(x, halves=False):
    if halves:  # the GPT-NeoX layout: the rope-halves mistake
        d = x.shape[-1] // 2
        return np.concatenate([-x[..., d:], x[..., :d]], -1)
    pairs = x.reshape(x.shape[:-1] + (-1, 2))  # '... (d r) -> ... d r', r=2
    return np.stack([-pairs[..., 1], pairs[..., 0]], -1).reshape(x.shape)


def image_features(W, cfg, px, mistake=None):
    """get_image_features: EVAVisionTransformer (norm, token 0, head), then visual_projection."""
    vc, v = cfg["vision_config"], "vision_model."
    # (key, JinaCLIPVisionConfig default, the only value modelled: jina-clip-v2's)
    for key, default, ok in (("subln", False, True), ("naive_swiglu", False, True), ("post_norm", False, False),
                             ("ls_init_value", None, None)):
        if vc.get(key, default) != ok:
            raise ValueError(f"vision_config {key} = {vc.get(key, default)!r} is not modelled (jina-clip-v2: {ok})")
    n, c, h, w = px.shape
    s, ps, d = vc["image_size"], vc["patch_size"], vc["width"]
    if (h, w) != (s, s):
        raise ValueError(f"Input image size ({h}*{w}) doesn't match model ({s}*{s}).")
    heads = d // vc["head_width"]
    hd, g, eps = d // heads, s // ps, 1e-6
    patches = px.reshape(n, c, g, ps, g, ps).transpose(0, 2, 4, 1, 3, 5).reshape(n, g * g, -1)
    x = patches @ W[v + "patch_embed.proj.weight"].reshape(d, -1).T + W[v + "patch_embed.proj.bias"]
    x = np.concatenate([np.broadcast_to(W[v + "cls_token"], (n, 1, d)), x], 1) + W[v + "pos_embed"]
    rope = vc.get("rope_embeddings") and mistake != "no-rope"
    if rope:
        if hd % 4:
            raise ValueError(f"head_dim {hd}: VisionRotaryEmbeddingFast needs a multiple of 4")
        cos, sin = vision_rope_tables(vc, mistake)
        if cos.shape[0] != g * g:
            raise ValueError(f"rope table has {cos.shape[0]} positions for {g * g} patches (intp_freq off?)")
    hidden = int(d * vc["mlp_ratio"])
    split = lambda t: t.reshape(n, -1, heads, hd).transpose(0, 2, 1, 3)
    for i in range(vc["layers"]):
        p = f"{v}blocks.{i}."
        if W[p + "mlp.w1.weight"].shape[0] != hidden:
            raise ValueError(f"{p}mlp.w1 has {W[p + 'mlp.w1.weight'].shape[0]} rows, int(width * mlp_ratio) = {hidden}")
        y = layer_norm(x, W, p + "norm1", eps)
        q = y @ W[p + "attn.q_proj.weight"].T + W.get(p + "attn.q_bias", 0.0)
        k = y @ W[p + "attn.k_proj.weight"].T
        val = y @ W[p + "attn.v_proj.weight"].T + W.get(p + "attn.v_bias", 0.0)
        q, k, val = split(q), split(k), split(val)
        if rope:  # patch tokens only; the class token (index 0) is not rotated
            halves = mistake == "rope-halves"
            q = np.concatenate([q[:, :, :1], q[:, :, 1:] * cos + rotate_half(q[:, :, 1:], halves) * sin], 2)
            k = np.concatenate([k[:, :, :1], k[:, :, 1:] * cos + rotate_half(k[:, :, 1:], halves) * sin], 2)
        a = (softmax((q * hd ** -0.5) @ k.transpose(0, 1, 3, 2)) @ val).transpose(0, 2, 1, 3).reshape(n, -1, d)
        if mistake != "no-subln":
            a = layer_norm(a, W, p + "attn.inner_attn_ln", eps)
        x = x + linear(a, W, p + "attn.proj")
        y = layer_norm(x, W, p + "norm2", eps)
        u = linear(y, W, p + "mlp.w1")
        m = u / (1 + np.exp(-u)) * linear(y, W, p + "mlp.w2")
        if mistake != "no-subln":
            m = layer_norm(m, W, p + "mlp.ffn_ln", eps)
        x = x + linear(m, W, p + "mlp.w3")
    x = layer_norm(x, W, v + "norm", eps)
    pooled = x[:, 1:].mean(1) if mistake == "wrong-pool" else x[:, 0]
    if vision_head_kind(vc) == "linear":
        pooled = linear(pooled, W, v + "head")
    return linear(pooled, W, "visual_projection") if cfg.get("add_projections") else pooled


# -------------------------------------------------------------------------------------------- embed
def tokenize(folder, texts, max_length=512):
    """encode_text's tokenizer call: padding longest, truncation at max_length (512 default)."""
    tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    pad = json.loads((Path(folder) / "special_tokens_map.json").read_text())["pad_token"]
    pad = pad["content"] if isinstance(pad, dict) else pad
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=tok.token_to_id(pad), pad_token=pad)
    enc = tok.encode_batch(texts)
    return np.array([e.ids for e in enc], np.int64).reshape(len(texts), -1)


def embed(folder, images, texts, mistake=None, entry="processor"):
    cfg, W = load_model(folder)
    result, worst = {"images": [], "texts": []}, {"images": 0.0, "texts": 0.0}
    if images:
        feats = image_features(W, cfg, pixel_values(folder, images, mistake, entry).astype(np.float64), mistake)
        alone = np.concatenate([image_features(W, cfg, pixel_values(folder, [p], mistake, entry).astype(np.float64),
                                               mistake) for p in images])
        result["images"], worst["images"] = feats.tolist(), float(np.abs(feats - alone).max())
    if texts:
        ids = tokenize(folder, texts)
        feats = text_features(W, cfg, ids, mistake)
        alone = np.concatenate([text_features(W, cfg, tokenize(folder, [t]), mistake) for t in texts])
        result["texts"], worst["texts"] = feats.tolist(), float(np.abs(feats - alone).max())
        result["input_ids"] = ids.tolist()
        result["attention_mask"] = (ids != flash_settings(cfg["text_config"])["pad_token_id"]).astype(int).tolist()
    result["batch_alone_max_diff"] = worst
    if mistake is None and max(worst.values()) > 1e-9:
        raise ValueError(f"a batched result differs from the same input alone: {worst}")
    return result


# ----------------------------------------------------------------------------------------- selftest
def check_rope_by_complex(vc):
    """The rotated patch q against a rotation of complex numbers built independently."""
    rng = np.random.default_rng(5)
    heads = vc["width"] // vc["head_width"]
    hd = vc["width"] // heads
    g, pt = vc["image_size"] // vc["patch_size"], vc["pt_hw_seq_len"]
    x = rng.normal(size=(g * g, hd))
    cos, sin = vision_rope_tables(vc)
    mine = x * cos + rotate_half(x) * sin
    quarter = hd // 4  # frequencies per axis
    inv = 10000.0 ** (-np.arange(quarter) * 2 / (hd // 2))
    expected = np.empty_like(x)
    for idx in range(g * g):
        row, col = divmod(idx, g)
        ang = np.concatenate([row * pt / g * inv, col * pt / g * inv])  # pairs 0..q-1: row, then column
        z = (x[idx, 0::2] + 1j * x[idx, 1::2]) * np.exp(1j * ang)
        expected[idx, 0::2], expected[idx, 1::2] = z.real, z.imag
    return float(np.abs(mine - expected).max())


def check_text_against_families(folder, texts):
    """Hidden states against families_reference.py's independent jina-v3 forward."""
    try:
        import families_reference as fr
    except ImportError as exc:  # onnxruntime missing, say
        return f"skipped: {exc}"
    cfg, W = load_model(folder)
    kw = flash_settings(cfg["text_config"])
    ids = tokenize(folder, texts)
    mine, mask = text_hidden(W, cfg, ids)
    renamed = {"roberta." + k[len("text_model.transformer.roberta."):]: v for k, v in W.items()
               if k.startswith("text_model.transformer.roberta.")}
    task = kw["lora_adaptations"].index(cfg["text_config"]["default_lora_task"])
    theirs = fr.jina_v3(kw, renamed, ids, mask.astype(np.int64), np.zeros_like(ids), task=task)
    return float(np.abs((mine - theirs)[mask]).max())


def with_processor(src, dst, **changes):
    """A copy of folder src whose preprocessor_config.json has `changes`."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    pc = json.loads((dst / "preprocessor_config.json").read_text())
    pc.update(changes)
    (dst / "preprocessor_config.json").write_text(json.dumps(pc, indent=2))
    return dst


def cmd_selftest(work):
    work = Path(work)
    names = ir.cmd_images(work / "images")["images"]
    paths = [str(work / "images" / n) for n in names]
    path_of = lambda n: paths[names.index(n)]
    failures, report = [], {"images": len(paths), "variants": {}}
    check = lambda ok, what: ok or failures.append(what)

    # the crop rounding: Python's round is half to even; an odd excess 3 mod 4 differs from floor
    check([int(round(d / 2.0)) for d in (1, 3, 5, 7)] == [0, 2, 2, 4], "center crop: round half to even")
    for variant in VARIANTS:
        folder = work / variant
        made = cmd_make(variant, folder, seed=7)
        cfg, W = load_model(folder)
        s = processor_settings(folder)
        size = cfg["vision_config"]["image_size"]
        px = pixel_values(folder, paths)
        np.save(work / f"{variant}_pixels.npy", px)
        check(list(px.shape) == [len(paths), 3, size, size] and np.isfinite(px).all(), f"{variant}: pixels")
        # an image already S x S is only converted and normalised
        a = np.asarray(Image.open(path_of(f"exact_{size}x{size}.png")).convert("RGB"), np.float64)
        by_hand = ((a / 255 - s["mean"]) / s["std"]).transpose(2, 0, 1)
        check(np.abs(px[names.index(f"exact_{size}x{size}.png")] - by_hand).max() < 1e-5, f"{variant}: exact by hand")
        # a palette image is resized with NEAREST in mode P: only palette colours survive
        pal = Image.open(path_of("palette_P_50x33.png"))
        colours = np.array(pal.getpalette()[: 3 * 256]).reshape(-1, 3)
        got = px[names.index("palette_P_50x33.png")].transpose(1, 2, 0) * s["std"] + s["mean"]
        got = np.rint(got.reshape(-1, 3) * 255)
        check(all((colours == c).all(1).any() for c in got), f"{variant}: P resized in its own mode (NEAREST)")
        base = embed(folder, paths, TEXTS)
        v = {"tensors": len(made["tensors"]), "pixels_shape": list(px.shape),
             "input_ids_shape": list(np.array(base["input_ids"]).shape),
             "feature_dims": [len(base["images"][0]), len(base["texts"][0])],
             "batch_alone_max_diff": base["batch_alone_max_diff"], "mistakes": {}}
        check(v["feature_dims"] == [made["embedding_dim"]] * 2, f"{variant}: feature dims")
        for mistake in MISTAKES:
            wrong = embed(folder, paths, TEXTS, mistake)
            diff = {k: float(np.abs(np.array(wrong[k]) - np.array(base[k])).max()) for k in ("images", "texts")}
            v["mistakes"][mistake] = diff
            check(max(diff.values()) > 1e-2, f"{variant}: mistake {mistake} moves the output only {diff}")
        if variant == "jina-clip":
            v["rope_vs_complex_rotation"] = check_rope_by_complex(cfg["vision_config"])
            check(v["rope_vs_complex_rotation"] < 1e-12, "vision rope vs complex rotation")
            fam = check_text_against_families(folder, TEXTS)
            v["text_hidden_vs_families_reference"] = fam
            check(isinstance(fam, str) or fam < 1e-9, f"text hidden states vs families_reference.py: {fam}")
            # 97x41 -> 75x32: excess 43, left = round(21.5) = 22 where a floor gives 21
            crop = embed(folder, [path_of("landscape_97x41.jpg")], [], "crop-floor")["images"]
            one = embed(folder, [path_of("landscape_97x41.jpg")], [])["images"]
            v["crop_floor_landscape_97x41"] = float(np.abs(np.array(crop) - np.array(one)).max())
            check(v["crop_floor_landscape_97x41"] > 1e-3, "landscape_97x41: crop-floor must move it")
        report["variants"][variant] = v

    # processor modes on the jina-clip folder
    src = work / "jina-clip"
    modes = {}
    sq = pixel_values(with_processor(src, work / "squash", resize_mode="squash"), paths)
    modes["squash_shape"] = list(sq.shape)
    check(list(sq.shape) == [len(paths), 3, 32, 32], "squash shape")
    lg_folder = with_processor(src, work / "longest", resize_mode="longest", fill_color=0)
    lg = pixel_values(lg_folder, [path_of("landscape_97x41.jpg"), path_of("palette_P_50x33.png")])
    black = (0 - np.array(OPENAI_MEAN)) / np.array(OPENAI_STD)
    # 97x41 -> ratio 97/32 -> 32 x round(41 / 3.03125) = 14 rows, padded 9 above and 9 below
    modes["longest_landscape_pad_rows"] = int(np.all(np.abs(lg[0].transpose(1, 2, 0) - black) < 1e-5, axis=(1, 2)).sum())
    check(modes["longest_landscape_pad_rows"] == 18, "longest: 18 black rows on 97x41")
    pal = Image.open(path_of("palette_P_50x33.png"))
    fill0 = (np.array(pal.getpalette()[:3]) / 255 - OPENAI_MEAN) / OPENAI_STD  # palette index 0
    modes["longest_palette_fill_is_index0"] = bool(np.abs(lg[1][:, 0, 0] - fill0).max() < 1e-5)
    check(modes["longest_palette_fill_is_index0"], "longest: P pads with palette index fill_color")
    rect_bicubic = pixel_values(with_processor(src, work / "rect", size=[24, 32]), paths)
    rect_bilinear = pixel_values(with_processor(src, work / "rect2", size=[24, 32], interpolation="bilinear"), paths)
    modes["shortest_rect_shape"] = list(rect_bicubic.shape)
    modes["shortest_rect_ignores_interpolation"] = bool(np.array_equal(rect_bicubic, rect_bilinear))
    check(modes["shortest_rect_ignores_interpolation"], "shortest [h, w]: _ResizeKeepRatio's own BICUBIC")
    processor, encode = pixel_values(src, paths), pixel_values(src, paths, entry="encode_image")
    modes["encode_image_entry_differs_on"] = [n for n, a, b in zip(names, processor, encode)
                                              if np.abs(a - b).max() > 1e-6]
    report["processor_modes"] = modes
    report["ok"], report["failures"] = not failures, failures
    return report


# --------------------------------------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    entry = ("--entry", dict(choices=["processor", "encode_image"], default="processor"))
    args_of = {"make": [("variant", dict(choices=VARIANTS)), ("out", {}), ("--seed", dict(type=int, default=0)),
                        ("--rope-buffers", dict(action="store_true"))],
               "images": [("out", {})],
               "pixels": [("folder", {}), ("out", {}), ("images", dict(nargs="+")), entry],
               "embed": [("folder", {}), ("--images", dict(nargs="*", default=[])),
                         ("--texts", dict(nargs="*", default=[])), ("--mistake", dict(choices=MISTAKES)), entry],
               "selftest": [("work", {})]}
    for name, arguments in args_of.items():
        sp = sub.add_parser(name)
        for flag, kw in arguments:
            sp.add_argument(flag, **kw)
    a = ap.parse_args(argv)
    run = {"make": lambda: cmd_make(a.variant, a.out, a.seed, a.rope_buffers), "images": lambda: ir.cmd_images(a.out),
           "pixels": lambda: cmd_pixels(a.folder, a.out, a.images, a.entry),
           "embed": lambda: embed(a.folder, a.images, a.texts, a.mistake, a.entry),
           "selftest": lambda: cmd_selftest(a.work)}
    try:
        result = run[a.cmd]()
    except (ValueError, KeyError, TypeError, OSError) as exc:
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps(result))
    return 0 if result.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
