//! The arguments of the other kinds of model: a sparse encoder's (with `embed`) and a
//! cross-encoder's (`rerank`, `predict`).

use std::path::PathBuf;

use clap::Args;

use super::ModelArgs;

/// With a sparse encoder (SPLADE), `embed` writes JSON lines `{"indices": [...], "values": [...]}`.
#[derive(Args, Clone, Debug, Default)]
#[command(next_help_heading = "Sparse encoders (SPLADE)")]
pub struct SparseArgs {
    /// Also write each term's token ("tokens": [...]) beside its id.
    #[arg(long)]
    pub tokens: bool,
    /// Keep only the N heaviest terms of each text.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub top_k: Option<u32>,
    /// Keep only terms weighing more than W.
    #[arg(long, value_name = "W")]
    pub threshold: Option<f32>,
}

#[cfg_attr(not(feature = "embed-ort"), allow(dead_code))]
impl SparseArgs {
    /// Whether any of them was given (they need a sparse encoder).
    pub fn any(&self) -> bool {
        self.tokens || self.top_k.is_some() || self.threshold.is_some()
    }
}

/// With a late-interaction model (ColBERT, BGE-M3), `embed` writes each text's token vectors.
#[derive(Args, Clone, Debug, Default)]
#[command(next_help_heading = "Late interaction (ColBERT, BGE-M3)")]
pub struct MultiVectorArgs {
    /// Encode the texts as queries (the query marker, expanded to the model's query length);
    /// else as documents (the document marker, punctuation's vectors left out).
    #[arg(long)]
    pub query: bool,
    /// What to write from one pass of a BGE-M3 model, comma-separated: dense ("embedding"),
    /// sparse ("indices", "values"), multi-vector ("vectors"); default: the model's own output
    /// (a BGE-M3 folder's dense vector, a ColBERT folder's token vectors).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    pub outputs: Vec<OutputKind>,
}

#[cfg_attr(not(feature = "embed-ort"), allow(dead_code))]
impl MultiVectorArgs {
    /// Whether any of them was given (they need a model that makes token vectors).
    pub fn any(&self) -> bool {
        self.query || !self.outputs.is_empty()
    }
}

/// One output of a BGE-M3 pass.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputKind {
    Dense,
    Sparse,
    MultiVector,
}

#[derive(Args, Debug)]
pub struct RerankArgs {
    /// The query the documents are ranked against (no short form: `-q` is --quiet elsewhere).
    #[arg(long, value_name = "TEXT")]
    pub query: String,
    /// Documents (else --input, else standard input, one per line).
    pub documents: Vec<String>,
    /// Read documents from FILE, one per line ('-' for standard input).
    #[arg(long, short, value_name = "FILE", conflicts_with = "documents")]
    pub input: Option<PathBuf>,
    /// Write only the N best documents.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub top_n: Option<u32>,
    /// The model's raw scores (logits) instead of its activation's.
    #[arg(long)]
    pub raw_scores: bool,
    /// Leave the documents' text out of the output.
    #[arg(long)]
    pub no_text: bool,
    /// What to do with a document longer than the model reads: truncate (its end is cut, the
    /// default), refuse (an error naming it) or chunk (scored by the best of its overlapping
    /// chunks, each read with the query in one window; the line says which chunk).
    #[arg(long, value_name = "POLICY", default_value = "truncate", value_parser = super::parse_with_library::<nornir_vector::LongInputs>)]
    pub long: nornir_vector::LongInputs,
    /// Tokens per pair with --long chunk: the query, the chunk and the special tokens (default:
    /// the model's length).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub window: Option<u32>,
    /// Tokens shared by neighbouring chunks with --long chunk (default 32).
    #[arg(long, value_name = "N")]
    pub overlap: Option<u32>,
    /// Write to FILE (created only when the run succeeds) instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Args, Debug)]
pub struct PredictArgs {
    /// Texts to classify (else --input, else standard input).
    pub texts: Vec<String>,
    /// Read texts from FILE ('-' for standard input): one per line, or with --input-format jsonl
    /// one JSON object per line, {"text": ...} or a pair {"text": ..., "text_pair": ...}.
    #[arg(long, short, value_name = "FILE", conflicts_with = "texts")]
    pub input: Option<PathBuf>,
    /// How --input is laid out.
    #[arg(long, value_enum, default_value = "lines", value_name = "FORMAT")]
    pub input_format: nornir_cli::input::InputFormat,
    /// The model's raw scores (logits) instead of its activation's.
    #[arg(long)]
    pub raw_scores: bool,
    /// Write to FILE (created only when the run succeeds) instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub model: ModelArgs,
}
