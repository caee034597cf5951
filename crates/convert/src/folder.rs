//! The conversion of a folder: read the config and weights, build the graph, and write the
//! output folder under a temporary name, renamed into place only when whole.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::config::{Head, StModule};
use crate::families;
use crate::graph::{Graph, OPSET, WeightDtype};
use crate::text_file::pretty_json;
use crate::text_file::read_text;
use crate::weights::{SHARD_INDEX, SINGLE, TORCH_INDEX, TORCH_SINGLE, Weights};
use crate::{Conversion, ConvertError, ConvertOptions, RerankerBy, SourceFile, network};

const EXTERNAL_DATA: &str = "model.onnx_data";

/// Files of the source folder's top level that are not copied: weights in any format (the graph
/// replaces them), ONNX files and records of earlier conversions, and hidden files.
fn is_copied(name: &str) -> bool {
    const WEIGHTS: [&str; 6] = [".bin", ".pth", ".h5", ".msgpack", ".ckpt", ".onnx"];
    !(name.starts_with('.')
        || WEIGHTS.iter().any(|ext| name.ends_with(ext))
        || name.starts_with("model") && name.ends_with(".safetensors")
        || is_head_checkpoint(name)
        || name.ends_with(".onnx_data")
        || name.ends_with(".onnx.data")
        || [SHARD_INDEX, TORCH_INDEX, "conversion.json", "quantization.json", "onnx", "openvino"].contains(&name))
}

/// A head's PyTorch weights beside the model (BGE-M3's `colbert_linear.pt`, `sparse_linear.pt`):
/// written as `<name>.safetensors`; other safetensors files beside the model are copied.
fn is_head_checkpoint(name: &str) -> bool {
    name.ends_with(".pt")
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> ConvertError + '_ {
    move |source| ConvertError::Write { path: display(path), source }
}

