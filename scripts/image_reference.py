#!/usr/bin/env python3
"""An independent NumPy reference for image-and-text dual encoders (CLIP, SigLIP): small random
checkpoints laid out as the published ones, a varied image set, the slow (Pillow) image
processors' pixel_values, and float64 get_image_features / get_text_features. No nornir code used.

  image_reference.py make FAMILY OUT [--seed N]   clip | clip-eos | siglip: config.json,
                        model.safetensors (float32), preprocessor_config.json, tokenizer.json,
                        tokenizer_config.json, special_tokens_map.json
  image_reference.py images OUT                   the image set (fixed seed)
  image_reference.py pixels FOLDER OUT.npy IMAGE...   pixel_values [N,3,H,W] float32 (np.save)
  image_reference.py embed FOLDER --images .. --texts .. [--mistake NAME] [--siglip-unmasked]
                        {"images", "texts"} unnormalised features, plus input_ids,
                        pooled_positions and the largest batched-vs-alone difference
  image_reference.py selftest WORK                all of it, batch invariance, every mistake
Prints one JSON object; exits 1 on failure. Mistakes: mean-std-swapped, bilinear, no-post-norm,
no-final-norm, wrong-pooled-token, no-causal-mask.

Read (huggingface/transformers from the search index; written from the reading, not copied):
models/clip/modeling_clip.py in two versions (v4.31+: `if self.eos_token_id == 2` -> argmax; a
later one: every row's max == 49407 -> argmax; else the first eos_token_id), configuration_clip,
image_processing_clip.py (slow CLIPImageProcessor; v5's image_processing_pil_clip.py keeps its
defaults), processing_clip, models/siglip/modeling_siglip.py, configuration_siglip,
image_processing_siglip.py, processing_siglip, tokenization_siglip.py (slow: returns input_ids and
attention_mask) and _fast.py (input_ids only), image_transforms.py, image_utils.py
(infer_channel_dimension_format), image_processing_utils.py (get_size_dict), PR #24777, #39826.

Pixels (slow processors, v4 code paths):
  * Image.open, then convert_to_rgb = `convert("RGB")` when mode != "RGB": RGBA/LA drop alpha, no
    blending (the white alpha_composite variant is only in Idefics/Mllama); P+tRNS ignores the
    transparency; Pillow clips I;16 at 255; a 48-bit PNG opens as RGB keeping the high byte; a GIF
    gives frame 0; EXIF orientation is not applied (load_image would, the processor does not).
  * do_convert_rgb: CLIP default True; SigLIP default None (falsy) and google/siglip-* configs lack
    the key, so their slow processor raises on non-RGB input: `pixels` refuses it likewise.
    `make siglip` writes do_convert_rgb true so the whole image set can be checked.
  * Channel layout inferred once from the first image: an image 1 or 3 pixels tall reads as
    channels-first there; refused rather than imitated.
  * Resize: PIL Image.resize((w, h), resample) on the uint8 array (reducing_gap None; null
    resample -> BILINEAR). CLIP {"shortest_edge": S}: short side S, long int(S * long / short);
    {"height","width"}: that. SigLIP: (size["height"], size["width"]) (an int size fails there).
  * center_crop: top (h - ch) // 2, left (w - cw) // 2; zero padding, ceil((new - old) / 2)
    before, when the crop is larger. rescale: float64 multiply, then float32. normalize: float32
    (x - mean) / std with float32 mean/std. Channels first.
  * Settings as __init__ takes them: present keys override class defaults; null size, crop_size,
    mean, std fall back; null do_* are falsy; get_size_dict (int size = CLIP shortest edge, int
    crop = square). Unknown processor types fall back on config.json's model_type.

Models:
  * CLIP text: token + position embeddings, pre-LN layers, causal & padding mask, hidden_act
    (quick_gelu), final_layer_norm, pooled token, text_projection. Both pooling rules are computed
    and must agree: `clip` has <|endoftext|> = 49407 (vocab 49408, as OpenAI) with the legacy
    config ids bos 0, eos 2, pad 1; `clip-eos` has it at 3 (neither 2 nor the largest) and
    eos_token_id 3, so argmax and first-eos differ.
  * CLIP vision: conv patches without bias (row-major grid), class token, positions, pre_layrnorm,
    encoder, post_layernorm on the class token, visual_projection; pixels must be image_size.
  * SigLIP vision: conv with bias, positions, no class token, encoder, post_layernorm on all
    tokens, attention-pooling head (probe query; nn.MultiheadAttention's packed in_proj q,k,v rows;
    out_proj; + mlp(layernorm(.)); token 0). SigLIP text: bidirectional, gelu_pytorch_tanh,
    final_layer_norm, last position, head Linear.
  * SigLIP texts: padding to max_length = model_max_length (= max_position_embeddings, 64 in the
    real models) with </s> (pad = eos), truncation there; attention_mask passed, as the slow
    tokenizer returns it and SiglipModel masks the keys (--siglip-unmasked: big_vision/open_clip).
  * Tokenizers: WordLevel, ~250 lowercase words, NFC + Lowercase, Whitespace, <unk> (OpenAI's unk
    is <|endoftext|>, which WordLevel would then pool on). CLIP: TemplateProcessing
    "<|startoftext|> $A <|endoftext|>", pad <|endoftext|>, longest padding, truncation at 16 (end
    token kept). SigLIP: "$A </s>", no bos, <pad> 0, </s> 1, <unk> 2 as SigLIP's spiece, 12.
    SigLIP's canonicalize_text (punctuation stripping) is not in tokenizer.json: test texts have
    none. tokenizer_class PreTrainedTokenizerFast (CLIPTokenizerFast rejects a non-byte-level
    tokenizer.json; SiglipTokenizer needs spiece.model).
  * Weights: linear std 1/sqrt(fan_in), biases N(0, .02), layer norms 1 + .1 N and .05 N,
    embeddings N(0, .5); float32 on disk, float64 in the forward.
"""

