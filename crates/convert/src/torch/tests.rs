//! Checkpoints written here as `torch.save` lays them out (a zip of `<root>/data.pkl`, pickle
//! protocol 2 with the globals and persistent ids torch's pickler writes, `<root>/data/<key>`
//! storages and `<root>/byteorder`), read back through [`crate::weights::Weights`].

use std::io::Write;
use std::path::Path;

use crate::ConvertError;
use crate::weights::Weights;

mod hostile;

/// A tensor to write: its storage (class, key, bytes) and its place in it.
#[derive(Clone)]
struct T {
    name: String,
    class: &'static str,
    key: String,
    offset: usize,
    shape: Vec<usize>,
    stride: Vec<usize>,
}

fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

fn t(name: &str, class: &'static str, key: &str, offset: usize, shape: &[usize]) -> T {
    T { name: name.into(), class, key: key.into(), offset, shape: shape.to_vec(), stride: row_major(shape) }
}

/// A protocol 2 pickle writer that memoizes as CPython's does (BINPUT after each string, tuple
/// and global; BINGET for a global seen before).
struct P {
    out: Vec<u8>,
    memo: u32,
    globals: Vec<(String, u32)>,
}

impl P {
    fn new() -> P {
        P { out: vec![0x80, 2], memo: 0, globals: Vec::new() }
    }
    fn put(&mut self) {
        match u8::try_from(self.memo) {
            Ok(m) => self.out.extend([b'q', m]),
            Err(_) => {
                self.out.push(b'r');
                self.out.extend(self.memo.to_le_bytes());
            }
        }
        self.memo += 1;
    }
    fn str(&mut self, s: &str) {
        self.out.push(b'X');
        self.out.extend((s.len() as u32).to_le_bytes());
        self.out.extend(s.as_bytes());
        self.put();
    }
    fn int(&mut self, v: usize) {
        if v < 256 {
            self.out.extend([b'K', v as u8]);
        } else if v < 65536 {
            self.out.push(b'M');
            self.out.extend((v as u16).to_le_bytes());
        } else {
            self.out.push(b'J');
            self.out.extend((v as i32).to_le_bytes());
        }
    }
    fn global(&mut self, module: &str, name: &str) {
        let full = format!("{module}\n{name}\n");
        if let Some(&(_, m)) = self.globals.iter().find(|(g, _)| *g == full) {
            match u8::try_from(m) {
                Ok(m) => self.out.extend([b'h', m]),
                Err(_) => {
                    self.out.push(b'j');
                    self.out.extend(m.to_le_bytes());
                }
            }
            return;
        }
        self.out.push(b'c');
        self.out.extend(full.as_bytes());
        self.globals.push((full, self.memo));
        self.put();
    }
    fn ints(&mut self, v: &[usize]) {
        if v.is_empty() {
            self.out.push(b')');
            return;
        }
        if v.len() > 3 {
            self.out.push(b'(');
        }
        for &x in v {
            self.int(x);
        }
        self.out.push(match v.len() {
            1 => 0x85,
            2 => 0x86,
            3 => 0x87,
            _ => b't',
        });
        self.put();
    }
    /// A state dict of `tensors`: an OrderedDict with `_metadata` set, as `module.state_dict()`.
    fn state_dict(tensors: &[T], numel: impl Fn(&str) -> usize) -> Vec<u8> {
        let mut p = P::new();
        p.global("collections", "OrderedDict");
        p.out.push(b')');
        p.out.push(b'R');
        p.put();
        p.out.push(b'(');
        for t in tensors {
            p.str(&t.name);
            p.global("torch._utils", "_rebuild_tensor_v2");
            p.out.push(b'(');
            // The persistent id ('storage', class, key, location, numel).
            p.out.push(b'(');
            p.str("storage");
            p.global("torch", t.class);
            p.str(&t.key);
            p.str("cpu");
            p.int(numel(&t.key));
            p.out.extend([b't', b'Q']);
            p.put();
            p.int(t.offset);
            p.ints(&t.shape);
            p.ints(&t.stride);
            p.out.push(0x89);
            p.global("collections", "OrderedDict");
            p.out.extend([b')', b'R']);
            p.put();
            p.out.push(b't');
            p.put();
            p.out.push(b'R');
            p.put();
        }
        p.out.push(b'u');
        // BUILD with the state {'_metadata': OrderedDict({'': {'version': 1}})}.
        p.out.push(b'}');
        p.put();
        p.str("_metadata");
        p.global("collections", "OrderedDict");
        p.out.extend([b')', b'R']);
        p.put();
        p.str("");
        p.out.push(b'}');
        p.put();
        p.str("version");
        p.int(1);
        p.out.extend([b's', b's', b's', b'b', b'.']);
        p.out
    }
}

