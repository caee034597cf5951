//! The bottom layer: plain values every other folder builds, reports or returns (the model
//! folder's facts, the session's report, a call's rows). Nothing here imports the rest of the
//! crate.

pub(crate) mod embeddings;
mod model;
mod session;

pub use model::{
    DenseSpec, KindChoice, ModelFolder, ModelInfo, Modules, MultiVectorSpec, PairTemplate, PoolingSpec, PromptChoice,
    Prompts, Quantization, TokenVectorSource,
};
pub use session::{
    DeviceList, MIN_ORT, Memory, OrtInfo, Placement, PluginReport, Registration, RegistrationOutcome, SessionReport,
    Token,
};
