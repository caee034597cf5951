//! `nornir vector quantize` and `convert`: their arguments and the values only they parse.

use std::path::PathBuf;

use clap::Args;

use super::ModelArgs;

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The folder to write: int8 model.onnx, the tokenizer and configs, quantization.json.
    #[arg(long, short, value_name = "OUTPUT")]
    pub output: PathBuf,
    /// Replace OUTPUT if it exists (only after the new folder is complete).
    #[arg(long)]
    pub force: bool,
    /// One scale per weight instead of one per output column (measured less accurate).
    #[arg(long)]
    pub per_tensor: bool,
    /// How activations are quantized at run time: per-token (a scale per token: vectors do not
    /// depend on the batch) or per-tensor (one scale per batch, ONNX Runtime's
    /// DynamicQuantizeMatMul: vectors change with their neighbours in a batch).
    #[arg(long, value_name = "SCHEME", default_value = "per-token",
        value_parser = |s: &str| s.parse::<nornir_vector::quantize::Activations>())]
    pub activations: nornir_vector::quantize::Activations,
    /// How the weights are stored: int8 (fastest on CPUs with VNNI or AMX; with AVX2 alone, ONNX
    /// Runtime's kernel can saturate on it), uint8 (int8 + 128: never saturates, for AVX2), or
    /// auto: the one for the CPU this command runs on.
    #[arg(long, value_name = "TYPE", default_value = "auto",
        value_parser = |s: &str| s.parse::<nornir_vector::quantize::WeightType>())]
    pub weights: nornir_vector::quantize::WeightType,
    /// SmoothQuant strength (0 to 1) for MatMuls fed by a LayerNormalization: their large
    /// channels are divided down before per-token quantization and the weights multiplied up.
    /// "off" turns it off.
    #[arg(long, value_name = "ALPHA", default_value = "0.5", value_parser = parse_smoothing)]
    pub smoothing: Smoothing,
    /// Texts (one per line) on which to measure the activations that smoothing divides.
    /// Default: the built-in sample of 99 texts.
    #[arg(long, value_name = "FILE")]
    pub calibrate: Option<PathBuf>,
    /// Keep in float32 every MatMul/Gemm whose node or weight name contains PATTERN (repeatable).
    #[arg(long, value_name = "PATTERN")]
    pub keep_fp32: Vec<String>,
    /// Subgraphs to replace by one ONNX Runtime operator each, comma-separated: gelu (the erf
    /// form of GELU -> Gelu), attention (self-attention over heads -> MultiHeadAttention), qkv
    /// (the products that share a quantized input -> one product and a Split; measured no faster
    /// with AVX-512 VNNI, so not in the default), or none. A fused graph that does not run, or
    /// whose vectors differ from the unfused one's, is written unfused, and quantization.json
    /// says why.
    #[arg(long, value_name = "LIST", default_value = "gelu,attention", value_parser = parse_fusions)]
    pub fuse: Fusions,
    /// Write the int8 graph's large weights to OUTPUT/model.onnx_data beside model.onnx, as ONNX
    /// stores models over 2 GB. Without it, that happens only where the int8 weights pass 1.8 GB
    /// (a source with external data, such as a converted decoder's, is always read).
    #[arg(long)]
    pub external_data: bool,
    /// Print quantization.json instead of a summary.
    #[arg(long)]
    pub json: bool,
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// The fusions `--fuse` asks for.
#[derive(Clone, Debug)]
pub struct Fusions(pub Vec<nornir_vector::quantize::Fusion>);

fn parse_fusions(s: &str) -> Result<Fusions, String> {
    use nornir_vector::quantize::Fusion;
    if s == "none" {
        return Ok(Fusions(Vec::new()));
    }
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim) {
        match Fusion::ALL.into_iter().find(|f| f.name() == name) {
            Some(f) if !out.contains(&f) => out.push(f),
            Some(_) => {}
            None => {
                return Err(format!("{name:?} is not a fusion: give gelu, attention, qkv (comma-separated), or none"));
            }
        }
    }
    Ok(Fusions(out))
}

