//! What the embedder reports: the plain values (model folder, session, placement, memory) and
//! the one report every surface writes.

pub(crate) mod describe;
