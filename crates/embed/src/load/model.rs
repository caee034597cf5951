//! The model folder in the Hugging Face / sentence-transformers layout, read and checked up front.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{EmbedError, Result};
use crate::kinds::dense::Activation;
use crate::load::checks::{MAX_TOKENS, MAX_WIDTH, count_in, from_json, maybe_in};
use crate::load::files::{CONFIG_MAX_BYTES, read_bounded};
use crate::load::kind::{HeadConfig, KindChoice, choose_kind, parse_splade_config};
use crate::load::template::parse_pair_template;
use crate::report::values::{
    DenseSpec, ModelFolder, Modules, MultiVectorSpec, PairTemplate, PoolingSpec, Prompts, Quantization,
    TokenVectorSource,
};
use nornir_options::ModelKind;
use nornir_options::Pooling;

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

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
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
}

/// Parses a Hugging Face `config.json` (other keys are ignored); its sizes checked.
pub fn parse_hf_config(text: &str) -> Result<HfConfig, String> {
    let c: HfConfig = from_json(text)?;
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

    /// A causal decoder (Qwen3, Qwen2, Llama, Mistral, or any `*ForCausalLM`): its token vectors
    /// see only the tokens before them, so only its last token sees the whole text.
    pub fn is_decoder(&self) -> bool {
        matches!(self.model_type.as_deref(), Some("qwen3" | "qwen2" | "llama" | "mistral"))
            || self.architectures.iter().any(|a| a.ends_with("ForCausalLM"))
    }

    /// The family, named for a person: from `architectures`, `model_type` and the positions.
    pub fn family(&self) -> Option<String> {
        let arch = self.architectures.first().map(String::as_str).unwrap_or_default();
        let positions = self.position_embedding_type.as_deref();
        let named = match self.model_type.as_deref() {
            _ if arch.starts_with("JinaBert") => "JinaBERT v2 (ALiBi)",
            Some("bert") if positions == Some("alibi") => "JinaBERT v2 (ALiBi)",
            _ if arch.starts_with("XLMRobertaLoRA") => "jina-embeddings-v3 (XLM-RoBERTa, rotary, task LoRA)",
            Some("xlm-roberta") if positions == Some("rotary") => "jina-embeddings-v3 (XLM-RoBERTa, rotary, task LoRA)",
            Some("nomic_bert") => "NomicBERT (rotary, SwiGLU)",
            Some("new") => "GTE (NewModel: rotary, GeGLU)",
            Some("modernbert") => "ModernBERT (rotary, local and global attention)",
            Some("qwen3") => "Qwen3 (decoder: causal, grouped-query, rotary)",
            Some("qwen2") => "Qwen2 (decoder: causal, grouped-query, rotary)",
            Some("llama") => "Llama (decoder: causal, grouped-query, rotary)",
            Some("mistral") => "Mistral (decoder: causal, grouped-query, rotary)",
            Some("bert") => "BERT",
            Some("xlm-roberta") => "XLM-RoBERTa",
            Some(other) => other,
            None if arch.is_empty() => return None,
            None => arch,
        };
        Some(if arch.is_empty() { named.to_owned() } else { format!("{named}, {arch}") })
    }
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type", default)]
    kind: String,
}

