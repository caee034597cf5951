//! The folder the docs' commands run in, as the docs assume it: the files they name (texts.txt,
//! docs.txt with one long document, queries.txt, corpus.txt, docs.jsonl, models.toml) and the
//! model folders by the names they use, linked to the fetched ones (`DIR`: the default model;
//! `all-MiniLM-L6-v2` and `splade-tiny`: transformers folders of safetensors to convert;
//! `splade-onnx`: splade-tiny converted; `models/...`: the cache's folders; `reranker` (and
//! `my-reranker`): a cross-encoder of all-MiniLM-L6-v2's encoder under a seeded classifier
//! head, made by scripts/minilm_reranker.py and converted by the `nornir` under test;
//! `m2v-model`: a static model saved by model2vec itself with a random table, made by
//! scripts/static_reference.py; `clip-weights` and `clip-model`: a random CLIP checkpoint laid out
//! as OpenAI's, made by scripts/image_reference.py, and its conversion; `images/` and
//! `images.txt`: that script's image set and a list of six of them).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Writes the fixtures and links into `work`, from the tests' variables `env`, with the
/// `nornir` in `bin`.
pub(super) fn prepare(work: &Path, bin: &Path, env: &[(&'static str, PathBuf)]) -> Result<()> {
    let var = |name: &str| -> Result<PathBuf> {
        env.iter().find(|(n, _)| *n == name).map(|(_, p)| p.clone()).with_context(|| format!("{name} is not set"))
    };
    let sample = std::fs::read_to_string(crate::process::workspace_root().join("testdata/parity-sample.txt"))?;
    let corpus = std::fs::read_to_string(crate::process::workspace_root().join("testdata/corpus.txt"))?;
    let lines: Vec<&str> = sample.lines().filter(|l| !l.trim().is_empty()).collect();
    let long = corpus.lines().find(|l| l.split_whitespace().count() > 250).context("a long corpus paragraph")?;
    write(work, "texts.txt", &lines[..8].join("\n"))?;
    write(work, "queries.txt", &lines[8..12].join("\n"))?;
    write(work, "docs.txt", &format!("{}\n{long}", lines[12..20].join("\n")))?;
    write(work, "corpus.txt", &corpus.lines().take(300).collect::<Vec<_>>().join("\n"))?;
    let jsonl: Vec<String> = lines[..4]
        .iter()
        .enumerate()
        .map(|(i, t)| serde_json::json!({ "id": format!("doc-{i}"), "text": t }).to_string())
        .collect();
    write(work, "docs.jsonl", &jsonl.join("\n"))?;
    let default = var("NORNIR_TEST_CONVERTED_MODEL")?;
    let home = var("NORNIR_HOME")?;
    write(
        work,
        "models.toml",
        &format!(
            "[[model]]\nname = \"minilm\"\nfolder = {:?}\n\n[[model]]\nname = \"minilm-int8\"\nfolder = {:?}\n",
            default.display().to_string(),
            home.join(crate::assets::EXPORT_MODEL_DIR).display().to_string()
        ),
    )?;
    std::fs::create_dir_all(work.join("models"))?;
    let links = [
        ("DIR", default.clone()),
        ("all-MiniLM-L6-v2", var("NORNIR_TEST_MINILM_SAFETENSORS")?),
        ("splade-tiny", var("NORNIR_TEST_SPLADE_SAFETENSORS")?),
        ("splade-onnx", var("NORNIR_TEST_SPLADE_MODEL")?),
        ("models/all-MiniLM-L6-v2", default),
        ("models/all-MiniLM-L6-v2-int8", home.join(crate::assets::EXPORT_MODEL_DIR)),
    ];
    for (name, target) in links {
        std::os::unix::fs::symlink(&target, work.join(name))
            .with_context(|| format!("link {name} to {}", target.display()))?;
    }
    let python = var("NORNIR_TEST_REFERENCE_PYTHON")?;
    reranker(work, bin, &python, &var("NORNIR_TEST_MINILM_SAFETENSORS")?)?;
    clip_model(work, bin, &python)?;
    static_model(work, &python, &var("NORNIR_TEST_MODEL")?.join("tokenizer.json"))
}

/// `work/clip-weights` (a random CLIP checkpoint), `work/clip-model` (it converted), `work/images`
/// and `work/images.txt`.
fn clip_model(work: &Path, bin: &Path, python: &Path) -> Result<()> {
    let script = crate::process::workspace_root().join("scripts/image_reference.py");
    let run = |args: &[&std::ffi::OsStr]| {
        crate::process::run_checked(
            std::process::Command::new(python).arg(&script).args(args).stdout(std::process::Stdio::null()),
        )
    };
    run(&["make".as_ref(), "clip".as_ref(), work.join("clip-weights").as_os_str()])?;
    run(&["images".as_ref(), work.join("images").as_os_str()])?;
    let names = [
        "landscape_97x41.jpg",
        "portrait_40x113.png",
        "rgba_alpha_45x30.png",
        "palette_P_50x33.png",
        "lossy_64x48.webp",
        "animated_3frames_30x22.gif",
    ];
    let list: Vec<String> = names.iter().map(|n| format!("images/{n}")).collect();
    write(work, "images.txt", &list.join("\n"))?;
    crate::process::run_checked(
        std::process::Command::new(bin.join("nornir"))
            .args(["vector", "convert", "--quiet", "--model"])
            .arg(work.join("clip-weights"))
            .arg("--output")
            .arg(work.join("clip-model")),
    )
}

/// `work/m2v-model`: the float32 static model of scripts/static_reference.py's cases.
fn static_model(work: &Path, python: &Path, tokenizer: &Path) -> Result<()> {
    let script = crate::process::workspace_root().join("scripts/static_reference.py");
    let cases = work.join(".static");
    crate::process::run_checked(
        std::process::Command::new(python)
            .arg(script)
            .arg("cases")
            .arg(tokenizer)
            .arg(work.join("corpus.txt"))
            .arg(&cases)
            .stdout(std::process::Stdio::null()),
    )?;
    std::os::unix::fs::symlink(cases.join("wordpiece-f32"), work.join("m2v-model")).context("link m2v-model")
}

/// `work/reranker` (and the link `my-reranker`), from all-MiniLM-L6-v2's safetensors folder.
fn reranker(work: &Path, bin: &Path, python: &Path, minilm: &Path) -> Result<()> {
    let script = crate::process::workspace_root().join("scripts/minilm_reranker.py");
    let source = work.join(".reranker-src");
    crate::process::run_checked(std::process::Command::new(python).arg(script).arg(minilm).arg(&source))?;
    crate::process::run_checked(
        std::process::Command::new(bin.join("nornir"))
            .args(["vector", "convert", "--quiet", "--model"])
            .arg(&source)
            .arg("--output")
            .arg(work.join("reranker")),
    )?;
    std::os::unix::fs::symlink("reranker", work.join("my-reranker")).context("link my-reranker")?;
    Ok(())
}

/// A doc's own folder `work`, with a link to every fixture of `fixtures` (hidden ones aside).
pub(super) fn link_fixtures(fixtures: &Path, work: &Path) -> Result<()> {
    std::fs::create_dir_all(work)?;
    for entry in std::fs::read_dir(fixtures)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), work.join(entry.file_name()))
            .with_context(|| format!("link {}", entry.path().display()))?;
    }
    Ok(())
}

fn write(work: &Path, name: &str, text: &str) -> Result<()> {
    std::fs::write(work.join(name), format!("{text}\n")).with_context(|| format!("write {name}"))
}
