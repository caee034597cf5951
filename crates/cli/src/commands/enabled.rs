//! Model loading, embedding and benchmarking for the CLI.

use std::io::{BufRead, BufReader, IsTerminal};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use indicatif::{ProgressBar, ProgressStyle};
use nornir_vector::diagnostics::{
    EpDevice, MIN_ORT, ModelFolder, Plan, check_library, choose_library, device_list, plan_with,
};
use nornir_vector::diagnostics::{ProbeContext, default_model_dir};
use nornir_vector::{Embedder, EmbedderOptions, LongInputs, Prompt};

use super::{EmbedJob, OrtChoice};
use crate::output::{ChunkOut, RowWriter, Sink};
use crate::{BenchArgs, ModelArgs};
use nornir_cli::input::{InputFormat, Record, Records};

/// Texts embedded per call when streaming: bounds memory whatever the input size.
const CHUNK: usize = 4096;

pub fn model_dir(m: &ModelArgs) -> Result<PathBuf> {
    if m.model.len() > 1 {
        bail!("--model is given {} times; only `nornir vector serve` takes several models", m.model.len());
    }
    if let Some(d) = m.model.first() {
        return Ok(d.clone());
    }
    let dir = default_model_dir(&ProbeContext::from_process())
        .context("no nornir cache folder (set NORNIR_HOME); pass --model DIR")?;
    if !dir.is_dir() {
        bail!("the default model is not at {}: run `cargo xtask fetch`, or pass --model DIR", dir.display());
    }
    Ok(dir)
}

/// The prompt of `--prompt TEXT` or `--prompt-name NAME` (clap refuses both).
pub fn prompt(text: Option<String>, name: Option<String>) -> Option<Prompt> {
    text.map(Prompt::Text).or_else(|| name.map(Prompt::Name))
}

