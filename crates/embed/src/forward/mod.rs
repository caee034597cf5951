//! The workers and the forward pass: a batch fed to the graph, run (on one shared CPU session or
//! a GPU session of its own), its output read back; faults injected by the tests.

pub(crate) mod fault;
pub(crate) mod graph_io;
pub(crate) mod run;
pub(crate) mod shared_run;
