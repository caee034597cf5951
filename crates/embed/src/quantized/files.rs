//! The files of a quantized folder: the source model's external data read beside it, the source
//! folder copied without its graphs, files hard-linked, and the finished folder renamed into
//! place only when whole.

use std::io;
use std::path::Path;

/// Files of the source folder that are not copied: the ONNX graphs (the int8 one replaces them),
/// an earlier quantization's record, and hidden files.
pub(super) fn is_copied(name: &str) -> bool {
    !(name.starts_with('.')
        || name.ends_with(".onnx")
        || name.ends_with(".onnx_data")
        || name.ends_with(".onnx.data")
        || name == "quantization.json")
}

/// `error` naming `path`, for the folder's I/O errors.
pub(super) fn at(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Reads a model's external data (its `model.onnx_data`) from the files beside `model_file`. A
/// location that leaves the folder is refused, as ONNX Runtime refuses it.
pub(super) fn read_beside(model_file: &Path) -> impl FnMut(&str, u64, Option<u64>) -> Result<Vec<u8>, String> + use<> {
    use std::io::{Read, Seek, SeekFrom};
    let folder = model_file.parent().map(Path::to_path_buf).unwrap_or_default();
    move |location: &str, offset: u64, length: Option<u64>| {
        let relative = Path::new(location);
        if relative.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            return Err(format!("the location {location:?} is not a file inside the model's folder"));
        }
        let path = folder.join(relative);
        let mut f = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        f.seek(SeekFrom::Start(offset)).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut bytes = Vec::new();
        match length {
            Some(n) => {
                bytes.resize(usize::try_from(n).map_err(|_| format!("length {n} is too large"))?, 0);
                f.read_exact(&mut bytes)
                    .map_err(|e| format!("{}: {n} bytes at offset {offset}: {e}", path.display()))?;
            }
            None => {
                f.read_to_end(&mut bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        Ok(bytes)
    }
}

/// A hard link to `from` at `to`, else a copy (another file system). Not a symbolic link: ONNX
/// Runtime resolves one and refuses external data outside the model's folder.
pub(super) fn link_or_copy(from: &Path, to: &Path) -> io::Result<()> {
    if std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to).map_err(at(from))?;
    Ok(())
}

/// Copies every file of `from` except the ONNX graphs, keeping sub-folders (`1_Pooling/`) and
/// following symbolic links (a Hugging Face cache's snapshot is made of them).
pub(super) fn copy_folder(from: &Path, to: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(from).map_err(at(from))? {
        let entry = entry.map_err(at(from))?;
        let name = entry.file_name();
        let (src, dst) = (entry.path(), to.join(&name));
        let kind = std::fs::metadata(&src).map_err(at(&src))?.file_type();
        if kind.is_dir() {
            std::fs::create_dir_all(&dst).map_err(at(&dst))?;
            copy_folder(&src, &dst)?;
        } else if kind.is_file() && is_copied(&name.to_string_lossy()) {
            std::fs::copy(&src, &dst).map_err(at(&src))?;
        }
    }
    Ok(())
}

/// Puts the finished folder `tmp` at `out`, replacing an old one only after the new one is whole.
pub(super) fn replace_dir(tmp: &Path, out: &Path) -> io::Result<()> {
    if out.exists() {
        let old = tmp.with_extension("old");
        std::fs::rename(out, &old).map_err(at(out))?;
        if let Err(e) = std::fs::rename(tmp, out) {
            let _ = std::fs::rename(&old, out);
            let _ = std::fs::remove_dir_all(tmp);
            return Err(at(out)(e));
        }
        let _ = std::fs::remove_dir_all(&old);
        return Ok(());
    }
    std::fs::rename(tmp, out).map_err(|e| {
        let _ = std::fs::remove_dir_all(tmp);
        at(out)(e)
    })
}
