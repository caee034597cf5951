"""The reference pipeline for a model folder, one text at a time: Hugging Face tokenizers and
onnxruntime on the CPU, mean pooling over the real tokens in numpy, L2-normalised. Writes raw
little-endian float32, one row per input line, for the parity tests.

    python scripts/reference_embed.py MODEL_DIR TEXTS.txt OUT.f32 --output NAME --max-length N

--output names the graph output holding the token vectors ([1, L, width]).
"""

import argparse

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("texts")
    ap.add_argument("out")
    ap.add_argument("--output", required=True, help="graph output with the token vectors")
    ap.add_argument("--max-length", type=int, required=True)
    a = ap.parse_args()

    tok = Tokenizer.from_file(f"{a.model_dir}/tokenizer.json")
    tok.no_padding()
    tok.enable_truncation(a.max_length)
    session = ort.InferenceSession(f"{a.model_dir}/model.onnx", providers=["CPUExecutionProvider"])
    inputs = {i.name for i in session.get_inputs()}
    rows = []
    with open(a.texts, encoding="utf-8") as f:
        texts = f.read().splitlines()
    for text in texts:
        enc = tok.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        mask = np.array([enc.attention_mask], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = session.run([a.output], feed)
        m = mask[0].astype(np.float32)[:, None]
        v = (hidden[0] * m).sum(axis=0) / m.sum()
        rows.append(v / np.linalg.norm(v))
    np.asarray(rows, dtype="<f4").tofile(a.out)
    print(f"{len(rows)} rows of {rows[0].shape[0]} -> {a.out}")


if __name__ == "__main__":
    main()
