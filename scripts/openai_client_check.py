"""The official OpenAI Python client against `nornir vector serve`: reads a JSON list of texts on
stdin, asks for their embeddings twice (the client's default request, which is base64, and
floats cut to 64 dimensions) and prints what it got as JSON, for crates/cli/tests/serve.rs.

    echo '["hello", "world"]' | python scripts/openai_client_check.py http://127.0.0.1:8080 KEY MODEL
"""

import json
import sys

from openai import OpenAI


def main() -> None:
    url, key, model = sys.argv[1], sys.argv[2], sys.argv[3]
    texts = json.load(sys.stdin)
    client = OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)
    full = client.embeddings.create(model=model, input=texts)
    cut = client.embeddings.create(model=model, input=texts, dimensions=64, encoding_format="float")
    json.dump(
        {
            "vectors": [d.embedding for d in full.data],
            "indices": [d.index for d in full.data],
            "prompt_tokens": full.usage.prompt_tokens,
            "model": full.model,
            "dim64": [d.embedding for d in cut.data],
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
