//! `cargo xtask gpu-bundle`: everything `scripts/gpu-check.sh` needs on a lent GPU machine that
//! the repository does not hold (the `nornir` binary, the CUDA build of ONNX Runtime, the default
//! model, the fp32 sentence-transformers peer), as one gzip'd tar cut into parts small enough
//! for one transfer each, with a MANIFEST of sha256 sums that the script checks before use.
//!
//! Layout inside the archive: `bin/nornir`, `ort/` (libonnxruntime.so.1.31.1 and its shared and
//! CUDA provider libraries), `model/` (all-MiniLM-L6-v2 int8), `st-model/` (fp32, unless
//! `--no-peer`), and `SHA256SUMS` over all of them.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::assets::{self, Asset};
use crate::fetch::{fetch, sha256_file};
use crate::process::{cargo, run_checked, workspace_root};

/// The archive's name; parts are `<ARCHIVE>.part-NN`.
pub const ARCHIVE: &str = "nornir-gpu-bundle.tar.gz";
const MIB: u64 = 1 << 20;

/// `cargo xtask gpu-bundle`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where the parts go.
    #[arg(long, value_name = "DIR", default_value_os_t = workspace_root().join("target/gpu-bundle"))]
    out: PathBuf,
    /// Largest part, MiB (1 to 60: one transfer carries 64 MiB in all).
    #[arg(long = "part-mib", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=60))]
    part_mib: u64,
    /// Use this nornir binary instead of building a release one.
    #[arg(long, value_name = "PATH")]
    nornir: Option<PathBuf>,
    /// Leave out the fp32 sentence-transformers peer.
    #[arg(long = "no-peer")]
    no_peer: bool,
}

impl Args {
    fn peer(&self) -> bool {
        !self.no_peer
    }

    /// Under the figure: a part of exactly N MiB would not be "under N MiB".
    fn part_bytes(&self) -> u64 {
        self.part_mib * MIB - 1
    }

    /// The dry run's bundle: this binary, into `out`.
    pub fn for_dry_run(nornir: PathBuf, out: PathBuf) -> Self {
        Self { out, part_mib: 60, nornir: Some(nornir), no_peer: false }
    }
}

pub fn gpu_bundle(o: &Args) -> Result<()> {
    let out = if o.out.is_absolute() { o.out.clone() } else { std::env::current_dir()?.join(&o.out) };
    let mut wanted: Vec<&Asset> = vec![&assets::ORT_GPU, &assets::MODEL_ONNX, &assets::MODEL_TOKENIZER];
    if o.peer() {
        wanted.push(&assets::PEER_MODEL);
    }
    let home = fetch(&wanted)?;
    let nornir = match &o.nornir {
        Some(p) => p.clone(),
        None => {
            eprintln!("xtask: building nornir (release)");
            run_checked(cargo().args(["build", "--release", "--quiet", "-p", "nornir-cli"]))?;
            workspace_root().join("target/release/nornir")
        }
    };
    if !nornir.is_file() {
        bail!("{} is not a file: build nornir first or pass --nornir PATH", nornir.display());
    }

    // Built beside the output and renamed into place, so a failed run leaves no bundle that
    // looks complete.
    let parent = out.parent().context("--out has no parent folder")?;
    std::fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    let work = parent.join(format!(".{}.tmp-{}", file_name(&out), std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let result = build(o, &home, &nornir, &work);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&work);
    }
    let parts = result?;
    let _ = std::fs::remove_dir_all(&out);
    std::fs::rename(work.join("parts"), &out).with_context(|| format!("move the bundle to {}", out.display()))?;
    let _ = std::fs::remove_dir_all(&work);
    print_plan(&out, &parts);
    Ok(())
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "gpu-bundle".to_owned())
}

