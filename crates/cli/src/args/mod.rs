//! The command line as clap reads it: every command's arguments, with their help, and the
//! parsers of values the library does not parse itself. `serve.rs` holds `serve`'s, `tools.rs`
//! those of `quantize` and `convert`.

mod serve;
// Without the embedder `quantize` is parsed (to say it is not compiled in), not run.
#[cfg_attr(not(feature = "embed-ort"), allow(dead_code))]
mod tools;

pub use serve::ServeArgs;
pub use tools::{ConvertArgs, QuantizeArgs};
mod compact;
mod retrieval;
pub use compact::CompactArgs;
#[cfg(feature = "embed-ort")]
pub use retrieval::OutputKind;
pub use retrieval::{MultiVectorArgs, PredictArgs, RerankArgs, SparseArgs};

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use nornir_vector::Device;

use crate::output::OutputFormat;
use nornir_cli::input::InputFormat;

// The options' words are the library's in every build (nornir-options has no ONNX Runtime).
pub use nornir_vector::{LongInputs, Pooling, Precision};

#[derive(Parser)]
#[command(name = "nornir", version, about = "nornir's tools", propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Top,
}

/// The command line, with the help that is made from the registries it describes so that it
/// cannot drift from them: the architectures `convert` converts (nornir-convert's families) and
/// the routes `serve` answers (nornir-server's route table).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let prepend = |c: clap::Command, text: String| {
        let after = c.get_after_help().map(ToString::to_string).unwrap_or_default();
        c.after_help(format!("{text}\n\n{after}"))
    };
    Cli::command().mut_subcommand("vector", |v| {
        let architectures: Vec<&str> = nornir_vector::convert::supported_architectures().collect();
        let v = v.mut_subcommand("convert", |c| {
            prepend(
                c,
                format!("Converted architectures (config.json's `architectures`): {}.", architectures.join(", ")),
            )
        });
        #[cfg(feature = "embed-ort")]
        let v = v.mut_subcommand("serve", |c| prepend(c, format!("Routes:\n{}", nornir_server::routes_help())));
        v
    })
}

#[derive(Subcommand)]
pub enum Top {
    /// Text embeddings with ONNX Runtime on AMD, NVIDIA or CPU.
    #[command(subcommand)]
    Vector(VectorCommand),
}

#[derive(Subcommand)]
pub enum VectorCommand {
    /// Embed texts: from arguments, --input FILE, or standard input (one text per line).
    #[command(after_help = "Examples:
  nornir vector embed \"A man is eating food.\" \"A man is riding a horse.\"
  nornir vector embed --input texts.txt --format npy --output vectors.npy
  cat docs.jsonl | nornir vector embed --input-format jsonl --output vectors.jsonl
  nornir vector embed -v --device cuda --input texts.txt --format f32 --output vectors.f32")]
    Embed(EmbedArgs),
    /// Explain which execution provider runs the model and why ("why is my GPU idle?").
    #[command(after_help = "Examples:
  nornir vector doctor                     drivers, libraries, ONNX Runtime, plan
  nornir vector doctor --model DIR         also build a session and show what really runs
  nornir vector doctor --json --model DIR  the same as JSON (stable keys, see README)
  nornir vector doctor --expect cuda       exit 1 unless CUDA really runs the model (for CI)
  nornir vector doctor --isolate --ort-lib /opt/ort/libonnxruntime.so
                                           check a library that may crash the process on load")]
    Doctor(DoctorArgs),
    /// Measure throughput on a file (default: a built-in sample of 99 texts).
    Bench(BenchArgs),
    /// Make an int8 copy of a model folder for the CPU: faster, in less memory, at a measured cost.
    #[command(after_help = "Every MatMul and Gemm whose weight is a constant (float32, or int8 that the graph
dequantizes) runs in int8: int8 weights with one scale per output column, activations quantized
at run time with one scale per token, so that a text's vector is the same alone or in any batch
(ONNX Runtime's MatMulIntegerToFloat). --activations per-tensor writes ONNX Runtime's fused
DynamicQuantizeMatMul instead, whose vectors depend on the batch. The weights are int8 where this
CPU has VNNI (AVX-512 VNNI, AVX-VNNI, AMX) and uint8 (int8 + 128) elsewhere: ONNX Runtime's AVX2
kernel for int8 weights adds products in 16 bits, which saturate. OUTPUT gets the int8 model.onnx, the tokenizer and
config files, and quantization.json: what was rewritten, what was kept in float32, and what int8
costs, measured here on the built-in sample (99 texts) by each kind's own output: an embedder's
vectors (cosine to float32), a sparse encoder's (cosine of the sparse vectors, overlap of the top
10 terms), a cross-encoder's raw scores on 90 query/document pairs made from the sample (largest
difference, queries whose top document and whole order are kept, mean Spearman).
OUTPUT is written into a temporary folder and renamed into place only when all of it succeeded.
The int8 model is for the CPU: on a GPU plan nornir runs it on the CPU and says why.

