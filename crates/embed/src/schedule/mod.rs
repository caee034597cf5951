//! The queue every call feeds, the rule that cuts the next batch from it, the request a call
//! waits on (`request`), and the counters of what the embedder has done.

pub(crate) mod queue;
pub(crate) mod request;
pub(crate) mod scheduler;
pub(crate) mod stats;
