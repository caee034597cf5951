//! The model the command line names: its folder, its options, the embedder, the long-text policy.

use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use nornir_vector::diagnostics::{NoDefaultModel, ProbeContext, default_model};
use nornir_vector::{Embedder, EmbedderOptions, LongInputs, Prompt};

use crate::args::ModelArgs;

pub fn model_dir(m: &ModelArgs) -> Result<PathBuf> {
    if m.model.len() > 1 {
        bail!("--model is given {} times; only `nornir vector serve` takes several models", m.model.len());
    }
    if let Some(d) = m.model.first() {
        return Ok(d.clone());
    }
    default_model(&ProbeContext::from_process()).map_err(|e| match e {
        NoDefaultModel::NoCache => anyhow::anyhow!("{e}: set NORNIR_HOME, or pass --model DIR"),
        _ => anyhow::anyhow!("{e}: run `cargo xtask fetch`, or pass --model DIR"),
    })
}

/// The prompt of `--prompt TEXT` or `--prompt-name NAME` (clap refuses both).
pub fn prompt(text: Option<String>, name: Option<String>) -> Option<Prompt> {
    text.map(Prompt::Text).or_else(|| name.map(Prompt::Name))
}

pub fn options(m: &ModelArgs) -> Result<EmbedderOptions> {
    let mut o = EmbedderOptions::default().with_device(m.device).with_token_budget(m.batch_tokens as usize);
    o.call.normalize = match (m.normalize, m.no_normalize) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    o.output_name = m.output_name.clone();
    o.call.prompt = prompt(m.prompt.clone(), m.prompt_name.clone());
    o.task = m.task.clone();
    o.call.dimensions = m.dimensions.map(|d| d as usize);
    o.batch_wait = std::time::Duration::from_millis(m.batch_wait_ms);
    o.threads = m.threads.map(|t| t as usize);
    o.workers = m.workers.map(|s| s as usize);
    o.max_length = m.max_length.map(|l| l as usize);
    o.pooling = m.pooling;
    o.model_file = m.model_file.clone();
    o.ort_library = m.ort_lib.clone();
    o.providers = m.providers.iter().map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect();
    o.ep_libraries = m.ep_libs.clone();
    Ok(o)
}

pub fn load(m: &ModelArgs) -> Result<Embedder> {
    Ok(Embedder::new(&model_dir(m)?, &options(m)?)?)
}

/// One line: which provider runs and why.
pub fn provider_line(e: &Embedder) -> String {
    let r = e.report();
    let mut why: Vec<String> = r.plan.reasons.clone();
    for reg in &r.registrations {
        if let Some(error) = reg.error() {
            why.push(format!("{} failed: {error}", reg.provider));
        }
    }
    if let Some(f) = &r.fallback {
        why.push(f.clone());
    }
    let on = r.active_device.as_ref().map_or_else(|| r.active_provider.clone(), ToString::to_string);
    format!("running on {on} ({}); {}", r.gpu_vendor, why.join("; "))
}

/// `--long` with `--window` and `--overlap`: the one policy `embed` and `serve` both follow (the
/// server's for requests that do not say).
pub fn long_policy(long: LongInputs, window: Option<usize>, overlap: Option<usize>) -> Result<LongInputs> {
    long.with_window(window, overlap).map_err(|_| {
        anyhow!(
            "--window and --overlap set the chunks of --long chunk or --long late, not of --long {}; add one of them",
            long.label()
        )
    })
}