/// The zip `torch.save` writes: `pickle` and `storages` under `root/`, stored uncompressed.
fn archive(root: &str, pickle: &[u8], storages: &[(String, Vec<u8>)], byteorder: &str) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mut add = |name: String, bytes: &[u8]| {
        zip.start_file(name, opts).expect("entry");
        zip.write_all(bytes).expect("write");
    };
    add(format!("{root}/data.pkl"), pickle);
    add(format!("{root}/byteorder"), byteorder.as_bytes());
    for (key, bytes) in storages {
        add(format!("{root}/data/{key}"), bytes);
    }
    add(format!("{root}/version"), b"3\n");
    zip.finish().expect("zip").into_inner()
}

/// Element `i` of a test tensor: varied signs and magnitudes.
fn value(seed: usize, i: usize) -> f32 {
    ((seed * 131 + i) as f32 * 0.618).sin() * (1.0 + (i % 7) as f32)
}

/// The bytes of a storage of `class` holding `n` values from `seed`, and those values widened
/// to float32 as the reader must return them.
fn storage(class: &str, seed: usize, n: usize) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::new();
    let mut widened = Vec::new();
    for i in 0..n {
        let v = value(seed, i);
        match class {
            "FloatStorage" => {
                bytes.extend(v.to_le_bytes());
                widened.push(v);
            }
            "HalfStorage" => {
                let h = half::f16::from_f32(v);
                bytes.extend(h.to_le_bytes());
                widened.push(h.to_f32());
            }
            "BFloat16Storage" => {
                let h = half::bf16::from_f32(v);
                bytes.extend(h.to_le_bytes());
                widened.push(h.to_f32());
            }
            "DoubleStorage" => {
                let d = f64::from(v) * (1.0 + 1e-12);
                bytes.extend(d.to_le_bytes());
                widened.push(d as f32);
            }
            "LongStorage" => {
                bytes.extend((i as i64).to_le_bytes());
                widened.push(i as f32);
            }
            other => panic!("{other}"),
        }
    }
    (bytes, widened)
}

/// A checkpoint of `tensors` whose storages hold `numel` elements each (the largest extent of
/// the tensors on it), and every tensor's expected float32 values.
struct Written {
    bytes: Vec<u8>,
    expected: Vec<(String, Vec<usize>, Vec<f32>)>,
}

