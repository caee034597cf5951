//! The queue every call feeds and the rule that cuts the next batch from it, and the counters
//! of what the embedder has done.

pub(crate) mod queue;
pub(crate) mod request;
pub(crate) mod scheduler;
pub(crate) mod stats;
