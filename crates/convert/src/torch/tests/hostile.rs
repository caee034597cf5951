//! Hostile checkpoints, built here: pickles nested two million deep, a dict of 300,000 keys,
//! lists and dicts that contain themselves, entries that inflate past their declared size, and
//! a file of zip end-of-directory records. Each is refused in one line naming its limit, or read.

use std::io::Write;

use super::super::pickle::{self, PickleError};
use super::super::values::Value;
use super::{P, archive, open_err, t};

/// The one-line error of reading `pickle` as the `data.pkl` of an archive.
fn pickle_refusal(pickle: &[u8]) -> String {
    let e = open_err(&archive("pytorch_model", pickle, &[], "little"));
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    assert!(e.contains("pytorch_model.bin is refused: its pickle "), "{e}");
    assert!(e.ends_with("(download it again, or use the model's model.safetensors)"), "{e}");
    e
}

#[test]
fn a_tuple_nested_two_million_deep_is_refused_at_a_thousand_levels() {
    // EMPTY_TUPLE, then TUPLE1 two million times: 2 MB.
    let mut p = vec![0x80, 2, b')'];
    p.extend(std::iter::repeat_n(0x85, 2_000_000));
    p.push(b'.');
    let e = pickle_refusal(&p);
    assert!(e.contains("its pickle nests deeper than 1,000 levels at byte 1002 (a state dict nests 3)"), "{e}");
    // A thousand levels read.
    let mut p = vec![0x80, 2, b')'];
    p.extend(std::iter::repeat_n(0x85, 999));
    p.push(b'.');
    assert!(matches!(pickle::load(&p), Ok(Value::Tuple(_))));
}

#[test]
fn two_million_marks_or_lists_nested_are_refused_at_a_thousand_levels() {
    let mut p = vec![0x80, 2];
    p.extend(std::iter::repeat_n(b'(', 2_000_000));
    p.push(b'.');
    assert!(pickle_refusal(&p).contains("nests deeper than 1,000 levels at byte 1002"));
    // Two million empty lists, each appended to the one below it: the innermost first.
    let mut p = vec![0x80, 2];
    p.extend(std::iter::repeat_n(b']', 2_000_000));
    p.extend(std::iter::repeat_n(b'a', 1_999_999));
    p.push(b'.');
    assert!(pickle_refusal(&p).contains("nests deeper than 1,000 levels at byte 2001001"));
}

#[test]
fn a_list_or_dict_that_would_contain_itself_is_refused() {
    let cases: [&[u8]; 5] = [
        // l = []; l.append(l)
        b"\x80\x02]q\x00h\x00a.",
        // l = []; l.append((l,))
        b"\x80\x02]q\x00h\x00\x85a.",
        // d = {}; d['k'] = d
        b"\x80\x02}q\x00X\x01\x00\x00\x00kh\x00s.",
        // d = {}; d['k'] = [d]: the list holds d, then d would hold the list.
        b"\x80\x02}q\x00X\x01\x00\x00\x00k]q\x01h\x00as.",
        // APPENDS of a list into itself among other items.
        b"\x80\x02]q\x00(K\x01h\x00e.",
    ];
    for p in cases {
        let e = pickle_refusal(p);
        assert!(
            e.contains("its pickle changes a list or dict at byte ")
                && e.contains("after putting it inside another or itself (torch.save never does)"),
            "{e}"
        );
    }
    // A list shared by two dict values, complete before either, reads.
    let shared = b"\x80\x02}q\x00(X\x01\x00\x00\x00x]q\x01K\x01aX\x01\x00\x00\x00yh\x01u.";
    let Ok(Value::Dict(d)) = pickle::load(shared) else { panic!("reads") };
    assert_eq!(d.borrow().items.len(), 2);
}