fn write(root: &str, tensors: &[T]) -> Written {
    let mut sizes: Vec<(String, &'static str, usize)> = Vec::new();
    for t in tensors {
        let end = t.offset + t.shape.iter().product::<usize>();
        match sizes.iter_mut().find(|(k, _, _)| *k == t.key) {
            Some(s) => s.2 = s.2.max(end),
            None => sizes.push((t.key.clone(), t.class, end)),
        }
    }
    let stores: Vec<(String, Vec<u8>, Vec<f32>)> = sizes
        .iter()
        .enumerate()
        .map(|(seed, (k, class, n))| {
            let (b, w) = storage(class, seed, *n);
            (k.clone(), b, w)
        })
        .collect();
    let numel = |key: &str| sizes.iter().find(|s| s.0 == key).map_or(0, |s| s.2);
    let pickle = P::state_dict(tensors, numel);
    let bytes =
        archive(root, &pickle, &stores.iter().map(|(k, b, _)| (k.clone(), b.clone())).collect::<Vec<_>>(), "little");
    let expected = tensors
        .iter()
        .map(|t| {
            let w = &stores.iter().find(|s| s.0 == t.key).expect("storage").2;
            let n: usize = t.shape.iter().product();
            (t.name.clone(), t.shape.clone(), w[t.offset..t.offset + n].to_vec())
        })
        .collect();
    Written { bytes, expected }
}

/// A tiny BertModel's tensors (hidden 4, intermediate 8, vocab 10, one layer), each on its own
/// float32 storage.
fn tiny_bert() -> Vec<T> {
    let (h, i) = (4usize, 8usize);
    let mut names: Vec<(String, Vec<usize>)> = vec![
        ("embeddings.word_embeddings.weight".into(), vec![10, h]),
        ("embeddings.position_embeddings.weight".into(), vec![8, h]),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, h]),
        ("embeddings.LayerNorm.weight".into(), vec![h]),
        ("embeddings.LayerNorm.bias".into(), vec![h]),
    ];
    for (name, shape) in [
        ("attention.self.query", vec![h, h]),
        ("attention.self.key", vec![h, h]),
        ("attention.self.value", vec![h, h]),
        ("attention.output.dense", vec![h, h]),
        ("intermediate.dense", vec![i, h]),
        ("output.dense", vec![h, i]),
    ] {
        names.push((format!("encoder.layer.0.{name}.bias"), vec![shape[0]]));
        names.push((format!("encoder.layer.0.{name}.weight"), shape));
    }
    for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
        names.push((format!("encoder.layer.0.{norm}.weight"), vec![h]));
        names.push((format!("encoder.layer.0.{norm}.bias"), vec![h]));
    }
    names.iter().enumerate().map(|(k, (n, s))| t(n, "FloatStorage", &k.to_string(), 0, s)).collect()
}

const CONFIG: &str = r#"{"architectures":["BertModel"],"model_type":"bert","hidden_size":4,"num_hidden_layers":1,
"num_attention_heads":2,"intermediate_size":8,"vocab_size":10,"max_position_embeddings":8,"type_vocab_size":2}"#;

fn assert_reads(dir: &Path, expected: &[(String, Vec<usize>, Vec<f32>)]) {
    let w = Weights::open(dir).expect("opens");
    for (name, shape, values) in expected {
        let got = w.f32(name, shape).expect(name);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(values), "{name}");
    }
}

fn open_err(bytes: &[u8]) -> String {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join("pytorch_model.bin"), bytes).expect("write");
    match Weights::open(d.path()) {
        Ok(_) => panic!("read"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_bert_state_dict_round_trips_bit_for_bit() {
    let mut tensors = tiny_bert();
    // Tied weights (one storage under two names), a tensor at an offset in a shared storage,
    // a buffer of int64 that is parsed but not converted, and a scalar.
    tensors.push(t("cls.predictions.decoder.weight", "FloatStorage", "0", 0, &[10, 4]));
    tensors.push(t("shared.tail", "FloatStorage", "0", 12, &[7, 4]));
    tensors.push(t("embeddings.position_ids", "LongStorage", "ids", 0, &[1, 8]));
    tensors.push(t("scalar", "FloatStorage", "s", 0, &[]));
    let w = write("pytorch_model", &tensors);
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join("pytorch_model.bin"), &w.bytes).expect("write");
    let floats: Vec<_> = w.expected.iter().filter(|e| e.0 != "embeddings.position_ids").cloned().collect();
    assert_reads(d.path(), &floats);
    let weights = Weights::open(d.path()).expect("opens");
    let e = weights.f32("embeddings.position_ids", &[1, 8]).expect_err("int64 is not converted");
    assert!(matches!(e, ConvertError::Dtype { .. }), "{e}");
    let e = weights.f32("shared.tail", &[4, 7]).expect_err("wrong shape");
    assert!(matches!(e, ConvertError::Shape { .. }), "{e}");
}

#[test]
fn half_bfloat16_and_double_storages_widen_or_narrow_to_float32() {
    let tensors = vec![
        t("a", "HalfStorage", "0", 0, &[3, 5]),
        t("b", "BFloat16Storage", "1", 2, &[2, 2, 2]),
        t("c", "DoubleStorage", "2", 1, &[6]),
        t("d", "FloatStorage", "3", 0, &[2, 1, 1, 3]),
    ];
    let w = write("archive", &tensors);
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join("pytorch_model.bin"), &w.bytes).expect("write");
    assert_reads(d.path(), &w.expected);
}

