//! What a model folder holds, read as sentence-transformers reads it: an embedder (a dense vector
//! per text), a sparse encoder (SPLADE: a weight per vocabulary term, from a masked-language-model
//! head) or a cross-encoder (scores per query and document pair, from a classification head).

use std::collections::BTreeMap;

use serde::Deserialize;

use nornir_options::{ModelKind, OutputWidth, Pooling, ScoreActivation};

use crate::load::checks::{MAX_WIDTH, maybe_in};
use crate::values::KindChoice;

/// What `config.json` says about the head.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct HeadConfig {
    #[serde(default)]
    architectures: Vec<String>,
    num_labels: Option<usize>,
    #[serde(default)]
    id2label: BTreeMap<String, String>,
    /// sentence-transformers 4+: `{"activation_fn": "torch.nn.modules.activation.Sigmoid"}`.
    sentence_transformers: Option<StConfig>,
    /// sentence-transformers before 4.
    sbert_ce_default_activation_function: Option<String>,
    /// transformers' `problem_type`: "multi_label_classification" scores each label alone.
    problem_type: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
struct StConfig {
    activation_fn: Option<String>,
}

/// SpladePooling's `config.json`.
#[derive(Debug, Deserialize)]
struct SpladeConfig {
    #[serde(default)]
    pooling_strategy: Option<String>,
    #[serde(default)]
    activation_function: Option<String>,
}

/// The pooling a SpladePooling module's config asks for: max (the default) or sum over tokens of
/// `log(1 + relu(logits))`.
pub(crate) fn parse_splade_config(text: &str) -> Result<Pooling, String> {
    let c: SpladeConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if let Some(a) = c.activation_function.as_deref().filter(|a| *a != "relu") {
        return Err(format!("activation_function {a:?} is not one nornir applies (it applies relu)"));
    }
    match c.pooling_strategy.as_deref() {
        None | Some("max") => Ok(Pooling::Splade),
        Some("sum") => Ok(Pooling::SpladeSum),
        Some(other) => Err(format!("pooling_strategy {other:?}: nornir applies \"max\" or \"sum\"")),
    }
}

/// The kind of a folder from its `config.json` (`head`) and, when it lists one, the pooling of
/// its SpladePooling module (`splade`). A folder whose modules.json lists a Pooling module is an
/// embedder whatever its head says: sentence-transformers loads it as one.
pub(crate) fn choose_kind(head: &HeadConfig, splade: Option<Pooling>, pooled: bool) -> Result<KindChoice, String> {
    if let Some(pooling) = splade {
        return Ok(KindChoice {
            kind: ModelKind::SparseEncoder,
            reason: "modules.json lists a SpladePooling module".to_owned(),
            labels: Vec::new(),
            activation: None,
            pooling: Some(pooling),
        });
    }
    if pooled {
        return Ok(KindChoice::embedder("modules.json lists a Pooling module"));
    }
    let Some(arch) =
        head.architectures.iter().find(|a| a.ends_with("ForMaskedLM") || a.ends_with("ForSequenceClassification"))
    else {
        return Ok(KindChoice::default());
    };
    if arch.ends_with("ForMaskedLM") {
        return Ok(KindChoice {
            kind: ModelKind::SparseEncoder,
            reason: format!("config.json's architectures lists {arch}, a masked-language-model head (SPLADE)"),
            labels: Vec::new(),
            activation: None,
            pooling: Some(Pooling::Splade),
        });
    }
    let multi_label = match head.problem_type.as_deref() {
        None | Some("single_label_classification" | "regression") => false,
        Some("multi_label_classification") => true,
        Some(other) => {
            return Err(format!(
                "problem_type {other:?} is not one transformers knows (regression, single_label_classification, multi_label_classification)"
            ));
        }
    };
    let mut ids: Vec<(usize, &String)> = Vec::with_capacity(head.id2label.len());
    for (id, label) in &head.id2label {
        let id = id.parse().map_err(|_| format!("id2label has the key {id:?}, not a label number"))?;
        ids.push((id, label));
    }
    ids.sort();
    let num_labels = maybe_in("num_labels", head.num_labels, 0..=MAX_WIDTH, "the classifier's outputs")?;
    if multi_label && ids.is_empty() && num_labels.unwrap_or(0) == 0 {
        return Err("problem_type is \"multi_label_classification\" but config.json names no labels: give id2label (or num_labels)".to_owned());
    }
    let count = num_labels.unwrap_or(ids.len()).max(ids.len()).max(1);
    let labels =
        (0..count).map(|i| ids.iter().find(|(id, _)| *id == i).map_or(format!("LABEL_{i}"), |(_, l)| (*l).clone()));
    let named = head
        .sentence_transformers
        .as_ref()
        .and_then(|s| s.activation_fn.as_deref())
        .or(head.sbert_ce_default_activation_function.as_deref());
    // As transformers' text-classification pipeline: a sigmoid for one label or a multi-label
    // head (each label scored alone), else a softmax over the labels.
    let activation = match named {
        None if count == 1 || multi_label => ScoreActivation::Sigmoid,
        None => ScoreActivation::Softmax,
        Some(f) => match f.rsplit('.').next().unwrap_or(f) {
            "Sigmoid" => ScoreActivation::Sigmoid,
            "Softmax" => ScoreActivation::Softmax,
            "Identity" => ScoreActivation::Identity,
            other => {
                return Err(format!(
                    "activation function {other:?} is not one nornir applies (Sigmoid, Softmax, Identity)"
                ));
            }
        },
    };
    let head_kind = if multi_label { "a multi-label classification head" } else { "a classification head" };
    Ok(KindChoice {
        kind: ModelKind::CrossEncoder,
        reason: format!("config.json's architectures lists {arch}, {head_kind} ({count} label(s))"),
        labels: labels.collect(),
        activation: Some(activation),
        pooling: None,
    })
}

