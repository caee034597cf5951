//! The model folder in the Hugging Face / sentence-transformers layout, read and checked up front.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{EmbedError, Result};
use crate::load::checks::{MAX_TOKENS, MAX_WIDTH, from_json, maybe_in};
use crate::load::files::{CONFIG_MAX_BYTES, read_bounded};
use crate::load::kind::{HeadConfig, choose_kind, parse_splade_config};
use crate::load::st_configs::colbert_linear_spec;
pub use crate::load::st_configs::{
    parse_dense_config, parse_modules, parse_multi_vector_config, parse_pooling_config, parse_prompts,
    parse_sentence_bert_config,
};
use crate::load::template::parse_pair_template;
use crate::values::KindChoice;
use crate::values::{DenseSpec, ModelFolder, PairTemplate, Prompts, Quantization};
use nornir_convert::Identity;
use nornir_options::ModelKind;

impl Quantization {
    /// Why this model runs only on the CPU, if it does.
    pub fn cpu_only(&self) -> Option<String> {
        (self.target == "cpu").then(|| {
            "the model is int8 for the CPU (quantization.json); ONNX Runtime's GPU providers have no kernel for \
             its int8 operators, so a GPU would hand every such node back to the CPU"
                .to_owned()
        })
    }
}

/// Parses `quantization.json` (other keys are ignored).
pub fn parse_quantization(text: &str) -> Result<Quantization, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// What nornir reads from a Hugging Face `config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
pub struct HfConfig {
    /// The position table's length (NomicBERT's `n_positions`): an upper bound on the tokens
    /// the model reads.
    #[serde(alias = "n_positions")]
    pub max_position_embeddings: Option<usize>,
    /// The width of the token vectors (NomicBERT's `n_embd`).
    #[serde(alias = "n_embd")]
    pub hidden_size: Option<usize>,
    /// The embedding table's rows.
    pub vocab_size: Option<usize>,
    /// `bert`, `xlm-roberta`, ...: the RoBERTa family places tokens from `pad_token_id + 1`.
    pub model_type: Option<String>,
    /// The padding token (the RoBERTa family's position offset).
    pub pad_token_id: Option<usize>,
    /// The network's classes (`BertModel`, `JinaBertForMaskedLM`, ...).
    #[serde(default)]
    pub architectures: Vec<String>,
    /// `absolute`, `alibi` (JinaBERT v2), `rotary` (jina-embeddings-v3), ...
    pub position_embedding_type: Option<String>,
    /// jina-embeddings-v3: the task adapters, in `task_id` order.
    pub lora_adaptations: Option<Vec<String>>,
    /// jina-embeddings-v3: the text put before a text for each task.
    #[serde(default)]
    pub task_instructions: BTreeMap<String, String>,
    /// The family the converter's registry finds in the same text (`None`: one it does not
    /// know), for [`HfConfig::family`] and [`HfConfig::is_decoder`].
    #[serde(skip)]
    identity: Option<Identity>,
}

/// A dual encoder's text tower keys (CLIP's and SigLIP's `text_config`; jina-clip's are in its
/// `hf_model_config_kwargs`).
#[derive(Deserialize, Default)]
struct TextTower {
    max_position_embeddings: Option<usize>,
    vocab_size: Option<usize>,
    hf_model_config_kwargs: Option<Box<TextTower>>,
}

#[derive(Deserialize, Default)]
struct Towers {
    text_config: Option<TextTower>,
}

