//! The embedder: loads the ONNX Runtime library chosen for the plan, builds the session one
//! provider at a time, verifies which provider really runs the model, then tokenizes, packs texts
//! by length under a token budget, runs, pools and normalises.
//!
//! It is not a CLI and prints nothing: it logs with `tracing` and returns [`EmbedError`]s whose
//! messages say what to do. It never decides policy itself (that is `nornir-ep-select`) and never
//! searches for libraries itself (that is `nornir-gpu-probe`).

#![warn(missing_docs)]

mod chunk;
mod compact;
mod compact_calls;
mod describe;
mod embedder;
mod embeddings;
mod engine;
mod error;
mod fault;
mod future;
mod graph_io;
mod graph_scan;
mod kind;
mod model;
mod pairs;
mod placement;
mod plan;
mod plugins;
mod pooling;
mod prepare;
mod prompt;
mod queue;
mod report;
mod request;
mod rerank;
mod runtime;
mod scheduler;
mod session;
mod shared_run;
mod sparse;
mod stats;
mod tokenize;
mod worker;

pub use compact::{CompactVectors, to_precision};
pub use compact_calls::SAMPLE_TEXTS;
pub use describe::{EmbedderReport, RangesReport, RangesUse, cpu_int8_extensions, fusion_counts, precision};
pub use embedder::Embedder;
pub use embeddings::{CharChunk, Chunk, Embeddings, Usage};
pub use error::{Cause, EmbedError, InferenceKind, Result, error_chain};
pub use future::EmbedFuture;
pub use kind::KindChoice;
pub use pairs::{PairOptions, Ranked, Ranking, rank};
pub use plan::{plan_for, plan_with};
pub use pooling::normalize;
pub use report::{
    DeviceList, MIN_ORT, Memory, ModelFolder, ModelInfo, Modules, OrtInfo, Placement, PluginReport, PoolingSpec,
    PromptChoice, Prompts, Quantization, Registration, RegistrationOutcome, SessionReport, Token,
};
pub use runtime::{check_library, choose_library, device_list, list_devices};
pub use sparse::{SparseOptions, SparseVector, SparseVectors};
pub use stats::{BATCH_SIZE_BOUNDS, EmbedStats};

// The words of its options, defined without ONNX Runtime in `nornir-options`.
pub use nornir_options::{
    CallOptions, CancelHandle, Chunking, DocumentVector, EmbedderOptions, InvalidOption, LongInputs, ModelKind,
    Pooling, Precision, Prompt, QueueFull, Ranges, ScoreActivation, Truncation,
};

/// Internals the benches and fuzz targets reach: not an API, may change in any release.
#[doc(hidden)]
pub mod internals {
    pub use crate::model::{
        HfConfig, parse_hf_config, parse_modules, parse_pooling_config, parse_prompts, parse_quantization,
        parse_sentence_bert_config,
    };
    pub use crate::placement::parse_profile;
    pub use crate::pooling::pool_tokens;
    pub use crate::runtime::load_runtime;
    /// Fault injection at a worker's stages, for this crate's tests (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub mod fault {
        pub use crate::fault::{Stage, inject, pending};
    }
}
