//! `nornir vector convert`: a model folder of safetensors weights becomes a folder nornir loads
//! (nornir-convert), then, for an encoder, the fused graph is checked against the plain one.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use nornir_vector::convert::{Conversion, ConvertOptions, Head, convert as write_folder};

#[derive(Args, Debug)]
#[command(after_help = "Reads config.json and model.safetensors (float32, float16 or bfloat16; or the shards of
model.safetensors.index.json) and writes a folder nornir loads: model.onnx, the tokenizer and
sentence-transformers files copied, and conversion.json (the source files' sha256, the
architecture, the graph's operators). Converted: BertModel, BertForMaskedLM,
BertForSequenceClassification, XLMRobertaModel, XLMRobertaForMaskedLM,
XLMRobertaForSequenceClassification (MiniLM, BGE, e5, GTE v1, bge-m3, SPLADE, cross-encoders);
in a sentence-transformers folder modules.json decides the head, as sentence-transformers does
(its Transformer module: the encoder). More: docs/convert.md.
Attention and GELU are written as ONNX Runtime's MultiHeadAttention and Gelu; an encoder is then
embedded with both that graph and the plain one on the built-in sample, and the plain one is
written if they differ. OUTPUT is written into a temporary folder and renamed into place only when
whole; on any error nothing is left there.

Examples:
  nornir vector convert --model all-MiniLM-L6-v2 --output all-MiniLM-L6-v2-onnx
  nornir vector convert --model splade-tiny --output splade-tiny-onnx --json
  nornir vector convert --model bge-reranker-base --output reranker --no-fuse")]
pub struct ConvertArgs {
    /// The folder of the model: config.json, model.safetensors (or model.safetensors.index.json
    /// and its shards), and the tokenizer and sentence-transformers files to copy.
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
    /// Print conversion.json instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Print nothing on success.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn convert(a: &ConvertArgs) -> Result<()> {
    let mut options = ConvertOptions::default().with_fused(!a.no_fuse).with_replace(a.force);
    if a.external_data {
        options = options.with_external_data_over(0);
    }
    let mut conversion = write_folder(&a.model, &a.output, &options)?;
    let mut check = None;
    if conversion.head == Head::Encoder {
        let checked = super::check_converted(&a.model, &a.output, &conversion)?;
        if let Some(plain) = checked.replaced_by {
            conversion = plain;
        }
        check = Some(checked.summary);
    }
    if a.json {
        let mut record = serde_json::to_value(&conversion)?;
        record["check"] = check.into();
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else if !a.quiet {
        println!("{}", summary(&conversion));
        if let Some(check) = check {
            println!("{check}");
        }
    }
    Ok(())
}

fn summary(c: &Conversion) -> String {
    let ops: Vec<String> = c.operators.iter().map(|(op, n)| format!("{n} {op}")).collect();
    format!(
        "{}: {} ({} layers, hidden {}, vocabulary {}{}) -> model.onnx, output {:?}; {} nodes ({}); {:.1} MB of float32 weights{}; copied {} files",
        c.folder.display(),
        c.architecture,
        c.layers,
        c.hidden,
        c.vocabulary,
        if c.labels > 0 { format!(", {} labels", c.labels) } else { String::new() },
        c.output,
        c.nodes,
        ops.join(", "),
        c.weight_bytes as f64 / 1e6,
        c.external_data.as_ref().map_or(String::new(), |f| format!(" (in {f})")),
        c.copied.len(),
    )
}

/// What the check of a converted encoder found.
pub struct Checked {
    /// One line for the summary.
    pub summary: String,
    /// The record of the plain graph where it replaced the fused one.
    pub replaced_by: Option<Conversion>,
}
