//! `cargo xtask serve-bench`: `nornir vector serve` (release build) under N concurrent HTTP
//! clients, each sending K texts per request (`--per-request`, default 1) from the corpus's first
//! texts, beside the library on the same texts in the same run (`nornir vector bench
//! --concurrency N --per-call K`).
//! Clients ask for base64 vectors, so that they cost the server's 2 cores little.
//!
//! `--mixed-prompts`: a copy of the model with a BGE-style query prompt; every other text is sent
//! as a query (`prompt_name`), the rest as passages, so that requests with different options must
//! share batches. The library's figures are then for the same token ids: the queries with the
//! prompt written before them, in one bulk call.
//!
//! `--load-tests`: instead, the server tests that stand in for load figures (crates/cli/tests/
//! serve.rs: the overload at 4x the measured rate, 64 clients for a minute), in a release build,
//! and the targets those tests leave to this benchmark because they depend on the machine: under
//! overload some requests accepted and some refused, and in both runs resident memory at the end
//! within 20% + 30 MiB of the figure after warm-up.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nornir_test_support::percentile;

use crate::process::{cargo, run_checked, workspace_root};
use crate::{assets, fetch, figures};

/// `cargo xtask serve-bench`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// HTTP clients at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    clients: u64,
    /// Texts from the corpus.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(1..))]
    texts: u64,
    /// Texts per request.
    #[arg(long = "per-request", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    per_request: u64,
    /// Every other request a query with a prompt (prompt_name), the rest passages.
    #[arg(long = "mixed-prompts")]
    mixed_prompts: bool,
    /// Measure this binary (another commit's, side by side) instead of building this tree's.
    #[arg(long, value_name = "PATH")]
    nornir: Option<PathBuf>,
    /// Instead of the throughput run: the server's overload and 64-client tests (release build)
    /// and their targets (some requests refused under overload, memory flat).
    #[arg(long = "load-tests", conflicts_with_all = ["clients", "texts", "per_request", "mixed_prompts", "nornir"])]
    load_tests: bool,
}

pub fn serve_bench(a: &Args) -> Result<()> {
    if a.load_tests {
        return load_tests();
    }
    let (clients, count, per_request) = (a.clients as usize, a.texts as usize, a.per_request as usize);
    let mixed = a.mixed_prompts;
    let home = fetch::fetch(assets::DEFAULT_ASSETS)?;
    let nornir = match &a.nornir {
        Some(path) => path.clone(),
        None => {
            run_checked(cargo().args(["build", "--release", "--quiet", "-p", "nornir-cli"]))?;
            workspace_root().join("target/release/nornir")
        }
    };
    let mut model = home.join(assets::EXPORT_MODEL_DIR);
    let corpus = std::fs::read_to_string(workspace_root().join("testdata/corpus.txt"))?;
    let texts: Vec<String> = corpus.lines().take(count).map(str::to_owned).collect();
    // Request r carries texts r*K.. (r+1)*K; with --mixed-prompts every other request is a query.
    let is_query = |request: usize| mixed && request.is_multiple_of(2);
    if mixed {
        model = prompted_copy(&model)?;
    }
    let input = workspace_root().join("target/serve-bench-texts.txt");
    let library_texts: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| if is_query(i / per_request) { format!("{QUERY_PROMPT}{t}") } else { t.clone() })
        .collect();
    std::fs::write(&input, library_texts.join("\n") + "\n")?;

    let library = library_bench(&nornir, &model, &input, per_request, clients)?;

    let (mut server, url) = start_server(&nornir, &model)?;
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(60)).build();
    // A warm-up pass builds the second session, as the library's bulk run does.
    let body = serde_json::json!({ "input": texts.iter().take(256).collect::<Vec<_>>(), "encoding_format": "base64" });
    agent.post(&format!("{url}/v1/embeddings")).send_string(&body.to_string())?;

    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let latencies: Vec<Result<Vec<f64>>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(|| -> Result<Vec<f64>> {
                    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(60)).build();
                    let mut mine = Vec::new();
                    let requests: Vec<&[String]> = texts.chunks(per_request).collect();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(text) = requests.get(i) else { break };
                        let mut body = serde_json::json!({ "input": text, "encoding_format": "base64" });
                        if is_query(i) {
                            body["prompt_name"] = "query".into();
                        }
                        let body = body.to_string();
                        let t = Instant::now();
                        let resp = agent.post(&format!("{url}/v1/embeddings")).send_string(&body)?;
                        let mut sink = Vec::new();
                        resp.into_reader().read_to_end(&mut sink)?;
                        mine.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    Ok(mine)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| bail!("a client panicked"))).collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    // SIGTERM through the kill command: xtask has no unsafe code.
    let _ = Command::new("kill").arg(server.id().to_string()).status();
    let _ = server.wait();
    let mut all = Vec::new();
    for l in latencies {
        all.extend(l?);
    }
    all.sort_by(f64::total_cmp);
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "texts": texts.len(),
            "clients": clients,
            "mixed_prompts": mixed,
            "texts_per_request": per_request,
            "server_vs_library_bulk": texts.len() as f64 / seconds / library["bulk_texts_per_second"].as_f64().unwrap_or(f64::NAN),
            "server": {
                "texts_per_second": texts.len() as f64 / seconds,
                "latency_ms": { "p50": percentile(&all, 0.5), "p95": percentile(&all, 0.95), "p99": percentile(&all, 0.99) },
            },
            "library": {
                "bulk_texts_per_second": library["bulk_texts_per_second"],
                "concurrent_texts_per_second": library["texts_per_second"],
                "latency_ms": library["latency_ms"],
            },
        }))?
    );
    Ok(())
}

