#!/usr/bin/env python3
"""Independent references for nornir's sparse encoders and cross-encoders: ONNX Runtime and the
tokenizers library in Python, with the pooling and the activations written here in NumPy.
Nothing here uses nornir's code, except `nornir vector convert` to make the ONNX graphs.

  retrieval_reference.py sparse MODEL_DIR CORPUS N OUT
      SPLADE vectors of the corpus's first N texts (log(1 + relu(logits)), masked, max over
      tokens), one JSON line per text {"indices", "values"} into OUT; prints the top terms of a
      few sentences and the reference's own throughput (batches of 32, sorted by length).
  retrieval_reference.py cross NORNIR WORK
      five cross-encoders with random weights (BERT and XLM-RoBERTa, one label and three, and a
      BERT whose config.json says problem_type "multi_label_classification"), each with a
      tokenizer of its family built here, converted by NORNIR; for each, a list of (query,
      document) pairs, some longer than the model reads, and their scores: raw and activated as
      transformers' text-classification pipeline does (a sigmoid for one label or a multi-label
      head, each label alone; else a softmax over the labels). Prints one JSON object.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convert_reference  # noqa: E402  (its synthetic checkpoints and safetensors writer)

SENTENCES = ["The capital of France is Paris.", "A man is eating food.", "How do fjords form?"]


def session(folder):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(str(Path(folder) / "model.onnx"), options, providers=["CPUExecutionProvider"])


def feed_for(sess, encodings):
    """A padded batch (right padding) of `encodings`, as the graph's inputs ask."""
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, e in enumerate(encodings):
        n = len(e.ids)
        ids[row, :n], mask[row, :n], types[row, :n] = e.ids, 1, e.type_ids
    names = {i.name for i in sess.get_inputs()}
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    return {k: v for k, v in feed.items() if k in names}


# --- sparse --------------------------------------------------------------------------------------


def splade(sess, tokenizer, texts):
    encodings = tokenizer.encode_batch(texts)
    logits = sess.run(None, feed_for(sess, encodings))[0]
    out = []
    for row, e in enumerate(encodings):
        weights = np.log1p(np.maximum(logits[row, : len(e.ids)], 0.0)).max(axis=0)
        nz = np.nonzero(weights > 0)[0]
        out.append((nz, weights[nz]))
    return out


def run_sparse(model_dir, corpus, n, out):
    tokenizer = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    tokenizer.no_padding()
    config = json.loads((Path(model_dir) / "config.json").read_text())
    tokenizer.enable_truncation(config.get("max_position_embeddings", 512))
    sess = session(model_dir)
    texts = [t for t in Path(corpus).read_text(encoding="utf-8").splitlines()[:n]]
    with open(out, "w", encoding="utf-8") as f:
        for start in range(0, len(texts), 32):
            for indices, values in splade(sess, tokenizer, texts[start : start + 32]):
                f.write(json.dumps({"indices": indices.tolist(), "values": values.astype(float).tolist()}) + "\n")
    # The reference's own speed: batches of 32 sorted by length, the best Python loop's way.
    order = sorted(texts, key=len)
    started = time.perf_counter()
    for start in range(0, len(order), 32):
        splade(sess, tokenizer, order[start : start + 32])
    seconds = time.perf_counter() - started
    top = {}
    for sentence, (indices, values) in zip(SENTENCES, splade(sess, tokenizer, SENTENCES)):
        best = np.argsort(-values)[:8]
        top[sentence] = [[tokenizer.id_to_token(int(indices[i])), round(float(values[i]), 4)] for i in best]
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "texts": len(texts),
        "seconds": seconds,
        "texts_per_second": len(texts) / seconds,
        "peak_rss_mib": peak,
        "top_terms": top,
    }


# --- cross-encoders ------------------------------------------------------------------------------

WORDS = (
    "the a is of and to in what where how why fjord fjords capital paris france city river sea water "
    "long narrow inlet glacier valley ice cut deep coast norway form made food man eating horse riding"
).split()
MAX_LENGTH = 32


