//! A defence against machines whose `/dev/null` is a regular file.
//!
//! Some CI containers have a plain file at `/dev/null` that keeps whatever was "discarded" into
//! it (nornir itself made one, run as root, until `--output /dev/null` was written in place
//! rather than renamed onto: `crates/cli/src/output.rs`). Cargo probes the compiler with its stdin from `/dev/null` (`rustc - --print=cfg ...`), and
//! rustix's build script discards its probe's warnings there, so the next probe reads those
//! warnings as source and fails with "failed to run `rustc` to learn about target-specific
//! information". Cargo probes again whenever the compiler's fingerprint changes, which is each
//! switch between `cargo clippy` and `cargo build`. Emptying the file before each cargo run keeps
//! every probe's input empty, as a null device would; a real null device is left alone.

use std::path::Path;
use std::sync::Once;

/// Empties `/dev/null` when it is a regular file with something in it (see the module's note).
pub(crate) fn empty_if_regular_file() {
    empty_regular_file(Path::new("/dev/null"));
}

fn empty_regular_file(path: &Path) {
    static SAID: Once = Once::new();
    let Ok(meta) = std::fs::symlink_metadata(path) else { return };
    if !meta.is_file() || meta.len() == 0 {
        return;
    }
    SAID.call_once(|| {
        eprintln!(
            "xtask: {} is a regular file here, not the null device ({} bytes of discarded output): emptying it before each cargo run, because cargo reads it as source when it probes the compiler",
            path.display(),
            meta.len()
        )
    });
    if let Err(e) = std::fs::File::create(path) {
        eprintln!("xtask: could not empty {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_emptied_and_a_device_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("xtask-dev-null-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("null");
        std::fs::write(&file, "warning: missing options for `on_unimplemented` attribute\n").unwrap();
        empty_regular_file(&file);
        assert_eq!(std::fs::read(&file).unwrap(), b"");
        std::fs::remove_dir_all(&dir).unwrap();

        let device = Path::new("/dev/null");
        if std::fs::symlink_metadata(device).is_ok_and(|m| !m.is_file()) {
            empty_regular_file(device);
            assert!(!std::fs::symlink_metadata(device).unwrap().is_file());
        }
    }
}
