//! Reads an ELF shared library's dynamic section (its SONAME and NEEDED entries) and its dynamic
//! symbol table (whether it exports a symbol).

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

/// Where the reader gets its bytes: a slice (tests, fuzzing) or a file read with positioned plain
/// reads. Never a memory map: a file truncated after `mmap` turns a read into SIGBUS.
trait Source {
    fn len(&self) -> u64;
    /// Exactly `len` bytes at `offset`, or why not.
    fn read_at(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, String>;
}

impl Source for &[u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn read_at(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let start = usize::try_from(offset).map_err(|_| "offset out of range".to_owned())?;
        start
            .checked_add(len)
            .and_then(|end| self.get(start..end))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| format!("truncated: {len} bytes at offset {offset} are past the end ({} bytes)", self.len()))
    }
}

struct FileSource {
    file: std::fs::File,
    len: u64,
}

impl Source for FileSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|e| format!("truncated or unreadable at offset {offset}: {e}"))?;
        Ok(buf)
    }
}

/// The most the reader allocates for one table; real libraries need a few KB.
const MAX_TABLE: u64 = 16 << 20;

/// An ELF file's layout: 32 or 64 bits, little or big endian.
#[derive(Clone, Copy)]
struct Layout {
    wide: bool,
    little: bool,
}

impl Layout {
    fn uint(self, b: &[u8], at: usize, size: usize) -> Result<u64, String> {
        let bytes = b.get(at..at + size).ok_or("a header field is past the end of its table")?;
        let mut v = 0u64;
        for i in 0..size {
            let byte = if self.little { bytes[size - 1 - i] } else { bytes[i] };
            v = (v << 8) | u64::from(byte);
        }
        Ok(v)
    }
    /// An address-sized field (8 bytes in ELF64, 4 in ELF32).
    fn word(self, b: &[u8], at: usize) -> Result<u64, String> {
        self.uint(b, at, if self.wide { 8 } else { 4 })
    }
}

