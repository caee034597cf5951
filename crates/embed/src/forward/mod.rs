//! The forward pass: what the graph takes and gives (`graph_io`), a padded batch fed to it, run
//! and pooled (`run`, `shared_run`), or a static model's rows pooled from its table
//! (`static_run`), a dual encoder's images run on its vision graph (`vision`); faults injected by
//! the tests (`fault`).

pub(crate) mod fault;
pub(crate) mod graph_io;
pub(crate) mod run;
pub(crate) mod shared_run;
pub(crate) mod static_run;
pub(crate) mod vision;
