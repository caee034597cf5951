//! A `nornir` built without `embed-ort`: doctor still reports the probe, and the commands that
//! need the embedder say it is not compiled in, with the feature that adds it.
#![cfg(not(feature = "embed-ort"))]

use std::process::Command;

#[test]
fn embed_says_not_compiled_and_doctor_still_works() {
    let o = Command::new(env!("CARGO_BIN_EXE_nornir")).args(["vector", "embed", "x"]).output().expect("run");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--features embed-ort"));
    let o = Command::new(env!("CARGO_BIN_EXE_nornir")).args(["vector", "doctor", "--json"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert!(d["cuda"].get("available").is_some());
    assert!(d["plan"].is_null());
}