struct Segment {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;

fn table_len(count: u64, entry: u64) -> Result<usize, String> {
    let len = count.checked_mul(entry).filter(|&l| l <= MAX_TABLE).ok_or("a table is implausibly large")?;
    usize::try_from(len).map_err(|_| "a table is implausibly large".to_owned())
}

fn layout(src: &mut dyn Source) -> Result<Layout, String> {
    let ident = src.read_at(0, 16).map_err(|_| "no ELF magic number".to_owned())?;
    if &ident[..4] != b"\x7fELF" {
        return Err("no ELF magic number".to_owned());
    }
    match (ident[4], ident[5]) {
        (1 | 2, 1 | 2) => Ok(Layout { wide: ident[4] == 2, little: ident[5] == 1 }),
        _ => Err("unknown ELF class or byte order".to_owned()),
    }
}

fn read_elf_deps(src: &mut dyn Source) -> Result<ElfDeps, String> {
    let l = layout(src)?;
    let header = src.read_at(0, if l.wide { 64 } else { 52 })?;
    let (phoff, phentsize, phnum) = if l.wide {
        (l.uint(&header, 32, 8)?, l.uint(&header, 54, 2)?, l.uint(&header, 56, 2)?)
    } else {
        (l.uint(&header, 28, 4)?, l.uint(&header, 42, 2)?, l.uint(&header, 44, 2)?)
    };
    let min_entry = if l.wide { 56 } else { 32 };
    if phnum > 0 && phentsize < min_entry {
        return Err(format!("program header entries of {phentsize} bytes are too small"));
    }
    let table = src.read_at(phoff, table_len(phnum, phentsize)?)?;
    let mut segments = Vec::new();
    for i in 0..phnum as usize {
        let e = &table[i * phentsize as usize..];
        let kind = l.uint(e, 0, 4)? as u32;
        let seg = if l.wide {
            Segment { kind, offset: l.uint(e, 8, 8)?, vaddr: l.uint(e, 16, 8)?, filesz: l.uint(e, 32, 8)? }
        } else {
            Segment { kind, offset: l.uint(e, 4, 4)?, vaddr: l.uint(e, 8, 4)?, filesz: l.uint(e, 16, 4)? }
        };
        segments.push(seg);
    }
    // The loader maps each segment's file range; past the end of the file that is a SIGBUS.
    let len = src.len();
    for seg in segments.iter().filter(|s| s.kind == PT_LOAD) {
        let end = seg.offset.saturating_add(seg.filesz);
        if end > len {
            return Err(format!("truncated: a loadable segment ends at byte {end} but the file has {len} bytes"));
        }
    }
    let Some(dynamic) = segments.iter().find(|s| s.kind == PT_DYNAMIC) else {
        return Ok(ElfDeps { soname: None, needed: Vec::new() });
    };
    let entry = if l.wide { 16 } else { 8 };
    let dyn_table = src.read_at(dynamic.offset, table_len(dynamic.filesz / entry, entry)?)?;
    let (mut strtab, mut strsz, mut needed, mut soname) = (None, None, Vec::new(), None);
    for e in dyn_table.chunks_exact(entry as usize) {
        let (tag, val) = (l.word(e, 0)?, l.word(e, entry as usize / 2)?);
        match tag {
            0 => break,
            DT_NEEDED => needed.push(val),
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = Some(val),
            DT_SONAME => soname = Some(val),
            _ => {}
        }
    }
    if needed.is_empty() && soname.is_none() {
        return Ok(ElfDeps { soname: None, needed: Vec::new() });
    }
    let (Some(addr), Some(size)) = (strtab, strsz) else {
        return Err("the dynamic section names libraries but has no string table".to_owned());
    };
    // The string table is given by address: find the loadable segment that holds it.
    let offset = segments
        .iter()
        .filter(|s| s.kind == PT_LOAD && addr >= s.vaddr && addr - s.vaddr < s.filesz)
        .map(|s| addr - s.vaddr + s.offset)
        .next()
        .ok_or("the dynamic string table lies in no loadable segment")?;
    let strings = src.read_at(offset, table_len(size, 1)?)?;
    let string = |at: u64| -> Result<String, String> {
        let rest = usize::try_from(at).ok().and_then(|a| strings.get(a..)).ok_or("a library name is past its table")?;
        let end = rest.iter().position(|&b| b == 0).ok_or("a library name is not terminated")?;
        String::from_utf8(rest[..end].to_vec()).map_err(|_| "a library name is not UTF-8".to_owned())
    };
    Ok(ElfDeps {
        soname: soname.map(string).transpose()?,
        needed: needed.into_iter().map(string).collect::<Result<_, _>>()?,
    })
}

const SHT_DYNSYM: u64 = 11;
const SHN_UNDEF: u64 = 0;

/// Whether the file's dynamic symbol table defines `symbol` with global or weak binding: what
/// `dlsym` would find. Read from the section headers, which every library a linker wrote keeps.
fn read_exports(src: &mut dyn Source, l: Layout, symbol: &str) -> Result<bool, String> {
    let header = src.read_at(0, if l.wide { 64 } else { 52 })?;
    let (shoff, shentsize, shnum) = if l.wide {
        (l.uint(&header, 40, 8)?, l.uint(&header, 58, 2)?, l.uint(&header, 60, 2)?)
    } else {
        (l.uint(&header, 32, 4)?, l.uint(&header, 46, 2)?, l.uint(&header, 48, 2)?)
    };
    if shnum == 0 {
        return Err("it has no section headers, so its exported symbols cannot be read".to_owned());
    }
    if shentsize < if l.wide { 64 } else { 40 } {
        return Err(format!("section header entries of {shentsize} bytes are too small"));
    }
    let table = src.read_at(shoff, table_len(shnum, shentsize)?)?;
    // (type, offset, size, link) of section `i`.
    let section = |i: u64| -> Result<(u64, u64, u64, u64), String> {
        let e = table.get((i * shentsize) as usize..).ok_or("a section index is past the table")?;
        if l.wide {
            Ok((l.uint(e, 4, 4)?, l.uint(e, 24, 8)?, l.uint(e, 32, 8)?, l.uint(e, 40, 4)?))
        } else {
            Ok((l.uint(e, 4, 4)?, l.uint(e, 16, 4)?, l.uint(e, 20, 4)?, l.uint(e, 24, 4)?))
        }
    };
    let Some((_, sym_off, sym_size, link)) =
        (0..shnum).map(section).collect::<Result<Vec<_>, _>>()?.into_iter().find(|s| s.0 == SHT_DYNSYM)
    else {
        return Ok(false);
    };
    if link >= shnum {
        return Err("the dynamic symbol table names no string table".to_owned());
    }
    let (_, str_off, str_size, _) = section(link)?;
    let symbols = src.read_at(sym_off, table_len(sym_size, 1)?)?;
    let strings = src.read_at(str_off, table_len(str_size, 1)?)?;
    let entry = if l.wide { 24 } else { 16 };
    for e in symbols.chunks_exact(entry) {
        let (name, info, shndx) = if l.wide {
            (l.uint(e, 0, 4)?, l.uint(e, 4, 1)?, l.uint(e, 6, 2)?)
        } else {
            (l.uint(e, 0, 4)?, l.uint(e, 12, 1)?, l.uint(e, 14, 2)?)
        };
        let binding = info >> 4;
        if shndx == SHN_UNDEF || !(binding == 1 || binding == 2) {
            continue;
        }
        let Some(rest) = usize::try_from(name).ok().and_then(|n| strings.get(n..)) else { continue };
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        if &rest[..end] == symbol.as_bytes() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A library's dependencies and whether it exports one symbol, in one read of its tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfExport {
    pub deps: ElfDeps,
    pub exported: bool,
}

/// Reads `path` as [`read_deps`] does (a truncated file is an error, never a SIGBUS) and says
/// whether it exports `symbol`.
pub fn read_export(path: &Path, symbol: &str) -> Result<ElfExport, ElfError> {
    let io = |source| ElfError::Io { path: path.display().to_string(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut src = FileSource { file, len };
    let malformed = |reason| ElfError::Malformed { path: path.display().to_string(), reason };
    let deps = read_elf_deps(&mut src).map_err(malformed)?;
    let l = layout(&mut src).map_err(malformed)?;
    let exported = read_exports(&mut src, l, symbol).map_err(malformed)?;
    Ok(ElfExport { deps, exported })
}

/// Whether `bytes`, as an ELF file, exports `symbol` (tests and fuzzing).
pub fn parse_export(mut bytes: &[u8], symbol: &str) -> Result<bool, String> {
    let l = layout(&mut bytes)?;
    read_exports(&mut bytes, l, symbol)
}

/// Parses `bytes` as an ELF file and returns its SONAME and NEEDED list.
pub fn parse_deps(mut bytes: &[u8]) -> Result<ElfDeps, String> {
    read_elf_deps(&mut bytes)
}

/// Reads the dependencies of the library at `path` with positioned plain reads of the few tables
/// it needs (large provider libraries are never read whole, and never memory-mapped).
pub fn read_deps(path: &Path) -> Result<ElfDeps, ElfError> {
    let io = |source| ElfError::Io { path: path.display().to_string(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    read_elf_deps(&mut FileSource { file, len })
        .map_err(|reason| ElfError::Malformed { path: path.display().to_string(), reason })
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
        let e = parse_deps(&exe[..8192]).expect_err("truncated");
        assert!(e.contains("truncated"), "{e}");
        // On disk as well: the same answer from plain reads of a file, never a SIGBUS.
        let t = tempfile::tempdir().expect("tempdir");
        let cut = t.path().join("libcut.so");
        std::fs::write(&cut, &exe[..8192]).expect("write");
        let e = read_deps(&cut).expect_err("truncated file").to_string();
        assert!(e.contains("not a valid ELF shared library: truncated"), "{e}");
    }

    /// The same answer as the system's `readelf -d` for a real library.
    #[test]
    fn agrees_with_readelf_on_libc() {
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.is_file());
        let Some(libc) = libc else { return };
        let deps = read_deps(libc).expect("read libc");
        assert_eq!(deps.soname.as_deref(), Some("libc.so.6"));
        assert!(deps.needed.iter().any(|n| n.starts_with("ld-linux")), "{deps:?}");
        let whole = std::fs::read(libc).expect("read");
        assert_eq!(parse_deps(&whole).expect("parse"), deps);
    }

    #[test]
    fn finds_an_exported_function_and_not_an_imported_one() {
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.is_file());
        let Some(libc) = libc else { return };
        assert!(read_export(libc, "malloc").expect("read libc").exported);
        assert!(!read_export(libc, "CreateEpFactories").expect("read libc").exported);
        // The test binary imports malloc from libc: imported is not exported.
        let exe = std::env::current_exe().expect("current exe");
        assert!(!read_export(&exe, "malloc").expect("read own ELF").exported);
        assert!(parse_export(b"not an elf", "malloc").is_err());
    }

    #[test]
    fn reads_a_real_library() {
        // The test binary itself links libc dynamically on every supported target.
        let exe = std::env::current_exe().expect("current exe");
        let deps = read_deps(&exe).expect("read own ELF");
        assert!(deps.needed.iter().any(|n| n.starts_with("libc.so")), "{deps:?}");
    }
}
