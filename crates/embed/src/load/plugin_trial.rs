//! The trial of a plugin library before this process registers it: a plugin built for a newer
//! ONNX Runtime dereferences the null API table an older one returns, and a broken vendor plugin
//! can kill whatever loads it, so each is first registered by a separate, fresh process, and only
//! one that survives there is registered here.
//!
//! That process is started with `exec` (`std::process::Command`), never a `fork` of this one: a
//! forked copy of a multithreaded process may hang on a lock another thread held, and runs
//! ONNX Runtime in a state no one tested. A library cannot make its host program answer a probe,
//! so the program comes from outside: the `nornir` binary names itself at start
//! ([`set_plugin_probe`]), and `NORNIR_PLUGIN_PROBE` names one for any other host (Python, a Rust
//! program: point it at a `nornir` binary). The program is run as
//! `PROGRAM vector __probe-plugin ORT_LIBRARY NAME PLUGIN`, and that command calls
//! [`run_plugin_probe`](crate::run_plugin_probe), which loads the same ONNX Runtime library, registers the plugin, and
//! says on its standard output how far it got. A crash, a hang (60 s) or an exit while
//! registering is the plugin's report line, and it is not loaded here; the probe's standard error
//! (where ONNX Runtime says which API version it lacks) goes into that line. Without a probe
//! program the plugin is registered here untried, and its report's `trial` says so.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// The environment variable that names the probe program for hosts that are not `nornir`.
pub const PLUGIN_PROBE_VAR: &str = "NORNIR_PLUGIN_PROBE";

/// The arguments the probe program takes before the library, the plugin's name and its path.
pub const PLUGIN_PROBE_COMMAND: [&str; 2] = ["vector", "__probe-plugin"];

/// How long a trial registration may take before it counts as hung.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(60);

/// What the probe prints on its standard output before each word: `ready` (ONNX Runtime loaded,
/// registering now), then `registered` or `refused`.
pub(crate) const MARK: &str = "nornir-plugin-probe:";

/// The most of the probe's standard error kept for the report.
const KEPT_BYTES: usize = 64 << 10;

static PROBE: OnceLock<PathBuf> = OnceLock::new();

/// The ONNX Runtime library this process loaded, which a trial loads too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrtLibrary<'a> {
    pub(crate) ort_path: &'a Path,
    pub(crate) ort_version: &'a str,
}

/// Names `program` as the one that tries plugin libraries in a fresh process (it must answer
/// `program vector __probe-plugin ...` by calling [`run_plugin_probe`](crate::run_plugin_probe)); the `nornir` binary
/// names itself. The first call wins; `NORNIR_PLUGIN_PROBE` wins over it. False when one was
/// named already.
pub fn set_plugin_probe(program: PathBuf) -> bool {
    PROBE.set(program).is_ok()
}

/// The probe program and where it was named, if any.
fn probe_program() -> Option<(PathBuf, &'static str)> {
    match std::env::var_os(PLUGIN_PROBE_VAR) {
        Some(p) if !p.is_empty() => Some((PathBuf::from(p), PLUGIN_PROBE_VAR)),
        _ => PROBE.get().map(|p| (p.clone(), "this program")),
    }
}

/// How a plugin was tried before this process registers it (for its report's `trial`), and
/// whether to register it here: `Err(why)` when the trial says not to load it.
pub(crate) fn trial(rt: OrtLibrary<'_>, name: &str, plugin: &Path) -> (String, Result<(), String>) {
    let Some((program, named_by)) = probe_program() else {
        let why = format!(
            "no probe program (the nornir binary is one; {PLUGIN_PROBE_VAR} names one), so a plugin that crashes ONNX Runtime would end this process"
        );
        return (untried(name, why), Ok(()));
    };
    let shown = program.display();
    let spawned = Command::new(&program)
        .args(PLUGIN_PROBE_COMMAND)
        .arg(rt.ort_path)
        .arg(name)
        .arg(plugin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return (untried(name, format!("the probe program {shown} ({named_by}) did not start: {e}")), Ok(())),
    };
    let out = child.stdout.take().map(read_all);
    let err = child.stderr.take().map(read_all);
    let tried = format!("tried first in a process of its own, by {shown} ({named_by})");
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > TRIAL_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                let secs = TRIAL_TIMEOUT.as_secs();
                return (tried, Err(format!("registering it did not finish in {secs} s; not loaded")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return (untried(name, format!("waiting for the probe program {shown} failed: {e}")), Ok(())),
        }
    };
    let (out, err) = (collect(out), collect(err));
    let said = |word: &str| out.lines().any(|l| l.strip_prefix(MARK).is_some_and(|w| w.trim() == word));
    if said("registered") || said("refused") {
        // Registering here gives ONNX Runtime's own refusal, if it refused.
        return (tried, Ok(()));
    }
    if !said("ready") {
        let why =
            format!("the probe program {shown} ({named_by}) did not load ONNX Runtime ({status}): {}", last_line(&err));
        return (untried(name, why), Ok(()));
    }
    (tried, Err(ended_while_registering(rt, status, &err)))
}

/// The report line of a plugin whose registering ended the probe: by a signal (a crash), or by
/// an exit the plugin made.
fn ended_while_registering(rt: OrtLibrary<'_>, status: std::process::ExitStatus, err: &str) -> String {
    let Some(signal) = status.signal() else {
        return format!("registering it ended the process ({status}), so it was not loaded; {}", last_line(err));
    };
    let mut why = format!(
        "registering it crashes ONNX Runtime {} (signal {signal}{}), so it was not loaded",
        rt.ort_version,
        if signal == libc::SIGSEGV { ", SIGSEGV" } else { "" }
    );
    let said: Vec<&str> = err.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if let Some(line) = said.iter().rev().find(|l| l.contains("API version")) {
        why = format!(
            "{why}; ONNX Runtime said: {line}; the plugin needs a newer ONNX Runtime: load one (--ort-lib, ORT_DYLIB_PATH)"
        );
    }
    why
}

/// A trial that could not run: the plugin is registered here, and the report says why untried.
fn untried(name: &str, why: String) -> String {
    tracing::warn!(plugin = %name, "registered in this process untried: {why}");
    format!("untried: {why}")
}

/// The last line of the probe's standard error that says something.
fn last_line(err: &str) -> &str {
    err.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or("it said nothing")
}

/// A pipe read to its end on a thread of its own (the probe cannot block on a full pipe), its
/// last [`KEPT_BYTES`] sent when it closes.
fn read_all(mut pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (send, receive) = std::sync::mpsc::channel();
    let reader = move || {
        let (mut kept, mut buf) = (Vec::new(), [0u8; 8192]);
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > 2 * KEPT_BYTES {
                kept.drain(..kept.len() - KEPT_BYTES);
            }
        }
        let _ = send.send(String::from_utf8_lossy(&kept).into_owned());
    };
    if std::thread::Builder::new().name("nornir-plugin-probe-pipe".into()).spawn(reader).is_err() {
        tracing::debug!("no thread to read the plugin probe's output");
    }
    receive
}

/// What a pipe's reader got, waiting a second at most (children of the probe that still hold
/// the pipe open would keep it from closing): nothing then.
fn collect(pipe: Option<Receiver<String>>) -> String {
    pipe.and_then(|r| r.recv_timeout(Duration::from_secs(1)).ok()).unwrap_or_default()
}
