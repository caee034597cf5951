//! The doctor's text: the summary, then ONNX Runtime, its devices, the plan and the session.

use std::fmt::Write as _;

use nornir_vector::diagnostics::{Plan, ProbeReport};

use super::SessionDoc;
use super::witnesses::{Witnesses, witnesses_line};
use crate::commands::{self, OrtChoice};

pub(super) fn summary(
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
    match session {
        #[cfg(feature = "embed-ort")]
        Some(SessionDoc::Running(r)) => {
            let _ = writeln!(s, "active provider: {}", r.session.active_provider);
        }
        Some(SessionDoc::Failed(f)) => {
            let _ = writeln!(s, "session: {}", f.error);
        }
        None => {}
    }
    let _ = writeln!(s, "next: {next}");
    s
}

pub(super) fn write_ort(out: &mut String, ort: &OrtChoice) -> std::fmt::Result {
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

pub(super) fn write_plan(out: &mut String, plan: Option<&Plan>) -> std::fmt::Result {
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

pub(super) fn write_session(out: &mut String, s: &SessionDoc) -> std::fmt::Result {
    writeln!(out, "\nsession")?;
    match s {
        SessionDoc::Failed(f) => {
            writeln!(out, "  could not be built: {}", f.error)?;
            #[cfg(feature = "embed-ort")]
            write_registrations(out, &f.registrations)?;
            Ok(())
        }
        #[cfg(feature = "embed-ort")]
        SessionDoc::Running(r) => write_running(out, r),
    }
}

/// A session that runs: the providers tried, what runs, the model, memory and node placement.
#[cfg(feature = "embed-ort")]
fn write_running(out: &mut String, r: &nornir_vector::EmbedderReport) -> std::fmt::Result {
    let session = &r.session;
    write_registrations(out, &session.registrations)?;
    if let Some(f) = &session.fallback {
        writeln!(out, "  fallback: {f}")?;
    }
    match &session.active_device {
        Some(d) => writeln!(out, "  active provider: {d}")?,
        None => writeln!(out, "  active provider: {}", session.active_provider)?,
    }
    writeln!(out, "  graph optimisation: {} (ONNX Runtime's level for this session)", session.graph_optimization)?;
    writeln!(out, "  model precision: {}", r.precision)?;
    write_model(out, &r.model)?;
    if let Some(images) = &r.images {
        writeln!(out, "  images: embedded into the text vectors' space; {images}")?;
    }
    write_memory(out, &session.memory)?;
    match &r.placement {
        Some(nornir_vector::diagnostics::Placement::Known { nodes }) => {
            let nodes: Vec<String> = nodes.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            writeln!(out, "  node placement: {}", nodes.join(", "))
        }
        Some(nornir_vector::diagnostics::Placement::Unknown { reason }) => {
            writeln!(out, "  node placement: unknown ({reason})")
        }
        _ => writeln!(out, "  node placement: unknown"),
    }
}

/// Each provider's registration, and the libraries its preflight looked for.
#[cfg(feature = "embed-ort")]
fn write_registrations(
    out: &mut String,
    registrations: &[nornir_vector::diagnostics::Registration],
) -> std::fmt::Result {
    for r in registrations {
        match r.error() {
            None => writeln!(out, "  {}: registered", r.provider)?,
            Some(error) => writeln!(out, "  {}: failed: {error}", r.provider)?,
        }
        if let Some(p) = &r.preflight {
            write_preflight(out, p)?;
        }
    }
    Ok(())
}

/// Each library a GPU provider needs, and each it opens at run time, with where it was found.
#[cfg(feature = "embed-ort")]
pub(super) fn write_preflight(
    out: &mut String,
    p: &nornir_vector::diagnostics::ProviderRequirements,
) -> std::fmt::Result {
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
pub(super) fn write_memory(out: &mut String, m: &nornir_vector::diagnostics::Memory) -> std::fmt::Result {
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
pub(super) fn write_model(out: &mut String, m: &nornir_vector::diagnostics::ModelInfo) -> std::fmt::Result {
    let kind = &m.folder.kind;
    writeln!(out, "  model kind: {} ({})", kind.kind, kind.reason)?;
    if let Some(family) = &m.folder.family {
        writeln!(out, "  family: {family}")?;
    }
    writeln!(out, "  model output: {:?}, {}", m.output, m.output_reason)?;
    if kind.kind == nornir_vector::ModelKind::CrossEncoder {
        let activation = kind.activation.map_or("none".to_owned(), |a| format!("{a:?}").to_lowercase());
        writeln!(
            out,
            "  scores: {} label(s) ({}), {activation}, up to {} tokens a pair",
            kind.labels.len(),
            kind.labels.join(", "),
            m.max_length
        )?;
        return Ok(());
    }
    if kind.kind == nornir_vector::ModelKind::SparseEncoder {
        writeln!(
            out,
            "  sparse vectors: {} terms, {} pooling, up to {} tokens",
            m.model_dimension, m.pooling, m.max_length
        )?;
        return Ok(());
    }
    let dim = if m.dimension == m.model_dimension {
        m.dimension.to_string()
    } else {
        format!("{} (first {} of {}, --dimensions)", m.dimension, m.dimension, m.model_dimension)
    };
    writeln!(out, "  model vectors: {dim} dimensions, {} pooling, up to {} tokens", m.pooling, m.max_length)?;
    if !m.max_length_reason.is_empty() {
        writeln!(out, "  length: {} tokens: {}", m.max_length, m.max_length_reason)?;
    }
    if !m.attention.is_empty() {
        writeln!(out, "  attention: {}", m.attention)?;
    }
    if let Some(why) = &m.dense_reason {
        let layers: Vec<String> = m
            .folder
            .dense
            .iter()
            .map(|d| {
                let activation = d.activation.rsplit('.').next().unwrap_or_default();
                format!("{} {} -> {} {activation}", d.path, d.in_features, d.out_features)
            })
            .collect();
        writeln!(out, "  dense: {} ({why})", layers.join(", "))?;
    }
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

/// ONNX Runtime's device list and each plugin library, then the witnesses' line.
pub(super) fn write_devices(out: &mut String, ort: &commands::OrtChoice, w: &Witnesses) -> std::fmt::Result {
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
