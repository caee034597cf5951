//! Reading a model folder's small files with a size bound checked before anything is read, so a
//! huge or endless file (a device, a FIFO, a gigabyte "config") is refused in one line.

use std::io::Read;
use std::path::Path;

/// A folder's JSON configs (config.json, the sentence-transformers files, pair_template.json):
/// the largest real ones are tens of kilobytes.
pub(crate) const CONFIG_MAX_BYTES: u64 = 16 << 20;

/// `tokenizer.json`: the largest real ones (Gemma's, XLM-RoBERTa's) are tens of megabytes.
pub(crate) const TOKENIZER_MAX_BYTES: u64 = 512 << 20;

/// The text of `path` if it is a regular file of at most `limit` bytes; else an
/// `InvalidData` error that names the limit.
pub(crate) fn read_bounded(path: &Path, limit: u64) -> std::io::Result<String> {
    let meta = std::fs::metadata(path)?;
    check_size(&meta, limit)?;
    let mut text = String::new();
    std::fs::File::open(path)?.take(limit + 1).read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(too_large(text.len() as u64, limit));
    }
    Ok(text)
}

/// Whether `meta` is a regular file of at most `limit` bytes, as an error that says which limit
/// (a folder is the operating system's own `IsADirectory`).
fn check_size(meta: &std::fs::Metadata, limit: u64) -> std::io::Result<()> {
    if meta.is_dir() {
        return Err(std::io::ErrorKind::IsADirectory.into());
    }
    // A FIFO would block the open, a device would never end.
    if !meta.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "is not a regular file"));
    }
    if meta.len() > limit {
        return Err(too_large(meta.len(), limit));
    }
    Ok(())
}

fn too_large(bytes: u64, limit: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("is {bytes} bytes, more than the {limit} a file of its kind may hold: it is not a model file"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_the_bound_or_not_a_file_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = dir.path().join("config.json");
        std::fs::write(&big, vec![b' '; 2048]).expect("write");
        let e = read_bounded(&big, 1024).expect_err("over the bound");
        assert!(e.to_string().contains("2048 bytes, more than the 1024"), "{e}");
        assert_eq!(read_bounded(&big, 4096).expect("within").len(), 2048);
        let e = read_bounded(dir.path(), 1024).expect_err("a folder");
        assert_eq!(e.kind(), std::io::ErrorKind::IsADirectory, "{e}");
        let e = read_bounded(Path::new("/dev/zero"), 1024).expect_err("a device");
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