/// Converts the model in `source` into a new folder `output`: `model.onnx`, the tokenizer and
/// configuration files copied, and `conversion.json`. Nothing is left at `output` if it fails.
pub fn convert(source: &Path, output: &Path, options: &ConvertOptions) -> Result<Conversion, ConvertError> {
    if output.exists() {
        if same_folder(source, output) {
            return Err(ConvertError::OutputIsSource { path: display(output) });
        }
        if !options.replace {
            return Err(ConvertError::OutputExists { path: display(output) });
        }
    }
    let parent = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(ConvertError::NoOutputParent { path: display(&parent) });
    }
    let name = output.file_name().map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned());
    let tmp = parent.join(format!(".{name}.nornir-convert-{}.tmp", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let written = (|| {
        std::fs::create_dir(&tmp).map_err(write_err(&tmp))?;
        let Built { graph: g, vision, mut conversion, positions } = build_in(source, options, Some(&tmp))?;
        if let Some(vision) = vision {
            conversion.graphs = vec![TEXT_MODEL.to_owned(), VISION_MODEL.to_owned()];
            write_graph(vision, &tmp, VISION_MODEL, "vision_model.onnx_data", options)?;
            conversion.external_data = write_graph(g, &tmp, TEXT_MODEL, "text_model.onnx_data", options)?;
        } else {
            conversion.external_data = write_graph(g, &tmp, "model.onnx", EXTERNAL_DATA, options)?;
        }
        conversion.copied = copy_folder(source, &tmp, Path::new(""), output)?;
        if conversion.head == Head::YesNo {
            write_reranker_config(&tmp.join("config.json"), &conversion.architecture)?;
            let template = tmp.join(PAIR_TEMPLATE);
            if !template.exists() {
                let text = pretty_json(&qwen3_reranker_template(), &template)?;
                std::fs::write(&template, text).map_err(write_err(&template))?;
            }
        }
        if conversion.architecture == "HF_ColBERT" {
            let files = crate::colbert::stanford_files(source, conversion.hidden, positions, &Weights::open(source)?)?;
            for (relative, bytes) in files {
                let file = tmp.join(relative);
                if let Some(dir) = file.parent() {
                    std::fs::create_dir_all(dir).map_err(write_err(dir))?;
                }
                std::fs::write(&file, bytes).map_err(write_err(&file))?;
            }
        }
        conversion.folder = output.to_path_buf();
        let record = tmp.join("conversion.json");
        let text = pretty_json(&conversion, &record)?;
        std::fs::write(&record, text).map_err(write_err(&record))?;
        replace_dir(&tmp, output)?;
        Ok(conversion)
    })();
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    written
}

/// A dual encoder's graph files.
const TEXT_MODEL: &str = "text_model.onnx";
const VISION_MODEL: &str = "vision_model.onnx";

/// Writes `g` as `file` in `dir`, its weights in `data` beside it where they were streamed there
/// or pass `options.external_data_over`; the external data file's name where there is one.
fn write_graph(
    mut g: Graph,
    dir: &Path,
    file: &str,
    data: &str,
    options: &ConvertOptions,
) -> Result<Option<String>, ConvertError> {
    let mut external = None;
    if g.streams_weights() {
        g.finish_weights().map_err(|(path, source)| ConvertError::Write { path: display(&path), source })?;
        external = Some(EXTERNAL_DATA.to_owned());
    } else if g.weight_bytes() > options.external_data_over {
        let mut bytes = Vec::new();
        g.move_weights_out(data, &mut bytes);
        let path = dir.join(data);
        std::fs::write(&path, bytes).map_err(write_err(&path))?;
        external = Some(data.to_owned());
    }
    let model = g.into_model(env!("CARGO_PKG_VERSION"));
    let bytes = protobuf::Message::write_to_bytes(&model).map_err(ConvertError::Encode)?;
    let path = dir.join(file);
    std::fs::write(&path, bytes).map_err(write_err(&path))?;
    Ok(external)
}

/// What [`build_in`] makes: the graph, a dual encoder's vision graph (its weights inline unless
/// they pass `options.external_data_over` when written), the record, and the model's positions.
struct Built {
    graph: Graph,
    vision: Option<Graph>,
    conversion: Conversion,
    positions: usize,
}

/// The graph of the model in `dir` and its record (without the copied files and the folder).
#[cfg(test)]
pub(crate) fn build(dir: &Path, options: &ConvertOptions) -> Result<(Graph, Conversion), ConvertError> {
    build_in(dir, options, None).map(|built| (built.graph, built.conversion))
}

/// [`build`], with the weights written to `out`'s external data file as they are converted where
/// `out` is given and they are larger than `options.external_data_over`; with a dual encoder's
/// vision graph and the model's positions (`max_position_embeddings`, 0 for a decoder without
/// them).
fn build_in(dir: &Path, options: &ConvertOptions, out: Option<&Path>) -> Result<Built, ConvertError> {
    let config_file = dir.join("config.json");
    if !config_file.is_file() {
        return Err(ConvertError::NoConfig { dir: display(dir) });
    }
    let text = read_text(&config_file).map_err(|e| ConvertError::Read { file: display(&config_file), source: e })?;
    let st = read_text(&dir.join("modules.json")).ok().and_then(|t| StModule::parse(&t));
    let mut config = families::parse(&text, &display(&config_file), st)?;
    if options.dtype != WeightDtype::Float32 && config.decoder.is_none() {
        return Err(ConvertError::DtypeForDecodersOnly {
            file: display(&config_file),
            architecture: config.architecture.clone(),
            dtype: options.dtype.name(),
        });
    }
    let reranker = config.decoder.as_ref().and_then(|_| reranker_by(dir, options));
    if reranker.is_some() {
        let (yes, no) = yes_no_ids(dir, config.vocab)?;
        config = config.into_reranker(yes, no);
    }
    let weights = Weights::open(dir)?;
    let config = config.encoder_where_no_head_weights(st, |name| weights.contains(name));
    let mut g = Graph::new(&config.architecture).with_weight_dtype(options.dtype);
    if let Some(out) = out
        && weights.size_as(options.dtype.element_bytes()) > options.external_data_over
    {
        let file = out.join(EXTERNAL_DATA);
        g.stream_weights_to(&file, EXTERNAL_DATA).map_err(write_err(&file))?;
    }
    network::build(&mut g, &config, &weights, options.fused)?;
    let vision = match &config.dual {
        Some(dual) => {
            let mut vision = Graph::new(&config.architecture);
            network::dual::build_vision(&mut vision, dual, &weights, options.fused)?;
            Some(vision)
        }
        None => None,
    };
    let mut sources = vec![source_file(dir, &config_file)?];
    for path in weights.files() {
        sources.push(source_file(dir, path)?);
    }
    let conversion = Conversion {
        architecture: config.architecture.clone(),
        family: config.family,
        head: config.head,
        reranker_by: reranker,
        output: config.head.output_name().to_owned(),
        opset: OPSET,
        fused: options.fused,
        layers: config.layers,
        hidden: config.hidden,
        vocabulary: config.vocab,
        labels: config.labels,
        nodes: g.node_count(),
        operators: g.op_counts(),
        weight_bytes: g.weight_bytes(),
        dtype: options.dtype,
        external_data: None,
        graphs: vec!["model.onnx".to_owned()],
        sources,
        copied: Vec::new(),
        nornir_version: env!("CARGO_PKG_VERSION").to_owned(),
        folder: PathBuf::new(),
    };
    Ok(Built { graph: g, vision, conversion, positions: config.max_positions })
}

/// Why a decoder converts as the yes/no reranker, if it does: asked for (`--reranker`), or the
/// folder's model card (README.md's front matter) tags it `pipeline_tag: text-ranking`, as the
/// hub's Qwen3-Reranker cards do. An embedder (Qwen3-Embedding) ships the same architecture, and
/// a folder's name proves nothing, so nothing else tells them apart.
fn reranker_by(dir: &Path, options: &ConvertOptions) -> Option<RerankerBy> {
    if options.reranker {
        return Some(RerankerBy::Asked);
    }
    (crate::model_card::pipeline_tag(dir).as_deref() == Some(TEXT_RANKING)).then_some(RerankerBy::ModelCard)
}

/// The hub's pipeline tag of a reranker's model card.
const TEXT_RANKING: &str = "text-ranking";

/// The ids of the tokens "yes" and "no" in the folder's tokenizer.json vocabulary.
fn yes_no_ids(dir: &Path, vocab: usize) -> Result<(usize, usize), ConvertError> {
    let file = dir.join("tokenizer.json");
    let refuse = |why: &str| ConvertError::Config {
        file: display(&file),
        why: format!(
            "{why}: a reranker is scored by the logits of \"yes\" and \"no\"; pass the reranker's own folder, or convert it as an embedder"
        ),
    };
    let text = read_text(&file).map_err(|_| refuse("cannot be read"))?;
    let tokenizer: serde_json::Value = serde_json::from_str(&text).map_err(|_| refuse("is not valid JSON"))?;
    let vocabulary = tokenizer.get("model").and_then(|m| m.get("vocab"));
    let id = |token: &str| {
        vocabulary
            .and_then(|v| v.get(token))
            .and_then(serde_json::Value::as_u64)
            .map(|id| id as usize)
            .filter(|&id| id < vocab)
    };
    match (id("yes"), id("no")) {
        (Some(yes), Some(no)) => Ok((yes, no)),
        _ => Err(refuse("has no tokens \"yes\" and \"no\" in its vocabulary (below config.json's vocab_size)")),
    }
}

/// Rewrites the copied config.json of a reranker as the one-label classifier nornir runs:
/// `architectures` `<Family>ForSequenceClassification`, `num_labels` 1, label "yes".
/// The prompt a yes/no reranker reads its pairs in, beside its graph (a folder's own is kept).
const PAIR_TEMPLATE: &str = "pair_template.json";

/// Qwen3-Reranker's prompt, as its model card's code builds it: the system prefix, the body with
/// the instruction, query and document (only the body is cut when a pair is too long), and the
/// assistant's suffix up to where the model answers "yes" or "no".
fn qwen3_reranker_template() -> serde_json::Value {
    serde_json::json!({
        "prefix": "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n",
        "body": "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}",
        "suffix": "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "instruction": "Given a web search query, retrieve relevant passages that answer the query",
    })
}

fn write_reranker_config(file: &Path, architecture: &str) -> Result<(), ConvertError> {
    let text = read_text(file).map_err(|e| ConvertError::Read { file: display(file), source: e })?;
    let mut config: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| ConvertError::Config { file: display(file), why: format!("is not a valid config ({e})") })?;
    let family = architecture.trim_end_matches("ForCausalLM").trim_end_matches("Model");
    if let Some(map) = config.as_object_mut() {
        map.insert("architectures".to_owned(), serde_json::json!([format!("{family}ForSequenceClassification")]));
        map.insert("num_labels".to_owned(), serde_json::json!(1));
        map.insert("id2label".to_owned(), serde_json::json!({"0": "yes"}));
        map.insert("label2id".to_owned(), serde_json::json!({"yes": 0}));
    }
    let text = pretty_json(&config, file)?;
    std::fs::write(file, text).map_err(write_err(file))
}

