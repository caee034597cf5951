//! `nornir`: embed text files with ONNX sentence-embedding models, diagnose why a GPU is or is not
//! used (`nornir vector doctor`), and measure speed (`nornir vector bench`).

mod args;
mod commands;
mod doctor;
// Without the embedder the embed options are still parsed (to say it is not compiled in), not used.
#[cfg_attr(not(feature = "embed-ort"), allow(dead_code))]
mod output;

use std::process::ExitCode;

use clap::FromArgMatches;

use crate::args::{Cli, Top, VectorCommand};

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "warn,nornir=info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("NORNIR_LOG").unwrap_or_else(|_| default.into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// A closed pipe ends the process quietly, as it does `cat` and `grep` (`nornir ... | head`):
/// Rust ignores SIGPIPE, which turns every later `println!` into a panic.
fn die_quietly_on_a_closed_pipe() {
    // SAFETY: `signal` is called before any thread is started, with a valid signal number and the
    // default disposition; no handler (Rust code) runs in signal context.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    die_quietly_on_a_closed_pipe();
    // This binary answers the library's trial of a plugin library (`__probe-plugin`).
    commands::offer_plugin_probe();
    let cli = match Cli::from_arg_matches(&args::command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Top::Vector(VectorCommand::ProbePlugin(a)) => return commands::probe_plugin(&a),
        Top::Vector(VectorCommand::Embed(a)) => {
            init_tracing(if a.verbose >= 2 { 2 } else { 0 }); // -v: the report; -vv: debug logs
            commands::embed(&commands::EmbedJob {
                texts: a.texts,
                images: a.images,
                input: a.input,
                input_format: a.input_format,
                format: a.format,
                output: a.output,
                model: a.model,
                long: a.long,
                window: a.window.map(|w| w as usize),
                overlap: a.overlap.map(|o| o as usize),
                sparse: a.sparse,
                multi_vector: a.multi_vector,
                compact: a.compact,
                json: a.json,
                quiet: a.quiet,
                verbose: a.verbose > 0,
            })
            .map(|()| ExitCode::SUCCESS)
        }
        Top::Vector(VectorCommand::Doctor(a)) => {
            init_tracing(a.verbose.saturating_mul(2));
            doctor::run(&a)
        }
        Top::Vector(VectorCommand::Bench(a)) => {
            init_tracing(0);
            commands::bench(&a).map(|()| ExitCode::SUCCESS)
        }
        Top::Vector(VectorCommand::Quantize(a)) => {
            init_tracing(0);
            commands::quantize(&a).map(|()| ExitCode::SUCCESS)
        }
        Top::Vector(VectorCommand::Convert(a)) => {
            init_tracing(0);
            commands::convert(&a).map(|()| ExitCode::SUCCESS)
        }
        Top::Vector(VectorCommand::Rerank(a)) => {
            init_tracing(0);
            commands::rerank(&a).map(|()| ExitCode::SUCCESS)
        }
        Top::Vector(VectorCommand::Predict(a)) => {
            init_tracing(0);
            commands::predict(&a).map(|()| ExitCode::SUCCESS)
        }
        Top::Vector(VectorCommand::Serve(a)) => {
            init_tracing(1);
            commands::serve(&a).map(|()| ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nornir: error: {}", commands::error_line(&e));
            ExitCode::from(2)
        }
    }
}
