//! `nornir vector doctor`: drivers, libraries, the ONNX Runtime chosen, the plan, and with a model
//! what really runs, in words or as JSON, ending with one line that says what to do next.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use nornir_vector::diagnostics::{EpDevice, Hardware, PCI_AMD, PCI_NVIDIA, Plan, ProbeReport};
use serde_json::{Value, json};

use crate::DoctorArgs;
use crate::commands::{self, OrtChoice, SessionDoc};

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
        (commands::ort_choice(first.as_ref(), &a.model), wants_session.then(|| commands::session_doc(&a.model)))
    };
    // ONNX Runtime's device list (with the plugins registered) joins the plan, as in the embedder.
    let devices = commands::listed_devices(&ort);
    let plan = commands::plan(&a.model, &devices)?;
    let witnesses = witnesses(probe, &devices, ort.path.is_some() && ort.error.is_none());
    let next = next_step(probe, plan.as_ref(), &ort, session.as_ref());
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
        print!("{}", summary(probe, plan.as_ref(), &ort, &witnesses, session.as_ref(), &next));
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
        write_ort(&mut out, &ort)?;
        write_devices(&mut out, &ort, &witnesses)?;
        write_plan(&mut out, plan.as_ref())?;
        if let Some(s) = &session {
            write_session(&mut out, s)?;
        }
        writeln!(out, "\nnext: {next}")?;
        print!("{out}");
    }

    if let Some(expected) = a.expect {
        let active = session.as_ref().and_then(|s| s.gpu_vendor).map_or("none", |v| v.label());
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

fn summary(
    probe: &ProbeReport,
    plan: Option<&Plan>,
    ort: &OrtChoice,
    witnesses: &Witnesses,
    session: Option<&SessionDoc>,
    next: &str,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", probe.cuda.summary);
    let _ = writeln!(s, "{}", probe.rocm.summary);
    match (&ort.path, &ort.version) {
        (Some(p), Some(v)) => {
            let _ = writeln!(s, "ONNX Runtime {v}: {}", p.display());
        }
        _ => {
            let _ = writeln!(s, "ONNX Runtime: {}", ort.error.as_deref().unwrap_or("not found"));
        }
    }
    if let Some(p) = plan {
        let names: Vec<&str> = p.providers.iter().map(|x| x.ort_name()).collect();
        let _ = writeln!(s, "plan: {} [{}]", p.vendor, names.join(", "));
    }
    let _ = writeln!(s, "witnesses: {}", witnesses_line(witnesses));
    if let Some(active) = session.and_then(|x| x.active_provider.as_deref()) {
        let _ = writeln!(s, "active provider: {active}");
    } else if let Some(e) = session.and_then(|x| x.error.as_deref()) {
        let _ = writeln!(s, "session: {e}");
    }
    let _ = writeln!(s, "next: {next}");
    s
}

fn write_ort(out: &mut String, ort: &OrtChoice) -> std::fmt::Result {
    writeln!(out, "ONNX Runtime")?;
    match &ort.path {
        Some(p) => {
            writeln!(out, "  chosen: {} (version {})", p.display(), ort.version.as_deref().unwrap_or("unknown"))?;
            writeln!(out, "  why: {}", ort.reason)?;
            let providers =
                if ort.providers.is_empty() { "none beside CPU".to_owned() } else { ort.providers.join(", ") };
            writeln!(out, "  provider libraries beside it: {providers}")?;
        }
        None => writeln!(out, "  none chosen")?,
    }
    if let Some(e) = &ort.error {
        writeln!(out, "  problem: {e}")?;
    }
    for c in ort.candidates.iter().filter(|c| Some(&c.path) != ort.path.as_ref()) {
        writeln!(out, "  also found: {} ({}, {})", c.path.display(), c.version.as_deref().unwrap_or("?"), c.source)?;
    }
    Ok(())
}

fn write_plan(out: &mut String, plan: Option<&Plan>) -> std::fmt::Result {
    let Some(p) = plan else {
        return writeln!(out, "\nplan: none (no embedder in this build)");
    };
    let names: Vec<&str> = p.providers.iter().map(|x| x.ort_name()).collect();
    writeln!(out, "\nplan: {} [{}]{}", p.vendor, names.join(", "), if p.forced { " (forced)" } else { "" })?;
    for r in &p.reasons {
        writeln!(out, "  {r}")?;
    }
    Ok(())
}

fn write_session(out: &mut String, s: &SessionDoc) -> std::fmt::Result {
    writeln!(out, "\nsession")?;
    if let Some(e) = &s.error {
        return writeln!(out, "  could not be built: {e}");
    }
    #[cfg(feature = "embed-ort")]
    for r in &s.registrations {
        match r.error() {
            None => writeln!(out, "  {}: registered", r.provider)?,
            Some(error) => writeln!(out, "  {}: failed: {error}", r.provider)?,
        }
        if let Some(p) = &r.preflight {
            write_preflight(out, p)?;
        }
    }
    if let Some(f) = &s.fallback {
        writeln!(out, "  fallback: {f}")?;
    }
    match &s.active_device {
        Some(d) => writeln!(out, "  active provider: {d}")?,
        None => writeln!(out, "  active provider: {}", s.active_provider.as_deref().unwrap_or("?"))?,
    }
    if let Some(level) = s.graph_optimization.as_deref() {
        writeln!(out, "  graph optimisation: {level} (ONNX Runtime's level for this session)")?;
    }
    if let Some(p) = &s.precision {
        writeln!(out, "  model precision: {p}")?;
    }
    #[cfg(feature = "embed-ort")]
    {
        if let Some(m) = &s.model {
            write_model(out, m)?;
        }
        if let Some(m) = &s.memory {
            write_memory(out, m)?;
        }
        match &s.placement {
            Some(nornir_vector::diagnostics::Placement::Known { nodes }) => {
                let nodes: Vec<String> = nodes.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                writeln!(out, "  node placement: {}", nodes.join(", "))?;
            }
            Some(nornir_vector::diagnostics::Placement::Unknown { reason }) => {
                writeln!(out, "  node placement: unknown ({reason})")?
            }
            _ => writeln!(out, "  node placement: unknown")?,
        }
    }
    Ok(())
}

/// Each library a GPU provider needs, and each it opens at run time, with where it was found.
#[cfg(feature = "embed-ort")]
fn write_preflight(out: &mut String, p: &nornir_vector::diagnostics::ProviderRequirements) -> std::fmt::Result {
    use nornir_vector::diagnostics::{Opened, RequirementStatus};
    for r in &p.requirements {
        let at = |p: &Option<std::path::PathBuf>| p.as_ref().map_or_else(String::new, |p| p.display().to_string());
        let status = match r.status {
            RequirementStatus::Loaded => format!("loaded ({})", at(&r.path)),
            RequirementStatus::Found => format!("found at {}, not loaded", at(&r.path)),
            RequirementStatus::System => format!("{} (the system loader finds it)", at(&r.path)),
            RequirementStatus::Missing => {
                format!("missing{}", r.detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())
            }
        };
        let how = match r.opened {
            Opened::AtRunTime => format!(", opened at run time by {}", r.needed_by),
            Opened::Needed => format!(", needed by {}", r.needed_by),
        };
        writeln!(out, "    {}{how}: {status}", r.soname)?;
    }
    if p.requirements.iter().any(|r| r.status == RequirementStatus::Missing) {
        writeln!(out, "    searched: {}", p.searched_list())?;
    }
    Ok(())
}

/// How the workers share the sessions, and what building each session added to resident memory.
#[cfg(feature = "embed-ort")]
fn write_memory(out: &mut String, m: &nornir_vector::diagnostics::Memory) -> std::fmt::Result {
    let mib = |b: u64| format!("{:.1}", b as f64 / (1024.0 * 1024.0));
    let each: Vec<String> = m.session_growth_bytes.iter().map(|&b| mib(b)).collect();
    match m.session_growth_bytes.len() {
        0 => {}
        1 => writeln!(
            out,
            "  memory: 1 session ({} MiB of weights, pre-packed kernels and graph), run by {} worker(s) at once",
            each[0], m.workers_per_session
        )?,
        n => writeln!(out, "  memory: {n} sessions, one per worker, each added {} MiB", each.join(", "))?,
    }
    if let (Some(now), Some(peak)) = (m.resident_bytes, m.peak_resident_bytes) {
        writeln!(out, "  process resident memory: {} MiB now, {} MiB at most", mib(now), mib(peak))?;
    }
    Ok(())
}

/// What nornir read from the model folder and the graph, and why.
#[cfg(feature = "embed-ort")]
fn write_model(out: &mut String, m: &nornir_vector::diagnostics::ModelInfo) -> std::fmt::Result {
    writeln!(out, "  model output: {:?}, {}", m.output, m.output_reason)?;
    let dim = if m.dimension == m.model_dimension {
        m.dimension.to_string()
    } else {
        format!("{} (first {} of {}, --dimensions)", m.dimension, m.dimension, m.model_dimension)
    };
    writeln!(out, "  model vectors: {dim} dimensions, {} pooling, up to {} tokens", m.pooling, m.max_length)?;
    let normalize = if m.normalize { "normalised" } else { "not normalised" };
    writeln!(out, "  normalisation: {normalize} ({})", m.normalize_reason)?;
    if let Some(source) = &m.prompt.source {
        writeln!(out, "  prompt: {:?} ({source})", m.prompt.text)?;
    }
    if let Some((task, id)) = &m.prompt.task {
        writeln!(out, "  task: {task} (task_id {id})")?;
    }
    match &m.one_text_per_run {
        Some(why) => writeln!(out, "  batching: one text per run: {why}")?,
        None => writeln!(out, "  batching: texts share runs (a text's vector does not depend on its neighbours)")?,
    }
    Ok(())
}

/// One sentence a person can act on.
fn next_step(probe: &ProbeReport, plan: Option<&Plan>, ort: &OrtChoice, session: Option<&SessionDoc>) -> String {
    if ort.path.is_none() || ort.error.is_some() && ort.version.is_none() {
        let oldest = crate::commands::oldest_ort().map(|(major, minor)| format!(" ({major}.{minor} or newer)"));
        return format!(
            "get ONNX Runtime: run `cargo xtask fetch`, or set ORT_DYLIB_PATH (or --ort-lib) to a libonnxruntime.so{}",
            oldest.unwrap_or_default()
        );
    }
    if let Some(s) = session {
        if s.error.is_some() {
            if s.forced_vendor.is_some() {
                return "install what the session error above names as missing, or use --device auto to run on the CPU"
                    .to_owned();
            }
            return "fix the session error above; `nornir vector doctor --model DIR -v` shows ONNX Runtime's own log"
                .to_owned();
        }
        let active = s.active_provider.as_deref().unwrap_or("");
        if let Some(why) = &s.unclaimed {
            return format!("{why}: name another provider, or run a model whose operators it has");
        }
        if let Some(f) = &s.fallback {
            return format!(
                "the GPU failed, so the CPU runs the model; check the device and its driver ({})",
                f.chars().take(120).collect::<String>()
            );
        }
        if active != "CPUExecutionProvider" {
            return format!("nothing to do: the model runs on {active}");
        }
        #[cfg(feature = "embed-ort")]
        if let Some((provider, error)) = s.registrations.iter().find_map(|r| Some((&r.provider, r.error()?))) {
            return format!("make {provider} work: {error}");
        }
    }
    if let Some(p) = plan {
        if p.vendor.label() == "cpu" {
            if !probe.cuda.driver_present && !probe.rocm.driver_present {
                let amd = if probe.rocm.compiled {
                    ""
                } else {
                    " (this build has no AMD support: add --features embed-ort-rocm)"
                };
                return format!(
                    "no GPU driver found, so the CPU runs the model; on a GPU machine install the NVIDIA or AMD kernel driver{amd}"
                );
            }
            let gpu = if probe.cuda.driver_present { &probe.cuda } else { &probe.rocm };
            return format!("the {} driver is present but the GPU is not usable: {}", gpu.vendor, gpu.summary);
        }
        let missing: Vec<&str> = p
            .providers
            .iter()
            .filter_map(|x| x.builtin()?.library_name())
            .filter(|n| !ort.providers.iter().any(|o| o == n))
            .collect();
        if !missing.is_empty() {
            return format!(
                "the chosen ONNX Runtime has no {} provider: point ORT_DYLIB_PATH at a build that has it",
                missing.join("/")
            );
        }
        return "run `nornir vector doctor --model DIR` to see which provider really runs the model".to_owned();
    }
    "this build has no embedder: rebuild with --features embed-ort".to_owned()
}

/// The probe and ONNX Runtime's device list on the GPUs: what each saw, and where they disagree.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Witnesses {
    /// GPU vendors whose driver the probe found (`cuda`, `rocm`).
    pub probe: Vec<String>,
    /// GPU vendors ONNX Runtime lists a device of (by PCI vendor id), with the providers.
    pub onnx_runtime: Vec<String>,
    /// Whether ONNX Runtime was loaded and asked at all.
    pub listed: bool,
    /// One line per disagreement.
    pub disagreements: Vec<String>,
}