/// Parses `modules.json`. The transformer (the ONNX graph), Pooling, SpladePooling, Dense and
/// Normalize modules are what nornir applies; any other module (WordEmbeddings, LayerNorm, ...) is
/// an error naming it, since leaving it out would give other vectors than sentence-transformers
/// does. Dense modules apply to the pooled vector, so they must come after Pooling and before
/// Normalize, the one order nornir applies them in; with no Pooling module at all they apply to
/// every token (a PyLate late-interaction model).
pub fn parse_modules(text: &str) -> Result<Modules, String> {
    let modules: Vec<Module> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let class = |m: &Module| m.kind.rsplit('.').next().unwrap_or_default().to_owned();
    let mut out = Modules::default();
    let mut before_pooling: Option<&Module> = None;
    for m in &modules {
        match class(m).as_str() {
            "Transformer" | "MLMTransformer" => {}
            "Pooling" => out.pooling_dir = Some(m.path.clone()),
            "SpladePooling" => out.splade_dir = Some(m.path.clone()),
            "Normalize" => out.normalize = true,
            "Dense" if out.normalize => {
                return Err(format!(
                    "module {:?} ({}) is listed after Normalize; nornir applies Dense modules after Pooling and before Normalize",
                    m.kind, m.path
                ));
            }
            "Dense" => {
                if out.pooling_dir.is_none() {
                    before_pooling.get_or_insert(m);
                }
                out.dense_dirs.push(m.path.clone());
            }
            _ => {
                return Err(format!(
                    "module {:?} ({}) is not one nornir applies (it applies the transformer, Pooling, SpladePooling, Dense and \
                     Normalize); its output would differ from sentence-transformers', so the model is refused",
                    m.kind, m.path
                ));
            }
        }
    }
    match before_pooling {
        Some(m) if out.pooling_dir.is_some() || out.splade_dir.is_some() => Err(format!(
            "module {:?} ({}) is listed before Pooling; nornir applies Dense modules after Pooling and before Normalize",
            m.kind, m.path
        )),
        Some(_) => {
            out.dense_per_token = true;
            Ok(out)
        }
        None => Ok(out),
    }
}

/// PyLate's keys in `config_sentence_transformers.json`.
#[derive(Deserialize, Default)]
struct PylateConfig {
    query_prefix: Option<String>,
    document_prefix: Option<String>,
    query_length: Option<usize>,
    document_length: Option<usize>,
    do_query_expansion: Option<bool>,
    attend_to_expansion_tokens: Option<bool>,
    skiplist_words: Option<Vec<String>>,
}

/// Python's `string.punctuation`: PyLate's default skiplist.
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// A PyLate model's token rules from `config_sentence_transformers.json` (`text`; `None`: the
/// file is absent), with PyLate's defaults for the keys it lacks.
pub fn parse_multi_vector_config(text: Option<&str>) -> Result<MultiVectorSpec, String> {
    let c: PylateConfig = match text {
        Some(t) => from_json(t)?,
        None => PylateConfig::default(),
    };
    // Cut to the model's positions when it loads; bounded here where the model states none.
    let lengths = "the most tokens PyLate gives a query or a document";
    maybe_in("query_length", c.query_length, 1..=MAX_TOKENS, lengths)?;
    maybe_in("document_length", c.document_length, 1..=MAX_TOKENS, lengths)?;
    let expansion = c.do_query_expansion.unwrap_or(true);
    Ok(MultiVectorSpec {
        query_prefix: c.query_prefix.unwrap_or_else(|| "[Q] ".to_owned()),
        document_prefix: c.document_prefix.unwrap_or_else(|| "[D] ".to_owned()),
        query_length: Some(c.query_length.unwrap_or(32)),
        document_length: Some(c.document_length.unwrap_or(180)),
        do_query_expansion: expansion,
        // PyLate attends to no expansion token when it makes none.
        attend_to_expansion_tokens: expansion && c.attend_to_expansion_tokens.unwrap_or(false),
        skiplist_words: c.skiplist_words.unwrap_or_else(|| PUNCTUATION.chars().map(String::from).collect()),
        source: TokenVectorSource::DenseModules,
    })
}

/// BGE-M3's ColBERT head: its token rules are FlagEmbedding's (no markers, no expansion, no
/// skiplist, the model's length).
fn colbert_linear_spec(file: &str) -> MultiVectorSpec {
    MultiVectorSpec {
        query_prefix: String::new(),
        document_prefix: String::new(),
        query_length: None,
        document_length: None,
        do_query_expansion: false,
        attend_to_expansion_tokens: false,
        skiplist_words: Vec::new(),
        source: TokenVectorSource::ColbertLinear(file.to_owned()),
    }
}