Examples:
  nornir vector quantize --model all-MiniLM-L6-v2 --output all-MiniLM-L6-v2-int8
  nornir vector quantize --model ms-marco-MiniLM-L-6-v2 --output reranker-int8
  nornir vector quantize --model DIR --output OUT --keep-fp32 output.dense --json")]
    Quantize(QuantizeArgs),
    /// Write model.onnx from a transformers model's safetensors or PyTorch weights, without torch
    /// (the architectures it converts: --help).
    Convert(ConvertArgs),
    /// Rank documents by their relevance to a query with a cross-encoder (reranker).
    #[command(after_help = "Each document is scored together with the query ([CLS] query [SEP] document [SEP]);
a pair longer than the model reads loses the end of its document first. The output is one JSON
line per document, best first: {\"index\": i, \"score\": s, \"text\": ...} (index: its line
in the input, from 0). Scores are the model's activation (sigmoid for one label) unless
--raw-scores.

Examples:
  nornir vector rerank --model ms-marco-MiniLM --query \"what is a fjord?\" --input docs.txt --top-n 3
  nornir vector rerank --model DIR --query \"capital of France\" \"Paris is in France.\" \"Berlin is big.\"")]
    Rerank(RerankArgs),
    /// Score each text (or pair of texts) with a classifier: every label's score, best first.
    #[command(
        after_help = "Each input's scores are one JSON line in the shape of text-embeddings-inference's /predict:
[{\"label\": ..., \"score\": ...}, ...], every label, best first; line i is input i. A text is
encoded alone; a JSON line {\"text\": a, \"text_pair\": b} (with --input-format jsonl) is
encoded as a pair, as an NLI cross-encoder reads one. Scores are the model's activation as
transformers' text-classification pipeline applies it: a sigmoid per label for one label or when
config.json says problem_type \"multi_label_classification\", else a softmax over the labels (a
sentence-transformers activation_fn in config.json wins); --raw-scores gives the logits.

Examples:
  nornir vector predict --model emotion-classifier \"I love this\" \"This is awful\"
  nornir vector predict --model nli-deberta --input pairs.jsonl --input-format jsonl --output scores.jsonl"
    )]
    Predict(PredictArgs),
    /// Serve one or several models over HTTP with OpenAI's, TEI's, Cohere's and Jina's APIs (the
    /// routes: --help).
    #[command(
        after_help = "Concurrent requests share batches, whatever prompt, dimensions or truncation each asks for;
each model has its own queue, and when more than --max-queued-texts texts wait for one, a request
is answered 503 with Retry-After at once. /health answers 503 until every model has loaded and
passed its first run, then 200: use it as the readiness probe. With --api-key (or NORNIR_API_KEY),
every endpoint but /health needs `Authorization: Bearer <key>`. SIGTERM or Ctrl-C stops taking
connections and finishes the requests in flight.

Several models: repeat --model NAME=DIR, or give --models-file FILE. OpenAI's `model` field
chooses one by name (an unknown name is 404 with the names); TEI's routes use the first, or
/models/NAME/embed and the like for any.

Examples:
  nornir vector serve --port 8080
  NORNIR_API_KEY=secret nornir vector serve --host 0.0.0.0 --port 8080 --model DIR
  nornir vector serve --model minilm=models/all-MiniLM-L6-v2 --model minilm-int8=models/all-MiniLM-L6-v2-int8
  curl -s localhost:8080/v1/embeddings -H 'content-type: application/json' \\
       -d '{\"model\": \"all-MiniLM-L6-v2-int8\", \"input\": [\"hello\", \"world\"]}'
  curl -s localhost:8080/embed -H 'content-type: application/json' -d '{\"inputs\": \"hello\"}'"
    )]
    Serve(ServeArgs),
    /// Registers one plugin library with ONNX Runtime in this fresh process: the library's trial
    /// of a plugin before it loads it (`nornir_embed`'s plugin_trial.rs). Not for people.
    #[command(name = "__probe-plugin", hide = true)]
    ProbePlugin(ProbePluginArgs),
}

