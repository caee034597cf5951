//! `cargo xtask test`: fetch what the tests need, make their environments, run every test of
//! the default and the AMD build, the Python package's suite, xtask's own, then check-features.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::process::{cargo, run_checked, stage, with_ignored, workspace_root};
use crate::{assets, compare, dev_null, features, fetch, gpu_bundle, machine_paths};

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
    // apt-get's progress goes to stderr: `test-env` prints only variables on stdout.
    let apt = |args: &[&str]| Command::new("apt-get").args(args).current_dir(&debs).stdout(std::io::stderr()).status();
    let download = || apt(&["download", "-q", "libamdhip64-5"]);
    if !download().is_ok_and(|s| s.success()) {
        // Package lists are missing on a fresh container; refreshing them needs root.
        let _ = apt(&["update", "-q"]);
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

pub(crate) fn all_test_assets() -> Vec<&'static assets::Asset> {
    let mut all: Vec<&assets::Asset> = assets::DEFAULT_ASSETS.to_vec();
    all.extend_from_slice(assets::TEST_ASSETS);
    all
}

/// What the tests read to find the fetched assets and the OpenAI client's Python.
pub(crate) fn test_env(home: &Path) -> Result<Vec<(&'static str, PathBuf)>> {
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
        ("NORNIR_TEST_SPLADE_MODEL", home.join(assets::SPLADE_MODEL_DIR)),
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
/// InferenceClient (numpy for its answers), LangChain's OpenAIEmbeddings (with tiktoken), Cohere's,
/// and grpcio with grpcio-tools (the gRPC stubs generated from TEI's proto at test time).
const TEST_PYTHON_PACKAGES: &[&str] = &[
    "openai==3.57.0",
    "huggingface_hub==2.4.0",
    "numpy==2.4.6",
    "langchain-openai==1.7.4",
    "tiktoken==0.14.0",
    "cohere==7.3.1",
    "grpcio==1.85.1",
    "grpcio-tools==1.85.1",
];

/// The Python package's venv: the wheel's builder, the onnxruntime it loads, pytest, Ray Data
/// for the bulk pipeline and scipy for sparse matrices (crates/python/tests).
const PYTHON_PACKAGE_VENV: &[&str] = &[
    "maturin==1.16.0",
    "onnxruntime==1.31.1",
    "numpy==2.4.6",
    "pytest==9.2.0",
    "ray[data]==2.60.0",
    "pyarrow==26.0.1",
    "pandas==3.1.1",
    "scipy==1.17.1",
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

/// The integration suites the AMD build runs again (`cargo xtask test`): those of the code
/// `embed-ort-rocm` compiles differently or that load the AMD and GPU ONNX Runtime builds.
const AMD_BUILD_SUITES: &[&str] = &[
    // nornir-gpu-probe
    "simulated_amd",
    "simulated_nvidia",
    "real_libs",
    "run_time_libraries",
    "preload_resolution",
    "plugin_discovery",
    // nornir-embed
    "ort_1_22",
    "cuda_pip",
    "plugins",
    "one_runtime",
    "faults",
    // nornir-cli
    "real_builds",
    "cli",
    "gpu_check",
    "plugin_providers",
    "bad_input",
];

/// huggingface_hub from the releases (0.28 to 0.33) that nest TEI's options under "parameters".
const TEST_PYTHON_HF_0_30: &[&str] = &["huggingface_hub==0.30.2", "numpy==2.4.6"];

/// The GPU check's bundle for its dry run (crates/cli/tests/gpu_check.rs), from the debug build.
pub(crate) fn dry_run_bundle() -> Result<()> {
    eprintln!("xtask: the GPU check's bundle for its dry run");
    run_checked(cargo().args(["build", "--quiet", "-p", "nornir-cli"]))?;
    let nornir = workspace_root().join("target/debug/nornir").display().to_string();
    let out = workspace_root().join(DRY_RUN_BUNDLE).display().to_string();
    gpu_bundle::gpu_bundle(&gpu_bundle::Args::for_dry_run(nornir.into(), out.into()))
}

/// `cargo xtask test-env`: the tests' variables as shell `export` lines on stdout.
pub fn print_env() -> Result<()> {
    let home = fetch::fetch(&all_test_assets())?;
    for (name, value) in test_env(&home)? {
        let value = value.display().to_string().replace('\'', "'\\''");
        println!("export {name}='{value}'");
    }
    Ok(())
}

/// `cargo xtask docs` on its own: fetch, the test environment, build `nornir`, run the docs.
pub fn docs_alone(only: &[String]) -> Result<()> {
    let home = fetch::fetch(&all_test_assets())?;
    let env = test_env(&home)?;
    crate::docs::run_docs(&env, only)
}

pub fn test(extra: &[String]) -> Result<()> {
    let started = std::time::Instant::now();
    stage("no machine paths", machine_paths::check)?;
    let home = stage("fetch", || fetch::fetch(&all_test_assets()))?;
    let mut env = stage("test environments", || test_env(&home))?;
    // Tests that cannot run here write why to this file; they are counted at the end, not passed.
    let skips = workspace_root().join("target/test-skips.txt");
    let _ = std::fs::remove_file(&skips);
    env.push(("NORNIR_TEST_SKIP_LOG", skips.clone()));
    stage("GPU check bundle", dry_run_bundle)?;
    eprintln!("xtask: tests, default build");
    stage("tests, default build", || {
        run_checked(
            cargo().args(["test", "--workspace", "--exclude", "xtask"]).args(with_ignored(extra)).envs(env.clone()),
        )
    })?;
    if extra.is_empty() {
        eprintln!("xtask: docs: every command of README.md and docs/*.md");
        stage("docs", || crate::docs::run_docs(&env, &[]))?;
    }
    stage("Python package", || python_package(&home, &env))?;
    // The server's minute-long load test runs in full once, in the default build above; the
    // other builds run it for 10 seconds.
    env.push(("NORNIR_SERVE_LOAD_SECONDS", PathBuf::from("10")));
    env.push(("NORNIR_SERVE_OVERLOAD_SECONDS", PathBuf::from("5")));
    eprintln!("xtask: tests, embed-ort-rocm build");
    stage("tests, embed-ort-rocm build", || {
        let rocm = || {
            let mut c = cargo();
            c.args(["test", "--workspace", "--exclude", "xtask", "--features", "nornir-cli/embed-ort-rocm"]);
            c
        };
        if !extra.is_empty() {
            return run_checked(rocm().args(with_ignored(extra)).envs(env.clone()));
        }
        // Every unit test, then the suites of what the AMD feature changes: the probe, the plan
        // and its sessions, the ONNX Runtime builds and plugins, doctor and the GPU check. What
        // runs the same on the CPU in both builds (embedding, serving, converting, quantizing)
        // was tested in the default build above.
        run_checked(rocm().args(["--lib", "--bins"]).args(with_ignored(&[])).envs(env.clone()))?;
        let suites = AMD_BUILD_SUITES.iter().flat_map(|t| ["--test", t]);
        run_checked(rocm().args(suites).args(with_ignored(&[])).envs(env.clone()))
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

/// `cargo xtask check-features` on its own: the test environments, the GPU check's dry-run
/// bundle, then every feature set's checks and tests.
pub fn check_features() -> Result<()> {
    let env = test_env(&fetch::fetch(&all_test_assets())?)?;
    dry_run_bundle()?;
    features::check_features(&env, false)
}

#[cfg(test)]
mod tests {
    use super::with_ignored;

    #[test]
    fn the_ignored_tests_are_included_after_the_one_separator() {
        let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(with_ignored(&[]), v(&["--", "--include-ignored"]));
        assert_eq!(
            with_ignored(&v(&["-p", "nornir-cli", "serve"])),
            v(&["-p", "nornir-cli", "serve", "--", "--include-ignored"])
        );
        assert_eq!(
            with_ignored(&v(&["serve", "--", "--nocapture"])),
            v(&["serve", "--", "--include-ignored", "--nocapture"])
        );
    }
}
