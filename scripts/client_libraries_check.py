"""The client libraries people point at an embedding server, against `nornir vector serve`:
reads a JSON list of texts on stdin, embeds them with the client named on the command line,
and prints {"vectors": [[...], ...], ...} as JSON, for crates/cli/tests/serve.rs.

    echo '["hello"]' | python scripts/client_libraries_check.py CLIENT http://127.0.0.1:8080 KEY MODEL

CLIENT is one of:
- huggingface_hub: InferenceClient(base_url=URL).feature_extraction(texts), as TEI's Python
  users call it (1.0 and later send the options at the body's root, 0.28 to 0.33 under
  "parameters"); also with prompt_name="query" ("query_vectors");
- langchain: LangChain's OpenAIEmbeddings at its defaults, which sends cl100k_base token ids, not
  strings (tiktoken reads its encoding file from TIKTOKEN_CACHE_DIR; the test writes it there);
  MODEL "-" leaves its model at its default too (text-embedding-ada-002); the models it sent are
  reported ("sent_models");
- cohere: Cohere's own client (ClientV2.rerank and the v1 Client.rerank with return_documents)
  with base_url=URL: texts[0] is the query, the rest the documents; reports each ranking;
- cohere_embed: Cohere's ClientV2.embed with every embedding type at once (float, int8, uint8,
  binary, ubinary), and the v1 Client.embed of floats; reports each type's vectors;
- tei_retrieval: the requests text-embeddings-inference's users send for the other two kinds:
  llama-index's TEI reranker ({"query", "texts"} to /rerank with httpx), huggingface_hub's
  text_classification (POST /predict on a cross-encoder) and /embed_sparse as TEI documents it;
  MODEL is "CROSS_ENCODER,SPARSE_ENCODER" and texts[0] is the query;
- urllib_large_body: Python's urllib, which writes a whole body before it reads the answer, sends
  50 bodies of 64 MiB to /embed and reports each answer's status (or the transport error).
"""

import json
import sys


def huggingface_hub(url: str, key: str, model: str, texts: list) -> dict:
    import huggingface_hub as hub
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=url, api_key=key)
    vectors = client.feature_extraction(texts)
    query = client.feature_extraction(texts, prompt_name="query", normalize=False)
    return {
        "version": hub.__version__,
        "vectors": vectors.tolist(),
        "query_vectors": query.tolist(),
    }


def langchain(url: str, key: str, model: str, texts: list) -> dict:
    from langchain_openai import OpenAIEmbeddings

    sent = []

    def log(request):
        sent.append(json.loads(request.read()))

    import httpx

    named = {} if model == "-" else {"model": model}
    embeddings = OpenAIEmbeddings(
        **named,
        base_url=f"{url}/v1",
        api_key=key,
        max_retries=0,
        http_client=httpx.Client(event_hooks={"request": [log]}),
    )
    vectors = embeddings.embed_documents(texts)
    query = embeddings.embed_query(texts[0])
    inputs = [s["input"] for s in sent]
    return {
        "vectors": vectors,
        "query": query,
        "sent_token_ids": all(isinstance(i, list) and all(isinstance(x, list) for x in i) for i in inputs),
        "sent_models": sorted({s.get("model") for s in sent}),
    }


def urllib_large_body(url: str, key: str, model: str, texts: list) -> dict:
    import urllib.error
    import urllib.request

    text = texts[0] if texts else "x"
    inputs = (text + " ") * (64 * 2**20 // (len(text) + 1) + 1)
    body = json.dumps({"inputs": inputs}).encode()[: 64 * 2**20 - 2] + b'"}'
    answers = []
    for _ in range(50):
        request = urllib.request.Request(
            url + "/embed",
            data=body,
            headers={"content-type": "application/json", "authorization": "Bearer " + key},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                answers.append({"status": r.status})
        except urllib.error.HTTPError as e:
            answers.append({"status": e.code, "body": e.read().decode(errors="replace")[:200]})
        except OSError as e:
            answers.append({"status": None, "error": repr(e)})
    return {"body_bytes": len(body), "answers": answers}


def cohere(url: str, key: str, model: str, texts: list) -> dict:
    import cohere as co

    query, documents = texts[0], texts[1:]
    v2 = co.ClientV2(api_key=key, base_url=url).rerank(model=model, query=query, documents=documents, top_n=3)
    v1 = co.Client(api_key=key, base_url=url).rerank(
        model=model, query=query, documents=documents, return_documents=True
    )
    return {
        "version": co.__version__ if hasattr(co, "__version__") else "",
        "v2": [[r.index, r.relevance_score] for r in v2.results],
        "v1": [[r.index, r.relevance_score, r.document.text if r.document else None] for r in v1.results],
    }


def cohere_embed(url: str, key: str, model: str, texts: list) -> dict:
    import cohere as co

    types = ["float", "int8", "uint8", "binary", "ubinary"]
    v2 = co.ClientV2(api_key=key, base_url=url).embed(
        model=model, texts=texts, input_type="search_document", embedding_types=types
    )
    v1 = co.Client(api_key=key, base_url=url).embed(model=model, texts=texts, input_type="search_query")
    e = v2.embeddings
    return {
        "float": e.float_,
        "int8": e.int8,
        "uint8": e.uint8,
        "binary": e.binary,
        "ubinary": e.ubinary,
        "v1_float": v1.embeddings.float_ if hasattr(v1.embeddings, "float_") else v1.embeddings,
    }


def tei_retrieval(url: str, key: str, model: str, texts: list) -> dict:
    import httpx
    from huggingface_hub import InferenceClient

    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
    query, documents = texts[0], texts[1:]
    model, sparse_model = model.split(",")
    # llama-index-postprocessor-tei-rerank 0.6.0's _call_api, as it is written.
    with httpx.Client() as client:
        ranked = client.post(
            f"{url}/models/{model}/rerank", headers=headers, json={"query": query, "texts": documents}, timeout=60
        ).json()
    classified = InferenceClient(base_url=f"{url}/models/{model}/predict", api_key=key).text_classification(query)
    # TEI answers one text's predictions as a flat list, of which huggingface_hub keeps the first.
    if not isinstance(classified, list):
        classified = [classified]
    sparse = httpx.post(f"{url}/models/{sparse_model}/embed_sparse", headers=headers, json={"inputs": documents, "truncate": True}).json()
    return {
        "rerank": [[r["index"], r["score"]] for r in ranked],
        "classification": [[c.label, c.score] for c in classified],
        "sparse": sparse,
    }


def main() -> None:
    client, url, key, model = sys.argv[1:5]
    texts = json.load(sys.stdin)
    check = {
        "huggingface_hub": huggingface_hub,
        "langchain": langchain,
        "urllib_large_body": urllib_large_body,
        "cohere": cohere,
        "cohere_embed": cohere_embed,
        "tei_retrieval": tei_retrieval,
    }[client]
    json.dump(check(url, key, model, texts), sys.stdout)


if __name__ == "__main__":
    main()
