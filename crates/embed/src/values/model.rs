//! What the model folder says and what was made of it, as plain data: `ModelFolder`,
//! `ModelInfo`, its kind (`KindChoice`), its sentence-transformers modules, prompts and
//! quantization. Nothing here does I/O or fails; the modules that fill these in import them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use nornir_options::{ModelKind, Pooling, ScoreActivation};

/// Facts about the loaded model, for reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelInfo {
    /// What the folder holds and says.
    pub folder: ModelFolder,
    /// The width of the vectors returned: `model_dimension`, or `--dim` when given.
    pub dimension: usize,
    /// The width of the model's own output.
    pub model_dimension: usize,
    /// The most tokens of a text the model reads (longer ones are truncated or chunked).
    pub max_length: usize,
    /// Which limit `max_length` is (asked for, sentence-transformers', the tokenizer's, the
    /// positions'), with the folder's other limits.
    #[serde(default)]
    pub max_length_reason: String,
    /// How the graph computes attention: which layers leave the mask out of a batch without
    /// padding (ONNX Runtime's memory-efficient CPU path) and which build the whole matrix;
    /// empty where the graph was not read.
    #[serde(default)]
    pub attention: String,
    /// How token vectors become one vector (for a graph that does not pool itself).
    pub pooling: Pooling,
    /// Tokens of the prompt left out of the pooling (`include_prompt: false`).
    pub pooling_skips_prompt_tokens: usize,
    /// Whether vectors are L2-normalised by default.
    pub normalize: bool,
    /// Why vectors are (or are not) normalised.
    pub normalize_reason: String,
    /// The prompt put before every text, and the task.
    pub prompt: PromptChoice,
    /// Texts are padded on the left (the tokenizer's padding side).
    pub left_padding: bool,
    /// The graph's inputs that nornir feeds.
    pub inputs: Vec<String>,
    /// The graph output read.
    pub output: String,
    /// That output is one vector per text (`sentence_embedding`), not per token.
    pub output_is_pooled: bool,
    /// Why this output was chosen.
    pub output_reason: String,
    /// Set when every text runs alone, without neighbours or padding, and why: the graph
    /// quantizes activations with one scale per batch, so batching would change the vectors.
    #[serde(default)]
    pub one_text_per_run: Option<String>,
    /// Where the folder's Dense modules are applied, when it lists any: by nornir after pooling,
    /// or already inside the graph's pooled output.
    #[serde(default)]
    pub dense_reason: Option<String>,
}

