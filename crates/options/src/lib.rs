//! What a caller can ask of nornir's embedder, as plain data: the options of an embedder
//! ([`EmbedderOptions`]) and of one call ([`CallOptions`], which is also what an embedder's
//! calls get by default), and the words they are made of: [`Precision`] and [`Ranges`],
//! [`LongInputs`], [`Truncation`], [`Chunking`], [`Prompt`], [`ModelKind`], [`Pooling`].
//!
//! It is not the embedder: it loads nothing, runs nothing and knows nothing of ONNX Runtime, so
//! a build without an embedder (the CLI without features, a config reader) parses and checks
//! the same words the embedder takes. Every check that needs no model is here, in one place
//! ([`Ranges::new`], [`EmbedderOptions::validate`]); what depends on the model (a width, a kind)
//! is checked by the embedder when the two meet.

#![warn(missing_docs)]

mod call;
mod embedder;
mod kind;
mod long;
mod pooling;
mod precision;

pub use call::{CallOptions, Cancel, CancelHandle, Chunking, DocumentVector, Prompt, Truncation};
pub use embedder::{EmbedderOptions, QueueFull, default_cpu_workers, intra_threads};
pub use kind::{KindCalls, ModelKind, OutputWidth, ScoreActivation};
pub use long::LongInputs;
pub use pooling::Pooling;
pub use precision::{Precision, Ranges};

/// An option whose value no embedder can take, named as its field is (`ranges`,
/// `chunking.window`), with what is wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid `{option}`: {reason}")]
#[non_exhaustive]
pub struct InvalidOption {
    /// The option's field name.
    pub option: &'static str,
    /// What is wrong with its value, and what to give instead.
    pub reason: String,
}

impl InvalidOption {
    /// `option` refused for `reason`.
    pub fn new(option: &'static str, reason: impl Into<String>) -> Self {
        Self { option, reason: reason.into() }
    }
}