pub fn options(m: &ModelArgs) -> Result<EmbedderOptions> {
    let mut o = EmbedderOptions::default().with_device(m.device).with_token_budget(m.batch_tokens as usize);
    o.normalize = match (m.normalize, m.no_normalize) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    o.output_name = m.output_name.clone();
    o.prompt = prompt(m.prompt.clone(), m.prompt_name.clone());
    o.task = m.task.clone();
    o.dimensions = m.dimensions.map(|d| d as usize);
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

enum Source {
    Args(std::vec::IntoIter<String>),
    Reader { records: Records<Box<dyn BufRead>>, name: String },
}

impl Source {
    fn next(&mut self) -> Result<Option<Record>> {
        match self {
            Source::Args(it) => Ok(it.next().map(|text| Record { text, id: None })),
            Source::Reader { records, name } => records.next_record(name),
        }
    }
    fn bytes(&self) -> u64 {
        match self {
            Source::Args(_) => 0,
            Source::Reader { records, .. } => records.bytes,
        }
    }
}

fn open_source(job: &EmbedJob) -> Result<(Source, Option<u64>)> {
    if !job.texts.is_empty() {
        return Ok((Source::Args(job.texts.clone().into_iter()), None));
    }
    let (reader, name, size): (Box<dyn BufRead>, String, Option<u64>) = match &job.input {
        Some(p) if p.as_os_str() != "-" => {
            let f = std::fs::File::open(p).with_context(|| format!("cannot read --input {}", p.display()))?;
            let size = f.metadata().ok().map(|m| m.len());
            (Box::new(BufReader::with_capacity(1 << 20, f)), p.display().to_string(), size)
        }
        _ => (Box::new(BufReader::with_capacity(1 << 20, std::io::stdin())), "standard input".to_owned(), None),
    };
    Ok((Source::Reader { records: Records::new(reader, job.input_format), name }, size))
}

fn progress(enabled: bool, total: Option<u64>) -> ProgressBar {
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match total {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{bar:40} {percent:>3}% {msg} ETA {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner(),
    }
}

/// `--long` with `--window` and `--overlap`: the one policy `embed` and `serve` both follow (the
/// server's for requests that do not say).
pub fn long_policy(long: LongInputs, window: Option<usize>, overlap: Option<usize>) -> Result<LongInputs> {
    long.with_window(window, overlap).map_err(|e| anyhow!("--window, --overlap: {e} with --long"))
}

/// The embedder's report (the keys of `doctor --json`'s session, `/info` and Python's `report()`)
/// beside a bench's own figures in `json`.
fn with_report(json: &mut serde_json::Value, embedder: &Embedder) -> Result<()> {
    let serde_json::Value::Object(report) = serde_json::to_value(embedder.describe())? else {
        bail!("the embedder's report is not a JSON object")
    };
    if let serde_json::Value::Object(json) = json {
        json.extend(report);
    }
    Ok(())
}

pub fn embed(job: &EmbedJob) -> Result<()> {
    let options = long_policy(job.long, job.window, job.overlap)?.call_options();
    let (mut source, size) = open_source(job)?;
    let sink = Sink::open(job.output.as_deref())?;
    let mut writer = RowWriter::new(job.format, sink);
    if options.chunking.is_some() {
        writer = writer.with_chunk_files(job.output.as_deref())?;
    }
    let embedder = load(&job.model)?;
    if job.verbose {
        eprintln!("nornir: {}", provider_line(&embedder));
    }
    let bar = progress(!job.quiet && job.texts.is_empty(), size);
    let started = Instant::now();
    let (mut done, mut truncated, mut chunks) = (0usize, 0usize, 0usize);
    loop {
        let mut chunk: Vec<Record> = Vec::with_capacity(CHUNK);
        while chunk.len() < CHUNK {
            match source.next()? {
                Some(r) => chunk.push(r),
                None => break,
            }
        }
        if chunk.is_empty() {
            break;
        }
        let texts: Vec<&str> = chunk.iter().map(|r| r.text.as_str()).collect();
        let vectors = embedder.embed_with(&texts, &options).map_err(|e| match e {
            nornir_vector::EmbedError::TooLong { index, tokens, exact, max_length, .. } => anyhow::anyhow!(
                "text {} of the input has {}{tokens} tokens, more than the {max_length} the model reads: shorten it, or use --long truncate|chunk",
                done + index + 1,
                if exact { "" } else { "more than " }
            ),
            e => e.into(),
        })?;
        for (i, (row, rec)) in vectors.rows().zip(&chunk).enumerate() {
            truncated += usize::from(vectors.truncated(i));
            if vectors.is_chunked() {
                let out: Vec<ChunkOut<'_>> = vectors
                    .char_chunks(i, &rec.text)
                    .into_iter()
                    .map(|c| ChunkOut { start: c.start, end: c.end, tokens: c.tokens, embedding: c.embedding })
                    .collect();
                chunks += out.len();
                writer.write_text(row, rec.id.as_ref(), Some(&out))?;
            } else {
                writer.write_row(row, rec.id.as_ref())?;
            }
        }
        done += chunk.len();
        bar.set_position(source.bytes());
        bar.set_message(format!(
            "{done} texts, {:.0} texts/s",
            done as f64 / started.elapsed().as_secs_f64().max(1e-9)
        ));
    }
    bar.finish_and_clear();
    writer.finish(embedder.dimension())?;
    if job.json {
        let summary = serde_json::json!({
            "texts": done,
            "truncated": truncated,
            "chunks": chunks,
            "seconds": started.elapsed().as_secs_f64(),
            "max_length": embedder.model_info().max_length,
            "provider": embedder.report().active_provider,
        });
        eprintln!("{summary}");
    } else if truncated > 0 {
        eprintln!(
            "nornir: {truncated} of {done} texts were longer than the model's {} tokens and were truncated to them; --long chunk keeps every token",
            embedder.model_info().max_length
        );
    }
    if job.verbose {
        let seconds = started.elapsed().as_secs_f64();
        let chunked = if chunks > 0 { format!(", {chunks} chunks") } else { String::new() };
        eprintln!(
            "nornir: {done} texts{chunked} in {seconds:.2} s ({:.1} texts/s) on {}; {truncated} truncated; peak RSS {:.0} MiB",
            done as f64 / seconds.max(1e-9),
            embedder.report().active_provider,
            peak_rss_mib(&embedder).unwrap_or(f64::NAN)
        );
    }
    Ok(())
}

/// The built-in benchmark sample: the parity sample's 99 texts.
pub(super) const SAMPLE: &str = include_str!("../../../../testdata/parity-sample.txt");

/// The process's peak resident memory in MiB, as the embedder's memory report gives it.
fn peak_rss_mib(embedder: &Embedder) -> Option<f64> {
    embedder.report().memory.peak_resident_bytes.map(|b| b as f64 / (1024.0 * 1024.0))
}

pub fn bench(a: &BenchArgs) -> Result<()> {
    let (texts, source): (Vec<String>, String) = match &a.input {
        Some(p) => {
            let bytes = std::fs::read(p).with_context(|| format!("cannot read --input {}", p.display()))?;
            let mut records = Records::new(bytes.as_slice(), InputFormat::Lines);
            let mut texts = Vec::new();
            while let Some(r) = records.next_record(&p.display().to_string())? {
                texts.push(r.text);
            }
            (texts, p.display().to_string())
        }
        None => (SAMPLE.lines().map(str::to_owned).collect(), "built-in sample (99 texts)".to_owned()),
    };
    let load_start = Instant::now();
    let embedder = load(&a.model)?;
    let load_seconds = load_start.elapsed().as_secs_f64();
    if let Some(callers) = a.concurrency {
        let r = super::concurrency::measure(&embedder, &texts, callers as usize, a.per_call as usize, CHUNK)?;
        if a.json {
            let mut j = serde_json::to_value(&r)?;
            j["input"] = serde_json::json!(source);
            j["texts"] = serde_json::json!(texts.len());
            with_report(&mut j, &embedder)?;
            j["batch_tokens"] = serde_json::json!(a.model.batch_tokens);
            j["peak_rss_mib"] = serde_json::json!(peak_rss_mib(&embedder));
            println!("{}", serde_json::to_string_pretty(&j)?);
        } else {
            println!("input            {source} ({} texts)", texts.len());
            println!("provider         {} ({})", embedder.report().active_provider, embedder.gpu_vendor());
            println!("bulk             {:.1} texts/s (calls of {CHUNK})", r.bulk_texts_per_second);
            println!(
                "concurrent       {} callers x {} texts per call: {:.1} texts/s, {:.2}x bulk",
                r.callers, r.per_call, r.texts_per_second, r.ratio_to_bulk
            );
            let l = &r.latency_ms;
            println!(
                "latency          p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} calls)",
                l.p50, l.p95, l.p99, l.max, r.calls
            );
            println!(
                "batches          {} of {:.1} texts on average, {:.1}% padding",
                r.batches,
                r.mean_batch_texts,
                100.0 * r.padding
            );
        }
        return Ok(());
    }
    let bar = progress(!a.quiet && !a.json, Some(texts.len() as u64 * u64::from(a.repeat)));
    let started = Instant::now();
    for _ in 0..a.repeat {
        for chunk in texts.chunks(CHUNK) {
            embedder.embed(chunk)?;
            bar.inc(chunk.len() as u64);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let s = embedder.stats();
    let session = embedder.report();
    let mut report = serde_json::json!({
        "input": source,
        "texts": s.texts,
        "tokens": s.tokens,
        "padded_tokens": s.padded_tokens,
        "batches": s.batches,
        "seconds": seconds,
        "texts_per_second": s.texts as f64 / seconds,
        "tokens_per_second": s.tokens as f64 / seconds,
        "ort_seconds": s.ort_seconds,
        "ort_seconds_per_worker": s.ort_seconds / embedder.workers() as f64,
        "outside_ort_seconds": (seconds - s.ort_seconds / embedder.workers() as f64).max(0.0),
        "load_seconds": load_seconds,
        "peak_rss_mib": peak_rss_mib(&embedder),
        "threads": a.model.threads,
        "batch_tokens": a.model.batch_tokens,
    });
    with_report(&mut report, &embedder)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("input            {source}");
        println!("provider         {} ({})", session.active_provider, embedder.gpu_vendor());
        println!("precision        {}", nornir_vector::diagnostics::precision(&embedder.model_info().folder));
        if embedder.model_info().folder.quantization.is_some() {
            println!(
                "CPU int8 ISA     {} (ONNX Runtime picks the best; it does not say which)",
                nornir_vector::diagnostics::cpu_int8_extensions().join(", ")
            );
        }
        println!(
            "texts            {} in {seconds:.2} s: {:.1} texts/s, {:.0} tokens/s",
            s.texts,
            s.texts as f64 / seconds,
            s.tokens as f64 / seconds
        );
        let workers = embedder.workers() as f64;
        println!(
            "inside ORT       {:.2} s per worker ({:.0}%) with {workers} worker(s), outside {:.2} s",
            s.ort_seconds / workers,
            100.0 * s.ort_seconds / workers / seconds,
            (seconds - s.ort_seconds / workers).max(0.0)
        );
        println!(
            "padding          {:.1}% of {} tokens fed",
            100.0 * (1.0 - s.tokens as f64 / s.padded_tokens.max(1) as f64),
            s.padded_tokens
        );
        println!("model load       {load_seconds:.2} s");
        if let Some(m) = peak_rss_mib(&embedder) {
            println!("peak RSS         {m:.0} MiB");
        }
        let memory = &session.memory;
        let mib = |b: u64| format!("{:.0}", b as f64 / (1024.0 * 1024.0));
        let each: Vec<String> = memory.session_growth_bytes.iter().map(|&b| mib(b)).collect();
        println!(
            "memory           added by each session built {} MiB; {} worker(s) per session",
            each.join(", "),
            memory.workers_per_session
        );
    }
    Ok(())
}

/// The plan for these arguments, with ONNX Runtime's `devices` once listed (empty before).
pub fn plan(m: &ModelArgs, devices: &[EpDevice]) -> Result<Option<Plan>> {
    // The model's own constraint (an int8 model for the CPU) is part of the plan when it can be read.
    let cpu_only = model_dir(m)
        .ok()
        .and_then(|d| ModelFolder::open(&d, m.model_file.as_deref()).ok())
        .and_then(|f| f.quantization)
        .and_then(|q| q.cpu_only());
    let providers = options(m)?.providers;
    Ok(Some(plan_with(m.device, cpu_only, devices, &providers)))
}

/// Which ONNX Runtime library the plan would load, and its real version, without creating a session.
pub fn ort_choice(plan: Option<&Plan>, m: &ModelArgs) -> OrtChoice {
    let mut c = ort_pick(plan, m);
    if let Some(path) = &c.path {
        match check_library(path) {
            Ok(v) => {
                if nornir_vector::diagnostics::version_at_least(&v, MIN_ORT) == Some(false) {
                    c.error = Some(format!(
                        "ONNX Runtime {v} is older than {}.{}, the oldest nornir supports: `cargo xtask fetch` provides 1.31.1",
                        MIN_ORT.0, MIN_ORT.1
                    ));
                }
                c.version = Some(v);
            }
            Err(e) => c.error = Some(nornir_vector::error_chain(&e)),
        }
    }
    if c.error.is_none()
        && let Some(plan) = plan
    {
        match device_list(plan, m.ort_lib.as_deref(), &m.ep_libs) {
            Ok(d) => c.devices = Some(d),
            Err(e) => c.error = Some(nornir_vector::error_chain(&e)),
        }
    }
    c
}

/// The devices ONNX Runtime listed in `ort` (none when it was not loaded).
pub fn listed_devices(ort: &OrtChoice) -> Vec<EpDevice> {
    ort.devices.as_ref().map(|d| d.devices.clone()).unwrap_or_default()
}

/// Which ONNX Runtime library the plan would load, from file names alone: nothing is loaded.
pub fn ort_pick(plan: Option<&Plan>, m: &ModelArgs) -> OrtChoice {
    let Some(plan) = plan else { return OrtChoice::default() };
    let (d, choice) = choose_library(plan, m.ort_lib.as_deref());
    let mut c = OrtChoice { candidates: d.candidates.clone(), searched: d.searched.clone(), ..OrtChoice::default() };
    match choice {
        None => {
            c.error = Some(format!(
                "no ONNX Runtime library found: run `cargo xtask fetch` or set ORT_DYLIB_PATH {}",
                d.problems.join("; ")
            ));
        }
        Some((cand, why)) => {
            c.path = Some(cand.path.clone());
            c.providers = cand.providers.clone();
            c.reason = why;
        }
    }
    c
}
