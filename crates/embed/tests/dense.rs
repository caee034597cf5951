//! sentence-transformers `Dense` modules after pooling: the real all-MiniLM-L6-v2 (float32) with
//! two Dense folders written here (seeded random weights, 384 -> 256 Tanh with a bias, then
//! 256 -> 128 GELU without one) against NumPy computing the same layers on nornir's pooled
//! vectors of the plain folder; and each bad Dense folder as one line, before ONNX Runtime loads.

use std::path::{Path, PathBuf};

use nornir_embed::{Embedder, EmbedderOptions, error_chain};
use nornir_ep_select::Device;
use nornir_options::{CallOptions, Precision};
use nornir_test_support::dense::{Dense, modules_json, safetensors, write_dense};
use nornir_test_support::env_path;

const TEXTS: [&str; 4] =
    ["A man is eating food.", "what is a fjord?", "The capital of France is Paris, a city on the Seine.", "ice"];

/// NumPy: the two layers on the pooled rows, before and after normalising them first (the
/// wrong order, which the test must tell apart), reading the safetensors files itself.
const REFERENCE: &str = r#"
import json, math, sys
import numpy as np
def tensors(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out
folder, rows = sys.argv[1], int(sys.argv[2])
pooled = np.fromfile(folder + "/pooled.f32", dtype="<f4").astype(np.float64).reshape(rows, -1)
first, second = tensors(folder + "/2_Dense/model.safetensors"), tensors(folder + "/3_Dense/model.safetensors")
gelu = np.vectorize(lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))))
def head(x):
    return gelu(np.tanh(x @ first["linear.weight"].T + first["linear.bias"]) @ second["linear.weight"].T)
right = head(pooled)
wrong = head(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
np.concatenate([right, wrong]).astype("<f4").tofile(folder + "/reference.f32")
"#;

fn cpu() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_threads(1)
}

/// `model`'s files linked into `dir`, its sub-folders copied.
fn link_model(model: &Path, dir: &Path) {
    for entry in std::fs::read_dir(model).expect("read model") {
        let entry = entry.expect("entry");
        let target = dir.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            for f in std::fs::read_dir(entry.path()).expect("read sub-folder") {
                let f = f.expect("entry");
                std::fs::copy(f.path(), target.join(f.file_name())).expect("copy");
            }
        } else {
            std::os::unix::fs::symlink(entry.path(), target).expect("link");
        }
    }
}

fn normalised(v: &[f32]) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn dense_modules_apply_after_pooling_and_before_normalize_as_numpy() {
    nornir_test_support::needs_assets!();
    let model = env_path("NORNIR_TEST_CONVERTED_MODEL");
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("dense");
    std::fs::create_dir(&dir).expect("mkdir");
    link_model(&model, &dir);
    std::fs::remove_file(dir.join("modules.json")).expect("unlink modules.json");
    std::fs::write(dir.join("modules.json"), modules_json(&["2_Dense", "3_Dense"])).expect("modules.json");
    let tanh = Dense {
        in_features: 384,
        out_features: 256,
        activation: "torch.nn.modules.activation.Tanh",
        bias: true,
        seed: 1,
    };
    let gelu = Dense {
        in_features: 256,
        out_features: 128,
        activation: "torch.nn.modules.activation.GELU",
        bias: false,
        seed: 2,
    };
    write_dense(&dir, "2_Dense", &tanh);
    write_dense(&dir, "3_Dense", &gelu);

    // The pooled rows, raw, from the folder without Dense modules.
    let plain = Embedder::new(&model, &cpu()).expect("load the plain model");
    let pooled = plain.embed_with(&TEXTS, &CallOptions::new().with_normalize(false)).expect("pooled");
    let bytes: Vec<u8> = pooled.rows().flatten().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("pooled.f32"), bytes).expect("pooled.f32");
    let o = std::process::Command::new(env_path("NORNIR_TEST_REFERENCE_PYTHON"))
        .args(["-c", REFERENCE])
        .arg(&dir)
        .arg(TEXTS.len().to_string())
        .output()
        .expect("run NumPy");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let reference: Vec<f32> = std::fs::read(dir.join("reference.f32"))
        .expect("reference.f32")
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let (right, wrong) = reference.split_at(TEXTS.len() * 128);

    let e = Embedder::new(&dir, &cpu()).expect("load the model with Dense modules");
    let info = e.model_info();
    assert_eq!((e.dimension(), info.model_dimension), (128, 128));
    assert!(info.dense_reason.as_deref().is_some_and(|r| r.contains("applied by nornir after pooling")), "{info:?}");
    assert_eq!(info.folder.dense.len(), 2);
    let got = e.embed(&TEXTS).expect("embed");
    assert_eq!(got.dim(), 128);
    for (i, row) in got.rows().enumerate() {
        let want = normalised(&right[i * 128..(i + 1) * 128]);
        let d = max_diff(row, &want);
        assert!(d <= 1e-5, "text {i}: max |nornir - NumPy| = {d}");
        // The test can tell the orders apart: Dense on the normalised vector is far from it.
        let other = normalised(&wrong[i * 128..(i + 1) * 128]);
        assert!(max_diff(row, &other) > 1e-2, "text {i}: the wrong order gives the same vector");
    }

    // --dimensions cuts the Dense output, then normalises.
    let cut = e.embed_with(&TEXTS, &CallOptions::new().with_dimensions(64)).expect("cut");
    for (i, row) in cut.rows().enumerate() {
        let d = max_diff(row, &normalised(&right[i * 128..i * 128 + 64]));
        assert!(d <= 1e-5, "text {i} cut to 64: {d}");
    }
    let e2 = e.embed_with(&TEXTS, &CallOptions::new().with_dimensions(129)).expect_err("wider than 128");
    assert!(error_chain(&e2).contains("128"), "{}", error_chain(&e2));
    // TEI's token vectors are the graph's own (384 wide, before the Dense modules), also when
    // they share a batch with pooled rows that go through them.
    let plain_tokens = plain.token_vectors(TEXTS[0], &CallOptions::new()).expect("plain token vectors");
    let (tokens, beside) = std::thread::scope(|s| {
        let beside = s.spawn(|| e.embed(&TEXTS));
        (e.token_vectors(TEXTS[0], &CallOptions::new()).expect("token vectors"), beside.join())
    });
    assert_eq!((tokens.dim(), tokens.len()), (384, plain_tokens.len()));
    assert!(max_diff(tokens.as_slice(), plain_tokens.as_slice()) <= 1e-5);
    assert!(max_diff(beside.expect("join").expect("embed").as_slice(), got.as_slice()) <= 1e-5);
    // int8 ranges are calibrated at the Dense width.
    let compact = e.embed_compact(&TEXTS, &CallOptions::new().with_precision(Precision::Int8)).expect("int8");
    assert_eq!((compact.dimensions, compact.len()), (128, TEXTS.len()));
}

