//! A call before and after the queue: its plan, identical texts collapsed, tokenized (or cut
//! into chunks) into queue items, the `Finish` each kind gives its rows, its future, and the
//! runner that gives a blocking call and its async twin one body. What a kind prepares beyond
//! texts (pairs, token calls, images) is its own module's, in `kinds/`.

pub(crate) mod chunk;
pub(crate) mod future;
pub(crate) mod prepare;
pub(crate) mod runner;