#[test]
fn shards_are_read_through_their_index() {
    let tensors = tiny_bert();
    let (first, second) = tensors.split_at(7);
    let d = tempfile::tempdir().expect("tempdir");
    let mut map = serde_json::Map::new();
    let mut expected = Vec::new();
    for (file, part) in [("pytorch_model-00001-of-00002.bin", first), ("pytorch_model-00002-of-00002.bin", second)] {
        let w = write("pytorch_model", part);
        std::fs::write(d.path().join(file), &w.bytes).expect("shard");
        for t in part {
            map.insert(t.name.clone(), serde_json::Value::String(file.into()));
        }
        expected.extend(w.expected);
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
    std::fs::write(d.path().join("pytorch_model.bin.index.json"), index.to_string()).expect("index");
    assert_reads(d.path(), &expected);
    assert_eq!(Weights::open(d.path()).expect("opens").files().count(), 2);
}

#[test]
fn a_pickle_naming_anything_else_is_refused_and_nothing_is_called() {
    let d = tempfile::tempdir().expect("tempdir");
    let marker = d.path().join("ran");
    let command = format!("touch {}", marker.display());
    // GLOBAL os.system, then REDUCE with the command: an unpickler would run it.
    let mut p = vec![0x80, 2, b'c'];
    p.extend(b"os\nsystem\n");
    p.push(b'X');
    p.extend((command.len() as u32).to_le_bytes());
    p.extend(command.as_bytes());
    p.extend([0x85, b'R', b'.']);
    let e = open_err(&archive("pytorch_model", &p, &[], "little"));
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    assert!(
        e.contains("pytorch_model.bin's pickle names os.system, which is not a tensor: nornir reads only tensors and their storages (convert it to safetensors, or report the module)"),
        "{e}"
    );
    assert!(!marker.exists(), "nothing the pickle names is called");

    // STACK_GLOBAL spells the name from strings on the stack.
    let mut p = vec![0x80, 4, 0x8c, 8];
    p.extend(b"builtins");
    p.extend([0x8c, 4]);
    p.extend(b"eval");
    p.push(0x93);
    p.extend([0x8c, 1, b'1', 0x85, b'R', b'.']);
    let e = open_err(&archive("m", &p, &[], "little"));
    assert!(e.contains("names builtins.eval, which is not a tensor"), "{e}");

    // A storage class torch does not have is refused the same way.
    let mut p = vec![0x80, 2, b'c'];
    p.extend(b"torch\nFakeStorage\n.");
    assert!(open_err(&archive("m", &p, &[], "little")).contains("names torch.FakeStorage"));
}

#[test]
fn a_truncated_or_corrupt_archive_is_named() {
    let w = write("pytorch_model", &tiny_bert());
    let cut = &w.bytes[..w.bytes.len() - 30];
    let e = open_err(cut);
    assert!(e.contains("pytorch_model.bin is a truncated or corrupt zip archive"), "{e}");
    assert!(open_err(b"").contains("is not a torch.save zip archive"));
    let legacy = [0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, b'.'];
    assert!(open_err(&legacy).contains("format before torch 1.6"));
    let e = open_err(&archive("x", b"", &[], "little"));
    assert!(e.contains("pytorch_model.bin's pickle ends early (at byte 0)"), "{e}");
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file("x/other.pkl", zip::write::SimpleFileOptions::default()).expect("entry");
    let e = open_err(&zip.finish().expect("zip").into_inner());
    assert!(e.contains("has no <folder>/data.pkl"), "{e}");
}

#[test]
fn a_pickle_that_ends_early_or_has_an_unknown_opcode_is_named() {
    let tensors = tiny_bert();
    let pickle = P::state_dict(&tensors, |_| 1000);
    let e = open_err(&archive("pytorch_model", &pickle[..pickle.len() / 2], &[], "little"));
    assert!(e.contains("pytorch_model.bin's pickle ends early"), "{e}");
    let e = open_err(&archive("pytorch_model", &[0x80, 2, b'}', 0xff, b'.'], &[], "little"));
    assert!(e.contains("pytorch_model.bin's pickle has the opcode 0xff at byte 3"), "{e}");
    // INST (protocol 0's call of a class by name) is no state dict's opcode either.
    let e = open_err(&archive("pytorch_model", b"\x80\x02(ios\nsystem\n.", &[], "little"));
    assert!(e.contains("opcode 0x69 at byte 3"), "{e}");
}

#[test]
fn a_missing_or_short_storage_a_strided_tensor_and_big_endian_are_refused() {
    let tensors = vec![t("a", "FloatStorage", "0", 0, &[2, 3])];
    let pickle = P::state_dict(&tensors, |_| 6);
    let e = open_err(&archive("pytorch_model", &pickle, &[], "little"));
    assert!(e.contains("pytorch_model.bin has no pytorch_model/data/0, the storage of tensor \"a\""), "{e}");

    let short = archive("pytorch_model", &pickle, &[("0".into(), vec![0; 20])], "little");
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join("pytorch_model.bin"), &short).expect("write");
    let e = Weights::open(d.path()).expect("opens").f32("a", &[2, 3]).expect_err("short").to_string();
    assert!(
        e.contains("tensor \"a\" in ")
            && e.contains("runs past the end of its storage pytorch_model/data/0 (20 bytes)"),
        "{e}"
    );

    let mut strided = tensors.clone();
    strided[0].stride = vec![1, 2];
    let pickle = P::state_dict(&strided, |_| 6);
    std::fs::write(d.path().join("pytorch_model.bin"), archive("p", &pickle, &[("0".into(), vec![0; 24])], "little"))
        .expect("write");
    let e = Weights::open(d.path()).expect("opens").f32("a", &[2, 3]).expect_err("strided").to_string();
    assert!(e.contains("tensor \"a\" in ") && e.contains("is not contiguous (shape [2, 3], stride [1, 2])"), "{e}");

    let pickle = P::state_dict(&tensors, |_| 6);
    let e = open_err(&archive("p", &pickle, &[("0".into(), vec![0; 24])], "big"));
    assert!(e.contains("was written on a big machine"), "{e}");
}