import argparse
import json
import math
import struct
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
from PIL import Image
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

OPENAI_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_STD = [0.26862954, 0.26130258, 0.27577711]
MISTAKES = ("mean-std-swapped", "bilinear", "no-post-norm", "no-final-norm", "wrong-pooled-token",
            "no-causal-mask")
SPECS = {
    "clip": dict(text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           max_position_embeddings=16),
                 vision=dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=6,
                             image_size=32, patch_size=8),
                 projection_dim=24, shortest_edge=36),
    "siglip": dict(text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                             max_position_embeddings=12),
                   vision=dict(hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=2,
                               image_size=24, patch_size=6)),
}
BASE_WORDS = """a an the of and in on at with near under over two three one four some many photo picture
image drawing painting sketch cat cats dog dogs bird birds horse car cars bus train plane boat bike tree
trees house houses street road park beach sea sky cloud clouds sun moon night day red blue green yellow
black white small big old new man woman child children people person sitting standing running eating
playing sleeping flying table chair window door room kitchen food pizza apple banana cake cup glass
bottle book phone computer city mountain river lake snow rain field grass flower flowers garden""".split()
TEXTS = ["a photo of a cat", "two dogs", "",
         "a photo of a cat and a dog on the red car in the park with two birds near an old house",
         "A Photo of a ZEBRA near the sea"]


def vocabulary_words():
    words = list(dict.fromkeys(BASE_WORDS))
    words += [c + v + e for c in "bdgkp" for v in "aeiou" for e in "lmnrst" if c + v + e not in words]
    return words


# --------------------------------------------------------------------------------------------- make
def token_layout(family):
    """Vocabulary dict and the (bos, eos, pad) token strings of each family."""
    words = vocabulary_words()
    if family == "clip":
        vocab = {w: i for i, w in enumerate(["<unk>"] + words)}
        vocab.update({"<|startoftext|>": 49406, "<|endoftext|>": 49407})
        return vocab, ("<|startoftext|>", "<|endoftext|>", "<|endoftext|>")
    if family == "clip-eos":
        order = ["<unk>", "<|startoftext|>", words[0], "<|endoftext|>"] + words[1:]
        return {w: i for i, w in enumerate(order)}, ("<|startoftext|>", "<|endoftext|>", "<|endoftext|>")
    return {w: i for i, w in enumerate(["<pad>", "</s>", "<unk>"] + words)}, (None, "</s>", "</s>")


def build_tokenizer(family):
    vocab, (bos, eos, _) = token_layout(family)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([t for t in (bos, eos, "<unk>", "<pad>" if family == "siglip" else None) if t])
    if family == "siglip":
        tok.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, vocab[eos])])
    else:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A {eos}", special_tokens=[(bos, vocab[bos]), (eos, vocab[eos])])
    return tok, vocab


