#!/usr/bin/env python3
"""text-embeddings-inference's gRPC API (tei.v1) called as its users call it: Python stubs
generated from the proto by grpcio-tools' protoc, the real grpcio client. Prints one JSON object
of what each call answered (its fields, or its status code and message), for
crates/cli/tests/serve_grpc.rs to compare with the HTTP routes.

  grpc_client_check.py ADDR KEY PROTO KIND < texts.json
      KIND: embedder (Info, Embed, EmbedStream, EmbedAll, EmbedAllStream, Tokenize,
      TokenizeStream, Decode, DecodeStream, and the refusals), cross-encoder (Predict,
      PredictPair, their streams, Rerank, RerankStream) or sparse (EmbedSparse and its stream).
  grpc_client_check.py ADDR KEY PROTO embed-once < texts.json
      one Embed of the first text: {"code": ..., "message": ...}.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
from google.protobuf.json_format import MessageToDict


def stubs(proto):
    """tei_pb2 and tei_pb2_grpc, generated here from `proto`."""
    out = Path(tempfile.mkdtemp(prefix="tei-stubs-"))
    proto = Path(proto)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto.parent}", f"--python_out={out}",
         f"--grpc_python_out={out}", str(proto)],
        check=True,
    )
    sys.path.insert(0, str(out))
    import tei_pb2  # noqa: E402
    import tei_pb2_grpc  # noqa: E402

    return tei_pb2, tei_pb2_grpc


def as_dict(message):
    return MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


def call(fn, *args, **kwargs):
    """The answer as a dict (a list of them for a stream), or the status it failed with."""
    try:
        got = fn(*args, **kwargs)
        if hasattr(got, "DESCRIPTOR"):
            return as_dict(got)
        return [as_dict(m) for m in got]
    except grpc.RpcError as e:
        return {"code": e.code().name, "message": e.details()}


def embedder_calls(pb, rpc, channel, meta, texts):
    embed, tokenize, info = rpc.EmbedStub(channel), rpc.TokenizeStub(channel), rpc.InfoStub(channel)
    out = {"info": call(info.Info, pb.InfoRequest(), metadata=meta)}
    out["embed"] = [call(embed.Embed, pb.EmbedRequest(inputs=t, truncate=True), metadata=meta) for t in texts]
    out["embed_dimensions"] = call(
        embed.Embed, pb.EmbedRequest(inputs=texts[0], truncate=True, dimensions=8, normalize=False), metadata=meta
    )
    out["embed_stream"] = call(
        embed.EmbedStream, iter([pb.EmbedRequest(inputs=t, truncate=True) for t in texts]), metadata=meta
    )
    out["embed_all"] = call(embed.EmbedAll, pb.EmbedAllRequest(inputs=texts[0], truncate=True), metadata=meta)
    out["embed_all_stream"] = call(
        embed.EmbedAllStream, iter([pb.EmbedAllRequest(inputs=t, truncate=True) for t in texts[:2]]), metadata=meta
    )
    out["tokenize"] = call(tokenize.Tokenize, pb.EncodeRequest(inputs=texts[0], add_special_tokens=True), metadata=meta)
    out["tokenize_stream"] = call(
        tokenize.TokenizeStream, iter([pb.EncodeRequest(inputs=t, add_special_tokens=True) for t in texts[:2]]),
        metadata=meta,
    )
    ids = [t["id"] for t in out["tokenize"]["tokens"]]
    out["decode"] = call(tokenize.Decode, pb.DecodeRequest(ids=ids, skip_special_tokens=True), metadata=meta)
    out["decode_stream"] = call(
        tokenize.DecodeStream, iter([pb.DecodeRequest(ids=ids, skip_special_tokens=True)] * 2), metadata=meta
    )
    # The refusals, each with its code.
    out["empty"] = call(embed.Embed, pb.EmbedRequest(inputs="", truncate=True), metadata=meta)
    out["too_long_refused"] = call(embed.Embed, pb.EmbedRequest(inputs=" ".join(["word"] * 2000)), metadata=meta)
    out["no_key"] = call(embed.Embed, pb.EmbedRequest(inputs=texts[0], truncate=True))
    out["wrong_kind"] = call(rpc.PredictStub(channel).Predict, pb.PredictRequest(inputs=texts[0]), metadata=meta)
    out["too_large"] = call(embed.Embed, pb.EmbedRequest(inputs="x" * (5 << 20), truncate=True), metadata=meta)
    out["wrong_body"] = wrong_body(channel, meta)
    return out


def wrong_body(channel, meta):
    """Bytes that are no EmbedRequest (a field of the wrong wire type) sent to Embed."""
    raw = channel.unary_unary("/tei.v1.Embed/Embed", request_serializer=None, response_deserializer=None)
    try:
        raw(b"\x0a\xff\xff\xff\xff\x0f", metadata=meta)
        return {"code": "OK"}
    except grpc.RpcError as e:
        return {"code": e.code().name, "message": e.details()}


def cross_encoder_calls(pb, rpc, channel, meta, texts):
    predict, rerank = rpc.PredictStub(channel), rpc.RerankStub(channel)
    query, docs = texts[0], texts[1:]
    out = {"predict": call(predict.Predict, pb.PredictRequest(inputs=docs[0], truncate=True), metadata=meta)}
    out["predict_pair"] = call(
        predict.PredictPair, pb.PredictPairRequest(inputs=[query, docs[0]], truncate=True), metadata=meta
    )
    out["predict_stream"] = call(
        predict.PredictStream, iter([pb.PredictRequest(inputs=d, truncate=True) for d in docs]), metadata=meta
    )
    out["predict_pair_stream"] = call(
        predict.PredictPairStream, iter([pb.PredictPairRequest(inputs=[query, d], truncate=True) for d in docs]),
        metadata=meta,
    )
    out["rerank"] = call(
        rerank.Rerank, pb.RerankRequest(query=query, texts=docs, truncate=True, return_text=True), metadata=meta
    )
    stream = [pb.RerankStreamRequest(query=query, text=d, truncate=True, return_text=True) for d in docs]
    out["rerank_stream"] = call(rerank.RerankStream, iter(stream), metadata=meta)
    out["pair_of_three"] = call(
        predict.PredictPair, pb.PredictPairRequest(inputs=[query, docs[0], docs[1]], truncate=True), metadata=meta
    )
    return out


def sparse_calls(pb, rpc, channel, meta, texts):
    embed = rpc.EmbedStub(channel)
    out = {"embed_sparse": call(embed.EmbedSparse, pb.EmbedSparseRequest(inputs=texts[0], truncate=True), metadata=meta)}
    out["embed_sparse_stream"] = call(
        embed.EmbedSparseStream, iter([pb.EmbedSparseRequest(inputs=t, truncate=True) for t in texts]), metadata=meta
    )
    return out


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    addr, key, proto, kind = sys.argv[1:]
    texts = json.load(sys.stdin)
    pb, rpc = stubs(proto)
    meta = [("authorization", f"Bearer {key}")]
    with grpc.insecure_channel(addr, options=[("grpc.max_send_message_length", 8 << 20)]) as channel:
        if kind == "embed-once":
            answer = call(rpc.EmbedStub(channel).Embed, pb.EmbedRequest(inputs=texts[0], truncate=True), metadata=meta)
            out = answer if "code" in answer else {"code": "OK"}
        else:
            calls = {"embedder": embedder_calls, "cross-encoder": cross_encoder_calls, "sparse": sparse_calls}[kind]
            out = calls(pb, rpc, channel, meta, texts)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
