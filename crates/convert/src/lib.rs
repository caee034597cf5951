//! `nornir-convert`: a model brought as its weights becomes a folder nornir loads. It reads
//! `config.json` and `model.safetensors` (float32, float16, bfloat16 or float64 tensors; or the
//! shards of `model.safetensors.index.json`; or, where there are none, the PyTorch checkpoint
//! `pytorch_model.bin` or the shards of `pytorch_model.bin.index.json`, read without running
//! its pickle) and writes `model.onnx`: a BERT or XLM-RoBERTa
//! encoder, with the masked-LM head (SPLADE) or the sequence-classification head (cross-encoders)
//! where `config.json`'s `architectures` names one. The tokenizer and sentence-transformers files
//! are copied beside it, and `conversion.json` records the source files' hashes and the graph.
//!
//! It is not an exporter of arbitrary PyTorch code: the graph is written from the published
//! definitions of these architectures, so any other architecture is refused by name. It knows
//! nothing of ONNX Runtime and runs nothing; the tests run what it writes against independent
//! reference implementations. The output folder is written under a temporary name and renamed
//! into place only when complete.

#![forbid(unsafe_code)]

mod colbert;
mod config;
mod families;
mod folder;
mod graph;
mod model_card;
mod network;
mod text_file;
mod torch;
mod weights;

/// The ONNX message types (generated from the quantizer's `proto/onnx_subset.proto`).
#[allow(clippy::all, clippy::pedantic, clippy::restriction, missing_debug_implementations, unused_qualifications)]
mod onnx {
    include!(concat!(env!("OUT_DIR"), "/onnx/mod.rs"));
    pub use onnx_subset::*;
}

use std::path::PathBuf;

use serde::Serialize;

pub use config::Head;
pub use folder::convert;
pub use graph::WeightDtype;

/// Every architecture name `config.json`'s `architectures` may give, family by family.
pub fn supported_architectures() -> impl Iterator<Item = &'static str> {
    families::supported_architectures()
}

/// How to write the graph.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConvertOptions {
    /// Attention as ONNX Runtime's `com.microsoft.MultiHeadAttention` and GELU as its `Gelu`
    /// (`FastGelu` for the tanh form), where ONNX Runtime's CPU provider runs fewer, faster
    /// kernels; `false` writes ONNX's standard operators only (opset 17), for any runtime.
    pub fused: bool,
    /// Replace an existing output folder instead of refusing.
    pub replace: bool,
    /// Write the weights to `model.onnx_data` beside `model.onnx` (ONNX's external data) when
    /// they are larger than this many bytes. Protobuf cannot hold 2 GB, so the default is
    /// [`ConvertOptions::EXTERNAL_DATA_OVER`]; 0 always writes them apart. Where they go apart,
    /// each weight is written there as soon as it is converted, so memory holds one at a time.
    pub external_data_over: usize,
    /// Convert a decoder as a yes/no reranker (Qwen3-Reranker) rather than an embedder. Without
    /// it, a decoder whose model card (README.md's front matter) says `pipeline_tag:
    /// text-ranking` is one too; nothing else (not a folder's name) makes one.
    pub reranker: bool,
    /// How a decoder's weights are stored; the graph computes in float32 (a `Cast` where each
    /// half-precision weight is read). Encoders are written in float32 only.
    pub dtype: WeightDtype,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            fused: true,
            replace: false,
            external_data_over: Self::EXTERNAL_DATA_OVER,
            reranker: false,
            dtype: WeightDtype::Float32,
        }
    }
}

impl ConvertOptions {
    /// The weight size above which they go to an external data file by default.
    pub const EXTERNAL_DATA_OVER: usize = 1_800_000_000;

    pub fn with_external_data_over(mut self, bytes: usize) -> Self {
        self.external_data_over = bytes;
        self
    }
    pub fn with_fused(mut self, fused: bool) -> Self {
        self.fused = fused;
        self
    }
    pub fn with_replace(mut self, replace: bool) -> Self {
        self.replace = replace;
        self
    }
    pub fn with_reranker(mut self, reranker: bool) -> Self {
        self.reranker = reranker;
        self
    }
    pub fn with_dtype(mut self, dtype: WeightDtype) -> Self {
        self.dtype = dtype;
        self
    }
}

/// One file the conversion read.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct SourceFile {
    /// The name inside the source folder.
    pub file: String,
    pub sha256: String,
    pub bytes: u64,
}

