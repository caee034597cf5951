//! `nornir vector convert`: a model folder of safetensors weights becomes a folder nornir loads
//! (nornir-convert), then, for an encoder, the fused graph is checked against the plain one
//! (the library's `convert_checked`).

use crate::args::ConvertArgs;
use anyhow::Result;
use nornir_vector::convert::{Conversion, ConvertOptions};

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
    format!(
        "{}: {} ({} layers, hidden {}, vocabulary {}{}) -> model.onnx, output {:?}; {} nodes ({}); {:.1} MB of {} weights{}; copied {} files",
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
        c.dtype.name(),
        c.external_data.as_ref().map_or(String::new(), |f| format!(" (in {f})")),
        c.copied.len(),
    )
}