/// A Dense module's `config.json`, as sentence-transformers writes it.
#[derive(Deserialize)]
struct DenseConfig {
    in_features: usize,
    out_features: usize,
    #[serde(default = "yes")]
    bias: bool,
    activation_function: Option<String>,
    /// sentence-transformers 5: the feature it reads; nornir applies it to the pooled vector only.
    module_input_name: Option<String>,
    module_output_name: Option<String>,
}

fn yes() -> bool {
    true
}

/// Parses a Dense module's `config.json` (its folder `path`): widths, bias and an activation
/// nornir applies (other keys are ignored).
pub fn parse_dense_config(path: &str, text: &str) -> Result<DenseSpec, String> {
    let c: DenseConfig = from_json(text)?;
    Activation::from_torch(c.activation_function.as_deref())?;
    for (key, name) in [("module_input_name", &c.module_input_name), ("module_output_name", &c.module_output_name)] {
        if let Some(n) = name.as_deref().filter(|n| *n != "sentence_embedding") {
            return Err(format!("{key} {n:?}: nornir applies a Dense module to the sentence_embedding only"));
        }
    }
    count_in("in_features", c.in_features, 1..=MAX_WIDTH, "the width the layer reads")?;
    count_in("out_features", c.out_features, 1..=MAX_WIDTH, "the width the layer gives")?;
    Ok(DenseSpec {
        path: path.to_owned(),
        in_features: c.in_features,
        out_features: c.out_features,
        bias: c.bias,
        activation: c.activation_function.unwrap_or_else(|| "torch.nn.modules.activation.Tanh".to_owned()),
    })
}

#[derive(Deserialize)]
#[serde(default)]
struct PoolingConfig {
    word_embedding_dimension: Option<usize>,
    pooling_mode_cls_token: bool,
    pooling_mode_mean_tokens: bool,
    pooling_mode_max_tokens: bool,
    pooling_mode_mean_sqrt_len_tokens: bool,
    pooling_mode_weightedmean_tokens: bool,
    pooling_mode_lasttoken: bool,
    include_prompt: bool,
}

impl Default for PoolingConfig {
    fn default() -> Self {
        Self {
            word_embedding_dimension: None,
            pooling_mode_cls_token: false,
            pooling_mode_mean_tokens: false,
            pooling_mode_max_tokens: false,
            pooling_mode_mean_sqrt_len_tokens: false,
            pooling_mode_weightedmean_tokens: false,
            pooling_mode_lasttoken: false,
            include_prompt: true,
        }
    }
}

/// Parses a sentence-transformers pooling config.
pub fn parse_pooling_config(text: &str) -> Result<PoolingSpec, String> {
    let c: PoolingConfig = from_json(text)?;
    let width = "the width of the vectors pooled";
    maybe_in("word_embedding_dimension", c.word_embedding_dimension, 1..=MAX_WIDTH, width)?;
    let set: Vec<Pooling> = [
        (c.pooling_mode_mean_tokens, Pooling::Mean),
        (c.pooling_mode_cls_token, Pooling::Cls),
        (c.pooling_mode_lasttoken, Pooling::Last),
        (c.pooling_mode_max_tokens, Pooling::Max),
        (c.pooling_mode_mean_sqrt_len_tokens, Pooling::MeanSqrtLen),
        (c.pooling_mode_weightedmean_tokens, Pooling::WeightedMean),
    ]
    .into_iter()
    .filter_map(|(on, p)| on.then_some(p))
    .collect();
    let mode = match set.as_slice() {
        [one] => *one,
        [] => return Err("no pooling_mode_* is true; override with `pooling`".to_owned()),
        several => {
            return Err(format!(
                "several pooling modes at once ({}, concatenated by sentence-transformers) are not supported; \
                 override with `pooling`",
                several.iter().map(ToString::to_string).collect::<Vec<_>>().join(" + ")
            ));
        }
    };
    Ok(PoolingSpec { mode, dimension: c.word_embedding_dimension, include_prompt: c.include_prompt })
}

