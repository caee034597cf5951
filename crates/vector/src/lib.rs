//! nornir's text-embedding facade: the one crate other nornir crates depend on. It owns the
//! feature names (`embed-ort`, default, `embed-ort-rocm`, `quantize` and `convert`) and re-exports a chosen
//! list; it has no logic of its own.
//!
//! - At the root, in every build: the words of the options ([`EmbedderOptions`], [`CallOptions`],
//!   [`Precision`], [`Ranges`], [`LongInputs`], [`Truncation`], [`ModelKind`], [`Pooling`], ...),
//!   from `nornir-options`, which has no ONNX Runtime in it.
//! - At the root with `embed-ort`: the embedder and what a call needs ([`Embedder`], [`EmbedderOptions`],
//!   [`CallOptions`], [`Embeddings`], [`EmbedError`] and its kinds), the device and vendor types,
//!   and the design's (docs/design.md) [`preflight`] and [`probe`] (the embedder has `gpu_vendor()`,
//!   `rocm_ready()` and `vendor()`).
//! - [`diagnostics`]: the typed reports (probe, plan, registrations, placement, memory).
//! - `quantize` (feature `quantize`): the int8 rewrite.
//! - `convert` (feature `convert`): safetensors weights to an ONNX graph.
//!
//! Library loading with `RTLD_GLOBAL` and the probe's other building blocks stay inside their
//! crates. The README's library example (compiled as a doctest) shows the API in use.
#![cfg_attr(
    feature = "embed-ort",
    doc = r#"
```no_run
use nornir_vector::{CallOptions, Embedder, EmbedderOptions};

let embedder = Embedder::new("models/all-MiniLM-L6-v2".as_ref(), &EmbedderOptions::default())?;
let rows = embedder.embed_with(&["what is a fjord?"], &CallOptions::new().with_prompt_name("query"))?;
println!("{} vectors of {} on {}", rows.len(), embedder.dimension(), embedder.gpu_vendor());
# Ok::<(), nornir_vector::EmbedError>(())
```
"#
)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use nornir_ep_select::{Device, Provider, Vendor};
pub use nornir_gpu_probe::{preflight, probe};
// The words of the options, in every build (no ONNX Runtime in them).
pub use nornir_options::{
    CallOptions, CancelHandle, Chunking, DocumentVector, EmbedderOptions, InvalidOption, KindCalls, LongInputs,
    ModelKind, OutputWidth, Pooling, Precision, Prompt, QueueFull, Ranges, ScoreActivation, Truncation,
};

#[cfg(feature = "embed-ort")]
pub use nornir_embed::{
    BATCH_SIZE_BOUNDS, Cause, CharChunk, Chunk, ChunkSpan, CompactVectors, CrossEncoder, EmbedError, EmbedFuture,
    EmbedStats, Embedder, EmbedderReport, Embeddings, Encoded, ImageEmbedder, ImageInput, InferenceKind, KindChoice,
    KindHandle, MultiVectorEncoder, MultiVectorOptions, MultiVectors, Outputs, PairOptions, ROWS_PER_PART,
    RangesReport, RangesUse, Ranked, Ranking, Result, SAMPLE_TEXTS, SparseEncoder, SparseOptions, SparseVector,
    SparseVectors, TextEmbedder, Token, Usage, error_chain, max_sim, normalize, rank, to_precision,
};

/// What nornir found on this machine and what it decided, as typed reports: the probe's
/// (drivers, GPU runtimes, ONNX Runtime builds), the policy's plan, and, with an embedder, each
/// provider's registration, the session that runs, where its nodes ran, its memory and the model
/// folder it read. Each type is `#[non_exhaustive]` and (de)serialises as `nornir vector doctor
/// --json` writes it.
pub mod diagnostics {
    pub use nornir_ep_select::{EpDevice, Hardware, PCI_AMD, PCI_NVIDIA, Plan, Planned, PluginRef};
    pub use nornir_gpu_probe::{
        DEFAULT_MODEL_SUBDIR, DriverReport, LibraryReport, NoDefaultModel, Opened, OrtCandidate, OrtDiscovery,
        PluginDiscovery, PluginLibrary, PluginSource, ProbeContext, ProbeReport, ProviderRequirements, RejectedEntry,
        Requirement, RequirementStatus, SearchPath, VendorReport, VisibleDevices, default_model, default_model_dir,
        discover_plugins, nornir_home,
    };

    #[cfg(feature = "embed-ort")]
    pub use nornir_embed::{
        DenseSpec, DeviceList, MIN_ORT, Memory, ModelFolder, ModelInfo, Modules, MultiVectorSpec, OrtInfo,
        PairTemplate, Placement, PluginReport, PoolingSpec, PromptChoice, Prompts, Quantization, Registration,
        RegistrationOutcome, SessionReport, TokenVectorSource, check_library, choose_library, cpu_int8_extensions,
        device_list, fusion_counts, plan_for, plan_with, precision,
    };

    /// A plugin library's trial in a process of its own, before this one registers it: the
    /// program that runs it, and what that program calls.
    #[cfg(feature = "embed-ort")]
    pub use nornir_embed::{PLUGIN_PROBE_COMMAND, PLUGIN_PROBE_VAR, run_plugin_probe, set_plugin_probe};
}

/// Helpers of the `nornir` command line (its `--ep-library` parser, comparing two paths, ONNX
/// Runtime version checks), outside the public API: no other crate uses them.
#[doc(hidden)]
pub mod cli_support {
    pub use nornir_gpu_probe::{parse_plugin_entry, same_file, version_at_least};
}

/// A conversion checked by running it (features `embed-ort` and `convert`): every caller's one rule.
#[cfg(all(feature = "embed-ort", feature = "convert"))]
pub use nornir_embed::{CheckedConversion, ConvertCheckError, FUSED_MIN_COSINE, convert_checked};

/// A model folder made int8 and checked by running it (features `embed-ort` and `quantize`):
/// every caller's one rule.
#[cfg(all(feature = "embed-ort", feature = "quantize"))]
pub use nornir_embed::{
    FUSED_INT8_MIN_SIMILARITY, QuantizeFolderError, QuantizeFolderOptions, QuantizedFolder, granularity_name,
    quantize_folder, weight_type_name,
};

/// The int8 rewrite for the CPU (feature `quantize`).
#[cfg(feature = "quantize")]
pub use nornir_quantize as quantize;

/// Conversion of safetensors weights into an ONNX graph (feature `convert`).
#[cfg(feature = "convert")]
pub use nornir_convert as convert;

/// Compiles the README's Rust example as a doctest.
#[cfg(all(doctest, feature = "embed-ort"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// Compiles the library guide's Rust examples as doctests.
#[cfg(all(doctest, feature = "embed-ort"))]
#[doc = include_str!("../../../docs/library.md")]
pub struct LibraryDoctests;

/// Compiles the long-documents guide's Rust examples as doctests.
#[cfg(all(doctest, feature = "embed-ort"))]
#[doc = include_str!("../../../docs/long-documents.md")]
pub struct LongDocumentsDoctests;

/// Compiles the sparse-encoder and reranker guide's Rust examples as doctests.
#[cfg(all(doctest, feature = "embed-ort"))]
#[doc = include_str!("../../../docs/retrieval.md")]
pub struct RetrievalDoctests;

/// Compiles the compact vectors guide's Rust examples as doctests.
#[cfg(all(doctest, feature = "embed-ort"))]
#[doc = include_str!("../../../docs/compact.md")]
pub struct CompactDoctests;
