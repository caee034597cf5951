//! What a `config.json` is, as the families' claims tell it ([`identify`]): the name a person
//! reads, whether it is a causal decoder, a dual encoder's text tower positions. For whoever
//! describes a model folder (the embedder's doctor), whether or not it is ever converted; it reads
//! three keys and checks nothing else.

use serde_json::Value;

use super::{FAMILIES, Family};
use crate::config::Raw;

/// What [`identify`] found: a family of the converter's registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Identity {
    /// The family, named for a person: `BERT`, `JinaBERT v2 (ALiBi)`, `Qwen3 (decoder: causal,
    /// grouped-query, rotary)`.
    pub name: &'static str,
    /// A causal decoder: a token's vector sees only the tokens before it, so only the last
    /// token's sees the whole text.
    pub decoder: bool,
    /// An image-and-text dual encoder's text tower: the positions its config class gives it
    /// where `text_config` leaves them out (CLIP's 77).
    pub text_positions: Option<usize>,
}

impl Identity {
    /// An encoder named `name`.
    pub(crate) const fn encoder(name: &'static str) -> Self {
        Identity { name, decoder: false, text_positions: None }
    }

    /// A causal decoder named `name`.
    pub(crate) const fn decoder(name: &'static str) -> Self {
        Identity { name, decoder: true, text_positions: None }
    }

    /// A dual encoder named `name` whose text tower places `text_positions` by default.
    pub(crate) const fn dual(name: &'static str, text_positions: usize) -> Self {
        Identity { name, decoder: false, text_positions: Some(text_positions) }
    }
}

/// The family of the model `config_json` (the text of a `config.json`) describes: the first of
/// its `architectures` a family claims, by the rules a conversion uses (a later family refining
/// an earlier one wins: `BertModel` with ALiBi positions is JinaBERT v2); where none does, its
/// `model_type`, standing for that family's first architecture. `None` for anything else: text
/// that is not JSON, keys of other types, a family nornir does not convert. It reads only
/// `architectures`, `model_type` and `position_embedding_type`, never fails and never panics;
/// the caller bounds the text's size.
pub fn identify(config_json: &str) -> Option<Identity> {
    let value: Value = serde_json::from_str(config_json).ok()?;
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    let raw = Raw {
        model_type: text("model_type"),
        position_embedding_type: text("position_embedding_type"),
        ..Raw::default()
    };
    let architectures = value.get("architectures").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let by_architecture = architectures.iter().filter_map(Value::as_str).find_map(|a| claimant(a, &raw));
    let by_model_type = || {
        let model_type = raw.model_type.as_deref()?;
        let named = FAMILIES.iter().find(|f| f.model_types.contains(&model_type))?;
        claimant(named.architectures.first()?.0, &raw)
    };
    by_architecture.or_else(by_model_type).map(|f| f.identity)
}

/// The family that claims `architecture` with these keys, as a conversion decides it.
pub(super) fn claimant(architecture: &str, raw: &Raw) -> Option<&'static Family> {
    FAMILIES.iter().rev().find(|f| (f.claims)(architecture, raw)).copied()
}