#[test]
fn a_pytorch_model_bin_folder_converts_to_the_graph_of_the_same_safetensors() {
    let w = write("pytorch_model", &tiny_bert());
    let torch_dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(torch_dir.path().join("config.json"), CONFIG).expect("config");
    std::fs::write(torch_dir.path().join("pytorch_model.bin"), &w.bytes).expect("bin");

    let data: Vec<(String, Vec<usize>, Vec<u8>)> = w
        .expected
        .iter()
        .map(|(n, s, v)| (n.clone(), s.clone(), v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let tensors: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::tensor::Dtype::F32, s.clone(), b).expect("view"),
            )
        })
        .collect();
    let st = safetensors::serialize(tensors, None).expect("safetensors");
    let st_dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(st_dir.path().join("config.json"), CONFIG).expect("config");
    std::fs::write(st_dir.path().join("model.safetensors"), st).expect("safetensors");

    let options = crate::ConvertOptions::default().with_fused(false);
    let graph = |dir: &Path| {
        let (g, c) = crate::folder::build(dir, &options).expect("converts");
        (protobuf::Message::write_to_bytes(&g.into_model("test")).expect("encode"), c)
    };
    let (from_torch, record) = graph(torch_dir.path());
    let (from_safetensors, _) = graph(st_dir.path());
    assert!(from_torch == from_safetensors, "the same graph and weights");
    assert_eq!(record.sources[1].file, "pytorch_model.bin");

    // Through convert(): the folder is written, and the .bin is not copied; a module folder's
    // pytorch_model.bin (an older sentence-transformers Dense) becomes its model.safetensors.
    let dense = write(
        "pytorch_model",
        &[t("linear.weight", "FloatStorage", "0", 0, &[3, 4]), t("linear.bias", "FloatStorage", "1", 0, &[3])],
    );
    std::fs::create_dir(torch_dir.path().join("2_Dense")).expect("mkdir");
    std::fs::write(torch_dir.path().join("2_Dense/pytorch_model.bin"), &dense.bytes).expect("dense bin");
    std::fs::write(torch_dir.path().join("2_Dense/config.json"), "{}").expect("dense config");
    // A head beside the model as its own torch.save file (BGE-M3's colbert_linear.pt).
    let head = write(
        "colbert_linear",
        &[t("weight", "FloatStorage", "0", 0, &[2, 4]), t("bias", "FloatStorage", "1", 0, &[2])],
    );
    std::fs::write(torch_dir.path().join("colbert_linear.pt"), &head.bytes).expect("head");
    let out = torch_dir.path().join("out");
    let record = crate::convert(torch_dir.path(), &out, &options).expect("converts");
    assert!(out.join("model.onnx").is_file());
    assert!(!out.join("pytorch_model.bin").exists());
    assert!(!out.join("2_Dense/pytorch_model.bin").exists());
    assert_reads(&out.join("2_Dense"), &dense.expected);
    assert!(!out.join("colbert_linear.pt").exists());
    let head_dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(out.join("colbert_linear.safetensors"), head_dir.path().join("model.safetensors")).expect("copy");
    assert_reads(head_dir.path(), &head.expected);
    assert!(
        record.copied.contains(&"colbert_linear.safetensors (from colbert_linear.pt)".to_owned()),
        "{:?}",
        record.copied
    );
    assert!(
        record.copied.contains(&"2_Dense/model.safetensors (from 2_Dense/pytorch_model.bin)".to_owned()),
        "{:?}",
        record.copied
    );
}

