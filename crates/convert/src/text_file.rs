//! A model folder's small text files (config.json, modules.json, artifact.metadata, the
//! tokenizer a reranker's ids come from) read with a size bound checked before reading, and
//! the JSON files a conversion writes.

use std::path::Path;

/// A folder's JSON files (config.json, modules.json, artifact.metadata) and the tokenizer the
/// reranker's ids come from: more than this is not a config.
const TEXT_MAX_BYTES: u64 = 512 << 20;

/// The text of `path`, refused before it is read when it is not a regular file or is larger than
/// [`TEXT_MAX_BYTES`].
pub(crate) fn read_text(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    if !meta.is_file() {
        return Err(refuse("is not a regular file".to_owned()));
    }
    if meta.len() > TEXT_MAX_BYTES {
        return Err(refuse(format!("is {} bytes, more than the {TEXT_MAX_BYTES} a config may hold", meta.len())));
    }
    let mut text = String::new();
    std::fs::File::open(path)?.take(TEXT_MAX_BYTES).read_to_string(&mut text)?;
    Ok(text)
}

/// `value` as the pretty JSON text of the file `path`, with a final newline; a value serde
/// cannot write is that file's write error, never an empty file.
pub(crate) fn pretty_json(value: &impl serde::Serialize, path: &Path) -> Result<String, crate::ConvertError> {
    serde_json::to_string_pretty(value)
        .map(|text| text + "\n")
        .map_err(|e| crate::ConvertError::Write { path: path.display().to_string(), source: std::io::Error::other(e) })
}