/// Where a model's files are and what its configs say.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelFolder {
    /// The folder.
    pub dir: PathBuf,
    /// The ONNX graph (`model.onnx`, `onnx/model.onnx` or the one named).
    pub model_file: PathBuf,
    /// `tokenizer.json`.
    pub tokenizer_file: PathBuf,
    /// `sentence_bert_config.json`'s `max_seq_length`.
    pub max_seq_length: Option<usize>,
    /// `config.json`'s `max_position_embeddings`, less the RoBERTa family's position offset:
    /// the most tokens the model can place.
    pub max_position_embeddings: Option<usize>,
    /// `config.json`'s `hidden_size`, or the pooling config's `word_embedding_dimension`.
    pub hidden_size: Option<usize>,
    /// `config.json`'s `vocab_size`: the rows of the model's token embedding table.
    pub vocab_size: Option<usize>,
    /// The pooling module's config, if the folder has one.
    pub pooling: Option<PoolingSpec>,
    /// `modules.json`, if the folder has one: it decides whether vectors are normalised.
    pub modules: Option<Modules>,
    /// `config_sentence_transformers.json`'s prompts (empty without that file).
    pub prompts: Prompts,
    /// `config.json`'s `lora_adaptations`: the tasks a jina-embeddings-v3 graph takes as `task_id`.
    pub tasks: Option<Vec<String>>,
    /// `config.json`'s `task_instructions`: the text put before a text for each task.
    pub task_instructions: BTreeMap<String, String>,
    /// `quantization.json`, written by `nornir vector quantize`: the model is int8 for that target.
    pub quantization: Option<Quantization>,
    /// Embedder, sparse encoder or cross-encoder, and why.
    #[serde(default)]
    pub kind: KindChoice,
    /// The network's family as `config.json` describes it (`architectures`, `model_type`,
    /// `position_embedding_type`), e.g. "JinaBERT v2 (ALiBi)"; absent without a config.json.
    #[serde(default)]
    pub family: Option<String>,
    /// `config.json` names a causal decoder (a decoder family of nornir-convert's registry, such
    /// as Qwen3, or any `*ForCausalLM`): its embedder needs a pooling rule (the last token), as
    /// mean pooling reads tokens that never saw the text's end.
    #[serde(default)]
    pub decoder: bool,
    /// The `Dense` modules `modules.json` lists after pooling, in order (their configs; the
    /// weights are read when the embedder loads).
    #[serde(default)]
    pub dense: Vec<DenseSpec>,
    /// How a late-interaction model makes token vectors (a PyLate folder, or BGE-M3's
    /// `colbert_linear`); `None` when it makes none.
    #[serde(default)]
    pub multi_vector: Option<MultiVectorSpec>,
    /// BGE-M3's `sparse_linear` head: term weights from the same pass as its dense vector.
    #[serde(default)]
    pub sparse_head: Option<String>,
    /// `pair_template.json`: the prompt a decoder reranker reads each pair in (Qwen3-Reranker's,
    /// written by `nornir vector convert`); `None`: the tokenizer's own pair encoding.
    #[serde(default)]
    pub pair_template: Option<PairTemplate>,
    /// A static model (Model2Vec): `model_file` is its table of token vectors, and no ONNX
    /// Runtime runs it.
    #[serde(default)]
    pub is_static: bool,
    /// A dual encoder's vision graph (`vision_model.onnx` beside `text_model.onnx`, CLIP and
    /// SigLIP): the model embeds images into its text vectors' space. `None`: text only.
    pub vision_file: Option<PathBuf>,
}

/// A reranker's prompt around a pair: `prefix`, then `body` with `{instruction}`, `{query}` and
/// `{document}` filled in (the only part cut when a pair is too long), then `suffix`; each
/// tokenized without special tokens, as Qwen3-Reranker's model card does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PairTemplate {
    /// Before the body.
    pub prefix: String,
    /// The pair's own text.
    pub body: String,
    /// After the body, up to where the model answers.
    pub suffix: String,
    /// What `{instruction}` becomes.
    #[serde(default)]
    pub instruction: String,
}

/// How a late-interaction model turns a text into token vectors, as PyLate reads
/// `config_sentence_transformers.json` (its defaults where a key is absent), or as
/// FlagEmbedding's BGE-M3 makes its ColBERT vectors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MultiVectorSpec {
    /// The token put after the first token of a query (`[Q] `, `[unused0]`; empty: none).
    pub query_prefix: String,
    /// The token put after the first token of a document (`[D] `, `[unused1]`; empty: none).
    pub document_prefix: String,
    /// A query's tokens, the prefix included: longer ones are cut, shorter ones expanded.
    pub query_length: Option<usize>,
    /// A document's tokens at most, the prefix included.
    pub document_length: Option<usize>,
    /// Queries padded with the mask token up to `query_length`, and every query token kept.
    pub do_query_expansion: bool,
    /// The expansion tokens are attended to (else only their own vectors are read).
    pub attend_to_expansion_tokens: bool,
    /// Tokens whose vectors a document leaves out (punctuation).
    pub skiplist_words: Vec<String>,
    /// Where the token vectors come from.
    pub source: TokenVectorSource,
}

/// Where a model's token vectors come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TokenVectorSource {
    /// PyLate: the Dense modules on every token, each vector normalised; MaxSim sums over
    /// the query's tokens.
    DenseModules,
    /// BGE-M3: the head in this file on every token after the first, normalised; MaxSim is the
    /// mean over the query's tokens (FlagEmbedding's `colbert_score`).
    ColbertLinear(String),
}

/// One sentence-transformers `Dense` module: `activation(W x + b)` on the pooled vector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DenseSpec {
    /// Its folder (`2_Dense`).
    pub path: String,
    /// The width it takes.
    pub in_features: usize,
    /// The width it gives.
    pub out_features: usize,
    /// Whether it adds a bias.
    pub bias: bool,
    /// Its `activation_function`, a torch class (`torch.nn.modules.activation.Tanh`).
    pub activation: String,
}