fn witnesses(probe: &ProbeReport, devices: &[EpDevice], listed: bool) -> Witnesses {
    let mut w = Witnesses { listed, ..Witnesses::default() };
    for (vendor, name, pci, found) in
        [("rocm", "AMD", PCI_AMD, probe.rocm.driver_present), ("cuda", "NVIDIA", PCI_NVIDIA, probe.cuda.driver_present)]
    {
        let gpus: Vec<&EpDevice> =
            devices.iter().filter(|d| d.hardware == Hardware::Gpu && d.pci_vendor_id == pci).collect();
        if found {
            w.probe.push(vendor.to_owned());
        }
        if !gpus.is_empty() {
            let providers: Vec<&str> = gpus.iter().map(|d| d.provider.as_str()).collect();
            w.onnx_runtime.push(format!("{vendor} ({})", providers.join(", ")));
        }
        if !listed {
            continue;
        }
        let summary = if vendor == "rocm" { &probe.rocm.summary } else { &probe.cuda.summary };
        match (found, gpus.is_empty()) {
            (true, true) => w.disagreements.push(format!(
                "the probe found an {name} GPU ({summary}) but ONNX Runtime lists no {name} GPU device: its built-in providers are not listed, and no plugin provider for this GPU is registered"
            )),
            (false, false) => w.disagreements.push(format!(
                "ONNX Runtime lists an {name} GPU ({}) but the probe found no {name} driver ({summary})",
                gpus.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("; ")
            )),
            _ => {}
        }
    }
    w
}