/// `__probe-plugin`'s arguments, as the library passes them.
#[derive(Args, Debug)]
pub struct ProbePluginArgs {
    /// The ONNX Runtime library to load.
    pub ort_library: PathBuf,
    /// The name to register the plugin under.
    pub name: String,
    /// The plugin library.
    pub plugin: PathBuf,
}

/// Options shared by every command that loads a model.
#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// Model folder (model.onnx or onnx/model.onnx, tokenizer.json, sentence-transformers configs).
    /// Default: all-MiniLM-L6-v2 (float32) in the nornir cache (`cargo xtask fetch`). `serve` takes it
    /// more than once, as NAME=DIR or NAME,ALIAS...=DIR (a bare DIR is named after its folder).
    #[arg(long, value_name = "DIR")]
    pub model: Vec<PathBuf>,
    /// Model file inside the folder, instead of model.onnx.
    #[arg(long, value_name = "FILE")]
    pub model_file: Option<PathBuf>,
    /// Where to run: auto picks AMD, then NVIDIA, then CPU; a forced GPU that cannot run is an
    /// error. auto, cpu, cuda (or nvidia), rocm (or amd).
    #[arg(long, env = "NORNIR_DEVICE", default_value = "auto", value_parser = parse_with_library::<Device>)]
    pub device: Device,
    /// Threads for the model in all (default: all cores).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
    /// Workers, each running a batch side by side. On the CPU they share
    /// the threads and one ONNX Runtime session, so the weights are in memory once (default: half
    /// the threads, at least 2; 1 for 1 thread; what that buys is measured in docs/performance.md).
    /// On a GPU each has a session of its own (default 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: Option<u32>,
    /// The libonnxruntime.so to load, instead of searching for one.
    #[arg(long, env = "ORT_DYLIB_PATH", value_name = "PATH")]
    pub ort_lib: Option<PathBuf>,
    /// Execution providers to try in this order, then the CPU, by ONNX Runtime name: built-in
    /// (CUDAExecutionProvider, MIGraphXExecutionProvider, or cuda, migraphx) or a plugin's
    /// (cpu_ep, OpenVINOExecutionProvider). Overrides --device. `nornir vector doctor` lists them.
    #[arg(long, env = "NORNIR_PROVIDERS", value_name = "NAME[,NAME...]", value_delimiter = ',')]
    pub providers: Vec<String>,
    /// A plugin execution-provider library to register with ONNX Runtime, as NAME=PATH (a bare
    /// PATH is named after its file); repeat for more. Also NORNIR_EP_LIBS (comma-separated).
    /// Plugins pip-installed where nornir finds onnxruntime, and in $NORNIR_HOME/ep, are found
    /// without it.
    #[arg(long = "ep-lib", value_name = "NAME=PATH", value_parser = parse_ep_lib)]
    pub ep_libs: Vec<(String, PathBuf)>,
    /// Truncate texts to N tokens (default: the model's max_seq_length).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_length: Option<u32>,
    /// Pooling: mean, cls, last, max, mean_sqrt_len or weighted_mean; sentence-transformers'
    /// names (mean_tokens, cls_token, lasttoken, ...) work too (default: the model's 1_Pooling config).
    #[arg(long, value_parser = parse_with_library::<Pooling>)]
    pub pooling: Option<Pooling>,
    /// L2-normalise the vectors even if modules.json lists no Normalize module.
    #[arg(long, conflicts_with = "no_normalize")]
    pub normalize: bool,
    /// Return raw vectors, even if the model folder says to normalise. Default: as modules.json
    /// says (a Normalize module, or no modules.json at all, means normalised).
    #[arg(long)]
    pub no_normalize: bool,
    /// The graph output to read (default: sentence_embedding, token_embeddings,
    /// last_hidden_state, text_embeds or embeddings by name, else the first floating-point one).
    #[arg(long, value_name = "NAME")]
    pub output_name: Option<String>,
    /// Put this prompt of config_sentence_transformers.json before every text (default: its
    /// default_prompt_name, if any).
    #[arg(long, value_name = "NAME", conflicts_with = "prompt")]
    pub prompt_name: Option<String>,
    /// Put TEXT before every text (E5: "query: "); "" turns the model's default prompt off.
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// The task of a model with task adapters (jina-embeddings-v3: retrieval.query,
    /// retrieval.passage, separation, classification, text-matching).
    #[arg(long, value_name = "NAME")]
    pub task: Option<String>,
    /// Keep the first N dimensions of each vector, then normalise (Matryoshka models); of the
    /// Dense modules' output where the folder has them.
    #[arg(long, alias = "dim", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub dimensions: Option<u32>,
    /// Under load (every worker busy), how long a free worker may wait for more texts to fill
    /// a batch; an idle embedder never waits.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub batch_wait_ms: u64,
    /// Most tokens per batch (texts x longest text); 256 measured faster than 512 on the CPU.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_tokens: u32,
}

