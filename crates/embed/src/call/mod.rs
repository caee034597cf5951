//! A call before and after the queue: its plan, identical texts collapsed, tokenized (or cut
//! into chunks, or paired, or as a late-interaction model's tokens, or as a text's raw token
//! vectors) into queue items, its future, and the runner that gives a blocking call and its
//! async twin one body.

pub(crate) mod chunk;
pub(crate) mod future;
pub(crate) mod pairs;
pub(crate) mod prepare;
pub(crate) mod raw_tokens;
pub(crate) mod runner;
pub(crate) mod tokens;