/// A source file's record; its sha256 read in slices, not the file whole.
fn source_file(dir: &Path, path: &Path) -> Result<SourceFile, ConvertError> {
    let read = |e| ConvertError::Read { file: display(path), source: e };
    let mut file = std::fs::File::open(path).map_err(read)?;
    let mut hash = Sha256::new();
    let mut buffer = vec![0u8; 1 << 22];
    let mut bytes = 0u64;
    loop {
        let n = std::io::Read::read(&mut file, &mut buffer).map_err(read)?;
        if n == 0 {
            break;
        }
        hash.update(&buffer[..n]);
        bytes += n as u64;
    }
    Ok(SourceFile {
        file: path.strip_prefix(dir).map_or_else(|_| display(path), display),
        sha256: format!("{:x}", hash.finalize()),
        bytes,
    })
}

/// Copies what [`is_copied`] keeps from `from` into `to` (subfolders whole, symbolic links
/// followed, as a hub cache's snapshot holds them), but never `output` (an earlier output inside
/// the source folder); returns the files, relative to the source.
fn copy_folder(from: &Path, to: &Path, relative: &Path, output: &Path) -> Result<Vec<String>, ConvertError> {
    let read = |e| ConvertError::Read { file: display(from), source: e };
    let mut entries: Vec<_> = std::fs::read_dir(from).map_err(read)?.collect::<Result<_, _>>().map_err(read)?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    let mut copied = Vec::new();
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let (src, dst) = (entry.path(), to.join(&name));
        if relative.as_os_str().is_empty() && is_head_checkpoint(&name) && src.is_file() {
            let stem = name.trim_end_matches(".pt");
            let target = format!("{stem}.safetensors");
            if !from.join(&target).is_file() {
                let bytes = Weights::open_torch_file(&src)?.to_safetensors()?;
                let dst = to.join(&target);
                std::fs::write(&dst, bytes).map_err(write_err(&dst))?;
                copied.push(format!("{target} (from {name})"));
            }
            continue;
        }
        if relative.as_os_str().is_empty() && !is_copied(&name) || name.starts_with('.') {
            continue;
        }
        if src.is_dir() {
            if same_folder(&src, output) {
                continue;
            }
            std::fs::create_dir_all(&dst).map_err(write_err(&dst))?;
            copied.extend(copy_folder(&src, &dst, &relative.join(&name), output)?);
        } else if src.is_file() && !relative.as_os_str().is_empty() && name == TORCH_SINGLE {
            // A module folder's PyTorch weights (a `2_Dense` of older sentence-transformers
            // models): read as the encoder's are, written as the safetensors nornir loads.
            if from.join(SINGLE).is_file() {
                continue;
            }
            let bytes = Weights::open(from)?.to_safetensors()?;
            let dst = to.join(SINGLE);
            std::fs::write(&dst, bytes).map_err(write_err(&dst))?;
            copied.push(format!("{} (from {})", display(&relative.join(SINGLE)), display(&relative.join(&name))));
        } else if src.is_file() {
            std::fs::copy(&src, &dst).map_err(write_err(&dst))?;
            copied.push(display(&relative.join(&name)));
        }
    }
    Ok(copied)
}

