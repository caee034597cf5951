//! Arithmetic on rows, with no knowledge of models or calls: pooling token vectors into one, and
//! sentence-transformers' Dense layers.

pub(crate) mod dense;
pub(crate) mod pooling;
pub(crate) mod static_table;