/// Parses `sentence_bert_config.json`'s `max_seq_length`.
pub fn parse_sentence_bert_config(text: &str) -> Result<Option<usize>, String> {
    let c: SentenceBertConfig = from_json(text)?;
    maybe_in("max_seq_length", c.max_seq_length, 1..=MAX_TOKENS, "the most tokens of a text the model reads")
}

/// Parses `config_sentence_transformers.json` (other keys are ignored).
pub fn parse_prompts(text: &str) -> Result<Prompts, String> {
    let p: Prompts = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if let Some(name) = &p.default_prompt_name
        && !p.prompts.contains_key(name)
    {
        return Err(format!("default_prompt_name {name:?} is not one of its prompts"));
    }
    Ok(p)
}

impl ModelFolder {
    /// Whether vectors are normalised when the caller does not say, and why: as
    /// sentence-transformers does where `modules.json` exists, else normalised (as TEI and
    /// fastembed do).
    pub fn normalize_default(&self) -> (bool, &'static str) {
        match self.kind.kind {
            ModelKind::SparseEncoder => return (false, "a sparse encoder's term weights are not normalised"),
            ModelKind::CrossEncoder => return (false, "a cross-encoder's scores are not normalised"),
            ModelKind::MultiVector => return (true, "token vectors are normalised, as PyLate does"),
            ModelKind::Embedder => {}
        }
        match &self.modules {
            Some(m) if m.normalize => (true, "modules.json lists a Normalize module"),
            Some(_) => (false, "modules.json lists no Normalize module"),
            None => (true, "no modules.json; nornir normalises by default"),
        }
    }