/// Outputs that hold hidden vectors, not a head's logits: a graph exported without its head.
const HIDDEN_OUTPUTS: [&str; 3] = ["last_hidden_state", "token_embeddings", "sentence_embedding"];

/// The kind the configs say, checked against the graph's chosen `output` (`pooled`: one row per
/// text). A head's configs over a graph exported without its head make an embedder, as the
/// graph gives hidden vectors; a classification head needs one row per text.
pub(crate) fn with_graph(choice: KindChoice, output: &str, pooled: bool) -> Result<KindChoice, String> {
    if choice.kind == ModelKind::MultiVector && pooled {
        return Err(format!(
            "{}, but the graph's output {output:?} is one vector per text: export the transformer's token output",
            choice.reason
        ));
    }
    if matches!(choice.kind, ModelKind::Embedder | ModelKind::MultiVector) {
        return Ok(choice);
    }
    if HIDDEN_OUTPUTS.contains(&output) {
        return Ok(KindChoice::embedder(format!(
            "{}, but the graph's output {output:?} holds hidden vectors, not the head's logits (an export without its head)",
            choice.reason
        )));
    }
    if choice.kind == ModelKind::CrossEncoder && !pooled {
        return Err(format!(
            "{}, but the graph's output {output:?} has a row per token, not [batch, labels]",
            choice.reason
        ));
    }
    Ok(choice)
}

/// The most bytes of a sparse encoder's logits (`[batch, tokens, vocabulary]` float32) one
/// batch may produce: it caps the batch's tokens (a batch of 32 x 256 tokens over 30,522 terms
/// would be 1 GB).
pub(crate) const SPARSE_LOGITS_BYTES: usize = 64 << 20;

