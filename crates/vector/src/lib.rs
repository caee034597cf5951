//! nornir's text-embedding facade: the one crate other nornir crates depend on. It re-exports the
//! embedder, the probe and the policy, and owns the feature names (`embed-ort`, default, and
//! `embed-ort-rocm`); it has no logic of its own.
//!
//! ```no_run
//! use nornir_vector::{Embedder, EmbedderOptions};
//!
//! # fn main() -> Result<(), nornir_vector::EmbedError> {
//! let model = std::path::Path::new("/root/.cache/nornir/models/all-MiniLM-L6-v2-int8");
//! let embedder = Embedder::new(model, &EmbedderOptions::from_env()?)?;
//! let vectors = embedder.embed(&["A man is eating food.", "A man is riding a horse."])?;
//! let similarity: f32 = vectors.row(0).iter().zip(vectors.row(1)).map(|(a, b)| a * b).sum();
//! println!("{similarity:.3} on {} ({})", embedder.gpu_vendor(), embedder.report().active_provider);
//! # Ok(())
//! # }
//! ```

pub use nornir_ep_select::{self as policy, Device, Plan, Provider, Vendor};
pub use nornir_gpu_probe::{self as gpu_probe, ProbeReport, preflight, probe};

#[cfg(feature = "embed-ort")]
pub use nornir_embed::{
    EmbedError, EmbedStats, Embedder, EmbedderOptions, Embeddings, MIN_ORT, ModelInfo, OrtInfo, Placement, Pooling,
    Registration, Result, SessionReport, check_library, plan_for,
};

/// Whether this build contains the ONNX Runtime embedder.
pub const EMBED_ORT: bool = cfg!(feature = "embed-ort");
/// Whether this build contains the AMD path.
pub const EMBED_ORT_ROCM: bool = cfg!(feature = "embed-ort-rocm");

/// Compiles the README's Rust example as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