/// A folder with the right files for `ModelFolder::open` (the graph and tokenizer are never read:
/// every case fails before ONNX Runtime loads), a pooling config 384 wide, and `2_Dense`.
fn bad_folder(root: &Path, name: &str, dense: &Dense<'_>) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("1_Pooling")).expect("mkdir");
    std::fs::write(dir.join("model.onnx"), b"not read").expect("model.onnx");
    std::fs::write(dir.join("tokenizer.json"), b"{}").expect("tokenizer.json");
    std::fs::write(dir.join("config.json"), r#"{"hidden_size": 384}"#).expect("config.json");
    std::fs::write(
        dir.join("1_Pooling/config.json"),
        r#"{"word_embedding_dimension": 384, "pooling_mode_mean_tokens": true}"#,
    )
    .expect("pooling");
    std::fs::write(dir.join("modules.json"), modules_json(&["2_Dense"])).expect("modules.json");
    write_dense(&dir, "2_Dense", dense);
    dir
}

#[test]
fn bad_dense_folders_are_one_line_errors() {
    let t = tempfile::tempdir().expect("tempdir");
    let ok = Dense {
        in_features: 384,
        out_features: 8,
        activation: "torch.nn.modules.activation.Tanh",
        bias: true,
        seed: 3,
    };
    let error = |dir: &Path| error_chain(&Embedder::new(dir, &cpu()).expect_err("refused"));

    let missing = bad_folder(t.path(), "missing", &ok);
    std::fs::remove_file(missing.join("2_Dense/model.safetensors")).expect("rm");
    let e = error(&missing);
    assert!(e.contains("2_Dense/model.safetensors is missing: the Dense module has no weights"), "{e}");

    let bin = bad_folder(t.path(), "bin", &ok);
    std::fs::rename(bin.join("2_Dense/model.safetensors"), bin.join("2_Dense/pytorch_model.bin")).expect("mv");
    let e = error(&bin);
    assert!(e.contains("2_Dense/ holds only pytorch_model.bin") && e.contains("safetensors.torch.save_file"), "{e}");

    let narrow = bad_folder(t.path(), "narrow", &Dense { in_features: 256, ..ok.clone() });
    let e = error(&narrow);
    assert!(
        e.contains("2_Dense/config.json: in_features 256 does not match the pooled vectors' width (hidden size), 384"),
        "{e}"
    );

    // The weights are 8 x 384 but config.json says 384 -> 16.
    let shape = bad_folder(t.path(), "shape", &ok);
    std::fs::write(
        shape.join("2_Dense/config.json"),
        r#"{"in_features": 384, "out_features": 16, "bias": true, "activation_function": "torch.nn.modules.activation.Tanh"}"#,
    )
    .expect("config");
    let e = error(&shape);
    assert!(e.contains("linear.weight has shape [8, 384], but config.json says [16, 384]"), "{e}");

    let no_bias = bad_folder(t.path(), "no-bias", &ok);
    std::fs::write(
        no_bias.join("2_Dense/model.safetensors"),
        safetensors(&[("linear.weight", &[8, 384], &[0.0; 8 * 384])]),
    )
    .expect("weights");
    let e = error(&no_bias);
    assert!(e.contains("has no tensor \"linear.bias\""), "{e}");

    let softplus =
        bad_folder(t.path(), "softplus", &Dense { activation: "torch.nn.modules.activation.Softplus", ..ok.clone() });
    let e = error(&softplus);
    assert!(
        e.contains("activation_function \"torch.nn.modules.activation.Softplus\" is not one nornir applies"),
        "{e}"
    );

    for e in [error(&missing), error(&bin), error(&narrow), error(&shape), error(&no_bias), error(&softplus)] {
        assert!(!e.contains('\n'), "one line: {e}");
    }
}