    /// Reads and checks the folder. `model_file` overrides the model's file name (relative to `dir`).
    pub fn open(dir: &Path, model_file: Option<&Path>) -> Result<Self> {
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
            model_file,
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
        None => ["model.onnx", "onnx/model.onnx"]
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
mod tests {
    use super::*;

    #[test]
    fn configs() {
        let modules = r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
            {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#;
        assert_eq!(
            parse_modules(modules),
            Ok(Modules {
                pooling_dir: Some("1_Pooling".to_owned()),
                normalize: true,
                splade_dir: None,
                dense_dirs: Vec::new(),
                dense_per_token: false
            })
        );
        let jina_v3 = r#"[{"idx":0,"name":"transformer","path":"","type":"custom_st.Transformer"},
            {"idx":1,"name":"pooler","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]"#;
        assert_eq!(
            parse_modules(jina_v3),
            Ok(Modules {
                pooling_dir: Some("1_Pooling".to_owned()),
                normalize: false,
                splade_dir: None,
                dense_dirs: Vec::new(),
                dense_per_token: false
            })
        );
        let m = |types: &[&str]| {
            let list: Vec<String> = types
                .iter()
                .enumerate()
                .map(|(i, t)| format!(r#"{{"path":"{i}_{t}","type":"sentence_transformers.models.{t}"}}"#))
                .collect();
            parse_modules(&format!("[{}]", list.join(",")))
        };
        let dense = m(&["Transformer", "Pooling", "Dense", "Dense", "Normalize"]).expect("dense");
        assert_eq!(dense.dense_dirs, ["2_Dense", "3_Dense"]);
        assert!(dense.normalize);
        for (order, why) in [
            (&["Transformer", "Dense", "Pooling"][..], "before Pooling"),
            (&["Transformer", "Pooling", "Normalize", "Dense"], "after Normalize"),
        ] {
            let e = m(order).unwrap_err();
            assert!(e.contains("sentence_transformers.models.Dense") && e.contains(why), "{e}");
        }
        let e = m(&["Transformer", "Pooling", "LayerNorm"]).unwrap_err();
        assert!(e.contains("sentence_transformers.models.LayerNorm") && e.contains("2_LayerNorm"), "{e}");
        assert!(parse_modules("{").is_err());

        let spec = parse_dense_config(
            "2_Dense",
            r#"{"in_features":384,"out_features":256,"bias":false,"activation_function":"torch.nn.modules.linear.Identity"}"#,
        )
        .expect("dense config");
        assert_eq!((spec.in_features, spec.out_features, spec.bias), (384, 256, false));
        let tanh = parse_dense_config("d", r#"{"in_features":4,"out_features":2}"#).expect("defaults");
        assert_eq!((tanh.bias, tanh.activation.as_str()), (true, "torch.nn.modules.activation.Tanh"));
        for (config, why) in [
            (
                r#"{"in_features":4,"out_features":2,"activation_function":"torch.nn.modules.activation.Softplus"}"#,
                "Softplus",
            ),
            (r#"{"in_features":4}"#, "out_features"),
            (r#"{"in_features":0,"out_features":2}"#, "positive"),
            (r#"{"in_features":4,"out_features":2,"module_input_name":"token_embeddings"}"#, "token_embeddings"),
        ] {
            let e = parse_dense_config("d", config).unwrap_err();
            assert!(e.contains(why), "{e}");
        }

        let pooling =
            r#"{"word_embedding_dimension":384,"pooling_mode_cls_token":false,"pooling_mode_mean_tokens":true}"#;
        assert_eq!(
            parse_pooling_config(pooling),
            Ok(PoolingSpec { mode: Pooling::Mean, dimension: Some(384), include_prompt: true })
        );
        for (key, mode) in [
            ("pooling_mode_max_tokens", Pooling::Max),
            ("pooling_mode_mean_sqrt_len_tokens", Pooling::MeanSqrtLen),
            ("pooling_mode_weightedmean_tokens", Pooling::WeightedMean),
            ("pooling_mode_lasttoken", Pooling::Last),
        ] {
            let spec = parse_pooling_config(&format!(r#"{{"{key}":true,"include_prompt":false}}"#)).expect(key);
            assert_eq!((spec.mode, spec.include_prompt), (mode, false), "{key}");
        }
        let both = r#"{"pooling_mode_mean_tokens":true,"pooling_mode_max_tokens":true}"#;
        assert!(parse_pooling_config(both).unwrap_err().contains("mean + max"));
        assert!(parse_pooling_config("{}").is_err());

        assert_eq!(parse_sentence_bert_config(r#"{"max_seq_length":256}"#), Ok(Some(256)));
        assert!(parse_sentence_bert_config(r#"{"max_seq_length":-1}"#).is_err());

        let p = parse_prompts(r#"{"prompts":{"query":"query: ","passage":"passage: "},"default_prompt_name":"query"}"#)
            .expect("prompts");
        assert_eq!((p.prompts["passage"].as_str(), p.default_prompt_name.as_deref()), ("passage: ", Some("query")));
        assert!(parse_prompts(r#"{"prompts":{},"default_prompt_name":"query"}"#).is_err());
        assert_eq!(parse_prompts(r#"{"__version__":{}}"#), Ok(Prompts::default()));

        let hf = parse_hf_config(
            r#"{"hidden_size":8,"lora_adaptations":["retrieval.query","text-matching"],
                "task_instructions":{"retrieval.query":"Represent the query: "}}"#,
        )
        .expect("config");
        assert_eq!(
            hf.lora_adaptations.as_deref(),
            Some(&["retrieval.query".to_owned(), "text-matching".to_owned()][..])
        );
        assert_eq!(hf.task_instructions["retrieval.query"], "Represent the query: ");
        let xlmr = parse_hf_config(r#"{"model_type":"xlm-roberta","max_position_embeddings":514,"pad_token_id":1}"#);
        assert_eq!(xlmr.expect("config").usable_positions(), Some(512));
        let bert = parse_hf_config(r#"{"model_type":"bert","max_position_embeddings":512,"pad_token_id":0}"#);
        assert_eq!(bert.expect("config").usable_positions(), Some(512));
    }

    #[test]
    fn the_family_is_named_from_the_config_and_nomics_keys_are_read() {
        let family = |text: &str| parse_hf_config(text).expect("config").family();
        assert_eq!(
            family(
                r#"{"architectures":["JinaBertForMaskedLM"],"model_type":"bert","position_embedding_type":"alibi"}"#
            )
            .as_deref(),
            Some("JinaBERT v2 (ALiBi), JinaBertForMaskedLM")
        );
        assert_eq!(
            family(
                r#"{"architectures":["XLMRobertaModel"],"model_type":"xlm-roberta","position_embedding_type":"rotary"}"#
            )
            .as_deref(),
            Some("jina-embeddings-v3 (XLM-RoBERTa, rotary, task LoRA), XLMRobertaModel")
        );
        assert_eq!(
            family(r#"{"model_type":"modernbert"}"#).as_deref(),
            Some("ModernBERT (rotary, local and global attention)")
        );
        assert_eq!(
            family(r#"{"architectures":["BertModel"],"model_type":"bert"}"#).as_deref(),
            Some("BERT, BertModel")
        );
        assert_eq!(family("{}"), None);
        let nomic = parse_hf_config(r#"{"model_type":"nomic_bert","n_positions":8192,"n_embd":768}"#).expect("config");
        assert_eq!((nomic.usable_positions(), nomic.hidden_size), (Some(8192), Some(768)));
    }

    #[test]
    fn a_pylate_folder_is_dense_on_every_token_with_its_rules() {
        let pylate = r#"[{"path":"","type":"sentence_transformers.models.Transformer"},
                         {"path":"1_Dense","type":"pylate.models.Dense.Dense"}]"#;
        let m = parse_modules(pylate).expect("modules");
        assert!(m.dense_per_token && m.pooling_dir.is_none());
        assert_eq!(m.dense_dirs, ["1_Dense"]);
        let before = r#"[{"path":"","type":"sentence_transformers.models.Transformer"},
                         {"path":"1_Dense","type":"sentence_transformers.models.Dense"},
                         {"path":"2_Pooling","type":"sentence_transformers.models.Pooling"}]"#;
        assert!(parse_modules(before).unwrap_err().contains("before Pooling"));
        let defaults = parse_multi_vector_config(None).expect("defaults");
        assert_eq!((defaults.query_prefix.as_str(), defaults.document_prefix.as_str()), ("[Q] ", "[D] "));
        assert_eq!((defaults.query_length, defaults.document_length), (Some(32), Some(180)));
        assert!(defaults.do_query_expansion && !defaults.attend_to_expansion_tokens);
        assert_eq!(defaults.skiplist_words.len(), 32, "string.punctuation");
        let stanford = parse_multi_vector_config(Some(
            r#"{"query_prefix":"[unused0]","query_length":64,"do_query_expansion":false,"attend_to_expansion_tokens":true}"#,
        ))
        .expect("config");
        assert_eq!((stanford.query_prefix.as_str(), stanford.query_length), ("[unused0]", Some(64)));
        assert!(!stanford.attend_to_expansion_tokens, "no expansion, nothing to attend to");
    }

    #[test]
    fn hostile_numbers_in_the_folders_configs_are_refused_naming_the_key_and_value() {
        let refused = |e: Result<(), String>, needle: &str| {
            let e = e.expect_err(needle);
            assert!(e.contains(needle) && e.ends_with("fix the config") && !e.contains('\n'), "{needle}: {e}");
        };
        for (text, needle) in [
            (r#"{"hidden_size":0}"#, "hidden_size is 0, it must be a positive whole number, at most 16777216"),
            (r#"{"vocab_size":0}"#, "vocab_size is 0"),
            (r#"{"max_position_embeddings":0}"#, "max_position_embeddings is 0"),
            (r#"{"n_positions":1000000000000000}"#, "max_position_embeddings is 1000000000000000"),
            (r#"{"max_position_embeddings":-1}"#, "max_position_embeddings is -1, not a value of its kind"),
            (r#"{"hidden_size":"768"}"#, "hidden_size is \"768\", not a value of its kind"),
            (
                r#"{"model_type":"xlm-roberta","max_position_embeddings":514,"pad_token_id":18446744073709551615}"#,
                "pad_token_id is 18446744073709551615, which leaves none of the 514 positions",
            ),
        ] {
            refused(parse_hf_config(text).map(drop), needle);
        }
        for (text, needle) in [
            (r#"{"max_seq_length":0}"#, "max_seq_length is 0"),
            (r#"{"max_seq_length":1000000000000000}"#, "max_seq_length is 1000000000000000"),
        ] {
            refused(parse_sentence_bert_config(text).map(drop), needle);
        }
        for (text, needle) in [
            (
                r#"{"query_length":1000000000000000}"#,
                "query_length is 1000000000000000, it must be a positive whole number, at most 1048576",
            ),
            (r#"{"query_length":0}"#, "query_length is 0"),
            (r#"{"document_length":0}"#, "document_length is 0"),
            (r#"{"document_length":"180"}"#, "document_length is \"180\", not a value of its kind"),
        ] {
            refused(parse_multi_vector_config(Some(text)).map(drop), needle);
        }
        for (text, needle) in [
            (r#"{"in_features":4,"out_features":0}"#, "out_features is 0"),
            (r#"{"in_features":1000000000000000,"out_features":4}"#, "in_features is 1000000000000000"),
            (r#"{"in_features":-4,"out_features":4}"#, "in_features is -4, not a value of its kind"),
        ] {
            refused(parse_dense_config("2_Dense", text).map(drop), needle);
        }
        let pooling = r#"{"word_embedding_dimension":0,"pooling_mode_mean_tokens":true}"#;
        refused(parse_pooling_config(pooling).map(drop), "word_embedding_dimension is 0");
        // The lengths of a valid folder read as before.
        let hf = parse_hf_config(r#"{"model_type":"xlm-roberta","max_position_embeddings":514}"#).expect("config");
        assert_eq!(hf.usable_positions(), Some(512));
    }

    #[test]
    fn a_colbert_folder_asking_for_a_petabyte_query_is_refused_at_open() {
        let t = tempfile::tempdir().expect("tempdir");
        for (name, text) in [
            ("model.onnx", "x"),
            ("tokenizer.json", "{}"),
            ("config.json", r#"{"architectures":["BertModel"],"hidden_size":8}"#),
            (
                "modules.json",
                r#"[{"path":"","type":"sentence_transformers.models.Transformer"},{"path":"1_Dense","type":"pylate.models.Dense.Dense"}]"#,
            ),
            ("1_Dense/config.json", r#"{"in_features":8,"out_features":4,"bias":false}"#),
            ("config_sentence_transformers.json", r#"{"query_length":1000000000000000}"#),
        ] {
            let path = t.path().join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        let e = ModelFolder::open(t.path(), None).unwrap_err().to_string();
        assert!(
            e.contains("config_sentence_transformers.json: query_length is 1000000000000000, it must be a positive whole number, at most 1048576"),
            "{e}"
        );
    }

    #[test]
    fn missing_pieces_are_clear_errors() {
        let t = tempfile::tempdir().expect("tempdir");
        let e = ModelFolder::open(&t.path().join("nope"), None).unwrap_err().to_string();
        assert!(e.contains("no such folder"), "{e}");
        let e = ModelFolder::open(t.path(), None).unwrap_err().to_string();
        assert!(e.contains("no model.onnx"), "{e}");
        std::fs::write(t.path().join("model.onnx"), b"x").expect("write");
        let e = ModelFolder::open(t.path(), None).unwrap_err().to_string();
        assert!(e.contains("no tokenizer.json"), "{e}");
    }
}