/// `nornir vector bench --concurrency` on the same texts: the library's figures, as its JSON.
fn library_bench(
    nornir: &Path,
    model: &Path,
    input: &Path,
    per_request: usize,
    clients: usize,
) -> Result<serde_json::Value> {
    let library = Command::new(nornir)
        .args([
            "vector",
            "bench",
            "--json",
            "--device",
            "cpu",
            "--per-call",
            &per_request.to_string(),
            "--concurrency",
            &clients.to_string(),
            "--model",
        ])
        .arg(model)
        .arg("--input")
        .arg(input)
        .output()
        .context("run nornir vector bench")?;
    if !library.status.success() {
        bail!("nornir vector bench failed: {}", String::from_utf8_lossy(&library.stderr));
    }
    Ok(serde_json::from_slice(&library.stdout)?)
}

/// Starts `nornir vector serve` on a free port and waits until `/health` answers: the child and
/// the server's URL.
fn start_server(nornir: &Path, model: &Path) -> Result<(std::process::Child, String)> {
    let mut server = Command::new(nornir)
        .args(["vector", "serve", "--port", "0", "--device", "cpu", "--model"])
        .arg(model)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("start nornir vector serve")?;
    let mut lines = BufReader::new(server.stderr.take().context("stderr")?).lines();
    let url = loop {
        let line = lines.next().context("the server ended before listening")??;
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().context("an address")?.to_owned();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(60)).build();
    let started = Instant::now();
    while agent.get(&format!("{url}/health")).call().is_err() {
        if started.elapsed() > Duration::from_secs(120) {
            bail!("the server was not ready after 2 minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((server, url))
}

/// `--load-tests`: the two tests, then their targets.
fn load_tests() -> Result<()> {
    let home = fetch::fetch(assets::DEFAULT_ASSETS)?;
    // Made before `cargo()`, which readies /dev/null for cargo: making them runs pip and apt-get.
    let env = crate::test::test_env(&home)?;
    let path = figures::file("serve-load")?;
    eprintln!("xtask: serve-bench: the server's overload and load tests, release build");
    run_checked(
        cargo()
            .args(["test", "--release", "-p", "nornir-cli", "--test", "serve", "--", "--include-ignored", "--exact"])
            .args(["--nocapture", "--test-threads", "1"])
            .args(["overload_is_answered_200_or_503_and_nothing_hangs", "sixty_four_clients_for_a_minute"])
            .envs(env)
            .env(nornir_test_support::FIGURES_VAR, &path),
    )?;
    let overload = figures::read(&path, "overload")?;
    let (accepted, refused) =
        (figures::number(&overload, "answered_200")?, figures::number(&overload, "answered_503")?);
    figures::target(
        &format!(
            "overload at {:.1} requests/s ({:.1}/s measured): some accepted and some refused ({accepted} answered 200, {refused} answered 503, {} answered 504)",
            figures::number(&overload, "rate_per_second")?,
            figures::number(&overload, "capacity_per_second")?,
            figures::number(&overload, "answered_504")?
        ),
        accepted > 0.0 && refused > 0.0,
    );
    for (test, label) in [(&overload, "overload"), (&figures::read(&path, "load")?, "64 clients")] {
        let (warm, end) = (figures::number(test, "warm_rss_mib")?, figures::number(test, "end_rss_mib")?);
        let bound = warm * 1.2 + 30.0;
        figures::target(
            &format!(
                "{label}: memory flat: {end:.0} MiB at the end, at most {bound:.0} MiB ({warm:.0} MiB + 20% + 30 MiB)"
            ),
            end <= bound,
        );
    }
    Ok(())
}

/// The query prompt of the `--mixed-prompts` model (BGE's).
const QUERY_PROMPT: &str = "Represent this sentence for searching relevant passages: ";

/// `model` with a query prompt in its config_sentence_transformers.json, as links in target/.
fn prompted_copy(model: &std::path::Path) -> Result<std::path::PathBuf> {
    let dir = workspace_root().join("target/serve-bench-prompted-model");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    for entry in std::fs::read_dir(model)? {
        let entry = entry?;
        std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name()))?;
    }
    let prompts = serde_json::json!({ "prompts": { "query": QUERY_PROMPT, "passage": "" } });
    std::fs::remove_file(dir.join("config_sentence_transformers.json")).ok();
    std::fs::write(dir.join("config_sentence_transformers.json"), prompts.to_string())?;
    Ok(dir)
}