fn witnesses_line(w: &Witnesses) -> String {
    if !w.listed {
        return "ONNX Runtime was not loaded, so only the probe speaks".to_owned();
    }
    if !w.disagreements.is_empty() {
        return format!("disagree: {}", w.disagreements.join("; "));
    }
    if w.probe.is_empty() {
        "agree: no AMD or NVIDIA GPU (neither the probe nor ONNX Runtime's device list has one)".to_owned()
    } else {
        format!("agree: the probe found {} and ONNX Runtime lists {}", w.probe.join(", "), w.onnx_runtime.join(", "))
    }
}

/// ONNX Runtime's device list and each plugin library, then the witnesses' line.
fn write_devices(out: &mut String, ort: &commands::OrtChoice, w: &Witnesses) -> std::fmt::Result {
    writeln!(out, "\nONNX Runtime devices (GetEpDevices)")?;
    #[cfg(feature = "embed-ort")]
    if let Some(d) = &ort.devices {
        if d.devices.is_empty() {
            writeln!(out, "  none listed")?;
        }
        for dev in &d.devices {
            writeln!(out, "  {dev}")?;
        }
        for p in &d.plugins {
            let state = match (&p.error, p.devices.is_empty()) {
                (Some(e), _) => format!("failed: {e}"),
                (None, true) => "registered; lists no device on this machine".to_owned(),
                (None, false) => format!("registered; {}", p.devices.join(", ")),
            };
            writeln!(out, "  plugin {} ({}, {}): {state}", p.name, p.path.display(), p.source)?;
        }
        if d.plugins.is_empty() {
            writeln!(
                out,
                "  plugins: none found (pip install one into the Python nornir reads, or --ep-lib NAME=PATH)"
            )?;
        }
        if let Some(e) = &d.error {
            writeln!(out, "  problem: {e}")?;
        }
    }
    #[cfg(not(feature = "embed-ort"))]
    let _ = ort;
    writeln!(out, "  witnesses: {}", witnesses_line(w))
}
