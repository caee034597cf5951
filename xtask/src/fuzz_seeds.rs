//! Each fuzz target's seeds: the hand-written ones tracked under `fuzz/seeds/<target>/` (a config
//! per family, every route's request), and real files from the nornir cache (all-MiniLM-L6-v2's
//! and splade-tiny's configs and safetensors headers, a torch.save archive as
//! scripts/make_torch_checkpoint.py writes one), each cut to what a target reads.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value};

use crate::assets::{PEER_MODEL_DIR, SPLADE_TINY};
use crate::process::workspace_root;

/// Writes `target`'s seeds into `dir` (emptied first); how many.
pub(crate) fn write(target: &str, home: &Path, dir: &Path) -> Result<usize> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    let tracked = workspace_root().join("fuzz/seeds").join(target);
    if let Ok(entries) = std::fs::read_dir(&tracked) {
        for e in entries {
            let path = e?.path();
            let name = path.file_name().context("seed name")?.to_string_lossy().into_owned();
            seeds.push((name, std::fs::read(&path)?));
        }
    }
    let minilm = home.join(PEER_MODEL_DIR);
    let splade = home.join(SPLADE_TINY.dest);
    let configs = |names: &[&str]| -> Result<Vec<(String, Vec<u8>)>> {
        let mut out = Vec::new();
        for (tag, folder) in [("minilm", &minilm), ("splade", &splade)] {
            for name in names {
                if let Ok(bytes) = std::fs::read(folder.join(name)) {
                    out.push((format!("{tag}-{}", name.replace('/', "-")), bytes));
                }
            }
        }
        Ok(out)
    };
    match target {
        "model_configs" => seeds.extend(configs(&[
            "config.json",
            "modules.json",
            "sentence_bert_config.json",
            "config_sentence_transformers.json",
            "1_Pooling/config.json",
        ])?),
        "convert_configs" => seeds.extend(configs(&["config.json"])?),
        "folder_templates" => seeds.extend(configs(&["config_sentence_transformers.json"])?),
        "input_records" => {
            let corpus = std::fs::read_to_string(workspace_root().join("testdata/corpus.txt"))?;
            let lines: Vec<&str> = corpus.lines().take(20).collect();
            seeds.push(("corpus-lines.txt".to_owned(), lines.join("\n").into_bytes()));
            let records: Vec<String> =
                lines.iter().enumerate().map(|(i, l)| serde_json::json!({"id": i, "text": l}).to_string()).collect();
            seeds.push(("corpus-records.jsonl".to_owned(), records.join("\n").into_bytes()));
        }
        "elf_deps" => {
            if let Ok(bytes) = std::fs::read("/usr/bin/true") {
                seeds.push(("true.elf".to_owned(), bytes));
            }
        }
        "safetensors" => {
            for (tag, folder) in [("minilm", &minilm), ("splade", &splade)] {
                let file = folder.join("model.safetensors");
                seeds.push((format!("{tag}-shrunk.safetensors"), shrunk_safetensors(&file)?));
            }
        }
        "onnx_graph_scan" => seeds.push(("dynamic-quantize-graph.onnx".to_owned(), quantized_graph())),
        "torch_archive" | "pickle" => {
            let archive = torch_archive()?;
            if target == "pickle" {
                seeds.push(("bert-data.pkl".to_owned(), pickle_of(&archive)?));
            } else {
                seeds.push(("bert-pytorch_model.bin".to_owned(), std::fs::read(&archive)?));
            }
        }
        _ => {}
    }
    for (name, bytes) in &seeds {
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(seeds.len())
}

/// A real safetensors file with its tensor names, dtypes, order and metadata kept and every
/// dimension cut to at most 2 (zeros as values), so the whole file fits a fuzz input.
fn shrunk_safetensors(file: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(file).with_context(|| format!("read {}", file.display()))?;
    let n = u64::from_le_bytes(bytes.get(..8).context("no header length")?.try_into()?) as usize;
    let header: Map<String, Value> = serde_json::from_slice(bytes.get(8..8 + n).context("short header")?)?;
    let mut tensors: Vec<(&String, &Value)> = header.iter().filter(|(k, _)| *k != "__metadata__").collect();
    tensors.sort_by_key(|(_, v)| v["data_offsets"][0].as_u64());
    let mut out = Map::new();
    if let Some(m) = header.get("__metadata__") {
        out.insert("__metadata__".to_owned(), m.clone());
    }
    let mut offset = 0u64;
    for (name, v) in tensors {
        let dtype = v["dtype"].as_str().context("dtype")?;
        let width = match dtype {
            "F64" | "I64" | "U64" => 8,
            "F32" | "I32" | "U32" => 4,
            "F16" | "BF16" | "I16" | "U16" => 2,
            _ => 1,
        };
        let shape: Vec<u64> =
            v["shape"].as_array().context("shape")?.iter().filter_map(Value::as_u64).map(|d| d.min(2)).collect();
        let size = shape.iter().product::<u64>() * width;
        out.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}),
        );
        offset += size;
    }
    let text = Value::Object(out).to_string();
    let mut seed = (text.len() as u64).to_le_bytes().to_vec();
    seed.extend_from_slice(text.as_bytes());
    seed.resize(seed.len() + offset as usize, 0);
    Ok(seed)
}

/// A BERT-shaped `pytorch_model.bin` written by scripts/make_torch_checkpoint.py (Python's own
/// pickler, protocol 2, torch.save's layout; standard library only).
fn torch_archive() -> Result<std::path::PathBuf> {
    let out = workspace_root().join("target/fuzz-seeds/torch-checkpoint");
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new("python3")
        .arg(workspace_root().join("scripts/make_torch_checkpoint.py"))
        .arg(&out)
        .status()
        .context("run python3 scripts/make_torch_checkpoint.py")?;
    if !status.success() {
        bail!("scripts/make_torch_checkpoint.py failed");
    }
    Ok(out.join("pytorch_model.bin"))
}

/// The `<root>/data.pkl` entry of a torch.save archive (stored, not compressed, as torch writes it).
fn pickle_of(archive: &Path) -> Result<Vec<u8>> {
    let read = Command::new("python3")
        .args(["-c", "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); sys.stdout.buffer.write(z.read(next(n for n in z.namelist() if n.endswith('/data.pkl'))))"])
        .arg(archive)
        .output()
        .context("read data.pkl with python3")?;
    if !read.status.success() || read.stdout.is_empty() {
        bail!("no data.pkl in {}", archive.display());
    }
    Ok(read.stdout)
}

/// A `ModelProto` whose graph holds a `DynamicQuantizeLinear` and a `com.microsoft`
/// `DynamicQuantizeMatMul` node, in protobuf's wire format (field 7 graph, field 1 node, its
/// field 4 op_type and 7 domain), as the scan reads a third-party int8 export.
fn quantized_graph() -> Vec<u8> {
    fn field(number: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2];
        let mut n = value.len();
        while n >= 0x80 {
            out.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out.extend_from_slice(value);
        out
    }
    let node = |op: &str, domain: &str| field(1, &[field(4, op.as_bytes()), field(7, domain.as_bytes())].concat());
    let graph = [node("DynamicQuantizeLinear", ""), node("DynamicQuantizeMatMul", "com.microsoft"), node("MatMul", "")];
    field(7, &graph.concat())
}