/// The token budget of a batch for a model of `kind` with `vocab` terms: `asked`, capped for a
/// kind whose rows are vocabulary-wide (a sparse encoder) at [`SPARSE_LOGITS_BYTES`] of logits
/// (and at least one text's worth).
pub(crate) fn token_budget(kind: ModelKind, vocab: usize, asked: usize) -> usize {
    match kind.output_width() {
        OutputWidth::Vocabulary => asked.min((SPARSE_LOGITS_BYTES / (vocab.max(1) * 4)).max(1)),
        _ => asked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_classifier_asking_for_more_labels_than_any_has_is_refused() {
        let head: HeadConfig = serde_json::from_str(
            r#"{"architectures":["BertForSequenceClassification"],"num_labels":1000000000000000}"#,
        )
        .expect("config");
        let e = choose_kind(&head, None, false).expect_err("refused");
        assert!(e.starts_with("num_labels is 1000000000000000, it must be a whole number from 0 to 16777216"), "{e}");
    }

    fn head(text: &str) -> HeadConfig {
        serde_json::from_str(text).expect("config")
    }

    #[test]
    fn kinds_from_the_configs() {
        let mlm = head(r#"{"architectures":["BertForMaskedLM"]}"#);
        let k = choose_kind(&mlm, None, false).expect("kind");
        assert_eq!((k.kind, k.pooling), (ModelKind::SparseEncoder, Some(Pooling::Splade)));
        assert_eq!(choose_kind(&mlm, None, true).expect("kind").kind, ModelKind::Embedder, "a Pooling module wins");
        let sum = parse_splade_config(r#"{"pooling_strategy":"sum","activation_function":"relu"}"#);
        assert_eq!(
            choose_kind(&HeadConfig::default(), Some(sum.expect("sum")), false).expect("kind").pooling,
            Some(Pooling::SpladeSum)
        );
        assert!(parse_splade_config(r#"{"pooling_strategy":"mean"}"#).is_err());

        let one =
            choose_kind(&head(r#"{"architectures":["BertForSequenceClassification"]}"#), None, false).expect("kind");
        assert_eq!(
            (one.kind, one.labels.len(), one.activation),
            (ModelKind::CrossEncoder, 1, Some(ScoreActivation::Sigmoid))
        );
        let nli = head(
            r#"{"architectures":["XLMRobertaForSequenceClassification"],
                "id2label":{"2":"neutral","0":"contradiction","1":"entailment"}}"#,
        );
        let three = choose_kind(&nli, None, false).expect("kind");
        assert_eq!(three.labels, ["contradiction", "entailment", "neutral"]);
        assert_eq!(three.activation, Some(ScoreActivation::Softmax));
        let st4 = head(
            r#"{"architectures":["BertForSequenceClassification"],"num_labels":1,
                "sentence_transformers":{"activation_fn":"torch.nn.modules.linear.Identity"}}"#,
        );
        assert_eq!(choose_kind(&st4, None, false).expect("kind").activation, Some(ScoreActivation::Identity));
        assert_eq!(
            choose_kind(&head(r#"{"architectures":["BertModel"]}"#), None, false).expect("kind").kind,
            ModelKind::Embedder
        );
    }

    #[test]
    fn a_multi_label_head_scores_each_label_with_a_sigmoid() {
        let multi = head(
            r#"{"architectures":["BertForSequenceClassification"],"problem_type":"multi_label_classification",
                "id2label":{"0":"toxic","1":"insult","2":"threat"}}"#,
        );
        let k = choose_kind(&multi, None, false).expect("kind");
        assert_eq!((k.labels.len(), k.activation), (3, Some(ScoreActivation::Sigmoid)));
        assert!(k.reason.contains("multi-label"), "{}", k.reason);
        let single = head(
            r#"{"architectures":["BertForSequenceClassification"],"problem_type":"single_label_classification",
                "id2label":{"0":"a","1":"b"}}"#,
        );
        assert_eq!(choose_kind(&single, None, false).expect("kind").activation, Some(ScoreActivation::Softmax));
        let no_labels = head(
            r#"{"architectures":["BertForSequenceClassification"],"problem_type":"multi_label_classification","num_labels":0}"#,
        );
        let e = choose_kind(&no_labels, None, false).expect_err("no labels");
        assert!(e.contains("names no labels"), "{e}");
        let unknown = head(r#"{"architectures":["BertForSequenceClassification"],"problem_type":"ranking"}"#);
        assert!(choose_kind(&unknown, None, false).expect_err("unknown").contains("\"ranking\""));
    }

    #[test]
    fn activations() {
        let mut s = [0.0f32];
        ScoreActivation::Sigmoid.apply(&mut s);
        assert_eq!(s, [0.5]);
        let mut s = [1.0f32, 1.0, 1.0, 1.0];
        ScoreActivation::Softmax.apply(&mut s);
        assert_eq!(s, [0.25; 4]);
    }
}
