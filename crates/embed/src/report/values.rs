//! The values the embedder reports, as plain data: what the model folder says and what was made
//! of it (`ModelFolder`, `ModelInfo`), how the session was built and what really runs it
//! (`SessionReport`, `Registration`, `OrtInfo`, `Memory`, `Placement`), and TEI's `Token`.
//! Nothing here does I/O or fails; the modules that fill these in import them, never the reverse.

use std::collections::BTreeMap;
use std::path::PathBuf;

use nornir_ep_select::{EpDevice, Plan, Provider, Vendor};
use nornir_gpu_probe::ProviderRequirements;
use serde::{Deserialize, Serialize};

use crate::load::kind::KindChoice;
use nornir_options::Pooling;

/// What registering one provider did. In JSON: `{"provider", "ok", "error", "preflight"}`, with
/// `error` only when `ok` is false.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(into = "RegistrationJson", from = "RegistrationJson")]
#[non_exhaustive]
pub struct Registration {
    /// As ONNX Runtime names it (`CUDAExecutionProvider`).
    pub provider: String,
    /// Registered, or why not.
    pub outcome: RegistrationOutcome,
    /// The provider library's NEEDED list checked against this machine.
    pub preflight: Option<ProviderRequirements>,
}

/// Whether a provider registered, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistrationOutcome {
    /// ONNX Runtime accepted it (which does not yet mean it runs the model: see the report's
    /// active provider).
    Registered,
    /// ONNX Runtime's error text, with the preflight's finding where it explains it.
    Failed(String),
}

impl Registration {
    pub(crate) fn failed(provider: Provider, why: String) -> Self {
        Self { provider: provider.ort_name().to_owned(), outcome: RegistrationOutcome::Failed(why), preflight: None }
    }

    /// Whether ONNX Runtime accepted it.
    pub fn registered(&self) -> bool {
        self.outcome == RegistrationOutcome::Registered
    }

    /// Why it did not register.
    pub fn error(&self) -> Option<&str> {
        match &self.outcome {
            RegistrationOutcome::Registered => None,
            RegistrationOutcome::Failed(why) => Some(why),
        }
    }
}

/// [`Registration`] as JSON has always had it.
#[derive(Serialize, Deserialize)]
struct RegistrationJson {
    provider: String,
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    preflight: Option<ProviderRequirements>,
}

impl From<Registration> for RegistrationJson {
    fn from(r: Registration) -> Self {
        let (ok, error) = match r.outcome {
            RegistrationOutcome::Registered => (true, None),
            RegistrationOutcome::Failed(why) => (false, Some(why)),
        };
        Self { provider: r.provider, ok, error, preflight: r.preflight }
    }
}

impl From<RegistrationJson> for Registration {
    fn from(j: RegistrationJson) -> Self {
        let outcome = if j.ok {
            RegistrationOutcome::Registered
        } else {
            RegistrationOutcome::Failed(j.error.unwrap_or_else(|| "failed".to_owned()))
        };
        Self { provider: j.provider, outcome, preflight: j.preflight }
    }
}

/// Which provider ran each node of the graph, from ONNX Runtime's own profiling record
/// ([`Embedder::placement`](crate::Embedder::placement), on demand: it costs a session build).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
#[non_exhaustive]
pub enum Placement {
    /// From the profile of one run.
    Known {
        /// Nodes run, by provider.
        nodes: std::collections::BTreeMap<String, usize>,
    },
    /// The profile could not be read.
    Unknown {
        /// Why.
        reason: String,
    },
}

impl Placement {
    /// When the profile shows that `provider` ran none of the graph's nodes: the provider that
    /// ran the most of them and a sentence saying so. A provider registered first is only
    /// offered the nodes; the ones it does not claim go to the next, down to the CPU.
    pub fn unclaimed(&self, provider: &str) -> Option<(String, String)> {
        let Self::Known { nodes } = self else { return None };
        if nodes.get(provider).copied().unwrap_or(0) > 0 {
            return None;
        }
        let (main, _) = nodes.iter().max_by_key(|(_, n)| **n)?;
        let total: usize = nodes.values().sum();
        Some((
            main.clone(),
            format!(
                "{provider} registered, but ONNX Runtime gave it none of the model's {total} nodes; {main} runs them"
            ),
        ))
    }
}

/// What the model's sessions hold in memory, so that an operator can size a process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Memory {
    /// How many workers run each ONNX Runtime session at once. On the CPU every worker
    /// (`EmbedderOptions::sessions`) runs the model's one session, so its weights and the
    /// kernels' pre-packed forms of them are in memory once; each further worker adds only the
    /// activations of the batch it runs. A GPU session runs one batch at a time.
    pub workers_per_session: usize,
    /// How much the process's resident memory grew while each session was built, in build order,
    /// in bytes: the weights as the session holds them (an int8-stored model's are folded to
    /// float32 at load), their pre-packed forms, and the graph. One entry on the CPU. Further GPU
    /// sessions are built at their first work (or `Embedder::warm_up`). Read from
    /// `/proc/self/status`, so other threads' allocations at the same moment count as well.
    pub session_growth_bytes: Vec<u64>,
    /// The process's resident memory when the report was made, in bytes.
    pub resident_bytes: Option<u64>,
    /// The most resident memory the process has held so far (`VmHWM`), in bytes: the model with
    /// the activations and ONNX Runtime's arena of the largest batches run so far.
    #[serde(default)]
    pub peak_resident_bytes: Option<u64>,
}

