//! A safetensors file's header, checked as `SafeTensors::read_metadata` checks a whole file in
//! memory, from the file or from bytes: its length is bounded and checked against the file's
//! size before it is read, its JSON is the `safetensors` crate's (which checks that every
//! tensor's element count fits and that its offsets hold exactly its bytes, one after another),
//! and the tensors must end where the file does. A refusal says what is wrong in words, with
//! the numbers that are.

use std::fs::File;
use std::io::Read;

use safetensors::tensor::{Dtype, Metadata};

use crate::conversion::grouped;

/// `safetensors`' own limit on a header's length.
pub(crate) const MAX_HEADER: u64 = 100_000_000;

/// What to do with a damaged file: said in every refusal.
const ADVICE: &str = "download it again, or write it again";

/// The header's length the first 8 bytes give, checked against [`MAX_HEADER`] and the file's
/// `file_len` before anything is allocated.
fn header_len(prefix: [u8; 8], file_len: u64) -> Result<u64, String> {
    let n = u64::from_le_bytes(prefix);
    if n > MAX_HEADER {
        return Err(format!(
            "is not a safetensors file: its header length says {} bytes, more than the {} a safetensors header may have ({ADVICE})",
            grouped(n),
            grouped(MAX_HEADER)
        ));
    }
    if 8 + n > file_len {
        return Err(format!(
            "is not a safetensors file or is cut short (its header is incomplete: it says {} bytes, and the file holds {} after its length; {ADVICE})",
            grouped(n),
            grouped(file_len.saturating_sub(8))
        ));
    }
    Ok(n)
}

/// The metadata of the header text `header` (the bytes after the length) of a file of
/// `file_len` bytes, checked.
fn metadata(header: &[u8], file_len: u64) -> Result<Metadata, String> {
    let n = header.len() as u64;
    let text = std::str::from_utf8(header)
        .map_err(|e| format!("is not a safetensors file: its header is not UTF-8 ({e}; {ADVICE})"))?;
    let metadata: Metadata = serde_json::from_str(text).map_err(|e| problem(header, &e))?;
    let end = (metadata.data_len() as u64).saturating_add(8 + n);
    if end != file_len {
        return Err(format!(
            "is truncated or has bytes after its tensors (its size does not match its header: its tensors end at byte {} and the file at byte {}; {ADVICE})",
            grouped(end),
            grouped(file_len)
        ));
    }
    Ok(metadata)
}

fn too_small(file_len: u64) -> String {
    format!(
        "is not a safetensors file or is cut short (its header is incomplete: the file has {file_len} bytes, fewer than the 8 of the header's length; {ADVICE})"
    )
}

/// The header of the safetensors file `file`, read alone: the offset of the first tensor byte
/// and the metadata, or (inner) what is wrong with it.
pub(super) fn read(file: &mut File) -> std::io::Result<Result<(u64, Metadata), String>> {
    let file_len = file.metadata()?.len();
    if file_len < 8 {
        return Ok(Err(too_small(file_len)));
    }
    let mut prefix = [0u8; 8];
    file.read_exact(&mut prefix)?;
    let n = match header_len(prefix, file_len) {
        Ok(n) => n,
        Err(why) => return Ok(Err(why)),
    };
    // At most MAX_HEADER bytes, and no more than the file holds.
    let mut header = Vec::new();
    file.take(n).read_to_end(&mut header)?;
    if header.len() as u64 != n {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
    }
    Ok(metadata(&header, file_len).map(|m| (8 + n, m)))
}

/// The header of the safetensors file `bytes`, as [`read`] reads a file.
pub(crate) fn of_bytes(bytes: &[u8]) -> Result<(u64, Metadata), String> {
    let file_len = bytes.len() as u64;
    let Some(prefix) = bytes.first_chunk::<8>() else { return Err(too_small(file_len)) };
    let n = header_len(*prefix, file_len)?;
    // `header_len` checked that the header lies inside the bytes.
    let header = usize::try_from(n).ok().and_then(|n| bytes.get(8..8 + n)).unwrap_or_default();
    Ok((8 + n, metadata(header, file_len)?))
}

/// What is wrong with a header the `safetensors` crate refused, in words: an unknown dtype, or a
/// shape whose element count overflows or does not match its offsets, names its tensor.
fn problem(header: &[u8], e: &serde_json::Error) -> String {
    let unreadable = || format!("has a header that is not a safetensors header ({e}; {ADVICE})");
    let Ok(serde_json::Value::Object(tensors)) = serde_json::from_slice::<serde_json::Value>(header) else {
        return unreadable();
    };
    let dtype = |t: &serde_json::Value| {
        let spelled = t.get("dtype")?.as_str()?;
        Some((spelled.to_owned(), serde_json::from_value::<Dtype>(serde_json::Value::String(spelled.to_owned()))))
    };
    for (name, t) in &tensors {
        if let Some((spelled, Err(_))) = dtype(t) {
            return format!("tensor {name:?} has the dtype {spelled:?}, which is not a safetensors type");
        }
    }
    for (name, t) in &tensors {
        let Some((_, Ok(dtype))) = dtype(t) else { continue };
        let dims: Option<Vec<u64>> = t.get("shape").and_then(|s| s.as_array()?.iter().map(|d| d.as_u64()).collect());
        let Some(dims) = dims else { continue };
        if let Some(why) = shape_problem(&dims, dtype, t.get("data_offsets")) {
            return format!("tensor {name:?} has the shape {dims:?} of {dtype:?}, {why} ({ADVICE})");
        }
    }
    unreadable()
}

/// What is wrong with a tensor of `dims` and `dtype` at `offsets`, if anything.
fn shape_problem(dims: &[u64], dtype: Dtype, offsets: Option<&serde_json::Value>) -> Option<String> {
    let bytes = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
        .and_then(|n| n.checked_mul(dtype.bitsize()))
        .map(|bits| bits / 8);
    let Some(bytes) = bytes else {
        return Some(format!(
            "whose element count overflows (its bytes would be more than {})",
            grouped(usize::MAX as u64)
        ));
    };
    let offsets = offsets?;
    let (start, end) = (offsets.get(0)?.as_u64()?, offsets.get(1)?.as_u64()?);
    let held = end.checked_sub(start);
    (held != Some(bytes as u64)).then(|| {
        format!(
            "{} bytes, where its offsets [{start}, {end}] hold {}",
            grouped(bytes as u64),
            held.map_or_else(|| "none".to_owned(), grouped)
        )
    })
}