def random_weights(rng, family, tc, vc, vocab_size):
    W = {}

    def lin(name, n_out, n_in, bias=True):
        W[name + ".weight"] = rng.normal(0, n_in ** -0.5, (n_out, n_in))
        if bias:
            W[name + ".bias"] = rng.normal(0, 0.02, n_out)

    def norm(name, n):
        W[name + ".weight"] = 1 + 0.1 * rng.normal(size=n)
        W[name + ".bias"] = 0.05 * rng.normal(size=n)

    def encoder(prefix, c):
        d, i = c["hidden_size"], c["intermediate_size"]
        for layer in range(c["num_hidden_layers"]):
            p = f"{prefix}.encoder.layers.{layer}."
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                lin(p + "self_attn." + proj, d, d)
            norm(p + "layer_norm1", d)
            norm(p + "layer_norm2", d)
            lin(p + "mlp.fc1", i, d)
            lin(p + "mlp.fc2", d, i)

    dt, dv, p = tc["hidden_size"], vc["hidden_size"], vc["patch_size"]
    n_patches = (vc["image_size"] // p) ** 2
    W["text_model.embeddings.token_embedding.weight"] = rng.normal(0, 0.5, (vocab_size, dt))
    W["text_model.embeddings.position_embedding.weight"] = rng.normal(0, 0.5, (tc["max_position_embeddings"], dt))
    encoder("text_model", tc)
    norm("text_model.final_layer_norm", dt)
    W["vision_model.embeddings.patch_embedding.weight"] = rng.normal(0, (3 * p * p) ** -0.5, (dv, 3, p, p))
    encoder("vision_model", vc)
    norm("vision_model.post_layernorm", dv)
    if family == "siglip":
        W["vision_model.embeddings.patch_embedding.bias"] = rng.normal(0, 0.02, dv)
        W["vision_model.embeddings.position_embedding.weight"] = rng.normal(0, 0.5, (n_patches, dv))
        lin("text_model.head", dt, dt)
        W["vision_model.head.probe"] = rng.normal(0, 1.0, (1, 1, dv))
        W["vision_model.head.attention.in_proj_weight"] = rng.normal(0, dv ** -0.5, (3 * dv, dv))
        W["vision_model.head.attention.in_proj_bias"] = rng.normal(0, 0.02, 3 * dv)
        lin("vision_model.head.attention.out_proj", dv, dv)
        norm("vision_model.head.layernorm", dv)
        lin("vision_model.head.mlp.fc1", vc["intermediate_size"], dv)
        lin("vision_model.head.mlp.fc2", dv, vc["intermediate_size"])
        W["logit_scale"] = np.array([math.log(10.0)])
        W["logit_bias"] = np.array([-10.0])
    else:
        W["vision_model.embeddings.class_embedding"] = rng.normal(0, 0.5, dv)
        W["vision_model.embeddings.position_embedding.weight"] = rng.normal(0, 0.5, (n_patches + 1, dv))
        norm("vision_model.pre_layrnorm", dv)
        lin("visual_projection", SPECS["clip"]["projection_dim"], dv, bias=False)
        lin("text_projection", SPECS["clip"]["projection_dim"], dt, bias=False)
        W["logit_scale"] = np.array(2.6592)
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in W.items()}


