//! `nornir vector convert`: a model folder of safetensors weights becomes a folder nornir loads
//! (nornir-convert), then, for an encoder, the fused graph is checked against the plain one
//! (the library's `convert_checked`).

use crate::args::ConvertArgs;
use anyhow::Result;
use nornir_vector::convert::{Conversion, ConvertOptions, Head, RerankerBy};

pub fn convert(a: &ConvertArgs) -> Result<()> {
    let mut options = ConvertOptions::default()
        .with_fused(!a.no_fuse)
        .with_replace(a.force)
        .with_reranker(a.reranker)
        .with_dtype(a.dtype);
    if a.external_data {
        options = options.with_external_data_over(0);
    }
    // The library's one rule: written, then loaded and checked (a head's graph is not run).
    let (conversion, check) = super::convert_folder(&a.model, &a.output, &options)?;
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
    let line = format!(
        "{}: {} ({} layers, hidden {}, vocabulary {}{}) -> {}, output {:?}; {} nodes ({}); {:.1} MB of {} weights{}; copied {} files",
        c.folder.display(),
        c.architecture,
        c.layers,
        c.hidden,
        c.vocabulary,
        if c.labels > 0 { format!(", {} labels", c.labels) } else { String::new() },
        c.graphs.join(" and "),
        c.output,
        c.nodes,
        ops.join(", "),
        c.weight_bytes as f64 / 1e6,
        c.dtype.name(),
        c.external_data.as_ref().map_or(String::new(), |f| format!(" (in {f})")),
        c.copied.len(),
    );
    match (c.reranker_by, c.head) {
        (Some(RerankerBy::Asked), _) => format!("{line}\nconverted as a yes/no reranker (--reranker)"),
        (Some(_), _) => {
            format!("{line}\nconverted as a yes/no reranker: its README.md says pipeline_tag: text-ranking")
        }
        (None, Head::Encoder) if c.architecture.ends_with("ForCausalLM") => format!(
            "{line}\nconverted as an embedder (its last token's hidden state): pass --reranker if it is a yes/no reranker such as Qwen3-Reranker"
        ),
        _ => line,
    }
}

/// A conversion's refusal in this command's words where the library leaves the what-to-do to the
/// surface (its flag); `None` for every other error.
pub fn convert_error_text(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    use nornir_vector::convert::ConvertError;
    #[cfg(feature = "embed-ort")]
    let checked = match e.downcast_ref::<nornir_vector::ConvertCheckError>() {
        Some(nornir_vector::ConvertCheckError::Convert(c)) => Some(c),
        _ => None,
    };
    #[cfg(not(feature = "embed-ort"))]
    let checked = None;
    Some(match checked.or_else(|| e.downcast_ref::<ConvertError>())? {
        ConvertError::OutputExists { path } => {
            format!("{path} already exists: choose another --output, or pass --force to replace it")
        }
        ConvertError::DtypeForDecodersOnly { file, architecture, dtype } => format!(
            "{file} names {architecture}, an encoder: --dtype {dtype} is for decoders only; leave --dtype out (float32), then `nornir vector quantize` it if it is too large"
        ),
        _ => return None,
    })
}