/// What [`convert`] wrote; also `conversion.json` in the output folder.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Conversion {
    /// `config.json`'s architecture that was converted, e.g. `BertModel`.
    pub architecture: String,
    /// The family converted, e.g. `bert`, `xlm-roberta`, `jina-bert`, `modern-bert`, `qwen3`.
    pub family: &'static str,
    pub head: Head,
    /// Why a decoder was converted as a yes/no reranker; `None` for every other conversion.
    pub reranker_by: Option<RerankerBy>,
    /// The graph's output: `last_hidden_state` (encoder, decoder embedder) or `logits` (the heads).
    pub output: String,
    /// The default domain's opset; `com.microsoft` opset 1 where `fused`.
    pub opset: i64,
    pub fused: bool,
    pub layers: usize,
    pub hidden: usize,
    pub vocabulary: usize,
    /// The classifier's labels (0 for the other heads).
    pub labels: usize,
    /// Node count of the graph, and per operator in order of first appearance.
    pub nodes: usize,
    pub operators: Vec<(String, usize)>,
    /// Weight bytes written (float32, or `dtype`'s).
    pub weight_bytes: usize,
    /// How the large weights are stored.
    pub dtype: WeightDtype,
    /// The file beside `model.onnx` holding the weights where they pass protobuf's 2 GB limit.
    pub external_data: Option<String>,
    /// The graphs written: `model.onnx`, or a dual encoder's `text_model.onnx` (`output`
    /// `text_embeds`) and `vision_model.onnx` (`pixel_values` -> `image_embeds`), each runnable
    /// alone.
    pub graphs: Vec<String>,
    pub sources: Vec<SourceFile>,
    /// Files copied from the source folder (tokenizer, configs), relative to it.
    pub copied: Vec<String>,
    /// The version of nornir that converted.
    pub nornir_version: String,
    /// Where the folder was written.
    pub folder: PathBuf,
}

/// Why a decoder was converted as a yes/no reranker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RerankerBy {
    /// The caller asked for one ([`ConvertOptions::reranker`]).
    Asked,
    /// The folder's model card, README.md, says `pipeline_tag: text-ranking` in its front matter.
    ModelCard,
}

/// Why a conversion did not happen. Every message names the file (and tensor) and what to do;
/// nothing is left in the output folder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    #[error(
        "{dir} has no config.json: pass the folder of a transformers model (config.json beside model.safetensors or pytorch_model.bin)"
    )]
    NoConfig { dir: String },
    #[error(
        "{dir} has no model.safetensors or model.safetensors.index.json, nor pytorch_model.bin or pytorch_model.bin.index.json: pass a folder with the model's weights"
    )]
    NoWeights { dir: String },
    #[error("{file} {why}")]
    Config { file: String, why: String },
    #[error("cannot convert architecture {architecture}: supported are {supported}")]
    Unsupported { architecture: String, supported: String },
    #[error("{file} {why}")]
    Weights { file: String, why: String },
    #[error("tensor {tensor:?} is not in {files}: the weights do not match config.json's architecture")]
    MissingTensor { tensor: String, files: String },
    #[error(
        "tensor {tensor:?} in {file} has shape {found:?} where config.json implies {expected:?}: the weights and config.json do not belong together"
    )]
    Shape { file: String, tensor: String, found: Vec<usize>, expected: Vec<usize> },
    #[error("tensor {tensor:?} in {file} is of dtype {dtype}: converted are F32, F16, BF16 and F64 weights")]
    Dtype { file: String, tensor: String, dtype: String },
    #[error("{file} {why}")]
    TorchArchive { file: String, why: String },
    #[error("{file}'s pickle {why} (at byte {at}): the file is truncated or damaged")]
    Pickle { file: String, at: usize, why: String },
    #[error(
        "{file}'s pickle has the opcode 0x{opcode:02x} at byte {at}, which torch.save does not write for a state dict: nornir reads only tensors (convert it to safetensors)"
    )]
    UnknownOpcode { file: String, opcode: u8, at: usize },
    #[error(
        "{file}'s pickle names {global}, which is not a tensor: nornir reads only tensors and their storages (convert it to safetensors, or report the module)"
    )]
    PickleGlobal { file: String, global: String },
    #[error("{file} has no {entry}, the storage of tensor {tensor:?}: the archive is incomplete")]
    StorageMissing { file: String, entry: String, tensor: String },
    #[error(
        "tensor {tensor:?} in {file} runs past the end of its storage {entry} ({storage_bytes} bytes): the file is damaged"
    )]
    StorageOverrun { file: String, tensor: String, entry: String, storage_bytes: usize },
    #[error(
        "tensor {tensor:?} in {file} is not contiguous (shape {shape:?}, stride {stride:?}): save it contiguous, or convert it to safetensors"
    )]
    NonContiguous { file: String, tensor: String, shape: Vec<usize>, stride: Vec<usize> },
    #[error("cannot read {file}: {source}")]
    Read { file: String, source: std::io::Error },
    /// The output folder exists and the options do not say to replace it; each surface names its
    /// own way to ask (`--force`, `replace=True`).
    #[error("{path} already exists: choose another output folder, or ask to replace it")]
    OutputExists { path: String },
    /// Half-precision weights were asked for an encoder; they are written for decoders only.
    #[error(
        "{file} names {architecture}, an encoder: {dtype} weights are written for decoders only; convert it in float32 (then quantize it if it is too large)"
    )]
    DtypeForDecodersOnly { file: String, architecture: String, dtype: &'static str },
    #[error("the output folder {path} is the model folder itself: write the converted model to another folder")]
    OutputIsSource { path: String },
    #[error("the folder {path} for the output does not exist: create it first")]
    NoOutputParent { path: String },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("cannot encode the ONNX graph: {0}")]
    Encode(#[source] protobuf::Error),
}