#[test]
fn a_dict_of_300_000_keys_reads_in_order_and_the_last_value_of_a_key_wins() {
    let n = 300_000usize;
    let mut p = vec![0x80, 2, b'}', b'('];
    let key = |i: usize| format!("encoder.layer.{i}.w");
    let push_item = |p: &mut Vec<u8>, k: &str, v: i32| {
        p.push(b'X');
        p.extend((k.len() as u32).to_le_bytes());
        p.extend(k.as_bytes());
        p.push(b'J');
        p.extend(v.to_le_bytes());
    };
    for i in 0..n {
        push_item(&mut p, &key(i), i as i32);
    }
    // Keys set again: each keeps its place and takes the new value.
    push_item(&mut p, &key(7), -7);
    push_item(&mut p, &key(n - 1), -1);
    p.extend([b'u', b'.']);
    assert!(p.len() > 3_000_000, "{}", p.len());
    let Ok(Value::Dict(d)) = pickle::load(&p) else { panic!("reads") };
    let d = d.borrow();
    assert_eq!(d.items.len(), n);
    for (i, (k, v)) in d.items.iter().enumerate() {
        let want = match i {
            7 => -7,
            i if i == n - 1 => -1,
            i => i as i64,
        };
        assert!(matches!((k, v), (Value::Str(k), Value::Int(v)) if **k == *key(i) && *v == want), "{i}");
    }
}

#[test]
fn a_key_of_a_megabyte_set_a_million_times_is_one_item() {
    // d = {}; k = 'x' * 2**20; d[k] = None, a million times through the memo.
    let mut p = vec![0x80, 2, b'}', b'X'];
    p.extend((1u32 << 20).to_le_bytes());
    p.extend(std::iter::repeat_n(b'x', 1 << 20));
    p.extend([b'q', 0, b'0']);
    for _ in 0..1_000_000 {
        p.extend([b'h', 0, b'N', b's']);
    }
    p.push(b'.');
    let Ok(Value::Dict(d)) = pickle::load(&p) else { panic!("reads") };
    assert_eq!(d.borrow().items.len(), 1);
}

#[test]
fn a_pickle_building_more_than_eight_million_values_is_refused() {
    let mut p = vec![0x80, 2];
    for _ in 0..=pickle::MAX_VALUES {
        p.extend([b'N', b'0']);
    }
    p.push(b'.');
    let e = pickle_refusal(&p);
    assert!(e.contains("its pickle builds more than 8,000,000 values at byte 16000002"), "{e}");
    assert!(e.contains("(a state dict builds about 30 a tensor)"), "{e}");
}

#[test]
fn a_tensor_of_65_dimensions_is_refused() {
    let mut shapes = vec![t("a", "FloatStorage", "0", 0, &[1; 64])];
    let pickle = P::state_dict(&shapes, |_| 1);
    let bytes = archive("pytorch_model", &pickle, &[("0".into(), vec![0; 4])], "little");
    assert!(crate::torch::Checkpoint::read("pytorch_model.bin", &bytes).is_ok(), "64 dimensions read");
    shapes[0] = t("a", "FloatStorage", "0", 0, &[1; 65]);
    let e = pickle_refusal(&P::state_dict(&shapes, |_| 1));
    assert!(e.contains("its pickle has a tensor of 65 dimensions at byte "), "{e}");
    assert!(e.contains(", more than 64 (weights have 1 to 4)"), "{e}");
    assert_eq!(pickle::load(b"\x80\x02]q\x00h\x00a.").err(), Some(PickleError::Changed { at: 7 }));
}

/// A zip of `entries` (name, bytes), deflated, whose uncompressed size field (local header and
/// central directory) of entry `patched` is set to `declared`.
fn deflated(entries: &[(&str, &[u8])], patched: &str, declared: u32) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in entries {
        zip.start_file(*name, opts).expect("entry");
        zip.write_all(bytes).expect("write");
    }
    let mut z = zip.finish().expect("zip").into_inner();
    // (signature, offset of the uncompressed size, offset of the name's length) per header.
    for (sig, size_at, name_at, name_start) in [(b"PK\x03\x04", 22, 26, 30), (b"PK\x01\x02", 24, 28, 46)] {
        let mut i = 0;
        while let Some(found) = z[i..].windows(4).position(|w| w == sig) {
            let h = i + found;
            if h + name_start > z.len() {
                break;
            }
            let len = usize::from(u16::from_le_bytes([z[h + name_at], z[h + name_at + 1]]));
            if z.get(h + name_start..h + name_start + len) == Some(patched.as_bytes()) {
                z[h + size_at..h + size_at + 4].copy_from_slice(&declared.to_le_bytes());
            }
            i = h + 4;
        }
    }
    z
}

