//! The conversion alone, without the CLI's check that loads the result in ONNX Runtime: for
//! measuring its time and peak memory (`/usr/bin/time -v`).
//!
//! `cargo run --release -p nornir-convert --example convert_folder -- SOURCE OUTPUT [--reranker] [--dtype TYPE]`

use std::path::Path;
use std::process::ExitCode;

use nornir_convert::{ConvertOptions, WeightDtype, convert};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(source), Some(output)) = (args.first(), args.get(1)) else {
        eprintln!("usage: convert_folder SOURCE OUTPUT [--reranker] [--dtype float32|float16|bfloat16]");
        return ExitCode::from(2);
    };
    let mut options =
        ConvertOptions::default().with_replace(true).with_reranker(args.iter().any(|a| a == "--reranker"));
    if let Some(i) = args.iter().position(|a| a == "--dtype") {
        match args.get(i + 1).map(|d| d.parse::<WeightDtype>()) {
            Some(Ok(dtype)) => options = options.with_dtype(dtype),
            Some(Err(e)) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
            None => {
                eprintln!("--dtype needs a value: float32, float16 or bfloat16");
                return ExitCode::from(2);
            }
        }
    }
    let started = std::time::Instant::now();
    match convert(Path::new(source), Path::new(output), &options) {
        Ok(c) => {
            println!(
                "{} -> {}: {} layers, {} nodes, {:.1} MB of {} weights{}, {:.1} s",
                c.architecture,
                output,
                c.layers,
                c.nodes,
                c.weight_bytes as f64 / 1e6,
                c.dtype.name(),
                c.external_data.map_or(String::new(), |f| format!(" in {f}")),
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
