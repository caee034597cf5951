//! What the `nornir` binary shares with its fuzz targets: the input reader ([`input`]), so that
//! `fuzz/fuzz_targets/input_records.rs` fuzzes the very code the command runs.

pub mod input;
