"""Writes a PyTorch checkpoint as torch.save lays it out, without torch (standard library only).

The pickle is written by CPython's own pickler, protocol 2, with torch.save's persistent_id and
stand-in `torch` and `torch._utils` modules, so its opcodes, globals and persistent ids are the
ones torch.save emits for a state dict:
    <root>/data.pkl   an OrderedDict (with `_metadata`) of name -> _rebuild_tensor_v2(
                      persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel),
                      storage_offset, size, stride, requires_grad, OrderedDict())
    <root>/byteorder  "little"
    <root>/data/<key> each storage's raw bytes, little-endian
    <root>/version    "3"
Tied tensors share one storage (one key), and some tensors start at an offset into a storage.

    make_torch_checkpoint.py OUT_DIR [--shards N] [--evil MARKER]

writes OUT_DIR/pytorch_model.bin (or N shards and pytorch_model.bin.index.json) and
OUT_DIR/expected.json: each floating tensor's shape and its values widened to float32, as the
bit patterns of the float32s. --evil writes instead a pytorch_model.bin whose pickle calls
os.system("touch MARKER") when unpickled: a reader that runs pickles creates MARKER.
"""

import collections
import io
import json
import math
import os
import pickle
import struct
import sys
import types
import zipfile

# Stand-ins for the torch names the pickle refers to: the pickler writes a class or function
# as GLOBAL module.qualname after checking that sys.modules[module] holds it.
torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")
sys.modules["torch"] = torch
sys.modules["torch._utils"] = torch_utils
torch._utils = torch_utils

# name -> (struct format of one element, element size)
STORAGES = {
    "FloatStorage": ("<f", 4),
    "HalfStorage": ("<e", 2),
    "BFloat16Storage": (None, 2),
    "DoubleStorage": ("<d", 8),
    "LongStorage": ("<q", 8),
}
for _name in STORAGES:
    _cls = type(_name, (), {"__module__": "torch"})
    setattr(torch, _name, _cls)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    raise RuntimeError("a stand-in: never called")


_rebuild_tensor_v2.__module__ = "torch._utils"
torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2


class Storage:
    """A typed storage: its class name, key and values (Python numbers)."""

    def __init__(self, kind, key, values):
        self.kind, self.key, self.values = kind, key, values

    def raw(self):
        fmt, _ = STORAGES[self.kind]
        if fmt is None:  # bfloat16: the top half of the float32
            return b"".join(struct.pack("<I", f32_bits(v))[2:] for v in self.values)
        return b"".join(struct.pack(fmt, v) for v in self.values)

    def widened(self, i):
        """Element i as the float32 a reader must return, as its bits."""
        fmt, _ = STORAGES[self.kind]
        if fmt is None:
            return f32_bits(self.values[i]) & 0xFFFF0000
        (v,) = struct.unpack(fmt, struct.pack(fmt, self.values[i]))
        return f32_bits(v)


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


class Tensor:
    """A contiguous tensor on a storage, pickled as torch.Tensor.__reduce_ex__ does."""

    def __init__(self, storage, offset, shape):
        self.storage, self.offset, self.shape = storage, offset, tuple(shape)
        stride, acc = [], 1
        for d in reversed(self.shape):
            stride.insert(0, acc)
            acc *= d
        self.stride = tuple(stride)

    def __reduce_ex__(self, protocol):
        args = (self.storage, self.offset, self.shape, self.stride, False, collections.OrderedDict())
        return (_rebuild_tensor_v2, args)

    def numel(self):
        return math.prod(self.shape)


def save(obj, path):
    """torch.serialization._save: the pickle with persistent ids, then each storage by key."""
    storages = {}

    def persistent_id(o):
        if isinstance(o, Storage):
            storages[o.key] = o
            return ("storage", getattr(torch, o.kind), o.key, "cpu", len(o.values))
        return None

    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=2)
    pickler.persistent_id = persistent_id
    pickler.dump(obj)
    root = os.path.splitext(os.path.basename(path))[0]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{root}/data.pkl", buf.getvalue())
        z.writestr(f"{root}/byteorder", "little")
        for key in sorted(storages):
            z.writestr(f"{root}/data/{key}", storages[key].raw())
        z.writestr(f"{root}/version", "3\n")