def bert_tokenizer(vocab_size):
    """A WordPiece tokenizer as BERT's: [CLS] q [SEP] d [SEP], token types 0 then 1."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", ","] + letters + ["##" + c for c in letters]
    vocab += [w for w in WORDS if w not in vocab][: vocab_size - len(vocab)]
    vocab += [f"[unused{i}]" for i in range(vocab_size - len(vocab))]
    t = Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    t.decoder = decoders.WordPiece()
    return t, len(vocab)


def xlmr_tokenizer(vocab_size):
    """A Unigram tokenizer as XLM-RoBERTa's: <s> q </s></s> d </s>."""
    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0), (".", -3.0), ("?", -3.0)]
    pieces += [(chr(c), -5.0) for c in range(ord("a"), ord("z") + 1)]
    pieces += [("\u2581" + w, -1.0) for w in WORDS][: vocab_size - len(pieces)]
    pieces += [(f"<unused{i}>", -9.0) for i in range(vocab_size - len(pieces))]
    t = Tokenizer(models.Unigram(pieces, unk_id=3, byte_fallback=False))
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    t.decoder = decoders.Metaspace()
    return t, len(pieces)


LONG = " ".join(["the long narrow inlet of the sea cut by a glacier"] * 6)
PAIRS = [
    ["what is a fjord?", "a fjord is a long narrow inlet of the sea"],
    ["what is a fjord?", "paris is the capital of france"],
    ["what is a fjord?", "a man is eating food"],
    ["where is paris?", "paris is the capital of france"],
    ["where is paris?", "a man is riding a horse"],
    ["how do fjords form?", LONG],  # the document is cut
    ["how do fjords form?", "ice cut deep valleys in the coast of norway"],
    [LONG + " ?", "a fjord"],  # the query alone is too long: both are cut
    ["", "an empty query still scores"],
    ["what is a fjord?", ""],
]


def run_cross(nornir, work):
    work = Path(work)
    rng = np.random.default_rng(45)
    cases = []
    bert, xlmr = ("BertForSequenceClassification", bert_tokenizer), ("XLMRobertaForSequenceClassification", xlmr_tokenizer)
    models = [(bert, "F32", 1, False), (bert, "F16", 3, False), (xlmr, "F32", 1, False), (xlmr, "F16", 3, False)]
    models.append((bert, "F16", 3, True))
    for (arch, build), dtype, labels, multi_label in models:
        cfg, weights = convert_reference.synthetic(arch, dtype, rng)
        if multi_label:
            cfg["problem_type"] = "multi_label_classification"
            cfg["id2label"] = {"0": "toxic", "1": "insult", "2": "threat"}
        tokenizer, vocab = build(cfg["vocab_size"])
        if vocab != cfg["vocab_size"]:
            raise SystemExit(f"the {arch} tokenizer has {vocab} tokens, the checkpoint {cfg['vocab_size']}")
        name = f"{arch}-{labels}" + ("-multi-label" if multi_label else "")
        source = work / f"{name}-st"
        source.mkdir(parents=True, exist_ok=True)
        (source / "config.json").write_text(json.dumps(cfg))
        convert_reference.write_safetensors(source / "model.safetensors", weights, dtype)
        tokenizer.enable_truncation(MAX_LENGTH)
        tokenizer.save(str(source / "tokenizer.json"))
        out = work / name
        convert_reference.convert(nornir, source, out)
        sess = session(out)
        encodings = []
        for query, document in PAIRS:
            tokenizer.enable_truncation(MAX_LENGTH, strategy="only_second")
            try:
                encodings.append(tokenizer.encode(query, document))
            except Exception:
                tokenizer.enable_truncation(MAX_LENGTH, strategy="longest_first")
                encodings.append(tokenizer.encode(query, document))
        raw = sess.run(None, feed_for(sess, encodings))[0].astype(np.float64)
        if labels == 1 or multi_label:
            scores = 1.0 / (1.0 + np.exp(-raw))
        else:
            e = np.exp(raw - raw.max(axis=1, keepdims=True))
            scores = e / e.sum(axis=1, keepdims=True)
        cases.append(
            {
                "name": name,
                "folder": str(out),
                "labels": labels,
                "multi_label": multi_label,
                "pairs": PAIRS,
                "tokens": [len(e.ids) for e in encodings],
                "raw": raw.tolist(),
                "scores": scores.tolist(),
            }
        )
    return {"cases": cases, "max_length": MAX_LENGTH}


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "sparse":
        result = run_sparse(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) == 4 and sys.argv[1] == "cross":
        result = run_cross(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
