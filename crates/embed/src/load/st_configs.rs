//! The sentence-transformers files of a model folder read as text: `modules.json`, the Pooling,
//! Dense and `sentence_bert_config.json` configs, and `config_sentence_transformers.json`'s
//! prompts and PyLate's token rules; each number checked where it is read.

use serde::Deserialize;

use crate::load::checks::{MAX_TOKENS, MAX_WIDTH, count_in, from_json, maybe_in};
use crate::math::dense::Activation;
use crate::values::{DenseSpec, Modules, MultiVectorSpec, PoolingSpec, Prompts, TokenVectorSource};
use nornir_options::Pooling;

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
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
pub(crate) fn colbert_linear_spec(file: &str) -> MultiVectorSpec {
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
