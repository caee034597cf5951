"""The peer for nornir's int8: ONNX Runtime's own Python quantizer, as people use it today
(`cargo xtask bench-compare` and `cargo xtask quality` run this).

    quantize_python.py MODEL_DIR OUT_DIR [per-channel|per-tensor]

The default model stores its weights as int8 initializers that the graph dequantizes (Cast, Mul),
which `quantize_dynamic` does not recognise as weights; so the graph is first constant-folded to
float32 by ONNX Runtime itself (basic optimisation level, saved with `optimized_model_filepath`),
then `quantize_dynamic` makes every MatMul int8 (int8 weights, uint8 activations, its defaults).
OUT_DIR gets model.onnx and the tokenizer and config files.
"""

import os
import shutil
import sys
import tempfile

import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

CONFIGS = ["tokenizer.json", "config.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"]


def main() -> None:
    src, out = sys.argv[1], sys.argv[2]
    per_channel = (sys.argv[3] if len(sys.argv) > 3 else "per-channel") == "per-channel"
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folded = os.path.join(tmp, "fp32.onnx")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = folded
        ort.InferenceSession(os.path.join(src, "model.onnx"), options, providers=["CPUExecutionProvider"])
        quantize_dynamic(folded, os.path.join(out, "model.onnx"), weight_type=QuantType.QInt8, per_channel=per_channel)
    for name in CONFIGS:
        if os.path.exists(os.path.join(src, name)):
            os.makedirs(os.path.dirname(os.path.join(out, name)) or out, exist_ok=True)
            shutil.copyfile(os.path.join(src, name), os.path.join(out, name))


if __name__ == "__main__":
    main()
