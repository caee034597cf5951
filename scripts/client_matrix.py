"""Which real client shapes a running `nornir vector serve` answers: each client at the
configuration its users write, with a batch that holds a text longer than the model.

    python scripts/client_matrix.py http://127.0.0.1:8080 KEY SERVED_NAME

Prints {client: "ok" or the error} as JSON. LangChain's OpenAIEmbeddings needs tiktoken's
cl100k_base file: offline, point TIKTOKEN_CACHE_DIR at a folder that holds it (the server tests
write one; see crates/cli/tests/serve.rs). docs/server.md has the results.
"""

import json
import sys
import urllib.request

url, key, served = sys.argv[1], sys.argv[2], sys.argv[3]
long = " ".join(["river stone light"] * 140)
texts = ["A man is eating food.", long, "what is a fjord?"]
res = {}
def attempt(name, f):
    try:
        f(); res[name] = "ok"
    except Exception as e:
        res[name] = type(e).__name__ + ": " + str(e)[:90].replace("\n", " ")
from openai import OpenAI
c = OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
attempt("openai model='m'", lambda: c.embeddings.create(model="m", input=texts))
attempt("openai served name", lambda: c.embeddings.create(model=served, input=texts))
from langchain_openai import OpenAIEmbeddings
attempt("langchain defaults", lambda: OpenAIEmbeddings(base_url=url + "/v1", api_key=key, max_retries=0).embed_documents(texts))
attempt("langchain model=served", lambda: OpenAIEmbeddings(model=served, base_url=url + "/v1", api_key=key, max_retries=0).embed_documents(texts))
import huggingface_hub
from huggingface_hub import InferenceClient
attempt("huggingface_hub " + huggingface_hub.__version__, lambda: InferenceClient(base_url=url, api_key=key).feature_extraction(texts))
def post(path, body):
    r = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json", "authorization": "Bearer " + key})
    urllib.request.urlopen(r).read()
attempt("curl /embed (no truncate)", lambda: post("/embed", {"inputs": texts}))
attempt("llama-index shape (/embed truncate:true)", lambda: post("/embed", {"inputs": texts, "truncate": True}))
json.dump(res, sys.stdout, indent=1)
