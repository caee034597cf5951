"""jina-clip's image preprocessing computed with Pillow and NumPy, for tests/pillow_jina.rs.

JinaCLIPImageProcessor builds open_clip's eval `image_transform` and calls it on the Pillow
image. torch is not needed to follow it: every step before ToTensor is torchvision calling
Pillow, written out here from torchvision's `functional.py` / `_functional_pil.py` and
open_clip's (jina's) `transform.py`:

  shortest, square size:  Resize(size)   shortest edge = size, the other int(size * long / short);
                                          no resize when the size already matches
  shortest, other size:   ResizeKeepRatio(size) (BICUBIC whatever `interpolation` says),
                          each side round(side / min(h / th, w / tw))
  then                    CenterCrop(size): pad (fill 0) where the crop is larger, then crop at
                          int(round((h - ch) / 2.0)), Python's round (half to even)
  squash:                 Resize((h, w))
  longest:                ResizeKeepRatio(size, longest=1): round(side / max(..)), then
                          CenterCropOrPad(size, fill=fill_color)
  then                    convert("RGB"), ToTensor (float32 / 255), Normalize (float32)

Pillow's own `Image.resize` does the mode-dependent work (NEAREST for 1 and P, premultiplied
alpha for LA and RGBA, 16-bit sums for I;16).

  jina_reference.py images OUT                 extra images (modes the shared set lacks), JSON names
  jina_reference.py pixels CASES IMAGES OUT    CASES: a JSON list of {"config": a preprocessor
                                               config, "rgb_first": bool}; for each case and
                                               image, OUT/<i>-<image>.npy or an error; prints the
                                               JSON manifest

rgb_first is jina's own entry points (JinaCLIPModel.encode_image, its sentence-transformers
module): Image.open(..).convert("RGB") before the processor. Without it, the processor gets the
image as opened.
"""

import json
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

OPENAI_DATASET_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_DATASET_STD = (0.26862954, 0.26130258, 0.27577711)


# ------------------------------------------------------------------------------ torchvision on PIL
def tv_resize(img, size, resample):
    """F.resize: an int is the shortest edge; [h, w] is exact; the same size returns img."""
    w, h = img.size
    if isinstance(size, int):
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = size, int(size * long / short)
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    else:
        new_h, new_w = size
    if [h, w] == [new_h, new_w]:
        return img
    return img.resize((new_w, new_h), resample)


def keep_ratio(img, target, longest, resample):
    """open_clip's ResizeKeepRatio without its random factors."""
    h, w = img.size[::-1]
    ratio_h, ratio_w = h / target[0], w / target[1]
    ratio = max(ratio_h, ratio_w) * longest + min(ratio_h, ratio_w) * (1.0 - longest)
    size = [round(x * 1.0 / ratio) for x in (h, w)]
    return tv_resize(img, size, resample)


def tv_pad(img, ltrb, fill):
    """F_pil.pad, constant mode: the fill repeated per band; a P image keeps its palette."""
    bands = len(img.getbands())
    fill = tuple([fill] * bands) if bands > 1 else fill
    if img.mode == "P":
        palette = img.getpalette()
        out = ImageOps.expand(img, border=tuple(ltrb), fill=fill)
        out.putpalette(palette)
        return out
    return ImageOps.expand(img, border=tuple(ltrb), fill=fill)


def center_crop_or_pad(img, size, fill):
    """F.center_crop (fill 0) and open_clip's center_crop_or_pad (fill_color)."""
    crop_h, crop_w = size
    w, h = img.size
    if crop_w > w or crop_h > h:
        ltrb = [
            (crop_w - w) // 2 if crop_w > w else 0,
            (crop_h - h) // 2 if crop_h > h else 0,
            (crop_w - w + 1) // 2 if crop_w > w else 0,
            (crop_h - h + 1) // 2 if crop_h > h else 0,
        ]
        img = tv_pad(img, ltrb, fill)
        w, h = img.size
        if (crop_w, crop_h) == (w, h):
            return img
    top = int(round((h - crop_h) / 2.0))
    left = int(round((w - crop_w) / 2.0))
    return img.crop((left, top, left + crop_w, top + crop_h))


def transform(cfg, img):
    size = cfg.get("size", 224)
    mean = cfg.get("mean") or OPENAI_DATASET_MEAN
    mean = mean if isinstance(mean, (list, tuple)) else (mean,) * 3
    std = cfg.get("std") or OPENAI_DATASET_STD
    std = std if isinstance(std, (list, tuple)) else (std,) * 3
    interpolation = cfg.get("interpolation") or "bicubic"
    resample = Image.Resampling.BILINEAR if interpolation == "bilinear" else Image.Resampling.BICUBIC
    mode = cfg.get("resize_mode") or "shortest"
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if mode == "longest":
        img = keep_ratio(img, pair, 1, resample)
        img = center_crop_or_pad(img, pair, cfg.get("fill_color", 0))
    elif mode == "squash":
        img = tv_resize(img, list(pair), resample)
    else:
        if pair[0] == pair[1]:
            img = tv_resize(img, pair[0], resample)
        else:
            img = keep_ratio(img, pair, 0, Image.Resampling.BICUBIC)
        img = center_crop_or_pad(img, pair, 0)
    img = img.convert("RGB")
    x = np.asarray(img).astype(np.float32).transpose(2, 0, 1) / np.float32(255)
    m = np.asarray(mean, np.float32).reshape(-1, 1, 1)
    s = np.asarray(std, np.float32).reshape(-1, 1, 1)
    return (x - m) / s


