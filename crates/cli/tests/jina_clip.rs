//! jina-clip (`JinaCLIPModel`, jina-clip-v2's layout and two variants with projections) converted
//! from random checkpoints laid out as the published one, against an independent NumPy reference
//! (scripts/jina_clip_reference.py: open_clip's transform on Pillow as jina's `encode_image` and
//! its sentence-transformers module call it, float64 towers written from jina's modeling code):
//! image and text vectors through the library and the command line within 1e-5, and each of the
//! reference's deliberate mistakes caught.

#![cfg(feature = "embed-ort")]

mod common;

use std::path::{Path, PathBuf};

use common::{largest_difference, nornir, rows, s, unit};
use nornir_test_support::env_path;
use nornir_vector::{CallOptions, Device, Embedder, EmbedderOptions, ImageInput};
use serde_json::Value;

/// Runs scripts/jina_clip_reference.py with `args`; its JSON.
fn reference(args: &[&str]) -> Value {
    common::reference_json("jina_clip_reference.py", args)
}

/// The entry point whose pixels nornir gives: `encode_image` and the sentence-transformers
/// module, which convert an image to RGB before the processor.
const ENTRY: [&str; 2] = ["--entry", "encode_image"];

const TEXTS: [&str; 4] =
    ["a photo of a cat", "two dogs", "", "the quick brown fox jumps over the lazy dog again and again"];

fn reference_vectors(source: &Path, images: &[PathBuf], mistake: Option<&str>) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let mut args = vec!["embed", s(source), "--images"];
    args.extend(images.iter().map(|p| s(p)));
    args.push("--texts");
    args.extend(TEXTS);
    args.extend(ENTRY);
    if let Some(m) = mistake {
        args.extend(["--mistake", m]);
    }
    let r = reference(&args);
    (rows(&r["images"]), rows(&r["texts"]))
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn jina_clip_matches_the_reference_through_the_library_and_the_command_line() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let set = reference(&["images", s(&t.path().join("images"))]);
    let names: Vec<String> = serde_json::from_value(set["images"].clone()).expect("names");
    // The images every decoder reads alike (JPEG and lossy WebP decoders differ by a unit here
    // and there; their cost is measured for CLIP in image_models.rs).
    let exact: Vec<PathBuf> = names
        .iter()
        .filter(|n| n.ends_with(".png") || n.ends_with(".gif") || n.starts_with("lossless"))
        .map(|n| t.path().join("images").join(n))
        .collect();
    assert!(exact.len() >= 10, "{names:?}");
    let options = EmbedderOptions::default().with_device(Device::Cpu).with_ort_library(env_path("NORNIR_TEST_ORT_CPU"));
    let mut report = Vec::new();
    for name in ["jina-clip", "jina-clip-head", "jina-clip-proj"] {
        let source = t.path().join(name);
        reference(&["make", name, s(&source)]);
        let converted = t.path().join(format!("{name}-onnx"));
        let o = nornir(&["vector", "convert", "--model", s(&source), "--output", s(&converted), "--quiet"]);
        assert!(o.status.success(), "convert {name}: {}", common::stderr(&o));
        let (want_images, want_texts) = reference_vectors(&source, &exact, None);
        let e = Embedder::new(&converted, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        let settings = e.image_settings().expect("an image model");
        assert!(settings.starts_with("JinaCLIPImageProcessor"), "{settings}");
        let raw = CallOptions::new().with_normalize(false);
        let inputs: Vec<ImageInput> = exact.iter().map(ImageInput::path).collect();
        let got_images: Vec<Vec<f32>> =
            e.embed_images_with(&inputs, &raw).expect("images").rows().map(<[f32]>::to_vec).collect();
        let got_texts: Vec<Vec<f32>> = e.embed_with(&TEXTS, &raw).expect("texts").rows().map(<[f32]>::to_vec).collect();
        let (di, dt) = (largest_difference(&got_images, &want_images), largest_difference(&got_texts, &want_texts));
        assert!(di < 1e-5 && dt < 1e-5, "{name}: images {di:e}, texts {dt:e}");
        for mistake in [
            "mean-std-swapped",
            "bilinear",
            "no-subln",
            "no-rope",
            "rope-halves",
            "wrong-pool",
            "no-lora",
            "no-intp-freq",
            "crop-floor",
        ] {
            let (wi, wt) = reference_vectors(&source, &exact, Some(mistake));
            let caught = largest_difference(&got_images, &wi).max(largest_difference(&got_texts, &wt));
            assert!(caught > 1e-3, "{name}: the mistake {mistake} is not caught ({caught:e})");
        }
        report.push(format!("{name}: images {di:.1e}, texts {dt:.1e}"));
        // The command line: normalised rows, row i for line i.
        let list = t.path().join(format!("{name}.txt"));
        std::fs::write(&list, exact.iter().map(|p| s(p).to_owned()).collect::<Vec<_>>().join("\n") + "\n")
            .expect("list");
        let o = nornir(&["vector", "embed", "--model", s(&converted), "--images", s(&list), "--quiet"]);
        assert!(o.status.success(), "{name}: {}", common::stderr(&o));
        let lines: Vec<Vec<f32>> = String::from_utf8_lossy(&o.stdout).lines().map(common::embedding_of_line).collect();
        let want: Vec<Vec<f64>> = want_images.iter().map(|r| unit(r)).collect();
        let d = largest_difference(&lines, &want);
        assert!(d < 1e-5, "{name}: the command line's image rows differ by {d:e}");
    }
    eprintln!("{}", report.join("\n"));
}
