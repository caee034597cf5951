//! The parsers a downloaded weights file reaches, for the fuzz targets: any input gives a value
//! or an error, never a panic, in time linear in it. Not an API: it may change in any release.

use crate::ConvertError;

/// `bytes` read as a `pytorch_model.bin` is: the archive and its pickle, then every tensor's
/// bytes, widened to float32 where they are floats. The number of tensors.
pub fn read_torch_archive(bytes: &[u8]) -> Result<usize, ConvertError> {
    let file = "pytorch_model.bin";
    let checkpoint = crate::torch::Checkpoint::read(file, bytes)?;
    let mut names: Vec<&str> = checkpoint.names().collect();
    names.sort_unstable();
    for name in &names {
        if let Some(t) = checkpoint.tensor(file, bytes, name)? {
            drop(crate::weights::widen(t.data, t.dtype));
        }
    }
    Ok(names.len())
}

/// `bytes` run as the pickle (`data.pkl`) of a checkpoint.
pub fn read_pickle(bytes: &[u8]) -> Result<(), ConvertError> {
    crate::torch::load_pickle("data.pkl", bytes)
}

/// `bytes` read as a `model.safetensors` is: its header checked, then every tensor's bytes,
/// widened to float32 where they are floats. The number of tensors.
pub fn read_safetensors(bytes: &[u8]) -> Result<usize, ConvertError> {
    let file = "model.safetensors";
    let (start, metadata) = crate::weights::safetensors_header(bytes)
        .map_err(|why| ConvertError::Weights { file: file.to_owned(), why })?;
    let start = usize::try_from(start).unwrap_or(usize::MAX);
    for info in metadata.tensors().values() {
        let (s, e) = info.data_offsets;
        let data = start.checked_add(s).zip(start.checked_add(e)).and_then(|(s, e)| bytes.get(s..e));
        let data = data.ok_or_else(|| ConvertError::Weights {
            file: file.to_owned(),
            why: "has a tensor outside it, which its header check let through".to_owned(),
        })?;
        drop(crate::weights::widen(data, info.dtype));
    }
    Ok(metadata.tensors().len())
}

/// `text` read as a converter's `config.json`, for whichever family its `architectures` names
/// (its keys, defaults and range checks); the architecture it names.
pub fn parse_config(text: &str) -> Result<String, ConvertError> {
    Ok(crate::families::parse(text, "config.json", None)?.architecture)
}

/// `text` read as Stanford ColBERT's `artifact.metadata`, its lengths within 512 positions.
pub fn parse_colbert_metadata(text: &str) -> Result<serde_json::Value, ConvertError> {
    crate::colbert::token_rules("artifact.metadata", Some(text), 512)
}

/// `text` read as a `model.safetensors.index.json`: the shard file names it gives.
pub fn read_shard_index(text: &str) -> Result<Vec<String>, ConvertError> {
    crate::weights::shard_names("model.safetensors.index.json", text)
}