# -------------------------------------------------------------------------------------- images
def png16(path, width, height, color_type, samples):
    """A 16-bit PNG by hand (Pillow writes none with alpha): `samples` big-endian per row."""
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in samples.reshape(height, -1))
    hdr = struct.pack(">IIBBBBB", width, height, 16, color_type, 0, 0, 0)
    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", hdr) + chunk(b"IDAT", zlib.compress(raw))
                           + chunk(b"IEND", b""))


def cmd_images(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4321)
    noise = lambda h, w, c=3: rng.integers(0, 256, (h, w, c), dtype=np.uint8)

    def smooth(h, w, c=3):
        y, x = np.mgrid[0:h, 0:w].astype(np.float32) / max(h, w)
        base = np.stack([120 + 100 * np.sin(6 * x + 2 * y + k) for k in range(c)], -1)
        return np.clip(base + rng.standard_normal(base.shape, dtype=np.float32) * 20, 0, 255).astype(np.uint8)

    names = []

    def save(name, im, **kw):
        im.save(out / name, **kw)
        names.append(name)

    la = np.dstack([smooth(29, 41, 1), np.tile(np.linspace(0, 255, 41).astype(np.uint8), (29, 1))])
    la[:4, :4, 1] = 0
    save("la_41x29.png", Image.fromarray(la, "LA"))
    save("bilevel_1_33x21.png", Image.fromarray(smooth(21, 33, 1)[..., 0]).convert("1"))
    save("cmyk_50x37.jpg", Image.fromarray(smooth(37, 50, 4), "CMYK"), quality=92)
    rgba16 = smooth(22, 30, 4).astype(np.uint16) * 257 + rng.integers(0, 257, (22, 30, 4)).astype(np.uint16)
    png16(out / "rgba16_30x22.png", 30, 22, 6, rgba16)
    names.append("rgba16_30x22.png")
    la16 = smooth(19, 27, 2).astype(np.uint16) * 257 + rng.integers(0, 257, (19, 27, 2)).astype(np.uint16)
    png16(out / "la16_27x19.png", 27, 19, 4, la16)
    names.append("la16_27x19.png")
    two = Image.fromarray((smooth(12, 35, 1)[..., 0] > 128).astype(np.uint8), "P")
    two.putpalette([200, 30, 90, 20, 180, 240])
    save("palette_2colors_35x12.png", two)
    save("i16_low_52x31.png", Image.fromarray(rng.integers(0, 400, (31, 52)).astype(np.uint16)))
    # Tall: Pillow 13 resamples the rows first when the height shrinks much more than the width.
    save("i16_tall_23x90.png", Image.fromarray((smooth(90, 23, 1)[..., 0].astype(np.uint16) * 3)))
    save("la_tall_19x77.png", Image.fromarray(np.dstack([smooth(77, 19, 1), noise(77, 19, 1)]), "LA"))
    # Sizes whose crop offsets are x.5 with x odd (1.5, 3.5): half to even differs from floor.
    save("odd_60x66.png", Image.fromarray(smooth(66, 60)))
    save("odd_rgba_66x60.png", Image.fromarray(np.dstack([smooth(60, 66), noise(60, 66, 1)]), "RGBA"))
    save("odd_43x40.png", Image.fromarray(smooth(40, 43)))
    save("odd_palette_40x47.png", Image.fromarray(smooth(47, 40)).quantize(32))
    gif = Image.fromarray(smooth(17, 31)).quantize(8)
    save("palette_trns_31x17.gif", gif, transparency=3)
    save("thin_300x2.png", Image.fromarray(smooth(2, 300)))
    save("noise_rgba_23x57.webp", Image.fromarray(np.dstack([noise(57, 23), noise(57, 23, 1)]), "RGBA"),
         lossless=True, exact=True)
    return {"folder": str(out), "images": names}


def cmd_pixels(cases, images, out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cases = json.loads(Path(cases).read_text())
    manifest = []
    for i, case in enumerate(cases):
        for path in sorted(Path(images).iterdir()):
            entry = {"case": i, "image": path.name}
            try:
                img = Image.open(path)
                x = transform(case["config"], img.convert("RGB") if case["rgb_first"] else img)
                file = out / f"{i}-{path.name}.npy"
                np.save(file, np.ascontiguousarray(x, np.float32))
                entry["file"] = str(file)
            except ValueError as e:
                entry["error"] = str(e)
            manifest.append(entry)
    return manifest


if __name__ == "__main__":
    if sys.argv[1:2] == ["images"] and len(sys.argv) == 3:
        print(json.dumps(cmd_images(sys.argv[2])))
    elif sys.argv[1:2] == ["pixels"] and len(sys.argv) == 5:
        print(json.dumps(cmd_pixels(*sys.argv[2:5])))
    else:
        sys.exit(__doc__)