/// Stages the files, packs and cuts them. Returns the parts' names and sizes.
fn build(o: &Args, home: &Path, nornir: &Path, work: &Path) -> Result<Vec<(String, u64)>> {
    let stage = work.join("stage");
    let ort = home.join(assets::ORT_GPU.dest);
    let mut files: Vec<(PathBuf, String)> = vec![(nornir.to_path_buf(), "bin/nornir".to_owned())];
    for lib in ["libonnxruntime.so.1.31.1", "libonnxruntime_providers_shared.so", "libonnxruntime_providers_cuda.so"] {
        files.push((ort.join(lib), format!("ort/{lib}")));
    }
    let mut model_files: Vec<&str> = assets::MODEL_ONNX.files.iter().map(|(_, to)| *to).collect();
    model_files.extend(assets::MODEL_TOKENIZER.files.iter().map(|(_, to)| *to));
    for f in model_files {
        files.push((home.join(assets::EXPORT_MODEL_DIR).join(f), format!("model/{f}")));
    }
    if o.peer() {
        for (_, f) in assets::PEER_MODEL.files {
            files.push((home.join(assets::PEER_MODEL_DIR).join(f), format!("st-model/{f}")));
        }
    }
    for (from, to) in &files {
        let target = stage.join(to);
        std::fs::create_dir_all(target.parent().context("staged file has no folder")?)?;
        std::fs::copy(from, &target).with_context(|| format!("copy {} into the bundle", from.display()))?;
    }
    // Debug information is most of a binary's size and not needed to run it.
    let stripped = Command::new("strip").arg("--strip-debug").arg(stage.join("bin/nornir")).status();
    if !stripped.is_ok_and(|s| s.success()) {
        eprintln!("xtask: `strip` failed or is missing; the bundle carries nornir's debug information");
    }
    let mut sums = String::new();
    for (_, to) in &files {
        sums.push_str(&format!("{}  {to}\n", sha256_file(&stage.join(to))?));
    }
    std::fs::write(stage.join("SHA256SUMS"), &sums)?;

    eprintln!("xtask: packing {} files", files.len());
    let archive = work.join(ARCHIVE);
    let tar = Command::new("sh")
        .arg("-c")
        .arg("tar -C \"$1\" -cf - . | gzip -6 > \"$2\"")
        .arg("sh")
        .arg(&stage)
        .arg(&archive)
        .status()
        .context("run tar and gzip")?;
    if !tar.success() {
        bail!("tar | gzip failed ({tar}): both are needed to pack the bundle");
    }
    let archive_sha = sha256_file(&archive)?;
    let archive_size = std::fs::metadata(&archive)?.len();
    let parts_dir = work.join("parts");
    std::fs::create_dir_all(&parts_dir)?;
    let parts = cut(&archive, &parts_dir, o.part_bytes())?;
    let mut manifest = format!(
        "# nornir GPU bundle ({} files); scripts/gpu-check.sh joins the parts in this order and checks every sum\narchive {ARCHIVE} {archive_sha} {archive_size}\n",
        files.len()
    );
    for (name, size) in &parts {
        manifest.push_str(&format!("part {name} {} {size}\n", sha256_file(&parts_dir.join(name))?));
    }
    std::fs::write(parts_dir.join("MANIFEST"), manifest)?;
    Ok(parts)
}

/// Cuts `archive` into `<ARCHIVE>.part-NN` files of at most `part_bytes` each.
fn cut(archive: &Path, dir: &Path, part_bytes: u64) -> Result<Vec<(String, u64)>> {
    let mut input = std::fs::File::open(archive)?;
    let mut parts = Vec::new();
    let mut buf = vec![0u8; MIB as usize];
    loop {
        let name = format!("{ARCHIVE}.part-{:02}", parts.len());
        let mut written = 0u64;
        let mut out: Option<std::fs::File> = None;
        while written < part_bytes {
            let want = buf.len().min((part_bytes - written) as usize);
            let n = input.read(&mut buf[..want])?;
            if n == 0 {
                break;
            }
            let f = match &mut out {
                Some(f) => f,
                None => out.insert(std::fs::File::create(dir.join(&name))?),
            };
            f.write_all(&buf[..n])?;
            written += n as u64;
        }
        if written == 0 {
            return Ok(parts);
        }
        parts.push((name, written));
    }
}

/// How to send the bundle to a lent machine: one transfer per part, the last one running the check.
fn print_plan(out: &Path, parts: &[(String, u64)]) {
    let rel = out.strip_prefix(workspace_root()).map(Path::to_path_buf).unwrap_or_else(|_| out.to_path_buf());
    let total: u64 = parts.iter().map(|(_, s)| s).sum();
    println!("GPU bundle: {} ({} parts, {:.1} MiB)", out.display(), parts.len(), total as f64 / MIB as f64);
    println!("Send it with one device call per part, while the machine stays up (the parts stay between calls):");
    for (i, (name, size)) in parts.iter().enumerate() {
        let mut carry = vec![rel.join(name).display().to_string()];
        if i == 0 {
            carry.push(rel.join("MANIFEST").display().to_string());
        }
        let command = if i + 1 == parts.len() { "bash scripts/gpu-check.sh \"$OUT\"" } else { "true" };
        println!(
            "  call {}: carry {} ({:.1} MiB); command: {command}",
            i + 1,
            carry.join(" "),
            *size as f64 / MIB as f64
        );
    }
    if rel.is_absolute() {
        println!("(the bundle is outside the repository: set NORNIR_GPU_BUNDLE to its path on the GPU machine)");
    } else if rel != Path::new("target/gpu-bundle") {
        println!("(on the GPU machine set NORNIR_GPU_BUNDLE={} before the script)", rel.display());
    }
}
