"""The other two models of a retrieval stack, beside the dense `Embedder`: a sparse encoder
(SPLADE: a weight per vocabulary term, for hybrid search with exact terms) and a reranker (a
cross-encoder scoring each query and document pair). Each wraps an `Embedder` loaded from a
folder of its kind, with the same options (device, threads, ort_library, ...), the GIL released
while texts run, and the same typed exceptions.

    >>> from nornir_vector import Reranker, SparseEncoder
    >>> splade = SparseEncoder("models/splade-tiny")
    >>> indices, values = splade.embed("The capital of France is Paris.")
    >>> splade.tokens(indices[values.argsort()[::-1][:3]])
    ['capital', 'paris', 'france']
    >>> reranker = Reranker("models/ms-marco-MiniLM-L-6-v2")
    >>> reranker.rerank("what is a fjord?", ["Paris is in France.", "A fjord is a long inlet."])
    [(1, 0.97...), (0, 0.01...)]
"""

from ._nornir import Embedder, WrongKind


def _load(model, kind, options):
    if model is None:
        raise TypeError(f"model= is required: the folder of a {kind} (the default model is an embedder)")
    embedder = Embedder(model, **options)
    if embedder.kind != kind:
        found = embedder.kind
        embedder.close()
        error = WrongKind(f"{model} holds a {found}, not a {kind}: load it with the class for a {found}")
        error.kind = found
        raise error
    return embedder


class _Model:
    """What both kinds share: the loaded model, its report and stats, closing."""

    _embedder: Embedder

    def report(self) -> dict:
        """What really runs the model and why (the keys of `Embedder.report()`)."""
        return self._embedder.report()

    def stats(self) -> dict:
        """Texts (or pairs), batches, tokens and seconds inside ONNX Runtime so far."""
        return self._embedder.stats()

    def gpu_vendor(self) -> str:
        return self._embedder.gpu_vendor()

    def close(self) -> None:
        """Frees the model; calls after this raise `EmbedderClosed`."""
        self._embedder.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


class SparseEncoder(_Model):
    """A sparse encoder (SPLADE, a masked-language-model head) loaded from `model`, a folder
    with model.onnx (or safetensors made ONNX by `nornir_vector.convert`) and tokenizer.json.
    Keyword options are `Embedder`'s."""

    def __init__(self, model=None, **options):
        self._embedder = _load(model, "sparse-encoder", options)

    @property
    def vocabulary_size(self) -> int:
        """The width of the vectors: the tokenizer's vocabulary."""
        return self._embedder.dimension

    def embed(self, texts, *, top_k=None, threshold=None, prompt_name=None, prompt=None, truncation="right",
              csr=False):
        """Each text's `(indices, values)`: term ids ascending (uint32) and their weights
        (float32), `log(1 + relu(logits))`, the maximum over its tokens. `top_k` keeps the
        heaviest terms, `threshold` those above it. A str gives one pair, a sequence a list;
        `csr=True` gives a `scipy.sparse.csr_matrix` of shape (texts, vocabulary_size)."""
        one = isinstance(texts, str)
        pairs = self._embedder.embed_sparse(
            texts, top_k=top_k, threshold=threshold, prompt_name=prompt_name, prompt=prompt, truncation=truncation
        )
        if csr:
            try:
                import numpy as np
                from scipy.sparse import csr_matrix
            except ImportError as e:
                raise ImportError("csr=True needs scipy: pip install scipy (or leave csr=False)") from e
            indptr = np.zeros(len(pairs) + 1, dtype=np.int64)
            indptr[1:] = np.cumsum([len(i) for i, _ in pairs])
            indices = np.concatenate([i for i, _ in pairs]) if pairs else np.zeros(0, dtype=np.uint32)
            values = np.concatenate([v for _, v in pairs]) if pairs else np.zeros(0, dtype=np.float32)
            return csr_matrix((values, indices.astype(np.int32), indptr), shape=(len(pairs), self.vocabulary_size))
        return pairs[0] if one else pairs

    def tokens(self, indices) -> list:
        """The vocabulary's token for each term id."""
        return self._embedder.vocabulary_terms([int(i) for i in indices])

    def __repr__(self) -> str:
        return f"SparseEncoder(vocabulary_size={self.vocabulary_size}, provider={self.report()['active_provider']!r})"