def value(seed, i):
    return math.sin((seed * 131 + i) * 0.618) * (1 + i % 7)


def bert_state_dict():
    """A tiny BertModel's state dict (hidden 4, intermediate 8, vocab 10, one layer) with a tied
    decoder, a tensor at an offset, half, bfloat16 and double tensors and an int64 buffer."""
    h, inter = 4, 8
    shapes = [
        ("embeddings.word_embeddings.weight", (10, h)),
        ("embeddings.position_embeddings.weight", (8, h)),
        ("embeddings.token_type_embeddings.weight", (2, h)),
        ("embeddings.LayerNorm.weight", (h,)),
        ("embeddings.LayerNorm.bias", (h,)),
    ]
    for name, shape in [
        ("attention.self.query", (h, h)),
        ("attention.self.key", (h, h)),
        ("attention.self.value", (h, h)),
        ("attention.output.dense", (h, h)),
        ("intermediate.dense", (inter, h)),
        ("output.dense", (h, inter)),
    ]:
        shapes.append((f"encoder.layer.0.{name}.weight", shape))
        shapes.append((f"encoder.layer.0.{name}.bias", (shape[0],)))
    for norm in ["attention.output.LayerNorm", "output.LayerNorm"]:
        shapes.append((f"encoder.layer.0.{norm}.weight", (h,)))
        shapes.append((f"encoder.layer.0.{norm}.bias", (h,)))
    sd = collections.OrderedDict()
    for seed, (name, shape) in enumerate(shapes):
        n = math.prod(shape)
        sd[name] = Tensor(Storage("FloatStorage", str(seed), [value(seed, i) for i in range(n)]), 0, shape)
    word = sd["embeddings.word_embeddings.weight"]
    sd["cls.predictions.decoder.weight"] = Tensor(word.storage, 0, (10, h))  # tied
    sd["extra.tail"] = Tensor(word.storage, 12, (7, h))  # a view at an offset
    k = len(shapes)
    sd["extra.half"] = Tensor(Storage("HalfStorage", str(k), [value(k, i) for i in range(15)]), 0, (3, 5))
    sd["extra.bfloat16"] = Tensor(Storage("BFloat16Storage", str(k + 1), [value(k + 1, i) for i in range(10)]), 2, (2, 4))
    sd["extra.double"] = Tensor(Storage("DoubleStorage", str(k + 2), [value(k + 2, i) for i in range(6)]), 0, (6,))
    sd["embeddings.position_ids"] = Tensor(Storage("LongStorage", str(k + 3), list(range(8))), 0, (1, 8))
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("embeddings", {"version": 1})])
    return sd


def expected(sd):
    out = {}
    for name, t in sd.items():
        if t.storage.kind == "LongStorage":
            continue
        bits = [t.storage.widened(t.offset + i) for i in range(t.numel())]
        out[name] = {"shape": list(t.shape), "f32_bits": bits}
    return out


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def main():
    args = sys.argv[1:]
    out = args[0]
    os.makedirs(out, exist_ok=True)
    if "--evil" in args:
        marker = args[args.index("--evil") + 1]
        save(collections.OrderedDict([("weight", Evil(marker))]), os.path.join(out, "pytorch_model.bin"))
        return
    shards = int(args[args.index("--shards") + 1]) if "--shards" in args else 1
    sd = bert_state_dict()
    if shards == 1:
        save(sd, os.path.join(out, "pytorch_model.bin"))
    else:
        names = list(sd)
        weight_map = {}
        for s in range(shards):
            file = f"pytorch_model-{s + 1:05d}-of-{shards:05d}.bin"
            part = collections.OrderedDict((n, sd[n]) for n in names[s::shards])
            save(part, os.path.join(out, file))
            weight_map.update({n: file for n in part})
        with open(os.path.join(out, "pytorch_model.bin.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected(sd), f)


if __name__ == "__main__":
    main()