#[derive(Args, Debug)]
pub struct EmbedArgs {
    /// Texts to embed (else --input, else standard input).
    pub texts: Vec<String>,
    /// Read texts from FILE ('-' for standard input).
    #[arg(long, short, value_name = "FILE", conflicts_with = "texts")]
    pub input: Option<PathBuf>,
    /// Embed the images listed in FILE, one path a line ('-' for standard input), with an
    /// image-and-text model (CLIP, SigLIP): row i is line i's image, in the same space as the
    /// model's text vectors. JPEG, PNG, WebP and a GIF's first frame.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["texts", "input"])]
    pub images: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "lines")]
    pub input_format: InputFormat,
    #[arg(long, short, value_enum, default_value = "jsonl")]
    pub format: OutputFormat,
    /// Write to FILE (created only when the run succeeds) instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// What to do with a text longer than the model reads: truncate (keep its first tokens; the
    /// run says how many texts were cut), refuse (stop with an error naming the text), chunk
    /// (overlapping windows of its tokens, each embedded alone; the row is the document's vector,
    /// their token-weighted mean, and the chunks are written too: a "chunks" array per JSON line,
    /// or OUTPUT.chunks.npy|f32 with OUTPUT.chunks.tsv), late (late chunking: the same chunks,
    /// each pooled from one run over as much of the document as the model reads; for
    /// mean-pooled long-context models).
    #[arg(long, value_name = "POLICY", default_value = "truncate", value_parser = parse_with_library::<LongInputs>,
        help_heading = None)]
    pub long: LongInputs,
    /// Tokens per chunk with --long chunk|late, special tokens and prompt included (default: the
    /// model's length).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub window: Option<u32>,
    /// Tokens shared by neighbouring chunks with --long chunk|late (default 32).
    #[arg(long, value_name = "N")]
    pub overlap: Option<u32>,
    #[command(flatten)]
    pub sparse: SparseArgs,
    #[command(flatten)]
    pub multi_vector: MultiVectorArgs,
    #[command(flatten)]
    pub compact: CompactArgs,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// At the end, a JSON summary of the run on stderr (texts, truncated, chunks, seconds,
    /// provider), one line, for scripts; the vectors still go to the output.
    #[arg(long)]
    pub json: bool,
    /// Say on stderr which provider really ran and why (-vv: debug log).
    #[arg(long, short, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Only the NVIDIA part.
    #[arg(long)]
    pub cuda: bool,
    /// Only the AMD part.
    #[arg(long)]
    pub rocm: bool,
    /// JSON with stable keys instead of text.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 unless this device really runs the model (builds a session with --model or the
    /// default model): cpu, cuda (or nvidia), rocm (or amd).
    #[arg(long, value_parser = parse_expected_device)]
    pub expect: Option<Device>,
    /// A few lines instead of the full report.
    #[arg(long)]
    pub summary: bool,
    /// Load ONNX Runtime and build the session in a child process, so that a library that
    /// crashes on load is reported (with the signal) instead of killing the doctor.
    #[arg(long)]
    pub isolate: bool,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Debug log on stderr.
    #[arg(long, short, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Texts to embed, one per line (default: a built-in sample of 99 texts).
    #[arg(long, short, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Embed the input this many times.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Instead: N threads share the embedder, each embedding --per-call texts per call until the
    /// input is used up; reports texts/s, p50/p95/p99 latency and the ratio to one bulk job over
    /// the same texts, measured just before in the same run.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Option<u32>,
    /// Texts per call with --concurrency.
    #[arg(long, value_name = "K", default_value_t = 1, requires = "concurrency", value_parser = clap::value_parser!(u32).range(1..))]
    pub per_call: u32,
    #[arg(long)]
    pub json: bool,
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Options are parsed by the library's own `FromStr`, so the CLI and `NORNIR_DEVICE` in a library
/// user's process accept the same words.
fn parse_with_library<T: std::str::FromStr<Err = String>>(s: &str) -> Result<T, String> {
    s.parse()
}

fn parse_ep_lib(s: &str) -> Result<(String, PathBuf), String> {
    nornir_vector::cli_support::parse_plugin_entry(s)
}

fn parse_expected_device(s: &str) -> Result<Device, String> {
    match s.parse::<Device>()? {
        Device::Auto => Err("--expect needs a device: cpu, cuda or rocm".to_owned()),
        d => Ok(d),
    }
}
