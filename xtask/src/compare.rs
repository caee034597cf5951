//! `cargo xtask bench-compare`: nornir against the Python pipelines people write today and
//! against ONNX Runtime's own floor, side by side in one run, rounds interleaved, medians reported;
//! and nornir's int8 model against float32 and against ONNX Runtime's Python int8 of the same
//! model, all three through the same `nornir vector embed`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::process::{cargo, run_checked, workspace_root};
use crate::{assets, fetch, int8};

/// Pinned so every machine compares against the same Python stack (model2vec: the static
/// models' reference, scripts/static_reference.py; pillow: the image processors' reference,
/// scripts/image_reference.py).
const PYTHON_PACKAGES: &[&str] = &[
    "onnxruntime==1.31.1",
    "tokenizers==0.23.3",
    "numpy==2.4.6",
    "onnx==1.23.2",
    "model2vec==0.10.0",
    "pillow==13.0.0",
    "safetensors==0.8.0",
];

/// `cargo xtask bench-compare`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The texts, one per line.
    #[arg(long, value_name = "FILE", default_value_os_t = workspace_root().join("testdata/corpus.txt"))]
    corpus: std::path::PathBuf,
    /// Threads for every side.
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// nornir's token budget per batch.
    #[arg(long = "batch-tokens", default_value_t = 256)]
    budget: u32,
    /// Rounds, interleaved; the medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Also Python with unsorted batches.
    #[arg(long = "with-unsorted")]
    unsorted: bool,
    /// Also stream the corpus 10 times through stdin and compare peak RSS.
    #[arg(long)]
    memory: bool,
}

pub(crate) fn python_env(home: &Path) -> Result<std::path::PathBuf> {
    python_venv(home, "bench-venv", PYTHON_PACKAGES, "the Python baseline")
}