/// The parsers a downloaded weights file reaches, for the fuzz targets: any input gives a value
/// or an error, never a panic, in time linear in it. Not an API: it may change in any release.
#[doc(hidden)]
pub mod fuzzing {
    use crate::ConvertError;

    /// `bytes` read as a `pytorch_model.bin` is: the archive and its pickle, then every tensor's
    /// bytes, widened to float32 where they are floats. The number of tensors.
    pub fn read_torch_archive(bytes: &[u8]) -> Result<usize, ConvertError> {
        let file = "pytorch_model.bin";
        let checkpoint = crate::torch::Checkpoint::read(file, bytes)?;
        let mut names: Vec<&str> = checkpoint.names().collect();
        names.sort_unstable();
        for name in &names {
            if let Some(t) = checkpoint.tensor(file, bytes, name)? {
                drop(crate::weights::widen(t.data, t.dtype));
            }
        }
        Ok(names.len())
    }

    /// `bytes` run as the pickle (`data.pkl`) of a checkpoint.
    pub fn read_pickle(bytes: &[u8]) -> Result<(), ConvertError> {
        crate::torch::load_pickle("data.pkl", bytes)
    }

    /// `bytes` read as a `model.safetensors` is: its header checked, then every tensor's bytes,
    /// widened to float32 where they are floats. The number of tensors.
    pub fn read_safetensors(bytes: &[u8]) -> Result<usize, ConvertError> {
        let file = "model.safetensors";
        let (start, metadata) = crate::weights::safetensors_header(bytes)
            .map_err(|why| ConvertError::Weights { file: file.to_owned(), why })?;
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        for info in metadata.tensors().values() {
            let (s, e) = info.data_offsets;
            let data = start.checked_add(s).zip(start.checked_add(e)).and_then(|(s, e)| bytes.get(s..e));
            let data = data.ok_or_else(|| ConvertError::Weights {
                file: file.to_owned(),
                why: "has a tensor outside it, which its header check let through".to_owned(),
            })?;
            drop(crate::weights::widen(data, info.dtype));
        }
        Ok(metadata.tensors().len())
    }

    /// `text` read as a converter's `config.json`, for whichever family its `architectures` names
    /// (its keys, defaults and range checks); the architecture it names.
    pub fn parse_config(text: &str) -> Result<String, ConvertError> {
        Ok(crate::families::parse(text, "config.json", None)?.architecture)
    }

    /// `text` read as Stanford ColBERT's `artifact.metadata`, its lengths within 512 positions.
    pub fn parse_colbert_metadata(text: &str) -> Result<serde_json::Value, ConvertError> {
        crate::colbert::token_rules("artifact.metadata", Some(text), 512)
    }

    /// `text` read as a `model.safetensors.index.json`: the shard file names it gives.
    pub fn read_shard_index(text: &str) -> Result<Vec<String>, ConvertError> {
        crate::weights::shard_names("model.safetensors.index.json", text)
    }
}

/// `n` with its thousands separated by commas, as the limits are written in errors.
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