/// Parses a Hugging Face `config.json` (other keys are ignored); its sizes checked, its family
/// found by the converter's registry. A dual encoder's (CLIP, SigLIP, jina-clip) positions and
/// vocabulary are its text tower's, the defaults of its config class where `text_config` leaves
/// them out.
pub fn parse_hf_config(text: &str) -> Result<HfConfig, String> {
    let mut c: HfConfig = from_json(text)?;
    c.identity = nornir_convert::identify(text);
    if let Some(default_positions) = c.identity.and_then(|i| i.text_positions) {
        let mut tower = from_json::<Towers>(text)?.text_config.unwrap_or_default();
        if let Some(inner) = tower.hf_model_config_kwargs.take() {
            tower = *inner;
        }
        c.max_position_embeddings =
            c.max_position_embeddings.or(tower.max_position_embeddings).or(Some(default_positions));
        c.vocab_size = c.vocab_size.or(tower.vocab_size);
    }
    maybe_in("hidden_size", c.hidden_size, 1..=MAX_WIDTH, "the width of the token vectors")?;
    maybe_in("vocab_size", c.vocab_size, 1..=MAX_WIDTH, "the embedding table's rows")?;
    let positions = "the positions the model places, its longest input";
    maybe_in("max_position_embeddings", c.max_position_embeddings, 1..=MAX_TOKENS, positions)?;
    if let (Some(0), Some(rows)) = (c.usable_positions(), c.max_position_embeddings) {
        return Err(format!(
            "pad_token_id is {}, which leaves none of the {rows} positions (max_position_embeddings) to place a \
             token at: the RoBERTa family counts positions from pad_token_id + 1: fix the config",
            c.pad_token_id.unwrap_or(1)
        ));
    }
    Ok(c)
}

impl HfConfig {
    /// The most tokens the position table can place: `max_position_embeddings`, less the
    /// RoBERTa family's offset (its positions start at `pad_token_id + 1`: XLM-RoBERTa's 514
    /// rows place 512 tokens).
    pub fn usable_positions(&self) -> Option<usize> {
        let offset = match self.model_type.as_deref() {
            Some("roberta" | "xlm-roberta" | "xlm-roberta-xl" | "camembert") => {
                self.pad_token_id.unwrap_or(1).saturating_add(1)
            }
            _ => 0,
        };
        self.max_position_embeddings.map(|n| n.saturating_sub(offset))
    }

    /// A causal decoder (a decoder family of the converter's registry, or any `*ForCausalLM`):
    /// its token vectors see only the tokens before them, so only its last token sees the whole
    /// text.
    pub fn is_decoder(&self) -> bool {
        self.identity.is_some_and(|i| i.decoder) || self.architectures.iter().any(|a| a.ends_with("ForCausalLM"))
    }

    /// The family, named for a person: the converter registry's name for it, else `model_type`,
    /// else the architecture; with the first architecture.
    pub fn family(&self) -> Option<String> {
        let arch = self.architectures.first().map(String::as_str).unwrap_or_default();
        let named = match (self.identity, self.model_type.as_deref()) {
            (Some(identity), _) => identity.name,
            (None, Some(model_type)) => model_type,
            (None, None) if arch.is_empty() => return None,
            (None, None) => arch,
        };
        Some(if arch.is_empty() { named.to_owned() } else { format!("{named}, {arch}") })
    }
}

impl ModelFolder {
    /// Whether vectors are normalised when the caller does not say, and why: as
    /// sentence-transformers does where `modules.json` exists, else normalised (as TEI and
    /// fastembed do).
    pub fn normalize_default(&self) -> (bool, &'static str) {
        if let Some(fixed) = self.kind.kind.fixed_normalization() {
            return fixed;
        }
        match &self.modules {
            Some(m) if m.normalize => (true, "modules.json lists a Normalize module"),
            Some(_) => (false, "modules.json lists no Normalize module"),
            None => (true, "no modules.json; nornir normalises by default"),
        }
    }

    /// Why this model runs only on the CPU, if it does: a static model, or an int8 model for the
    /// CPU.
    pub fn cpu_only(&self) -> Option<String> {
        if self.is_static {
            return Some(crate::load::static_model::ON_THE_CPU.to_owned());
        }
        self.quantization.as_ref().and_then(Quantization::cpu_only)
    }

