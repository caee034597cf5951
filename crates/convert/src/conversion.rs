//! What a conversion is asked ([`ConvertOptions`]) and what it did ([`Conversion`], also the
//! output folder's `conversion.json`): the types of the `build` feature's API.

use std::path::PathBuf;

use serde::Serialize;

use crate::config::Head;
use crate::graph::WeightDtype;

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

/// What [`convert`](crate::convert) wrote; also `conversion.json` in the output folder.
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
