//! Node placement from ONNX Runtime's profiling output: every node event names its provider.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use crate::session::Placement;

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
