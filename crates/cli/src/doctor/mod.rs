//! `nornir vector doctor`: drivers, libraries, the ONNX Runtime chosen, the plan, and with a model
//! what really runs, in words or as JSON, ending with one line that says what to do next.
//! `session.rs` builds the session part (the library's report, or why none), `witnesses.rs`
//! compares the probe with ONNX Runtime's device list, `render.rs` writes the text, `advice.rs`
//! the next step.

mod advice;
mod render;
mod session;
mod witnesses;

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use nornir_vector::diagnostics::Plan;
use serde_json::{Value, json};

use crate::args::DoctorArgs;
use crate::commands::{self, OrtChoice};
pub use session::SessionDoc;

/// The parts of a child doctor's `--json` report that `--isolate` takes over.
#[derive(serde::Deserialize)]
struct ChildReport {
    ort: OrtChoice,
    session: Option<SessionDoc>,
}

pub fn run(a: &DoctorArgs) -> Result<ExitCode> {
    let probe = nornir_vector::probe();
    let first = commands::plan(&a.model, &[])?;
    let wants_session = !a.model.model.is_empty() || a.expect.is_some();
    let (ort, session) = if a.isolate {
        isolated(a, first.as_ref(), wants_session)
    } else {
        (commands::ort_choice(first.as_ref(), &a.model), wants_session.then(|| session::session_doc(&a.model)))
    };
    // ONNX Runtime's device list (with the plugins registered) joins the plan, as in the embedder.
    let devices = commands::listed_devices(&ort);
    let plan = commands::plan(&a.model, &devices)?;
    let witnesses = witnesses::witnesses(probe, &devices, ort.path.is_some() && ort.error.is_none());
    let next = advice::next_step(probe, plan.as_ref(), &ort, session.as_ref());
    let (show_cuda, show_rocm) = (a.cuda || !a.rocm, a.rocm || !a.cuda);

    if a.json {
        let mut doc = serde_json::Map::new();
        if show_cuda {
            doc.insert("cuda".into(), serde_json::to_value(&probe.cuda)?);
        }
        if show_rocm {
            doc.insert("rocm".into(), serde_json::to_value(&probe.rocm)?);
        }
        doc.insert("ort".into(), serde_json::to_value(&ort)?);
        doc.insert("witnesses".into(), json!(witnesses));
        doc.insert("plan".into(), serde_json::to_value(&plan)?);
        if let Some(s) = &session {
            doc.insert("session".into(), serde_json::to_value(s)?);
        }
        doc.insert("probe_micros".into(), json!(probe.probe_micros));
        doc.insert("isolated".into(), json!(a.isolate));
        doc.insert("next_step".into(), json!(next));
        println!("{}", serde_json::to_string_pretty(&Value::Object(doc))?);
    } else if a.summary {
        print!("{}", render::summary(probe, plan.as_ref(), &ort, &witnesses, session.as_ref(), &next));
    } else {
        let mut out = String::new();
        if show_cuda {
            write!(out, "{}", probe.cuda)?;
            out.push('\n');
        }
        if show_rocm {
            write!(out, "{}", probe.rocm)?;
            out.push('\n');
        }
        render::write_ort(&mut out, &ort)?;
        render::write_devices(&mut out, &ort, &witnesses)?;
        render::write_plan(&mut out, plan.as_ref())?;
        if let Some(s) = &session {
            render::write_session(&mut out, s)?;
        }
        writeln!(out, "\nnext: {next}")?;
        print!("{out}");
    }

    if let Some(expected) = a.expect {
        let active = session.as_ref().and_then(SessionDoc::gpu_vendor).map_or("none", |v| v.label());
        if active != expected.to_string() {
            eprintln!("nornir: expected {expected}, but the model runs on {active}");
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs this doctor again as a child with `--json` (without `--isolate` and `--summary`) and takes
/// the ONNX Runtime check and the session from its report. A child killed by a signal becomes an
/// error in both, naming the library that was being loaded.
fn isolated(a: &DoctorArgs, plan: Option<&Plan>, wants_session: bool) -> (OrtChoice, Option<SessionDoc>) {
    let ort = commands::ort_pick(plan, &a.model);
    let crashed = |why: String| -> (OrtChoice, Option<SessionDoc>) {
        let lib = ort.path.as_ref().map_or_else(|| "ONNX Runtime".to_owned(), |p| p.display().to_string());
        let text = format!(
            "loading {lib} in a child process failed: {why}; this library (or a provider it loads) is broken on this machine, so use another build (--ort-lib / ORT_DYLIB_PATH)"
        );
        let mut ort = ort.clone();
        ort.error = Some(text.clone());
        (ort, wants_session.then(|| SessionDoc::failed(text)))
    };
    let args: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|x| !matches!(x.to_str(), Some("--isolate" | "--summary" | "--json")))
        .chain(std::iter::once("--json".into()))
        .collect();
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return crashed(format!("cannot find this program to start it again: {e}")),
    };
    let out = match std::process::Command::new(exe).args(&args).stderr(std::process::Stdio::inherit()).output() {
        Ok(o) => o,
        Err(e) => return crashed(format!("cannot start the child process: {e}")),
    };
    if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&out.status) {
        return crashed(format!("the process was killed by signal {signal} ({})", signal_name(signal)));
    }
    match serde_json::from_slice::<ChildReport>(&out.stdout) {
        Ok(report) => (report.ort, if wants_session { report.session } else { None }),
        Err(_) if out.stdout.is_empty() => crashed(format!("the child exited with {} and no report", out.status)),
        Err(e) => crashed(format!("the child exited with {} and a report this doctor cannot read: {e}", out.status)),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        4 => "SIGILL, an instruction this CPU lacks",
        6 => "SIGABRT, the library aborted",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL, perhaps out of memory",
        11 => "SIGSEGV, a crash",
        _ => "see `kill -l`",
    }
}
