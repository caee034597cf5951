//! The zip archive of a checkpoint, read within bounds: the zip reader finds the central
//! directory on a budget of bytes, and an entry is read only up to the size it declares, which is
//! checked against a stated maximum before anything is read (a compressed entry can inflate a
//! thousandfold).

use std::cell::Cell;
use std::io::{Cursor, Read, Seek, SeekFrom};
use std::rc::Rc;

use crate::ConvertError;
use crate::conversion::grouped;

/// What to do with an archive refused for a bound: said in every such error.
pub(super) const ADVICE: &str =
    "it is not a checkpoint torch.save wrote (download it again, or use the model's model.safetensors)";

/// The largest `data.pkl` read. A state dict pickles to about 130 bytes a tensor (its name, its
/// storage's key, shape and stride), so this is more than 250,000 tensors; a model has hundreds
/// to a few thousand.
pub(super) const MAX_PICKLE_BYTES: u64 = 32 << 20;
/// The most bytes the compressed storages of one archive may inflate to, in all. `torch.save`
/// stores its entries uncompressed (they are read where they lie); a compressed one, from an
/// archive zipped again, is inflated into memory.
pub(super) const MAX_INFLATED: u64 = 8 << 30;
/// The largest `byteorder` read (`little` or `big`).
pub(super) const MAX_BYTEORDER: u64 = 64;
/// How many times the archive's size the zip reader may read while it finds the central
/// directory (a sound archive reads its end and its directory). Without a budget, a file of
/// end-of-directory signatures makes the reader try each, with a scan of the file each time.
const FIND_BUDGET: u64 = 4;

/// The archive's bytes as the zip reader reads them, `left` bytes more at most.
#[derive(Debug)]
pub(super) struct Budgeted<'a> {
    cursor: Cursor<&'a [u8]>,
    left: Rc<Cell<u64>>,
}

impl Read for Budgeted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.left.get();
        if left == 0 && !buf.is_empty() {
            return Err(std::io::Error::other("the budget of bytes to read is spent"));
        }
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let got = self.cursor.read(&mut buf[..n])?;
        self.left.set(left.saturating_sub(got as u64));
        Ok(got)
    }
}

impl Seek for Budgeted<'_> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.cursor.seek(pos)
    }
}

pub(super) type Zip<'a> = zip::ZipArchive<Budgeted<'a>>;

pub(super) fn archive_err(file: &str, why: impl Into<String>) -> ConvertError {
    ConvertError::TorchArchive { file: file.to_owned(), why: why.into() }
}

/// `file` refused for a bound: `why` names it.
pub(super) fn refused(file: &str, why: &str) -> ConvertError {
    archive_err(file, format!("is refused: {why}: {ADVICE}"))
}

/// The zip archive `bytes` of `file`, its central directory read.
pub(super) fn open<'a>(file: &str, bytes: &'a [u8]) -> Result<Zip<'a>, ConvertError> {
    let budget = (bytes.len() as u64).saturating_mul(FIND_BUDGET).saturating_add(1 << 20);
    let left = Rc::new(Cell::new(budget));
    match zip::ZipArchive::new(Budgeted { cursor: Cursor::new(bytes), left: left.clone() }) {
        Ok(zip) => {
            left.set(u64::MAX);
            Ok(zip)
        }
        Err(_) if left.get() == 0 => Err(refused(
            file,
            &format!(
                "finding its zip directory reads more than {FIND_BUDGET} times its {} bytes (a zip archive's directory is at its end)",
                grouped(bytes.len() as u64)
            ),
        )),
        Err(e) => Err(archive_err(file, format!("is a truncated or corrupt zip archive ({e})"))),
    }
}

/// Entry `name` of the archive, read whole: refused unread where it declares more than `max`
/// bytes (`limit` says what that is), and where it inflates to more than it declares.
pub(super) fn read_entry(
    file: &str,
    zip: &mut Zip<'_>,
    name: &str,
    max: u64,
    limit: &str,
) -> Result<Vec<u8>, ConvertError> {
    let entry = zip.by_name(name).map_err(|e| archive_err(file, format!("cannot open {name} ({e})")))?;
    let declared = entry.size();
    if declared > max {
        return Err(refused(
            file,
            &format!("its {name} declares {} bytes, more than {} bytes, {limit}", grouped(declared), grouped(max)),
        ));
    }
    let mut out = Vec::new();
    entry
        .take(declared.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| archive_err(file, format!("has a damaged {name} ({e})")))?;
    let read = out.len() as u64;
    if read > declared {
        return Err(refused(
            file,
            &format!("its {name} inflates to more than the {} bytes it declares", grouped(declared)),
        ));
    }
    if read < declared {
        return Err(archive_err(
            file,
            format!("has a damaged {name} (it holds {} bytes of the {} it declares)", grouped(read), grouped(declared)),
        ));
    }
    Ok(out)
}