/// A virtual environment under the nornir home with exactly `packages` (pinned), made once and
/// remade when the list changes. Returns its python.
pub(crate) fn python_venv(home: &Path, name: &str, packages: &[&str], purpose: &str) -> Result<std::path::PathBuf> {
    let venv = home.join(name);
    let py = venv.join("bin/python");
    let stamp = venv.join(".nornir-packages");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(&packages.join(" ")) {
        eprintln!("xtask: making the virtual environment for {purpose} ({})", packages.join(", "));
        run_checked(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run_checked(
            Command::new(&py).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(packages),
        )?;
        std::fs::write(&stamp, packages.join(" "))?;
    }
    Ok(py)
}

fn python_run(py: &Path, mode: &str, model: &Path, o: &Args) -> Result<f64> {
    let out = Command::new(py)
        .arg(workspace_root().join("scripts/bench_python.py"))
        .args([
            mode,
            &model.display().to_string(),
            &o.corpus.display().to_string(),
            &o.threads.to_string(),
            &o.budget.to_string(),
        ])
        .output()
        .context("run the Python baseline")?;
    if !out.status.success() {
        bail!("Python {mode} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("Python baseline output")?;
    v["texts_per_second"].as_f64().context("texts_per_second")
}

/// One `nornir vector embed` run: texts/s (wall time) and its peak RSS in MiB.
struct NornirRun {
    texts_per_second: f64,
    peak_rss_mib: f64,
}

/// `nornir vector embed` end to end: read, tokenize, batch, run, pool, write f32. With `repeat`
/// above 1, the corpus is streamed that many times through standard input.
fn nornir_run(nornir: &Path, model: &Path, o: &Args, texts: usize, repeat: usize) -> Result<NornirRun> {
    use std::io::Write;
    let out = std::env::temp_dir().join(format!("nornir-bench-{}.f32", std::process::id()));
    let mut cmd = Command::new(nornir);
    cmd.args(["vector", "embed", "--quiet", "-v", "--format", "f32", "--model"])
        .arg(model)
        .arg("--output")
        .arg(&out)
        .args(["--threads", &o.threads.to_string(), "--batch-tokens", &o.budget.to_string()])
        .stderr(std::process::Stdio::piped());
    if repeat == 1 {
        cmd.arg("--input").arg(&o.corpus);
    } else {
        cmd.stdin(std::process::Stdio::piped());
    }
    let start = Instant::now();
    let mut child = cmd.spawn().context("run nornir")?;
    if let Some(mut stdin) = child.stdin.take() {
        let corpus = std::fs::read(&o.corpus)?;
        std::thread::spawn(move || {
            for _ in 0..repeat {
                if stdin.write_all(&corpus).is_err() {
                    break;
                }
            }
        });
    }
    let output = child.wait_with_output().context("wait for nornir")?;
    let seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!("nornir vector embed failed ({}): {stderr}", output.status);
    }
    let peak_rss_mib = stderr
        .split("peak RSS ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("nornir -v printed no peak RSS")?;
    Ok(NornirRun { texts_per_second: (texts * repeat) as f64 / seconds, peak_rss_mib })
}

/// The CPU's int8-relevant extensions as `nornir vector doctor --json` reports them (the CLI is
/// the one reader of `/proc/cpuinfo`'s flags).
fn cpu_int8_extensions(nornir: &Path, model: &Path) -> Result<Vec<String>> {
    let out = Command::new(nornir)
        .args(["vector", "doctor", "--json", "--model"])
        .arg(model)
        .output()
        .context("run nornir vector doctor --json")?;
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).context("parse nornir's doctor JSON")?;
    Ok(doc["session"]["cpu_int8_extensions"]
        .as_array()
        .context("doctor --json has no session.cpu_int8_extensions")?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect())
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn bench_compare(o: &Args) -> Result<()> {
    let home = fetch::fetch(assets::DEFAULT_ASSETS)?;
    let model = home.join(assets::EXPORT_MODEL_DIR);
    let texts =
        std::fs::read_to_string(&o.corpus).with_context(|| format!("read {}", o.corpus.display()))?.lines().count();
    let py = python_env(&home)?;
    run_checked(cargo().args(["build", "--release", "--quiet", "-p", "nornir-cli"]))?;
    let nornir = workspace_root().join("target/release/nornir");
    let ours_int8 = int8::nornir_int8(&home)?;
    let peer_int8 = int8::python_int8(&py, &home)?;
    let (mut sorted, mut floor, mut ours, mut rss) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut i8, mut i8_rss, mut peer, mut peer_rss) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 1..=o.rounds {
        eprintln!("xtask: bench-compare round {round}/{}", o.rounds);
        sorted.push(python_run(&py, "sorted", &model, o)?);
        floor.push(python_run(&py, "floor", &model, o)?);
        let run = nornir_run(&nornir, &model, o, texts, 1)?;
        ours.push(run.texts_per_second);
        rss.push(run.peak_rss_mib);
        let run = nornir_run(&nornir, &ours_int8, o, texts, 1)?;
        i8.push(run.texts_per_second);
        i8_rss.push(run.peak_rss_mib);
        let run = nornir_run(&nornir, &peer_int8, o, texts, 1)?;
        peer.push(run.texts_per_second);
        peer_rss.push(run.peak_rss_mib);
    }
    let (i8, i8_rss, peer, peer_rss) = (median(i8), median(i8_rss), median(peer), median(peer_rss));
    let unsorted = if o.unsorted { Some(python_run(&py, "unsorted", &model, o)?) } else { None };
    let (sorted, floor, ours, rss_once) = (median(sorted), median(floor), median(ours), median(rss));
    let ten = if o.memory {
        eprintln!("xtask: bench-compare: the corpus 10 times through standard input");
        Some(nornir_run(&nornir, &model, o, texts, 10)?)
    } else {
        None
    };
    let extensions = cpu_int8_extensions(&nornir, &model)?;
    let report = serde_json::json!({
        "corpus": o.corpus, "texts": texts, "threads": o.threads, "batch_tokens": o.budget, "rounds": o.rounds,
        "texts_per_second": { "python_sorted_32": sorted, "python_unsorted_32": unsorted, "ort_floor": floor, "nornir_end_to_end": ours },
        "nornir_vs_python_sorted": ours / sorted,
        "nornir_time_vs_floor_time": floor / ours,
        "nornir_peak_rss_mib": { "corpus_once": rss_once, "corpus_10x_stdin": ten.as_ref().map(|r| r.peak_rss_mib) },
        "nornir_10x_stdin_texts_per_second": ten.as_ref().map(|r| r.texts_per_second),
        "int8": {
            "cpu_int8_extensions": extensions,
            "texts_per_second": { "nornir_int8": i8, "ort_quantize_dynamic_int8_through_nornir": peer },
            "peak_rss_mib": { "nornir_int8": i8_rss, "ort_quantize_dynamic_int8_through_nornir": peer_rss },
            "nornir_int8_vs_fp32": i8 / ours,
            "nornir_int8_rss_vs_fp32": i8_rss / rss_once,
            "nornir_int8_vs_quantize_dynamic": i8 / peer,
        },
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    eprintln!(
        "nornir {ours:.1} texts/s = {:.2}x Python sorted ({sorted:.1}); its time is {:.2}x the ONNX Runtime floor ({floor:.1} texts/s)",
        ours / sorted,
        floor / ours
    );
    eprintln!(
        "int8 ({}): nornir {i8:.1} texts/s = {:.2}x float32, peak RSS {i8_rss:.0} MiB ({:.2}x); ONNX Runtime quantize_dynamic through nornir {peer:.1} texts/s ({:.2}x float32)",
        extensions.join(", "),
        i8 / ours,
        i8_rss / rss_once,
        peer / ours
    );
    if let Some(t) = &ten {
        eprintln!(
            "peak RSS: {rss_once:.0} MiB for the corpus once, {:.0} MiB for it 10 times through stdin ({:.2}x)",
            t.peak_rss_mib,
            t.peak_rss_mib / rss_once
        );
    }
    Ok(())
}
