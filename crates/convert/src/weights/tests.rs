//! Hostile safetensors files and shard indexes, built here: header lengths of 2^60 and past the
//! file, shapes whose element count overflows or runs past the file, indexes naming `../x` or
//! `/etc/passwd` or linking out of the folder. Each is refused in one line naming its limit.

use std::path::Path;

use super::{SHARD_INDEX, SINGLE, Weights};
use crate::fuzzing;

/// A safetensors file of the header text `header` and the tensor bytes `data`.
fn safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// A sound safetensors file: tensor `a`, float32 [[1, 2], [3, 4]].
fn tiny() -> Vec<u8> {
    let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::tensor::Dtype::F32, vec![2, 2], &data).expect("view");
    safetensors::serialize([("a", view)], None).expect("serialize")
}

/// The one-line error of opening a folder whose `model.safetensors` is `bytes`; the fuzzing entry
/// gives the same.
fn refusal(bytes: &[u8]) -> String {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join(SINGLE), bytes).expect("write");
    let e = Weights::open(d.path()).err().expect("refused").to_string();
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    assert!(e.contains("model.safetensors "), "{e}");
    let fuzzed = fuzzing::read_safetensors(bytes).expect_err("refused").to_string();
    assert_eq!(fuzzed, format!("model.safetensors {}", e.split_once("model.safetensors ").expect("file").1));
    e
}

#[test]
fn a_header_length_of_2_to_the_60_or_past_the_file_is_refused_unread() {
    let mut bytes = (1u64 << 60).to_le_bytes().to_vec();
    bytes.extend(b"{}");
    let e = refusal(&bytes);
    assert!(
        e.contains("is not a safetensors file: its header length says 1,152,921,504,606,846,976 bytes, more than the 100,000,000 a safetensors header may have"),
        "{e}"
    );
    let mut bytes = 1000u64.to_le_bytes().to_vec();
    bytes.extend(b"{\"a\": 1}  ");
    let e = refusal(&bytes);
    assert!(
        e.contains("is not a safetensors file or is cut short (its header is incomplete: it says 1,000 bytes, and the file holds 10 after its length"),
        "{e}"
    );
    let e = refusal(b"\x01\0");
    assert!(e.contains("the file has 2 bytes, fewer than the 8 of the header's length"), "{e}");
}

#[test]
fn a_shape_that_overflows_or_runs_past_the_file_is_refused() {
    let header = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}}"#;
    let e = refusal(&safetensors(header, &[0; 16]));
    assert!(
        e.contains("tensor \"a\" has the shape [4294967296, 4294967296] of F32, whose element count overflows"),
        "{e}"
    );
    let header = r#"{"a":{"dtype":"F32","shape":[1000000],"data_offsets":[0,4000000]}}"#;
    let e = refusal(&safetensors(header, &[0; 16]));
    assert!(e.contains("is truncated or has bytes after its tensors (its size does not match its header: its tensors end at byte 4,000,074 and the file at byte 90"), "{e}");
    let header = r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}"#;
    let e = refusal(&safetensors(header, &[0; 8]));
    assert!(e.contains("tensor \"a\" has the shape [4] of F32, 16 bytes, where its offsets [0, 8] hold 8"), "{e}");
    // A sound file reads, through both.
    assert_eq!(fuzzing::read_safetensors(&tiny()).expect("reads"), 1);
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join(SINGLE), tiny()).expect("write");
    assert_eq!(Weights::open(d.path()).expect("opens").f32("a", &[2, 2]).expect("a"), [1.0, 2.0, 3.0, 4.0]);
}

/// The error of opening `dir`, whose index names `files`.
fn index_refusal(dir: &Path, files: &[&str]) -> String {
    let map: serde_json::Map<String, serde_json::Value> =
        files.iter().enumerate().map(|(i, f)| (format!("t{i}"), serde_json::Value::String((*f).to_owned()))).collect();
    let index = serde_json::json!({"metadata": {"total_size": 16}, "weight_map": map});
    std::fs::write(dir.join(SHARD_INDEX), index.to_string()).expect("index");
    let e = Weights::open(dir).err().expect("refused").to_string();
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    assert!(e.ends_with("(download the model again)"), "{e}");
    e
}