/// What `quantization.json` says about how the model was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Quantization {
    /// `"nornir int8"`.
    pub format: String,
    /// The hardware the int8 operators are for: `"cpu"`.
    pub target: String,
    /// The int8 operator written (`MatMulIntegerToFloat`).
    pub operator: Option<String>,
    /// `"int8"` or `"uint8"`: how the weights are stored (absent before nornir recorded it: int8).
    #[serde(default)]
    pub weights: Option<String>,
    /// `"per-token"` or `"per-tensor"`: how activations are scaled (absent: per-tensor).
    #[serde(default)]
    pub activations: Option<String>,
    /// The subgraphs replaced by one ONNX Runtime operator each (`"attention"`, `"gelu"`, `"qkv"`),
    /// one entry per subgraph (absent before nornir fused any).
    #[serde(default, deserialize_with = "fusion_names")]
    pub fused: Vec<String>,
}

/// `quantization.json`'s `fused` list (`[{"fusion": "gelu", "node": ...}, ...]`) as the fusions' names.
fn fusion_names<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    struct Entry {
        fusion: String,
    }
    Ok(Vec::<Entry>::deserialize(d)?.into_iter().map(|e| e.fusion).collect())
}

/// What `modules.json` lists, as far as nornir applies it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Modules {
    /// The pooling module's folder, if one is listed.
    pub pooling_dir: Option<String>,
    /// Whether a Normalize module is listed.
    pub normalize: bool,
    /// The SpladePooling module's folder, if one is listed (a sparse encoder).
    #[serde(default)]
    pub splade_dir: Option<String>,
    /// The Dense modules' folders, in the order they apply (after pooling, before Normalize).
    #[serde(default)]
    pub dense_dirs: Vec<String>,
    /// Dense modules listed with no Pooling module: they apply to every token (PyLate).
    #[serde(default)]
    pub dense_per_token: bool,
}

/// A sentence-transformers pooling config: the mode, the embedding width, and whether prompt
/// tokens are pooled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PoolingSpec {
    /// The `pooling_mode_*` that is true.
    pub mode: Pooling,
    /// `word_embedding_dimension`.
    pub dimension: Option<usize>,
    /// `include_prompt`: `false` leaves the prompt's tokens out of the pooling.
    pub include_prompt: bool,
}

/// `config_sentence_transformers.json`'s prompts.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Prompts {
    /// Prompt name -> the text put before each input.
    pub prompts: BTreeMap<String, String>,
    /// The prompt used when none is asked for.
    pub default_prompt_name: Option<String>,
}

/// The prompt and task an embedder applies to every text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PromptChoice {
    /// Put before every text (empty: nothing).
    pub text: String,
    /// Where the prompt came from: `the prompt option`, `prompt "query"`, `default prompt "query"`, `task "..."`.
    pub source: Option<String>,
    /// The task and its index in `lora_adaptations` (fed to a `task_id` input).
    pub task: Option<(String, i64)>,
}

/// The folder's kind and why, with what the kind needs from the configs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KindChoice {
    /// The kind.
    pub kind: ModelKind,
    /// Which file and key said so.
    pub reason: String,
    /// A cross-encoder's labels in id order (`id2label`); empty for the other kinds.
    pub labels: Vec<String>,
    /// A cross-encoder's activation; `None` for the other kinds.
    pub activation: Option<ScoreActivation>,
    /// A sparse encoder's pooling (SPLADE's max, or sum when its module says so).
    pub pooling: Option<Pooling>,
}

impl Default for KindChoice {
    fn default() -> Self {
        Self::embedder("no classification or masked-language-model head in config.json's architectures")
    }
}

impl KindChoice {
    pub(crate) fn embedder(reason: impl Into<String>) -> Self {
        Self { kind: ModelKind::Embedder, reason: reason.into(), labels: Vec::new(), activation: None, pooling: None }
    }

    pub(crate) fn multi_vector(reason: impl Into<String>) -> Self {
        Self { kind: ModelKind::MultiVector, ..Self::embedder(reason) }
    }
}