/// Runs scripts/make_torch_checkpoint.py (CPython's own pickler with torch.save's layout) into
/// `dir` with `args`.
fn python_checkpoint(dir: &Path, args: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/make_torch_checkpoint.py");
    let o = std::process::Command::new("python3").arg(script).arg(dir).args(args).output().expect("run python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Python 3 (standard library only) is one of the project's prerequisites (README), so this
/// runs in every tier.
#[test]
fn checkpoints_pickled_by_cpython_as_torch_save_does_read_bit_for_bit_and_refuse_os_system() {
    let t = tempfile::tempdir().expect("tempdir");
    for (sub, args) in [("single", &[][..]), ("sharded", &["--shards", "3"][..])] {
        let dir = t.path().join(sub);
        python_checkpoint(&dir, args);
        let text = std::fs::read_to_string(dir.join("expected.json")).expect("expected.json");
        let expected: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).expect("JSON");
        let w = Weights::open(&dir).expect("opens");
        assert!(w.contains("embeddings.position_ids"), "the int64 buffer is read too");
        for (name, e) in &expected {
            let shape: Vec<usize> = serde_json::from_value(e["shape"].clone()).expect("shape");
            let bits: Vec<u32> = serde_json::from_value(e["f32_bits"].clone()).expect("bits");
            let got: Vec<u32> = w.f32(name, &shape).expect(name).iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, bits, "{sub}: {name}");
        }
        assert!(expected.len() > 20, "{sub}: {}", expected.len());
    }
    let dir = t.path().join("evil");
    let marker = t.path().join("RAN");
    python_checkpoint(&dir, &["--evil", &marker.display().to_string()]);
    let e = Weights::open(&dir).err().expect("refused").to_string();
    // CPython names os.system by the module that defines it.
    assert!(e.contains("pytorch_model.bin's pickle names posix.system, which is not a tensor"), "{e}");
    assert!(!marker.exists(), "nothing the pickle names is called");
}