#[test]
fn an_index_naming_a_file_outside_its_folder_is_refused() {
    let d = tempfile::tempdir().expect("tempdir");
    for name in ["../x", "/etc/passwd", "..", "a\\b", "c:x", ""] {
        let e = index_refusal(d.path(), &["model-1.safetensors", name]);
        assert!(e.contains(&format!("model.safetensors.index.json is refused: it names the shard {name:?}, which is not a file name: an index's shards are files in its own folder (no /, \\, : or ..)")), "{e}");
        let text = std::fs::read_to_string(d.path().join(SHARD_INDEX)).expect("index");
        assert!(fuzzing::read_shard_index(&text).is_err(), "{name}");
    }
    // A shard that links out of the folder (to a sound file), and one that is a folder.
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret"), tiny()).expect("secret");
    std::os::unix::fs::symlink(outside.path().join("secret"), d.path().join("model-2.safetensors")).expect("link");
    let e = index_refusal(d.path(), &["model-2.safetensors"]);
    assert!(
        e.contains("is refused: its shard \"model-2.safetensors\" links to ")
            && e.contains(", outside the model's folder"),
        "{e}"
    );
    std::fs::create_dir(d.path().join("model-3.safetensors")).expect("mkdir");
    let e = index_refusal(d.path(), &["model-3.safetensors"]);
    assert!(e.contains("is refused: its shard \"model-3.safetensors\" is not a regular file"), "{e}");
}

#[test]
fn an_index_and_its_shards_linked_into_one_blobs_folder_read() {
    // The hub's cache: snapshots/<revision>/<file> -> ../../blobs/<hash>.
    let d = tempfile::tempdir().expect("tempdir");
    let (blobs, snapshot) = (d.path().join("blobs"), d.path().join("snapshots/rev"));
    std::fs::create_dir_all(&blobs).expect("blobs");
    std::fs::create_dir_all(&snapshot).expect("snapshot");
    std::fs::write(blobs.join("h1"), tiny()).expect("shard");
    std::fs::write(blobs.join("h2"), r#"{"weight_map": {"a": "model-00001-of-00001.safetensors"}}"#).expect("index");
    std::os::unix::fs::symlink("../../blobs/h1", snapshot.join("model-00001-of-00001.safetensors")).expect("link");
    std::os::unix::fs::symlink("../../blobs/h2", snapshot.join(SHARD_INDEX)).expect("link");
    let w = Weights::open(&snapshot).expect("opens");
    assert_eq!(w.f32("a", &[2, 2]).expect("a"), [1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn an_index_too_large_or_mapping_too_much_is_refused() {
    let d = tempfile::tempdir().expect("tempdir");
    // A sparse file of 100,000,001 bytes: refused before it is read.
    let f = std::fs::File::create(d.path().join(SHARD_INDEX)).expect("create");
    f.set_len(100_000_001).expect("set_len");
    let e = Weights::open(d.path()).err().expect("refused").to_string();
    assert!(e.contains("model.safetensors.index.json is refused: it is 100,000,001 bytes, more than the 100,000,000 read of an index"), "{e}");

    let many = |tensors: usize, files: usize| {
        let entries: Vec<String> = (0..tensors).map(|i| format!("\"t{i}\":\"s{}.safetensors\"", i % files)).collect();
        format!("{{\"weight_map\":{{{}}}}}", entries.join(","))
    };
    let e = fuzzing::read_shard_index(&many(1_000_001, 3)).expect_err("refused").to_string();
    assert!(e.contains("is refused: it maps 1,000,001 tensors, more than 1,000,000"), "{e}");
    let e = fuzzing::read_shard_index(&many(10_001, 10_001)).expect_err("refused").to_string();
    assert!(e.contains("is refused: it names more than 10,000 shard files"), "{e}");
    assert_eq!(fuzzing::read_shard_index(&many(1_000_000, 3)).expect("reads").len(), 3);
}