class Reranker(_Model):
    """A cross-encoder (a sequence-classification head) loaded from `model`. Keyword options
    are `Embedder`'s."""

    def __init__(self, model=None, **options):
        self._embedder = _load(model, "cross-encoder", options)

    @property
    def labels(self) -> list:
        """The model's labels, in the order of `predict`'s columns."""
        return self._embedder.labels

    def rerank(self, query, documents, *, top_n=None, raw_scores=False, truncation="right", long=None, window=None,
               overlap=None) -> list:
        """`documents` ranked against `query`: `(index, score)` best first, the first `top_n`.
        Scores are the model's activation (sigmoid for one label) unless `raw_scores`. A pair
        longer than the model loses its document's end first (`truncation="refuse"` raises
        `TooLong` instead). With `long="chunk"` a long document is scored by the best of its
        chunks (`window` tokens per pair, `overlap` shared), and each result is
        `(index, score, (chunk, start, end))`: the chunk that scored and its characters' byte
        span in the UTF-8 document."""
        ranked = self._embedder.rerank(query, list(documents), top_n=top_n, raw_scores=raw_scores,
                                       truncation=truncation, long=long, window=window, overlap=overlap)
        if long == "chunk":
            return ranked
        return [(index, score) for index, score, _ in ranked]

    def predict(self, inputs, *, raw_scores=False, truncation="right"):
        """Scores of each input, a `(query, document)` pair or a text alone: float32 of shape
        (inputs, labels), softmax over several labels and sigmoid for one unless `raw_scores`."""
        return self._embedder.predict(list(inputs), raw_scores=raw_scores, truncation=truncation)

    def __repr__(self) -> str:
        return f"Reranker(labels={self.labels!r}, provider={self.report()['active_provider']!r})"


def max_sim(query, document) -> float:
    """MaxSim as PyLate scores: for each query token vector (rows of `query`), its largest dot
    product with a document token vector, summed. Float32 arrays of shape (tokens, dim)."""
    import numpy as np

    if len(document) == 0:
        return 0.0
    return float(np.max(np.asarray(query) @ np.asarray(document).T, axis=1).sum())


class MultiVectorEncoder(_Model):
    """A late-interaction model loaded from `model`: a ColBERT model (a PyLate folder, or a
    Stanford checkpoint made ONNX by `nornir_vector.convert`), or BGE-M3 converted with its
    `colbert_linear.pt`. Keyword options are `Embedder`'s.

        >>> colbert = MultiVectorEncoder("models/colbert")
        >>> q = colbert.embed("what is a fjord?", is_query=True)   # float32 (tokens, dim)
        >>> docs = colbert.embed(["A fjord is a long inlet.", "Paris is in France."])
        >>> colbert.rerank("what is a fjord?", ["Paris is in France.", "A fjord is a long inlet."])
        [(1, 25.1...), (0, 17.3...)]
    """

    def __init__(self, model=None, **options):
        if model is None:
            raise TypeError("model= is required: the folder of a multi-vector model (ColBERT, BGE-M3)")
        embedder = Embedder(model, **options)
        if not embedder.multi_vector:
            found = embedder.kind
            embedder.close()
            error = WrongKind(
                f"{model} holds a {found} that makes no token vectors: load a ColBERT model or BGE-M3 "
                "(converted with its colbert_linear.pt)"
            )
            error.kind = found
            raise error
        self._embedder = embedder

    def embed(self, texts, *, is_query=False, dimensions=None, prompt_name=None, prompt=None, truncation="right"):
        """Each text's token vectors, float32 of shape (tokens, dim), normalised: as queries
        (`is_query=True`: the query marker, expanded with mask tokens to the model's query
        length) or documents (the document marker, punctuation's vectors left out). A str
        gives one array, a sequence a list."""
        one = isinstance(texts, str)
        arrays = self._embedder.embed_multi_vector(
            texts, is_query=is_query, dimensions=dimensions, prompt_name=prompt_name, prompt=prompt,
            truncation=truncation,
        )
        return arrays[0] if one else arrays

    def encode(self, texts, *, dense=True, sparse=True, multi_vector=True, is_query=False, truncation="right"):
        """BGE-M3's outputs from one pass per text, as FlagEmbedding's `BGEM3FlagModel.encode`
        names them: a dict with "dense_vecs" (float32 (n, dim)), "lexical_weights" (per text a
        dict of token id -> weight) and "colbert_vecs" (per text float32 (tokens, dim)), for
        those asked."""
        out = self._embedder.encode(
            texts, dense=dense, sparse=sparse, multi_vector=multi_vector, is_query=is_query, truncation=truncation
        )
        result = {}
        if "dense" in out:
            result["dense_vecs"] = out["dense"]
        if "sparse" in out:
            result["lexical_weights"] = [
                {str(int(i)): float(w) for i, w in zip(indices, values)} for indices, values in out["sparse"]
            ]
        if "multi_vector" in out:
            result["colbert_vecs"] = out["multi_vector"]
        return result

    def rerank(self, query, documents, *, top_n=None, truncation="right") -> list:
        """`documents` ranked against `query` by MaxSim: `(index, score)` best first, the first
        `top_n`; the query's token vectors are made once."""
        return [(i, s) for i, s, _ in self._embedder.rerank(query, list(documents), top_n=top_n, truncation=truncation)]

    def __repr__(self) -> str:
        return f"MultiVectorEncoder(kind={self._embedder.kind!r}, provider={self.report()['active_provider']!r})"
