//! The one report every surface writes about an embedder (`describe`), read from its engine.

pub(crate) mod describe;
