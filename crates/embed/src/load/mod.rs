//! Loading: the model folder read as sentence-transformers reads it (its kind, prompts), the
//! ONNX Runtime library and its plugins, the plan, the session built one provider at a time,
//! and the checks of what really runs; the engine that the callers and the workers share.

pub(crate) mod checks;
pub(crate) mod dense;
pub(crate) mod engine;
pub(crate) mod files;
pub(crate) mod graph_scan;
pub(crate) mod kind;
pub(crate) mod model;
pub(crate) mod multi_vector;
pub(crate) mod placement;
pub(crate) mod plan;
pub(crate) mod plugin_trial;
pub(crate) mod plugins;
pub(crate) mod prompt;
pub(crate) mod runtime;
pub(crate) mod session;
pub(crate) mod st_configs;
pub(crate) mod template;
