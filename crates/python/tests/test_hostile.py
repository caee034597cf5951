"""Hostile model folders through Python: each refused with a typed nornir exception (never
InternalError, never a crash of the interpreter), and nothing left on disk."""

import json
import shutil
import struct
import zipfile

import pytest

import nornir_vector as nv

BERT_CONFIG = {
    "architectures": ["BertModel"], "model_type": "bert", "hidden_size": 4, "num_hidden_layers": 1,
    "num_attention_heads": 2, "intermediate_size": 8, "max_position_embeddings": 16, "type_vocab_size": 2,
    "vocab_size": 8, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
}


def torch_archive(path, pickle_bytes):
    """A torch.save zip archive whose data.pkl is `pickle_bytes` (stored, as torch writes it)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/byteorder", "little")


def one_tensor_safetensors(path):
    header = json.dumps({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0\0\0")


def refused_convert(source, out, needle):
    with pytest.raises(nv.ConvertError, match=needle) as e:
        nv.convert(source, out)
    assert "\n" not in str(e.value), str(e.value)
    assert not out.exists(), "nothing written"


def test_a_pickle_nested_two_million_deep_is_a_convert_error(tmp_path):
    source = tmp_path / "deep"
    source.mkdir()
    (source / "config.json").write_text(json.dumps(BERT_CONFIG))
    # EMPTY_TUPLE, then TUPLE1 two million times: a tuple nested two million deep.
    torch_archive(source / "pytorch_model.bin", b"\x80\x02)" + b"\x85" * 2_000_000 + b".")
    refused_convert(source, tmp_path / "out", "nests deeper than")


def test_a_dict_of_300000_keys_is_read_in_linear_time_and_refused_as_no_tensors(tmp_path):
    source = tmp_path / "wide"
    source.mkdir()
    (source / "config.json").write_text(json.dumps(BERT_CONFIG))
    # EMPTY_DICT, MARK, 300,000 (int key, None) pairs, SETITEMS: a dict without a tensor.
    items = b"".join(b"J" + struct.pack("<i", i) + b"N" for i in range(300_000))
    torch_archive(source / "pytorch_model.bin", b"\x80\x02}(" + items + b"u.")
    refused_convert(source, tmp_path / "out", "without tensors")


@pytest.mark.parametrize(
    "key, value",
    [("rope_theta", 0), ("rms_norm_eps", -1e-6), ("num_attention_heads", 0), ("max_position_embeddings", 0)],
)
def test_a_decoder_config_number_that_cannot_be_right_is_a_convert_error_naming_it(tmp_path, key, value):
    source = tmp_path / "qwen3"
    source.mkdir()
    config = {
        "architectures": ["Qwen3Model"], "model_type": "qwen3", "hidden_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "vocab_size": 32,
    }
    config[key] = value
    (source / "config.json").write_text(json.dumps(config))
    one_tensor_safetensors(source / "model.safetensors")
    refused_convert(source, tmp_path / "out", key)


@pytest.fixture
def model_copy(model, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(model, folder)
    return folder


@pytest.mark.parametrize(
    "template, needle",
    [
        ({"prefix": "", "body": "<Query>: {query}", "suffix": ""}, "{document} 0 times"),
        ({"prefix": "", "body": "{query}{document}{query}", "suffix": ""}, "{query} 2 times"),
        ({"prefix": "{document}", "body": "{query}{document}", "suffix": ""}, "filled only in"),
    ],
)
def test_a_pair_template_without_each_placeholder_once_is_a_model_error(model_copy, template, needle):
    (model_copy / "pair_template.json").write_text(json.dumps(template))
    with pytest.raises(nv.ModelError, match="pair_template.json") as e:
        nv.Embedder(model_copy, device="cpu", threads=1)
    assert needle in str(e.value), str(e.value)


def test_a_config_larger_than_any_config_is_a_model_error(model_copy):
    with open(model_copy / "config_sentence_transformers.json", "w") as f:
        f.write('{"prompts": {"query": "' + "x" * (20 << 20) + '"}}')
    with pytest.raises(nv.ModelError, match="more than the 16777216"):
        nv.Embedder(model_copy, device="cpu", threads=1)