    /// Reads and checks the folder. `model_file` overrides the model's file name (relative to
    /// `dir`). A static model's folder (Model2Vec) is described without its table read.
    pub fn open(dir: &Path, model_file: Option<&Path>) -> Result<Self> {
        if let Some(layout) = crate::load::static_model::find(dir)? {
            let settings = crate::load::static_model::settings(dir, &layout)?;
            return Ok(crate::load::static_model::folder(dir, &layout, settings.max_length));
        }
        let err = |reason: String| EmbedError::model(dir, reason);
        let (model_file, tokenizer_file) = model_and_tokenizer(dir, model_file)?;
        let read_json = |name: &str| read_json(dir, name);
        let max_seq_length = match read_json("sentence_bert_config.json")? {
            Some(t) => parse_sentence_bert_config(&t).map_err(|e| err(format!("sentence_bert_config.json: {e}")))?,
            None => None,
        };
        let (hf, head) = match read_json("config.json")? {
            Some(t) => {
                let parsed = parse_hf_config(&t).and_then(|hf| Ok((hf, from_json(&t)?)));
                parsed.map_err(|e| err(format!("config.json: {e}")))?
            }
            None => (HfConfig::default(), HeadConfig::default()),
        };
        let mut hidden_size = hf.hidden_size;
        let modules = match read_json("modules.json")? {
            Some(t) => Some(parse_modules(&t).map_err(|e| err(format!("modules.json: {e}")))?),
            None => None,
        };
        let pooling_dir = modules.as_ref().and_then(|m| m.pooling_dir.as_deref()).unwrap_or("1_Pooling");
        let pooling_config = format!("{pooling_dir}/config.json");
        let pooling = match read_json(&pooling_config)? {
            Some(t) => {
                let spec = parse_pooling_config(&t).map_err(|e| err(format!("{pooling_config}: {e}")))?;
                hidden_size = hidden_size.or(spec.dimension);
                Some(spec)
            }
            None => None,
        };
        let splade = match modules.as_ref().and_then(|m| m.splade_dir.as_deref()) {
            Some(d) => {
                let name = if d.is_empty() { "config.json".to_owned() } else { format!("{d}/config.json") };
                let text = read_json(&name)?.unwrap_or_else(|| "{}".to_owned());
                Some(parse_splade_config(&text).map_err(|e| err(format!("{name}: {e}")))?)
            }
            None => None,
        };
        let dense =
            dense_specs(dir, modules.as_ref().map(|m| m.dense_dirs.as_slice()).unwrap_or_default(), hidden_size)?;
        let listed_pooling = modules.as_ref().is_some_and(|m| m.pooling_dir.is_some());
        let per_token = modules.as_ref().is_some_and(|m| m.dense_per_token);
        let mut kind = choose_kind(&head, splade, listed_pooling).map_err(|e| err(format!("config.json: {e}")))?;
        if per_token {
            kind = KindChoice::multi_vector(
                "modules.json lists Dense modules and no Pooling module: a vector per token (PyLate)",
            );
        }
        if !dense.is_empty() && !matches!(kind.kind, ModelKind::Embedder | ModelKind::MultiVector) {
            return Err(err(format!(
                "modules.json lists Dense modules, which apply to an embedder's vectors; this is {}",
                kind.kind.with_article()
            )));
        }
        let st_config = read_json("config_sentence_transformers.json")?;
        let prompts = match &st_config {
            Some(t) => parse_prompts(t).map_err(|e| err(format!("config_sentence_transformers.json: {e}")))?,
            None => Prompts::default(),
        };
        let exists = |name: &str| dir.join(name).is_file();
        let multi_vector = if per_token {
            Some(
                parse_multi_vector_config(st_config.as_deref())
                    .map_err(|e| err(format!("config_sentence_transformers.json: {e}")))?,
            )
        } else {
            exists(COLBERT_LINEAR).then(|| colbert_linear_spec(COLBERT_LINEAR))
        };
        let sparse_head = exists(SPARSE_LINEAR).then(|| SPARSE_LINEAR.to_owned());
        let (pair_template, quantization) = template_and_quantization(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            tokenizer_file,
            max_seq_length,
            max_position_embeddings: hf.usable_positions(),
            hidden_size,
            vocab_size: hf.vocab_size,
            pooling,
            modules,
            prompts,
            family: hf.family(),
            decoder: hf.is_decoder(),
            tasks: hf.lora_adaptations,
            task_instructions: hf.task_instructions,
            quantization,
            kind,
            dense,
            multi_vector,
            sparse_head,
            pair_template,
            is_static: false,
            vision_file: vision_beside(&model_file),
            model_file,
        })
    }
}