/// SmoothQuant's strength, or `None` for off.
#[derive(Clone, Copy, Debug)]
pub struct Smoothing(pub Option<f32>);

fn parse_smoothing(s: &str) -> Result<Smoothing, String> {
    if s == "off" {
        return Ok(Smoothing(None));
    }
    match s.parse::<f32>() {
        Ok(a) if (0.0..=1.0).contains(&a) => Ok(Smoothing(Some(a))),
        _ => Err(format!("{s:?} is not a strength between 0 and 1, nor \"off\"")),
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Reads config.json and model.safetensors (float32, float16 or bfloat16; or the shards of
model.safetensors.index.json), else PyTorch's pytorch_model.bin (or the shards of
pytorch_model.bin.index.json; its pickle read for tensors only, nothing in it run) and writes a folder nornir loads: model.onnx, the tokenizer and
sentence-transformers files copied, and conversion.json (the source files' sha256, the
architecture, the graph's operators). In a sentence-transformers folder modules.json decides the
head, as sentence-transformers does (its Transformer module: the encoder). A decoder converts as
an embedder, or as a yes/no reranker with --reranker or where its README.md's front matter says
`pipeline_tag: text-ranking`. More: docs/convert.md.
Attention and GELU are written as ONNX Runtime's MultiHeadAttention and Gelu (a batch without
padding runs attention without a mask, ONNX Runtime's memory-efficient path; a sliding window in
blocks, never the whole matrix); an encoder is then
embedded with both that graph and the plain one on the built-in sample, and the plain one is
written if they differ. OUTPUT is written into a temporary folder and renamed into place only when
whole; on any error nothing is left there.

Examples:
  nornir vector convert --model all-MiniLM-L6-v2 --output all-MiniLM-L6-v2-onnx
  nornir vector convert --model splade-tiny --output splade-tiny-onnx --json
  nornir vector convert --model bge-reranker-base --output reranker --no-fuse")]
pub struct ConvertArgs {
    /// The folder of the model: config.json, model.safetensors (or model.safetensors.index.json
    /// and its shards; else pytorch_model.bin or its index and shards), and the tokenizer and
    /// sentence-transformers files to copy.
    #[arg(long, short, value_name = "DIR")]
    pub model: PathBuf,
    /// The folder to write: model.onnx, the copied files, conversion.json.
    #[arg(long, short, value_name = "OUTPUT")]
    pub output: PathBuf,
    /// Replace OUTPUT if it exists (only after the new folder is complete).
    #[arg(long)]
    pub force: bool,
    /// Write ONNX's standard operators only (opset 17), not ONNX Runtime's MultiHeadAttention and
    /// Gelu: for another runtime than ONNX Runtime.
    #[arg(long)]
    pub no_fuse: bool,
    /// Write the weights to model.onnx_data beside model.onnx (ONNX's external data), as is done
    /// anyway for weights over 1.8 GB (protobuf cannot hold 2 GB).
    #[arg(long)]
    pub external_data: bool,
    /// Convert a decoder (Qwen3ForCausalLM and the like) as a yes/no reranker (Qwen3-Reranker):
    /// the graph's `logits` [batch, 1] is logit("yes") - logit("no") at each text's last token,
    /// and config.json is written as a one-label classifier. A decoder whose README.md says
    /// `pipeline_tag: text-ranking` in its front matter is converted so without it.
    #[arg(long)]
    pub reranker: bool,
    /// How a decoder's weights are stored: float32, or float16/bfloat16 (half the size on disk;
    /// ONNX Runtime widens them to float32 when it loads the model, and computes in float32).
    #[arg(long, value_name = "TYPE", default_value = "float32",
        value_parser = |s: &str| s.parse::<nornir_vector::convert::WeightDtype>())]
    pub dtype: nornir_vector::convert::WeightDtype,
    /// Print conversion.json instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Print nothing on success.
    #[arg(long, short)]
    pub quiet: bool,
}
