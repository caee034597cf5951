//! Reads an ELF shared library's dynamic section: its SONAME and NEEDED entries.

use std::path::Path;

/// What the dynamic loader will ask for when it loads a library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfDeps {
    pub soname: Option<String>,
    pub needed: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path} is not a valid ELF shared library: {reason}")]
    Malformed { path: String, reason: String },
}

/// Parses `bytes` as an ELF file and returns its SONAME and NEEDED list.
pub fn parse_deps(bytes: &[u8]) -> Result<ElfDeps, String> {
    if bytes.len() < 4 || &bytes[..4] != b"\x7fELF" {
        return Err("no ELF magic number".to_owned());
    }
    let elf = goblin::elf::Elf::parse(bytes).map_err(|e| e.to_string())?;
    // The loader maps each segment's file range; past the end of the file that is a SIGBUS.
    let len = bytes.len() as u64;
    for ph in elf.program_headers.iter().filter(|ph| ph.p_type == goblin::elf::program_header::PT_LOAD) {
        let end = ph.p_offset.saturating_add(ph.p_filesz);
        if end > len {
            return Err(format!("truncated: a loadable segment ends at byte {end} but the file has {len} bytes"));
        }
    }
    Ok(ElfDeps {
        soname: elf.soname.map(str::to_owned),
        needed: elf.libraries.iter().map(|s| (*s).to_owned()).collect(),
    })
}

/// Reads the dependencies of the library at `path` (memory-mapped: large provider libraries
/// are not read whole).
pub fn read_deps(path: &Path) -> Result<ElfDeps, ElfError> {
    let io = |source| ElfError::Io { path: path.display().to_string(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the mapping is read-only and dropped before return; a file truncated meanwhile
    // can at worst make the parse fail.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    parse_deps(&map).map_err(|reason| ElfError::Malformed { path: path.display().to_string(), reason })
}

/// True when the file starts with the ELF magic number.
pub fn looks_like_elf(path: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path)?;
    Ok(f.read_exact(&mut magic).is_ok() && &magic == b"\x7fELF")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_garbage_without_panicking() {
        assert!(parse_deps(b"").is_err());
        assert!(parse_deps(b"not an elf").is_err());
        let mut truncated = b"\x7fELF\x02\x01\x01".to_vec();
        truncated.resize(70, 0xff);
        assert!(parse_deps(&truncated).is_err());
    }

    #[test]
    fn a_truncated_library_is_an_error() {
        let exe = std::fs::read(std::env::current_exe().expect("current exe")).expect("read own ELF");
        let e = parse_deps(&exe[..exe.len() / 2]).expect_err("truncated");
        assert!(e.contains("truncated") || e.contains("offset"), "{e}");
    }

    #[test]
    fn reads_a_real_library() {
        // The test binary itself links libc dynamically on every supported target.
        let exe = std::env::current_exe().expect("current exe");
        let deps = read_deps(&exe).expect("read own ELF");
        assert!(deps.needed.iter().any(|n| n.starts_with("libc.so")), "{deps:?}");
    }
}
