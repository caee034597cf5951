//! nornir's text-embedding facade: the one crate other nornir crates depend on. It re-exports the
//! embedder, the probe and the policy, and owns the feature names (`embed-ort`, default,
//! `embed-ort-rocm` and `quantize`); it has no logic of its own.
//!
//! The README's library example (compiled as a doctest) shows the whole API in use.

#![forbid(unsafe_code)]

pub use nornir_ep_select::{self as policy, Device, Plan, Provider, Vendor};
pub use nornir_gpu_probe::{self as gpu_probe, ProbeReport, preflight, probe};

#[cfg(feature = "embed-ort")]
pub use nornir_embed::{
    BATCH_SIZE_BOUNDS, CallOptions, CallPrompt, CancelHandle, Chunk, Chunking, DocumentVector, EmbedError, EmbedFuture,
    EmbedStats, Embedder, EmbedderOptions, Embeddings, InferenceKind, MIN_ORT, Memory, ModelFolder, ModelInfo, Modules,
    OrtInfo, Placement, Pooling, PoolingSpec, PromptChoice, Prompts, Quantization, QueueFull, Registration, Result,
    SessionReport, Token, Truncation, check_library, choose_library, error_chain, normalize, plan_for, plan_for_model,
};

/// The int8 rewrite for the CPU (feature `quantize`).
#[cfg(feature = "quantize")]
pub use nornir_quantize as quantize;

/// Whether this build contains the ONNX Runtime embedder.
pub const EMBED_ORT: bool = cfg!(feature = "embed-ort");
/// Whether this build contains the AMD path.
pub const EMBED_ORT_ROCM: bool = cfg!(feature = "embed-ort-rocm");

/// Compiles the README's Rust example as a doctest.
#[cfg(all(doctest, feature = "embed-ort"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