/// The folder's `model_file` (else `model.onnx` or `onnx/model.onnx`) and `tokenizer.json`, each
/// checked to be there.
fn model_and_tokenizer(dir: &Path, model_file: Option<&Path>) -> Result<(PathBuf, PathBuf)> {
    let err = |reason: String| EmbedError::model(dir, reason);
    if !dir.is_dir() {
        return Err(err("no such folder; pass a model folder with model.onnx and tokenizer.json".to_owned()));
    }
    let model_file = match model_file {
        Some(f) => {
            let p = if f.is_absolute() { f.to_path_buf() } else { dir.join(f) };
            if !p.is_file() {
                return Err(err(format!("model file {} does not exist", p.display())));
            }
            p
        }
        None => ["model.onnx", "onnx/model.onnx", TEXT_MODEL, "onnx/text_model.onnx"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| err("no model.onnx or onnx/model.onnx; name the file with `model_file`".to_owned()))?,
    };
    let tokenizer_file = dir.join("tokenizer.json");
    if !tokenizer_file.is_file() {
        return Err(err(
            "no tokenizer.json (export it with the model's tokenizer: tokenizer.save_pretrained)".to_owned()
        ));
    }
    Ok((model_file, tokenizer_file))
}

/// A dual encoder's text graph, as `nornir vector convert` and the common exporters name it.
const TEXT_MODEL: &str = "text_model.onnx";

/// A dual encoder's vision graph: `vision_model.onnx` beside a text graph named
/// `text_model.onnx` (CLIP and SigLIP, converted or exported).
fn vision_beside(model_file: &Path) -> Option<PathBuf> {
    let name = model_file.file_name()?.to_str()?;
    let vision =
        name.strip_prefix("text_model").map(|rest| model_file.with_file_name(format!("vision_model{rest}")))?;
    vision.is_file().then_some(vision)
}

/// The text of the folder's file `name`; `None` where it is absent.
fn read_json(dir: &Path, name: &str) -> Result<Option<String>> {
    match read_bounded(&dir.join(name), CONFIG_MAX_BYTES) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(EmbedError::model_because(dir, name, e)),
    }
}

/// The Dense modules in `paths`, each reading the width the one before gives, the first
/// `hidden_size` (the pooled width) where known.
fn dense_specs(dir: &Path, paths: &[String], hidden_size: Option<usize>) -> Result<Vec<DenseSpec>> {
    let err = |reason: String| EmbedError::model(dir, reason);
    let mut dense: Vec<DenseSpec> = Vec::new();
    for path in paths {
        let name = format!("{path}/config.json");
        let text =
            read_json(dir, &name)?.ok_or_else(|| err(format!("{name} is missing (the Dense module's config)")))?;
        let spec = parse_dense_config(path, &text).map_err(|e| err(format!("{name}: {e}")))?;
        let (takes, from) = match dense.last() {
            Some(before) => (Some(before.out_features), format!("{}'s out_features", before.path)),
            None => (hidden_size, "the pooled vectors' width (hidden size)".to_owned()),
        };
        if let Some(w) = takes.filter(|&w| w != spec.in_features) {
            return Err(err(format!("{name}: in_features {} does not match {from}, {w}", spec.in_features)));
        }
        dense.push(spec);
    }
    Ok(dense)
}

/// The folder's `pair_template.json` and `quantization.json`, where it has them.
fn template_and_quantization(dir: &Path) -> Result<(Option<PairTemplate>, Option<Quantization>)> {
    let err = |reason: String| EmbedError::model(dir, reason);
    let pair_template = match read_json(dir, "pair_template.json")? {
        Some(t) => Some(parse_pair_template(&t).map_err(|e| err(format!("pair_template.json: {e}")))?),
        None => None,
    };
    let quantization = match read_json(dir, "quantization.json")? {
        Some(t) => Some(parse_quantization(&t).map_err(|e| err(format!("quantization.json: {e}")))?),
        None => None,
    };
    Ok((pair_template, quantization))
}

/// BGE-M3's heads as `nornir vector convert` writes them from `colbert_linear.pt` and
/// `sparse_linear.pt`.
pub(crate) const COLBERT_LINEAR: &str = "colbert_linear.safetensors";
/// See [`COLBERT_LINEAR`].
pub(crate) const SPARSE_LINEAR: &str = "sparse_linear.safetensors";

#[cfg(test)]
mod tests;
