//! Loading, below everything that runs: the model folder read as sentence-transformers reads it
//! (its kind, prompts, Dense modules, token rules) or a static model's table, its tokenizer, the
//! ONNX Runtime library and
//! its plugins, the plan, and one session built one provider at a time.

pub(crate) mod checks;
pub(crate) mod dense;
pub(crate) mod files;
pub(crate) mod graph_scan;
pub(crate) mod kernels;
pub(crate) mod kind;
pub(crate) mod model;
pub(crate) mod multi_vector;
pub(crate) mod plan;
pub(crate) mod plugin_probe;
pub(crate) mod plugin_trial;
pub(crate) mod plugins;
pub(crate) mod prompt;
pub(crate) mod runtime;
pub(crate) mod session;
pub(crate) mod st_configs;
pub(crate) mod static_model;
pub(crate) mod template;
pub(crate) mod tokenize;
