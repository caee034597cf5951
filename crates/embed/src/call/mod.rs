//! A call before and after the queue: its plan, identical texts collapsed, tokenized (or cut
//! into chunks, or paired, or as a late-interaction model's tokens, or as a text's raw token
//! vectors) into queue items, the request it waits on, and its future.

pub(crate) mod chunk;
pub(crate) mod future;
pub(crate) mod pairs;
pub(crate) mod prepare;
pub(crate) mod raw_tokens;
pub(crate) mod request;
pub(crate) mod runner;
pub(crate) mod tokenize;
pub(crate) mod tokens;