/// Moves the finished `tmp` folder to `out`, replacing an earlier folder there.
fn replace_dir(tmp: &Path, out: &Path) -> Result<(), ConvertError> {
    if out.exists() {
        let old = tmp.with_extension("old");
        std::fs::rename(out, &old).map_err(write_err(out))?;
        std::fs::rename(tmp, out).map_err(write_err(out))?;
        let _ = std::fs::remove_dir_all(&old);
        Ok(())
    } else {
        std::fs::rename(tmp, out).map_err(write_err(out))
    }
}

fn same_folder(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decoder_is_a_reranker_where_asked_or_where_its_model_card_says_text_ranking() {
        let t = tempfile::tempdir().expect("tempdir");
        let dir = |name: &str| {
            let d = t.path().join(name);
            std::fs::create_dir_all(&d).expect("mkdir");
            d
        };
        let plain = ConvertOptions::default();
        let asked = ConvertOptions::default().with_reranker(true);
        let card = |tag: &str| format!("---\nlicense: apache-2.0\npipeline_tag: {tag}\n---\n# A model\n");
        let embedding = dir("Qwen3-Embedding-0.6B");
        std::fs::write(embedding.join("README.md"), card("feature-extraction")).expect("card");
        assert_eq!(reranker_by(&embedding, &plain), None);
        assert_eq!(reranker_by(&embedding, &asked), Some(RerankerBy::Asked));
        let tagged = dir("snapshot");
        std::fs::write(tagged.join("README.md"), card("text-ranking")).expect("card");
        assert_eq!(reranker_by(&tagged, &plain), Some(RerankerBy::ModelCard));
        // A name proves nothing: without a card, only --reranker makes one.
        assert_eq!(reranker_by(&dir("Qwen3-Reranker-0.6B"), &plain), None);
        assert_eq!(reranker_by(&dir("models--Qwen--Qwen3-Reranker-4B/snapshots/0123abcd"), &plain), None);
    }
}
