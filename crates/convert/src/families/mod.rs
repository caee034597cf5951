//! The model families, one file each, and the one registry of them ([`FAMILIES`]). A family file
//! says which architectures it claims (names and heads, and any rule on the config's keys), how
//! its config keys become the family-neutral description the graph builders read (`config`'s
//! [`Config`]), its tensor names, its refusals, and what [`identify`] says of it (the name the
//! doctor prints, whether it is a causal decoder). Adding a family is its file, its line in
//! [`FAMILIES`] and its tests.

use crate::ConvertError;
use crate::config::checks::Check;
use crate::config::{Claim, Config, Head, Raw, StModule};
pub use identity::{Identity, identify};

mod bert;
mod clip;
mod gte;
mod identity;
mod jina_bert;
mod jina_clip;
mod jina_v3;
mod llama;
mod modernbert;
mod nomic_bert;
mod qwen2;
mod qwen3;
mod siglip;
mod xlm_roberta;

#[cfg(test)]
mod decoder_tests;
#[cfg(test)]
mod dual_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod identity_tests;
#[cfg(test)]
mod tests;

/// A family: the architectures it claims, and how it reads their config.
#[derive(Debug)]
pub(crate) struct Family {
    /// What [`identify`] says of a config this family claims.
    pub(crate) identity: Identity,
    /// The `model_type`s that name this family where no architecture a family claims does (a
    /// config without `architectures`): its first architecture stands for them, claimed as any
    /// other, so that a refinement (JinaBERT v2, BERT with ALiBi) still wins.
    pub(crate) model_types: &'static [&'static str],
    /// How refusals that list the encoder families name it (`None`: not listed).
    pub(crate) display: Option<&'static str>,
    /// The architectures `config.json` may name, with the head each asks for (a decoder's head
    /// is the encoder's output unless the conversion asks for the yes/no reranker).
    pub(crate) architectures: &'static [(&'static str, Head)],
    /// Whether an architecture's name (any head: sentence-transformers loads the base model of
    /// any) with these keys is this family's.
    pub(crate) claims: fn(&str, &Raw) -> bool,
    /// The config, read and checked.
    pub(crate) read: fn(Claim<'_>) -> Result<Config, ConvertError>,
}

/// Every family, in the order refusals list them. Where two claim an architecture, the later
/// one, which refines the earlier (JinaBERT v2 is BERT with ALiBi), wins.
const FAMILIES: &[&Family] = &[
    &bert::FAMILY,
    &xlm_roberta::FAMILY,
    &jina_bert::FAMILY,
    &jina_v3::FAMILY,
    &nomic_bert::FAMILY,
    &gte::FAMILY,
    &modernbert::FAMILY,
    &bert::COLBERT,
    &qwen3::FAMILY,
    &qwen2::FAMILY,
    &llama::FAMILY,
    &llama::MISTRAL,
    &clip::FAMILY,
    &siglip::FAMILY,
    &jina_clip::FAMILY,
];

/// Every architecture name `config.json` may give, in the families' order.
pub(crate) fn supported_architectures() -> impl Iterator<Item = &'static str> {
    FAMILIES.iter().flat_map(|f| f.architectures.iter().map(|&(name, _)| name))
}

fn supported_names() -> String {
    supported_architectures().collect::<Vec<_>>().join(", ")
}

/// The encoder families' names: "A, B and C".
fn encoder_names() -> String {
    let names: Vec<&str> = FAMILIES.iter().filter_map(|f| f.display).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// The head an architecture's name asks for, in a family that has it.
fn head_of(architecture: &str) -> Option<Head> {
    FAMILIES.iter().flat_map(|f| f.architectures).find(|(n, _)| *n == architecture).map(|&(_, head)| head)
}

/// Reads `config.json`'s text (`file` names it in errors). Where `modules.json` names the
/// first module (`st`), the head is what sentence-transformers loads: the encoder for its
/// `Transformer` (any architecture of a supported family), the masked-LM head for
/// `MLMTransformer`; else the head `architectures` names.
pub(crate) fn parse(text: &str, file: &str, st: Option<StModule>) -> Result<Config, ConvertError> {
    let bad = |why: String| ConvertError::Config { file: file.to_owned(), why };
    let raw: Raw = serde_json::from_str(text).map_err(|e| Check { file }.not_valid::<Raw>(text, &e))?;
    let archs = raw.architectures.clone().unwrap_or_default();
    if archs.is_empty() {
        return Err(bad(format!(
            "has no `architectures` (model_type {:?}): add the architecture, one of {}",
            raw.model_type.as_deref().unwrap_or("missing"),
            supported_names()
        )));
    }
    let found = archs.iter().find_map(|a| {
        let family = identity::claimant(a, &raw)?;
        let head = match st {
            Some(StModule::Transformer) => Head::Encoder,
            Some(StModule::MlmTransformer) => Head::MaskedLm,
            // XLM-RoBERTa's and BERT's names with another family's positions keep their head.
            None => head_of(a)?,
        };
        Some((a, family, head))
    });
    let Some((architecture, family, head)) = found else {
        return Err(ConvertError::Unsupported { architecture: archs.join(", "), supported: supported_names() });
    };
    let encoders = encoder_names();
    (family.read)(Claim { raw: &raw, architecture, head, check: Check { file }, encoders: &encoders })
}
