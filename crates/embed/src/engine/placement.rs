//! Node placement from ONNX Runtime's profiling output: every node event names its provider.

use std::collections::{BTreeMap, BTreeSet};

use std::sync::atomic::AtomicU64;

use serde::Deserialize;

use crate::engine::Engine;
use crate::error::{EmbedError, InferenceKind, Result, error_chain};
use crate::forward::run::{Row, run_and_pool};
use crate::load::session::{self, SessionConfig};
use crate::values::Placement;

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    cat: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    args: Option<Args>,
}

#[derive(Deserialize)]
struct Args {
    provider: Option<String>,
}

/// Counts distinct nodes per provider in a profiling file's JSON text.
pub fn parse_profile(text: &str) -> Placement {
    let events: Vec<Event> = match serde_json::from_str(text) {
        Ok(e) => e,
        Err(e) => return Placement::Unknown { reason: format!("profiling output is not valid JSON: {e}") },
    };
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    for ev in events {
        let (Some(provider), true) = (ev.args.and_then(|a| a.provider), ev.cat == "Node") else { continue };
        let node = ev.name.strip_suffix("_kernel_time").unwrap_or(&ev.name).to_owned();
        seen.insert((node, provider));
    }
    if seen.is_empty() {
        return Placement::Unknown { reason: "the profiling output names no node providers".to_owned() };
    }
    let mut nodes: BTreeMap<String, usize> = BTreeMap::new();
    for (_, provider) in seen {
        *nodes.entry(provider).or_default() += 1;
    }
    Placement::Known { nodes }
}

/// Which provider ran each node, from ONNX Runtime's profiling output of one run of a fresh
/// session built the same way. Costs a session build; call it on demand (`doctor`).
pub(crate) fn profile(engine: &Engine) -> Placement {
    let Some(sessions) = engine.sessions() else {
        return Placement::Unknown {
            reason: "a static model runs no ONNX graph: nornir sums its table's rows".to_owned(),
        };
    };
    // A private folder with an unpredictable name, removed when `dir` drops.
    let dir = match tempfile::Builder::new().prefix("nornir-placement-").tempdir() {
        Ok(d) => d,
        Err(e) => return Placement::Unknown { reason: format!("no temporary folder for the profile: {e}") },
    };
    let prefix = dir.path().join("nornir-placement");
    let cfg = SessionConfig { profile_to: Some(&prefix), ..engine.pooled_config(sessions) };
    let plan = engine.running_plan();
    let result = (|| -> Result<Placement> {
        let (mut session, _) = session::build(&sessions.runtime, &plan, &cfg)?;
        let ids = engine
            .tokenizer
            .truncating()
            .encode("where does this run?", true)
            .map(|e| e.get_ids().to_vec())
            .unwrap_or_else(|_| vec![0, 0]);
        let row = Row::text(&ids);
        run_and_pool(&session, &engine.io, engine.settings, &[row], &AtomicU64::new(0), |_, _| {})?;
        let file = session
            .end_profiling()
            .map_err(|e| EmbedError::inference_because(InferenceKind::Runtime, "ending the profile", e))?;
        let text = std::fs::read_to_string(&file)
            .map_err(|e| EmbedError::inference_because(InferenceKind::Runtime, &file, e))?;
        Ok(parse_profile(&text))
    })();
    result.unwrap_or_else(|e| Placement::Unknown { reason: error_chain(&e) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_distinct_nodes_per_provider() {
        let text = r#"[
            {"cat":"Session","name":"model_loading_uri","args":{}},
            {"cat":"Node","name":"MatMul_1_kernel_time","args":{"op_name":"MatMul","provider":"CPUExecutionProvider"}},
            {"cat":"Node","name":"MatMul_1_kernel_time","args":{"op_name":"MatMul","provider":"CPUExecutionProvider"}},
            {"cat":"Node","name":"Gelu_2_kernel_time","args":{"op_name":"Gelu","provider":"CUDAExecutionProvider"}},
            {"cat":"Node","name":"Gelu_2_fence_before","args":{"op_name":"Gelu"}}
        ]"#;
        match parse_profile(text) {
            Placement::Known { nodes } => {
                assert_eq!(nodes.get("CPUExecutionProvider"), Some(&1));
                assert_eq!(nodes.get("CUDAExecutionProvider"), Some(&1));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_profile("[]"), Placement::Unknown { .. }));
        assert!(matches!(parse_profile("{"), Placement::Unknown { .. }));
    }
}