def cmd_make(family, out, seed):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec = SPECS["siglip" if family == "siglip" else "clip"]
    tok, vocab = build_tokenizer(family)
    _, (bos, eos, pad) = token_layout(family)
    vocab_size = max(vocab.values()) + 1
    tc, vc = dict(spec["text"], vocab_size=vocab_size), dict(spec["vision"], num_channels=3)
    size = [vc["image_size"], vc["image_size"]]
    if family == "siglip":
        tc.update(model_type="siglip_text_model", hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
                  pad_token_id=vocab[pad], eos_token_id=vocab[eos])
        vc.update(model_type="siglip_vision_model", hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
        config = dict(architectures=["SiglipModel"], model_type="siglip", initializer_factor=1.0)
        proc = dict(image_processor_type="SiglipImageProcessor", processor_class="SiglipProcessor",
                    do_resize=True, size={"height": size[0], "width": size[1]}, resample=3, do_rescale=True,
                    rescale_factor=0.00392156862745098, do_normalize=True, image_mean=[0.5] * 3,
                    image_std=[0.5] * 3, do_convert_rgb=True)
        special = {"eos_token": eos, "pad_token": pad, "unk_token": "<unk>"}
    else:
        ids = (0, 2, 1) if family == "clip" else (vocab[bos], vocab[eos], vocab[pad])
        common = dict(hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=spec["projection_dim"])
        tc.update(common, model_type="clip_text_model", bos_token_id=ids[0], eos_token_id=ids[1], pad_token_id=ids[2])
        vc.update(common, model_type="clip_vision_model")
        config = dict(architectures=["CLIPModel"], model_type="clip", projection_dim=spec["projection_dim"],
                      logit_scale_init_value=2.6592, initializer_factor=1.0)
        proc = dict(image_processor_type="CLIPImageProcessor", processor_class="CLIPProcessor", do_resize=True,
                    size={"shortest_edge": spec["shortest_edge"]}, do_center_crop=True,
                    crop_size={"height": size[0], "width": size[1]}, resample=3, do_rescale=True,
                    rescale_factor=0.00392156862745098, do_normalize=True, image_mean=OPENAI_MEAN,
                    image_std=OPENAI_STD, do_convert_rgb=True)
        special = {"bos_token": bos, "eos_token": eos, "pad_token": pad, "unk_token": "<unk>"}
    config.update(text_config=tc, vision_config=vc, torch_dtype="float32")
    W = random_weights(np.random.default_rng(seed), family, tc, vc, vocab_size)
    save_file(W, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps(proc, indent=2))
    tok.save(str(out / "tokenizer.json"))
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
    (out / "tokenizer_config.json").write_text(json.dumps(dict(
        special, tokenizer_class="PreTrainedTokenizerFast", model_max_length=tc["max_position_embeddings"],
        do_lower_case=True), indent=2))
    dims = (tc["hidden_size"], vc["hidden_size"]) if family == "siglip" else (spec["projection_dim"],) * 2
    return {"folder": str(out), "family": family, "text_dim": dims[0], "image_dim": dims[1], "image_size": size}


# ------------------------------------------------------------------------------------------- images
def photo(rng, w, h, phase=0.0):
    """Gradients, waves and noise: no flat areas, so resampling filters differ."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32) / max(w, h, 1)
    base = np.stack([120 + 100 * np.sin(7 * x + 3 * y + phase), 128 + 90 * np.cos(5 * y - 4 * x + phase),
                     60 + 160 * x * (1 - y)], -1)
    return np.clip(base + rng.standard_normal(base.shape, dtype=np.float32) * 18, 0, 255).astype(np.uint8)


def write_png_rgb16(path, a):
    """Pillow cannot write 48-bit RGB, so the PNG is written by hand (IHDR bit depth 16, type 2)."""
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in a)
    hdr = struct.pack(">IIBBBBB", a.shape[1], a.shape[0], 16, 2, 0, 0, 0)
    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", hdr) + chunk(b"IDAT", zlib.compress(raw))
                           + chunk(b"IEND", b""))


def cmd_images(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1234)
    rgb = lambda w, h, ph=0.0: Image.fromarray(photo(rng, w, h, ph), "RGB")
    saved = {}

    def save(name, im, **kw):
        im.save(out / name, **kw)
        saved[name] = None

    save("landscape_97x41.jpg", rgb(97, 41), quality=90)
    save("portrait_40x113.png", rgb(40, 113))
    save("tiny_3x5.png", rgb(3, 5))
    save("huge_3001x2003.jpg", rgb(3001, 2003), quality=85)
    save("gray_L_57x38.png", rgb(57, 38).convert("L"))
    rgba = np.dstack([photo(rng, 45, 30), np.tile(np.linspace(0, 255, 45).astype(np.uint8), (30, 1))])
    rgba[:8, :8, 3] = 0  # fully transparent, RGB kept non-zero: convert("RGB") must keep it
    save("rgba_alpha_45x30.png", Image.fromarray(rgba, "RGBA"))
    save("palette_P_50x33.png", rgb(50, 33).quantize(64))
    pt = rgb(44, 31).quantize(16)
    save("palette_trns_44x31.png", pt, transparency=bytes([0, 64, 128, 200] + [255] * 12))
    g16 = (np.linspace(0, 65535, 48 * 35).reshape(35, 48) * (0.5 + rng.random((35, 48)) / 2)).astype(np.uint16)
    save("gray16_I16_48x35.png", Image.fromarray(g16))
    saved["gray16_I16_48x35.png"] = "mode I;16 up to 65535: Pillow's convert('RGB') clips at 255, it does not scale"
    low = rng.integers(0, 257, (28, 40, 3)).astype(np.uint16)
    write_png_rgb16(out / "rgb16_40x28.png", photo(rng, 40, 28).astype(np.uint16) * 257 + low)
    saved["rgb16_40x28.png"] = "48-bit PNG written by hand (Pillow cannot write one); Pillow opens it as RGB, high byte"
    save("progressive_80x60.jpg", rgb(80, 60), quality=88, progressive=True)
    save("gray_L_70x50.jpg", rgb(70, 50).convert("L"), quality=90)
    save("lossy_64x48.webp", rgb(64, 48), quality=75)
    wa = np.dstack([photo(rng, 52, 40), rng.integers(0, 256, (40, 52), dtype=np.uint8)])
    wa[:5, :5, 3] = 0
    save("lossless_alpha_52x40.webp", Image.fromarray(wa, "RGBA"), lossless=True, exact=True)
    frames = [rgb(30, 22, ph) for ph in (0.0, 2.0, 4.0)]
    save("animated_3frames_30x22.gif", frames[0], save_all=True, append_images=frames[1:], duration=100, loop=0)
    save("exact_36x36.png", rgb(36, 36))  # the clip fixture's resize target (shortest_edge 36)
    save("exact_32x32.png", rgb(32, 32))  # the clip fixture's crop / model size
    save("exact_24x24.png", rgb(24, 24))  # the siglip fixture's size
    save("small_10x7.png", rgb(10, 7))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation "rotate 90": the processors do not apply it
    save("exif_rotated_60x40.jpg", rgb(60, 40), quality=90, exif=exif.tobytes())
    saved["exif_rotated_60x40.jpg"] = "EXIF orientation 6, which the processors ignore (stored 60x40 is used)"
    saved["rgba_alpha_45x30.png"] = "alpha 0 over non-zero RGB in the top-left 8x8: convert('RGB') keeps the RGB"
    return {"folder": str(out), "images": list(saved), "notes": {k: v for k, v in saved.items() if v}}


# ------------------------------------------------------------------------------------------- pixels
def get_size_dict(size, default_to_square):
    if isinstance(size, int):
        return {"height": size, "width": size} if default_to_square else {"shortest_edge": size}
    if isinstance(size, (list, tuple)):
        return {"height": size[0], "width": size[1]}
    valid = [{"height", "width"}, {"shortest_edge"}, {"shortest_edge", "longest_edge"}, {"longest_edge"},
             {"max_height", "max_width"}]
    if not isinstance(size, dict) or set(size) not in valid:
        raise ValueError(f"size must have one of the keys sets {valid}, got {size}")
    return size


def processor_settings(folder):
    folder = Path(folder)
    pc = json.loads((folder / "preprocessor_config.json").read_text())
    kind = pc.get("image_processor_type") or pc.get("feature_extractor_type") or ""
    if not kind.startswith(("CLIP", "Siglip")):
        kind = "Siglip" if json.loads((folder / "config.json").read_text())["model_type"] == "siglip" else "CLIP"
    clip = kind.startswith("CLIP")
    s = dict(do_resize=True, resample=3, do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
             do_center_crop=clip, do_convert_rgb=True if clip else None)
    defaults = dict(size={"shortest_edge": 224} if clip else {"height": 224, "width": 224},
                    crop_size={"height": 224, "width": 224}, image_mean=OPENAI_MEAN if clip else [0.5] * 3,
                    image_std=OPENAI_STD if clip else [0.5] * 3)
    for key in s:
        if key in pc and (clip or key != "do_center_crop"):
            s[key] = pc[key]
    for key, value in defaults.items():
        s[key] = pc[key] if pc.get(key) is not None else value
    s["size"] = get_size_dict(s["size"], default_to_square=False)
    s["crop_size"] = get_size_dict(s["crop_size"], default_to_square=True)
    s["kind"] = "clip" if clip else "siglip"
    return s


def resize_output_size(h, w, size, kind):
    if kind == "siglip":
        return size["height"], size["width"]
    if "shortest_edge" in size:
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = size["shortest_edge"], int(size["shortest_edge"] * long / short)
        return (new_long, new_short) if w <= h else (new_short, new_long)
    if "height" in size and "width" in size:
        return size["height"], size["width"]
    raise ValueError("Size must contain either 'shortest_edge' or 'height' and 'width'.")


def center_crop(a, ch, cw):
    h, w = a.shape[:2]
    top, left = (h - ch) // 2, (w - cw) // 2
    if top >= 0 and left >= 0 and top + ch <= h and left + cw <= w:
        return a[top:top + ch, left:left + cw]
    nh, nw = max(ch, h), max(cw, w)
    padded = np.zeros((nh, nw) + a.shape[2:], a.dtype)
    tp, lp = math.ceil((nh - h) / 2), math.ceil((nw - w) / 2)
    padded[tp:tp + h, lp:lp + w] = a
    top, left = top + tp, left + lp
    return padded[max(0, top):min(nh, top + ch), max(0, left):min(nw, left + cw)]


def load_rgb(path, convert):
    im = Image.open(path)
    if im.mode != "RGB":
        if not convert:
            raise ValueError(f"{path}: mode {im.mode} and do_convert_rgb is off: the slow processor raises here")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im = im.convert("RGB")
    return np.array(im)


def pixel_values(folder, paths, mistake=None):
    s = processor_settings(folder)
    mean, std = s["image_mean"], s["image_std"]
    if mistake == "mean-std-swapped":
        mean, std = std, mean
    resample = 2 if mistake == "bilinear" else (s["resample"] if s["resample"] is not None else 2)
    arrays = [load_rgb(p, s["do_convert_rgb"]) for p in paths]
    if arrays and arrays[0].shape[0] in (1, 3):
        raise ValueError(f"{paths[0]}: {arrays[0].shape[0]} pixels tall, transformers would read it as channels-first")
    out = []
    for a in arrays:
        if s["do_resize"]:
            oh, ow = resize_output_size(a.shape[0], a.shape[1], s["size"], s["kind"])
            a = np.array(Image.fromarray(a).resize((ow, oh), resample=resample))
        if s["do_center_crop"]:
            a = center_crop(a, int(s["crop_size"]["height"]), int(s["crop_size"]["width"]))
        x = a
        if s["do_rescale"]:
            x = (x.astype(np.float64) * s["rescale_factor"]).astype(np.float32)
        if s["do_normalize"]:
            x = x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float32)
            x = (x - np.array(mean, dtype=x.dtype)) / np.array(std, dtype=x.dtype)
        out.append(x.transpose(2, 0, 1))
    if len({o.shape for o in out}) > 1:
        raise ValueError(f"images of different sizes cannot be batched: {[o.shape for o in out]}")
    return np.stack(out).astype(np.float32) if out else np.zeros((0, 3, 0, 0), np.float32)


# -------------------------------------------------------------------------------------------- model
ACT = {
    "quick_gelu": lambda x: x / (1 + np.exp(-1.702 * x)),
    "gelu_pytorch_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
}


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


def attention(q, k, v, heads, allowed):
    """Scaled dot-product attention; allowed [B, Lq, Lk] bool or None."""
    b, lq, d = q.shape
    hd = d // heads
    split = lambda t: t.reshape(b, t.shape[1], heads, hd).transpose(0, 2, 1, 3)
    s = split(q) @ split(k).transpose(0, 1, 3, 2) * hd ** -0.5
    if allowed is not None:
        s = np.where(allowed[:, None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ split(v)).transpose(0, 2, 1, 3).reshape(b, lq, d)


def encoder(x, W, prefix, c, allowed):
    act, eps = ACT[c["hidden_act"]], c["layer_norm_eps"]
    for layer in range(c["num_hidden_layers"]):
        p = f"{prefix}.encoder.layers.{layer}."
        h = layer_norm(x, W, p + "layer_norm1", eps)
        a = attention(*(linear(h, W, p + f"self_attn.{n}_proj") for n in "qkv"), c["num_attention_heads"], allowed)
        x = x + linear(a, W, p + "self_attn.out_proj")
        h = layer_norm(x, W, p + "layer_norm2", eps)
        x = x + linear(act(linear(h, W, p + "mlp.fc1")), W, p + "mlp.fc2")
    return x


def pooled_positions(ids, cfg, mistake):
    b, length = ids.shape
    if cfg["model_type"] == "siglip":
        return np.full(b, 0 if mistake == "wrong-pooled-token" else length - 1)
    if mistake == "wrong-pooled-token":
        return np.full(b, length - 1)
    eos = cfg["text_config"].get("eos_token_id", 49407)  # CLIPTextConfig's default since PR #24773
    first_eos = (ids == eos).astype(np.int64).argmax(-1)
    old = ids.argmax(-1) if eos == 2 else first_eos
    new = ids.argmax(-1) if np.all(ids.max(-1) == 49407) else first_eos
    if not np.array_equal(old, new):
        raise ValueError(f"transformers' two CLIP pooling rules disagree on this checkpoint: {old} vs {new}")
    return old


def text_features(W, cfg, ids, mask, mistake=None):
    tc, siglip = cfg["text_config"], cfg["model_type"] == "siglip"
    b, length = ids.shape
    x = W["text_model.embeddings.token_embedding.weight"][ids]
    x = x + W["text_model.embeddings.position_embedding.weight"][:length]
    allowed = np.broadcast_to(mask.astype(bool)[:, None, :], (b, length, length))
    if not siglip and mistake != "no-causal-mask":
        allowed = allowed & np.tril(np.ones((length, length), bool))[None]
    x = encoder(x, W, "text_model", tc, allowed)
    if mistake != "no-final-norm":
        x = layer_norm(x, W, "text_model.final_layer_norm", tc["layer_norm_eps"])
    pooled = x[np.arange(b), pooled_positions(ids, cfg, mistake)]
    return linear(pooled, W, "text_model.head") if siglip else pooled @ W["text_projection.weight"].T


def image_features(W, cfg, px, mistake=None):
    vc, siglip = cfg["vision_config"], cfg["model_type"] == "siglip"
    n, c, h, w = px.shape
    p, d, eps = vc["patch_size"], vc["hidden_size"], vc["layer_norm_eps"]
    if not siglip and (h != vc["image_size"] or w != vc["image_size"]):
        raise ValueError(f"Input image size ({h}*{w}) doesn't match model ({vc['image_size']}*{vc['image_size']}).")
    gh, gw = h // p, w // p
    patches = px[:, :, :gh * p, :gw * p].reshape(n, c, gh, p, gw, p).transpose(0, 2, 4, 1, 3, 5).reshape(n, gh * gw, -1)
    x = patches @ W["vision_model.embeddings.patch_embedding.weight"].reshape(d, -1).T
    if siglip:
        x = x + W["vision_model.embeddings.patch_embedding.bias"]
    else:
        x = np.concatenate([np.broadcast_to(W["vision_model.embeddings.class_embedding"], (n, 1, d)), x], 1)
    x = x + W["vision_model.embeddings.position_embedding.weight"]
    if not siglip:
        x = layer_norm(x, W, "vision_model.pre_layrnorm", eps)
    x = encoder(x, W, "vision_model", vc, None)
    if not siglip:
        pooled = x[:, 0]
        if mistake != "no-post-norm":
            pooled = layer_norm(pooled, W, "vision_model.post_layernorm", eps)
        return pooled @ W["visual_projection.weight"].T
    if mistake != "no-post-norm":
        x = layer_norm(x, W, "vision_model.post_layernorm", eps)
    return attention_pool(x, W, vc)


def attention_pool(x, W, vc):
    """SiglipMultiheadAttentionPoolingHead: probe attends over the tokens, then residual MLP."""
    hp, d = "vision_model.head.", vc["hidden_size"]
    w_in, b_in = W[hp + "attention.in_proj_weight"], W[hp + "attention.in_proj_bias"]
    probe = np.broadcast_to(W[hp + "probe"], (x.shape[0], 1, d))
    q, k, v = (t @ w_in[i * d:(i + 1) * d].T + b_in[i * d:(i + 1) * d] for i, t in enumerate((probe, x, x)))
    h = linear(attention(q, k, v, vc["num_attention_heads"], None), W, hp + "attention.out_proj")
    m = layer_norm(h, W, hp + "layernorm", vc["layer_norm_eps"])
    h = h + linear(ACT[vc["hidden_act"]](linear(m, W, hp + "mlp.fc1")), W, hp + "mlp.fc2")
    return h[:, 0]


# -------------------------------------------------------------------------------------------- embed
def tokenize(folder, cfg, texts, unmasked=False):
    folder = Path(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tk = json.loads((folder / "tokenizer_config.json").read_text())
    pad = json.loads((folder / "special_tokens_map.json").read_text())["pad_token"]
    pad = pad["content"] if isinstance(pad, dict) else pad
    max_len = tk["model_max_length"]
    tok.enable_truncation(max_len)
    siglip = cfg["model_type"] == "siglip"
    tok.enable_padding(pad_id=tok.token_to_id(pad), pad_token=pad, length=max_len if siglip else None)
    enc = tok.encode_batch(texts)
    ids = np.array([e.ids for e in enc], np.int64).reshape(len(texts), -1)
    mask = np.array([e.attention_mask for e in enc], np.int64).reshape(ids.shape)
    return ids, (np.ones_like(mask) if siglip and unmasked else mask)


def embed(folder, images, texts, mistake=None, unmasked=False):
    cfg, W = load_model(folder)
    result, worst = {"images": [], "texts": []}, {"images": 0.0, "texts": 0.0}
    if images:
        feats = image_features(W, cfg, pixel_values(folder, images, mistake).astype(np.float64), mistake)
        alone = np.concatenate([image_features(W, cfg, pixel_values(folder, [p], mistake).astype(np.float64), mistake)
                                for p in images])
        result["images"], worst["images"] = feats.tolist(), float(np.abs(feats - alone).max())
    if texts:
        ids, mask = tokenize(folder, cfg, texts, unmasked)
        feats = text_features(W, cfg, ids, mask, mistake)
        alone = np.concatenate([text_features(W, cfg, *tokenize(folder, cfg, [t], unmasked), mistake) for t in texts])
        result["texts"], worst["texts"] = feats.tolist(), float(np.abs(feats - alone).max())
        result["input_ids"], result["pooled_positions"] = ids.tolist(), pooled_positions(ids, cfg, mistake).tolist()
    result["batch_alone_max_diff"] = worst
    if mistake is None and max(worst.values()) > 1e-9:
        raise ValueError(f"a batched result differs from the same input alone: {worst}")
    return result


# ----------------------------------------------------------------------------------------- selftest
def cmd_selftest(work):
    work = Path(work)
    names = cmd_images(work / "images")["images"]
    paths = [str(work / "images" / n) for n in names]
    failures, report = [], {}
    check = lambda ok, what: ok or failures.append(what)
    raw = np.array(Image.open(paths[names.index("rgba_alpha_45x30.png")]))
    check(np.array_equal(load_rgb(paths[names.index("rgba_alpha_45x30.png")], True), raw[..., :3]),
          "RGBA -> RGB must keep the RGB of transparent pixels")
    for family in ("clip", "clip-eos", "siglip"):
        folder = work / family
        made = cmd_make(family, folder, seed=7)
        cfg, _ = load_model(folder)
        vocab, (_, eos, _) = token_layout(family)
        if family == "clip":
            check(vocab[eos] == max(vocab.values()) == 49407, "clip: <|endoftext|> must be the largest id, 49407")
        if family == "clip-eos":
            check(vocab[eos] not in (2, max(vocab.values())), "clip-eos: <|endoftext|> must be small, not 2")
        px = pixel_values(folder, paths)
        np.save(work / f"{family}_pixels.npy", px)
        check(list(px.shape) == [len(paths), 3] + made["image_size"] and np.isfinite(px).all(), f"{family}: pixels")
        exact = "exact_24x24.png" if family == "siglip" else "exact_36x36.png"
        a = np.array(Image.open(paths[names.index(exact)]).convert("RGB"), np.float64)
        a = a if family == "siglip" else a[2:34, 2:34]
        s = processor_settings(folder)
        by_hand = ((a / 255 - s["image_mean"]) / s["image_std"]).transpose(2, 0, 1)
        check(np.abs(px[names.index(exact)] - by_hand).max() < 1e-5, f"{family}: exact-size image by hand")
        base = embed(folder, paths, TEXTS)
        ids = np.array(base["input_ids"])
        eos_id = cfg["text_config"]["eos_token_id"] if family != "clip" else 49407
        first_eos = (ids == eos_id).argmax(-1)
        check(base["pooled_positions"] == (ids.argmax(-1) if family == "clip" else first_eos if family == "clip-eos"
                                           else np.full(len(TEXTS), ids.shape[1] - 1)).tolist(), f"{family}: pooling")
        if family == "clip-eos":
            check(bool((ids.argmax(-1) != first_eos).any()), "clip-eos: argmax and first eos must differ somewhere")
        fam = {"pixels_shape": list(px.shape), "input_ids_shape": list(ids.shape),
               "batch_alone_max_diff": base["batch_alone_max_diff"], "mistakes": {}}
        for mistake in MISTAKES:
            if family == "siglip" and mistake == "no-causal-mask":
                fam["mistakes"][mistake] = "n/a: SigLIP's text model has no causal mask"
                continue
            if family == "siglip" and mistake == "mean-std-swapped":
                fam["mistakes"][mistake] = "n/a: SigLIP's mean and std are both 0.5"
                continue
            wrong = embed(folder, paths, TEXTS, mistake)
            diff = max(float(np.abs(np.array(wrong[k]) - np.array(base[k])).max()) for k in ("images", "texts"))
            fam["mistakes"][mistake] = diff
            check(diff > 1e-3, f"{family}: mistake {mistake} changes the output by only {diff}")
        report[family] = fam
    return {"ok": not failures, "failures": failures, "images": len(paths), "families": report}


def cmd_pixels(folder, out, images):
    px = pixel_values(folder, images)
    np.save(out, px)
    return {"shape": list(px.shape), "out": out}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    args_of = {"make": [("family", dict(choices=["clip", "clip-eos", "siglip"])), ("out", {}),
                        ("--seed", dict(type=int, default=0))],
               "images": [("out", {})], "pixels": [("folder", {}), ("out", {}), ("images", dict(nargs="+"))],
               "embed": [("folder", {}), ("--images", dict(nargs="*", default=[])),
                         ("--texts", dict(nargs="*", default=[])), ("--mistake", dict(choices=MISTAKES)),
                         ("--siglip-unmasked", dict(action="store_true"))],
               "selftest": [("work", {})]}
    for name, arguments in args_of.items():
        sp = sub.add_parser(name)
        for flag, kw in arguments:
            sp.add_argument(flag, **kw)
    a = ap.parse_args(argv)
    run = {"make": lambda: cmd_make(a.family, a.out, a.seed), "images": lambda: cmd_images(a.out),
           "pixels": lambda: cmd_pixels(a.folder, a.out, a.images),
           "embed": lambda: embed(a.folder, a.images, a.texts, a.mistake, a.siglip_unmasked),
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
