//! The embedder: loads the ONNX Runtime library chosen for the plan, builds the session one
//! provider at a time, verifies which provider really runs the model, then tokenizes, packs texts
//! by length under a token budget, runs, pools and normalises.
//!
//! It is not a CLI and prints nothing: it logs with `tracing` and returns [`EmbedError`]s whose
//! messages say what to do. It never decides policy itself (that is `nornir-ep-select`) and never
//! searches for libraries itself (that is `nornir-gpu-probe`).

#![warn(missing_docs)]

// The layers, each folder importing only those above it in this list: values and math at the
// bottom, then error, load, forward, schedule, engine, call, report, embedder, kinds, converted
// and quantized.
mod call;
#[cfg(feature = "convert")]
mod converted;
mod embedder;
mod engine;
mod error;
mod forward;
mod kinds;
mod load;
mod math;
#[cfg(feature = "quantize")]
mod quantized;
mod report;
mod schedule;
mod values;

pub use call::future::EmbedFuture;
#[cfg(feature = "convert")]
pub use converted::{CheckedConversion, ConvertCheckError, FUSED_MIN_COSINE, convert_checked};
pub use embedder::Embedder;
pub use error::{Cause, EmbedError, InferenceKind, Result, error_chain};
pub use kinds::compact::{CompactVectors, to_precision};
pub use kinds::compact_calls::SAMPLE_TEXTS;
pub use kinds::image::ImageInput;
pub use kinds::image_calls::ImageEmbedder;
pub use kinds::multi_vector::{Encoded, MultiVectors, Outputs, max_sim};
pub use kinds::multi_vector_handle::MultiVectorEncoder;
pub use kinds::multi_vector_tokens::{MultiVectorOptions, ROWS_PER_PART};
pub use kinds::rerank::{ChunkSpan, PairOptions, Ranked, Ranking, rank};
pub use kinds::rerank_calls::CrossEncoder;
pub use kinds::sparse::{SparseOptions, SparseVector, SparseVectors};
pub use kinds::sparse_calls::SparseEncoder;
pub use kinds::text::{KindHandle, TextEmbedder};
pub use load::plan::{plan_for, plan_with};
pub use load::plugin_probe::run_plugin_probe;
pub use load::plugin_trial::{PLUGIN_PROBE_COMMAND, PLUGIN_PROBE_VAR, set_plugin_probe};
pub use load::runtime::{check_library, choose_library, device_list, list_devices};
pub use math::pooling::normalize;
#[cfg(feature = "quantize")]
pub use quantized::{
    FUSED_INT8_MIN_SIMILARITY, QuantizeFolderError, QuantizeFolderOptions, QuantizedFolder, granularity_name,
    quantize_folder, weight_type_name,
};
pub use report::describe::{EmbedderReport, RangesReport, RangesUse, cpu_int8_extensions, fusion_counts, precision};
pub use schedule::stats::{BATCH_SIZE_BOUNDS, EmbedStats};
pub use values::embeddings::{CharChunk, Chunk, Embeddings, Usage};
pub use values::{
    DenseSpec, DeviceList, KindChoice, MIN_ORT, Memory, ModelFolder, ModelInfo, Modules, MultiVectorSpec, OrtInfo,
    PairTemplate, Placement, PluginReport, PoolingSpec, PromptChoice, Prompts, Quantization, Registration,
    RegistrationOutcome, SessionReport, Token, TokenVectorSource,
};

// The words of its options, defined without ONNX Runtime in `nornir-options`.
pub use nornir_options::{
    CallOptions, CancelHandle, Chunking, DocumentVector, EmbedderOptions, InvalidOption, KindCalls, LongInputs,
    ModelKind, OutputWidth, Pooling, Precision, Prompt, QueueFull, Ranges, ScoreActivation, Truncation,
};

/// Internals the benches and fuzz targets reach: not an API, may change in any release.
#[doc(hidden)]
pub mod internals {
    pub use crate::engine::placement::parse_profile;
    pub use crate::load::graph_scan::per_tensor_activation_ops;
    pub use crate::load::model::{
        HfConfig, parse_hf_config, parse_modules, parse_multi_vector_config, parse_pooling_config, parse_prompts,
        parse_quantization, parse_sentence_bert_config,
    };
    pub use crate::load::runtime::load_runtime;
    pub use crate::load::static_model::check_table as check_static_table;
    pub use crate::load::template::parse_pair_template;
    pub use crate::math::pooling::pool_tokens;
    /// Fault injection at a worker's stages, for this crate's tests (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub mod fault {
        pub use crate::forward::fault::{Stage, inject, pending};
    }
}
