//! What the `nornir` command tests share: the test model, running `nornir` with input, and the
//! rule for bad input (exit 2, one line, no panic).

#![allow(dead_code)]

pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn model() -> PathBuf {
    let dir = std::env::var_os("NORNIR_TEST_MODEL")
        .map(PathBuf::from)
        .expect("NORNIR_TEST_MODEL unset: run `cargo xtask test`");
    assert!(dir.join("model.onnx").is_file(), "no model at {}: run `cargo xtask test`", dir.display());
    dir
}

/// Whether a GPU kernel driver (NVIDIA or AMD) is loaded here. A test that proves what happens on
/// a machine without one states that assumption with this, and skips where it does not hold,
/// instead of failing. A skip is not a pass: it is printed, and written to the file
/// `NORNIR_TEST_SKIP_LOG` names, which `cargo xtask test` counts and reports at the end.
pub fn skip_on_a_gpu_machine(test: &str) -> bool {
    let gpu = Path::new("/proc/driver/nvidia/version").exists() || Path::new("/dev/kfd").exists();
    if gpu {
        let line = format!("{test}: skipped: it assumes a machine without a GPU driver, and this one has one");
        eprintln!("{line}");
        if let Some(log) = std::env::var_os("NORNIR_TEST_SKIP_LOG") {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("the skip log");
            writeln!(f, "{line}").expect("write the skip log");
        }
    }
    gpu
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// One `nornir` run: arguments, standard input (fed from another thread, since nornir writes
/// output while it still reads input), extra environment and working folder.
pub struct Run<'a> {
    pub args: &'a [&'a str],
    pub stdin: &'a [u8],
    pub env: &'a [(&'a str, &'a str)],
    pub cwd: Option<&'a Path>,
}

impl<'a> Run<'a> {
    pub fn new(args: &'a [&'a str]) -> Self {
        Self { args, stdin: b"", env: &[], cwd: None }
    }
    pub fn output(self) -> Output {
        use std::io::Write;
        let mut cmd = clean_command(self.args);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (k, v) in self.env {
            cmd.env(k, v);
        }
        if let Some(d) = self.cwd {
            cmd.current_dir(d);
        }
        let mut child = cmd.spawn().expect("run nornir");
        let mut pipe = child.stdin.take().expect("stdin");
        // Fed from another thread: nornir writes output while it still reads input.
        let input = self.stdin.to_vec();
        let feeder = std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        });
        let out = child.wait_with_output().expect("wait");
        feeder.join().expect("stdin feeder");
        out
    }
}

/// `nornir` with `args`, without the caller's settings that change what it loads or runs on:
/// the tests say what they want.
fn clean_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nornir"));
    cmd.args(args);
    for var in [
        "NORNIR_DEVICE",
        "NORNIR_PROVIDERS",
        "NORNIR_EP_LIBS",
        "ORT_DYLIB_PATH",
        "NORNIR_CUDA_LIBS",
        "NORNIR_ROCM_LIBS",
        "NORNIR_PYTHON_PREFIX",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

pub fn nornir(args: &[&str]) -> Output {
    Run::new(args).output()
}

/// `nornir` with `args` and the environment `env` (paths) added.
pub fn nornir_with(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = clean_command(args);
    cmd.envs(env.iter().map(|(k, v)| (*k, *v)));
    cmd.output().expect("run nornir")
}

/// `nornir vector embed --format f32` of the parity sample with the test model on ONNX Runtime
/// `ort`, `extra` flags and `env` added: its rows of 384 (a failed run fails the test).
pub fn embed_parity_sample(ort: &Path, extra: &[&str], env: &[(&str, &Path)]) -> Vec<Vec<f32>> {
    let sample = nornir_test_support::env_path("NORNIR_TEST_CORPUS").join("parity-sample.txt");
    let m = model();
    let mut args = vec!["vector", "embed", "--quiet", "--format", "f32", "--model", s(&m), "--ort-lib", s(ort)];
    args.extend_from_slice(&["--input", s(&sample)]);
    args.extend_from_slice(extra);
    let o = nornir_with(&args, env);
    assert!(o.status.success(), "{}: {}", ort.display(), stderr(&o));
    f32_rows(&o.stdout)
}

/// Little-endian float32 bytes as rows of 384; bytes that are not whole rows fail the test.
pub fn f32_rows(bytes: &[u8]) -> Vec<Vec<f32>> {
    assert_eq!(bytes.len() % (384 * 4), 0, "{} bytes are not whole rows of 384 float32", bytes.len());
    let floats: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    floats.chunks(384).map(<[f32]>::to_vec).collect()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit 2, `needle` in the one line on stderr, no panic.
pub fn assert_one_line_error(o: &Output, needle: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains(needle), "expected {needle:?} in {e}");
    assert!(!e.contains("panicked"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
}

pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs `scripts/<script>` (an independent reference, in the test venv's Python with ONNX
/// Runtime) as `script MODE NORNIR ARGS...`; its JSON result. The script exits 1 when its check
/// fails: that fails the test, with its output.
pub fn reference_script(script: &str, mode: &str, args: &[&str]) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts").join(script);
    let o = Command::new(nornir_test_support::env_path("NORNIR_TEST_REFERENCE_PYTHON"))
        .arg(path)
        .args([mode, env!("CARGO_BIN_EXE_nornir")])
        .args(args)
        .env("ORT_DYLIB_PATH", nornir_test_support::env_path("NORNIR_TEST_ORT_CPU"))
        .output()
        .expect("run the reference script");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{script} {mode} failed:\n{out}\n{}", stderr(&o));
    serde_json::from_str(&out).expect("the reference script's JSON")
}

/// The vector of one line of `embed`'s JSON lines (`{"id"?, "embedding": [...]}`).
pub fn embedding_of_line(line: &str) -> Vec<f32> {
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
    serde_json::from_value(v["embedding"].clone()).unwrap_or_else(|e| panic!("no \"embedding\" in {line}: {e}"))
}

/// A reference script's rows of numbers (a JSON array of arrays).
pub fn rows(v: &serde_json::Value) -> Vec<Vec<f64>> {
    serde_json::from_value(v.clone()).expect("rows of numbers")
}

/// The largest difference between `got` and `want`, row by row (equal shapes asserted).
pub fn largest_difference(got: &[Vec<f32>], want: &[Vec<f64>]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .flat_map(|(g, w)| {
            assert_eq!(g.len(), w.len());
            g.iter().zip(w).map(|(a, b)| (f64::from(*a) - b).abs())
        })
        .fold(0.0, f64::max)
}

/// Runs `scripts/<script>` (an independent reference) in the reference venv's Python with `args`;
/// its JSON. The script's failure fails the test, with its output.
pub fn reference_json(script: &str, args: &[&str]) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts").join(script);
    let o = Command::new(nornir_test_support::env_path("NORNIR_TEST_REFERENCE_PYTHON"))
        .arg(path)
        .args(args)
        .output()
        .expect("run the reference script");
    assert!(o.status.success(), "{script} {args:?}:\n{}", String::from_utf8_lossy(&o.stdout));
    serde_json::from_slice(&o.stdout).expect("the reference's JSON")
}

/// `v` scaled to length 1.
pub fn unit(v: &[f64]) -> Vec<f64> {
    let n = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
    v.iter().map(|x| x / n).collect()
}