#[test]
fn an_entry_that_inflates_past_its_declared_size_is_refused() {
    let tensors = vec![t("a", "FloatStorage", "0", 0, &[2, 3])];
    let pickle = P::state_dict(&tensors, |_| 6);
    let zeros = vec![0u8; 1 << 20];
    let entries: [(&str, &[u8]); 3] = [("p/data.pkl", &pickle), ("p/byteorder", b"little"), ("p/data/0", &zeros)];
    // The storage declares 24 bytes and inflates to a megabyte.
    let e = open_err(&deflated(&entries, "p/data/0", 24));
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("pytorch_model.bin is refused: its p/data/0 inflates to more than the 24 bytes it declares"),
        "{e}"
    );
    // The pickle declares 10 bytes fewer than it has.
    let e = open_err(&deflated(&entries, "p/data.pkl", pickle.len() as u32 - 10));
    assert!(e.contains("is refused: its p/data.pkl inflates to more than the "), "{e}");
    // The pickle declares 4 GB: refused unread.
    let e = open_err(&deflated(&entries, "p/data.pkl", 0xffff_ff00));
    assert!(
        e.contains("is refused: its p/data.pkl declares 4,294,967,040 bytes, more than 33,554,432 bytes, the most read of a pickle"),
        "{e}"
    );
    // Compressed, and declared as it is, the archive reads: the megabyte of zeros holds the tensor.
    let bytes = deflated(&entries, "none", 0);
    let c = crate::torch::Checkpoint::read("pytorch_model.bin", &bytes).expect("reads");
    let tensor = c.tensor("pytorch_model.bin", &bytes, "a").expect("tensor").expect("there");
    assert_eq!(tensor.data, &[0u8; 24][..]);
}

#[test]
fn a_file_of_zip_end_records_is_refused_after_reading_four_times_its_size() {
    // Each record says: one file, its directory at 0; there is none.
    let mut record = b"PK\x05\x06\0\0\0\0\x01\0\x01\0\x2e\0\0\0\0\0\0\0\0\0".to_vec();
    assert_eq!(record.len(), 22);
    record = record.repeat((1 << 20) / 22);
    let e = open_err(&record);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("is refused: finding its zip directory reads more than 4 times its 1,048,564 bytes (a zip archive's directory is at its end)"),
        "{e}"
    );
}

#[test]
fn the_fuzzing_entries_read_a_sound_archive_and_refuse_a_hostile_one() {
    let w = super::write("pytorch_model", &super::tiny_bert());
    assert_eq!(crate::fuzzing::read_torch_archive(&w.bytes).expect("reads"), w.expected.len());
    let e = crate::fuzzing::read_pickle(b"\x80\x02]q\x00h\x00a.").expect_err("refused").to_string();
    assert!(e.starts_with("data.pkl is refused: its pickle changes a list or dict at byte 7"), "{e}");
    let e = crate::fuzzing::read_torch_archive(b"PK\x05\x06").expect_err("refused").to_string();
    assert!(e.starts_with("pytorch_model.bin is a truncated or corrupt zip archive"), "{e}");
}

#[test]
fn a_storage_key_of_60_000_bytes_shared_by_100_000_tensors_reads() {
    // One tensor on a storage whose key is 60,000 bytes, then 100,000 names for it.
    let key = "k".repeat(60_000);
    let mut p = vec![0x80, 2, b'}', b'('];
    let str = |p: &mut Vec<u8>, s: &str| {
        p.push(b'X');
        p.extend((s.len() as u32).to_le_bytes());
        p.extend(s.as_bytes());
    };
    str(&mut p, "t0");
    p.extend(b"ctorch._utils\n_rebuild_tensor_v2\n((");
    str(&mut p, "storage");
    p.extend(b"ctorch\nFloatStorage\n");
    str(&mut p, &key);
    str(&mut p, "cpu");
    p.extend(b"K\x01tQK\x00K\x01\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRq\x01");
    for i in 1..100_000 {
        str(&mut p, &format!("t{i}"));
        p.extend([b'h', 1]);
    }
    p.extend([b'u', b'.']);
    let bytes = archive("p", &p, &[(key, 1.5f32.to_le_bytes().to_vec())], "little");
    assert_eq!(crate::fuzzing::read_torch_archive(&bytes).expect("reads"), 100_000);
}