/// What really happened when the session was built.
///
/// ```no_run
/// # use nornir_embed::{Embedder, EmbedderOptions};
/// let embedder = Embedder::new("models/all-MiniLM-L6-v2".as_ref(), &EmbedderOptions::default())?;
/// let report = embedder.report();
/// for r in &report.registrations {
///     match r.error() {
///         None => println!("{}: registered", r.provider),
///         Some(why) => println!("{}: failed: {why}", r.provider),
///     }
/// }
/// // What runs, not what was asked for; and why the CPU took over, if it did.
/// println!("running on {} ({:?})", report.active_provider, report.fallback);
/// # Ok::<(), nornir_embed::EmbedError>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionReport {
    /// The ONNX Runtime library loaded.
    pub ort: OrtInfo,
    /// What the policy asked for, and why.
    pub plan: Plan,
    /// Each provider tried, in order.
    pub registrations: Vec<Registration>,
    /// The provider running the model, as ONNX Runtime names it.
    pub active_provider: String,
    /// For a plugin provider: the device it runs on, with its library, vendor and device id.
    #[serde(default)]
    pub active_device: Option<EpDevice>,
    /// ONNX Runtime's own device list and the plugin libraries registered: the second witness
    /// beside the probe.
    #[serde(default)]
    pub devices: DeviceList,
    /// `cpu`, `cuda` or `rocm`: where the model really runs.
    pub gpu_vendor: Vendor,
    /// Set when the session had to be rebuilt on CPU after a GPU session failed to build or run.
    pub fallback: Option<String>,
    /// What the sessions hold in memory.
    #[serde(default)]
    pub memory: Memory,
    /// ONNX Runtime's graph optimisation level for the session: `basic` on the CPU, `all` with
    /// a GPU provider (see `base_builder`).
    #[serde(default)]
    pub graph_optimization: String,
}

impl SessionReport {
    /// The session runs on ONNX Runtime's own CPU provider alone (not a GPU, not a plugin).
    pub(crate) fn on_builtin_cpu(&self) -> bool {
        self.active_provider == Provider::Cpu.ort_name()
    }
}

/// The oldest ONNX Runtime this build loads: 1.22, the last with the ROCm provider.
pub const MIN_ORT: (u64, u64) = (1, 22);

/// What was loaded and why. Serialised under `ort` in `doctor --json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OrtInfo {
    /// The library file loaded.
    pub path: PathBuf,
    /// As the library itself reports it (`OrtGetApiBase()->GetVersionString()`).
    pub version: String,
    /// Providers whose `libonnxruntime_providers_<name>.so` sits beside the library.
    pub providers: Vec<String>,
    /// Why this library was chosen.
    pub reason: String,
}

/// One token of a text, as TEI's `/tokenize` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Token {
    /// Its id in the model's vocabulary.
    pub id: u32,
    /// The text it stands for (the token's own spelling for a special token).
    pub text: String,
    /// A special token (`[CLS]`, `[SEP]`, ...), not from the text.
    pub special: bool,
    /// Byte offsets in the text with its prompt: its first byte, and past its last.
    pub start: usize,
    /// See `start`.
    pub stop: usize,
}

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
    /// `config.json` names a causal decoder (Qwen3, Qwen2, Llama, Mistral): its embedder needs a
    /// pooling rule (the last token), as mean pooling reads tokens that never saw the text's end.
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

/// One plugin execution-provider library: where it came from, and what registering it with
/// ONNX Runtime did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PluginReport {
    /// The name it was registered under.
    pub name: String,
    /// The library file (the package folder when none in it is a plugin).
    pub path: PathBuf,
    /// `explicit` (`--ep-lib`, `NORNIR_EP_LIBS`, the options), `python` or `nornir-home`.
    pub source: String,
    /// Why it was not loaded, or failed to register; `None` when ONNX Runtime took it.
    pub error: Option<String>,
    /// The providers on the devices it added to ONNX Runtime's list (`cpu_ep on AMD CPU ...`).
    pub devices: Vec<String>,
    /// How it was tried before this process registered it: `tried first in a process of its
    /// own, by ...`, or `untried: ` and why; `None` when it was not tried (a problem before).
    #[serde(default)]
    pub trial: Option<String>,
}

/// ONNX Runtime's own device list (`GetEpDevices`) after the plugins were registered: the second
/// witness beside the probe.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeviceList {
    /// Every plugin library found or named, in the order tried.
    pub plugins: Vec<PluginReport>,
    /// Every (provider, device) pair ONNX Runtime lists, built-in ones included.
    pub devices: Vec<EpDevice>,
    /// Why the list could not be read, if it could not.
    pub error: Option<String>,
}
