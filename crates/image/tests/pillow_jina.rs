//! jina-clip's processor against Pillow itself: tests/jina_reference.py follows open_clip's eval
//! transform (torchvision on the Pillow image, written out from their code; Pillow 13.0.0 and
//! NumPy in the reference venv) on scripts/image_reference.py's image set plus the modes it
//! lacks (LA, 1, CMYK JPEG, 16-bit RGBA and gray+alpha, a two-colour palette, low and tall
//! I;16, a GIF with a transparent index, sizes whose crop offsets round half to even), for
//! every resize mode, both filters and pads, on the image as opened (the processor's own order)
//! and converted to RGB first (jina's encode_image). Every value must match exactly. Needs the reference venv
//! `cargo xtask test` makes (NORNIR_TEST_REFERENCE_PYTHON), ignored with the wording every
//! asset-needing test shares.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use nornir_image::{ImageLimits, ImageProcessor};

fn python(script: &Path, args: &[&OsStr]) -> serde_json::Value {
    let python =
        std::env::var_os("NORNIR_TEST_REFERENCE_PYTHON").expect("NORNIR_TEST_REFERENCE_PYTHON: run `cargo xtask test`");
    let o = Command::new(python).arg(script).args(args).output().expect("run the reference");
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

/// The configs: jina-clip-v2's own file, then each resize mode with sizes and settings that
/// reach every step (no resize when the short side already fits, crop offsets of 1.5 and 3.5,
/// the non-square shortest resize, squash, pads with a fill on both axes). Each runs on the
/// image as opened; those in [`RGB_FIRST`] also converted to RGB first.
const CONFIGS: &str = r#"[
    {"auto_map": {"AutoImageProcessor": "jinaai/jina-clip-implementation--processing_clip.JinaCLIPImageProcessor"},
     "fill_color": 0, "image_processor_type": "JinaCLIPImageProcessor", "interpolation": "bicubic", "mean": null,
     "processor_class": "JinaCLIPProcessor", "resize_mode": "shortest", "size": 512, "std": null},
    {"image_processor_type": "JinaCLIPImageProcessor", "size": 32},
    {"image_processor_type": "JinaCLIPImageProcessor", "size": 40, "interpolation": "bilinear"},
    {"image_processor_type": "JinaCLIPImageProcessor", "size": [48, 40], "interpolation": "bilinear"},
    {"image_processor_type": "JinaCLIPImageProcessor", "size": 50, "resize_mode": "squash",
     "interpolation": "bilinear", "mean": 0.5, "std": 0.25},
    {"image_processor_type": "JinaCLIPImageProcessor", "size": 64, "resize_mode": "longest", "fill_color": 200},
    {"image_processor_type": "JinaCLIPImageProcessor", "size": [40, 56], "resize_mode": "longest",
     "fill_color": 7, "interpolation": "random", "mean": [0.5], "std": [0.5, 0.25, 0.125]}
]"#;

/// The configs also run converted to RGB first: one of each resize mode.
const RGB_FIRST: [usize; 3] = [0, 4, 5];

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn jina_clip_prepares_every_image_exactly_as_open_clip_does_with_pillow() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let t = tempfile::tempdir().expect("tempdir");
    let images = t.path().join("images");
    python(&here.join("../../scripts/image_reference.py"), &["images".as_ref(), images.as_os_str()]);
    let jina = here.join("tests/jina_reference.py");
    python(&jina, &["images".as_ref(), images.as_os_str()]);
    let configs: Vec<serde_json::Value> = serde_json::from_str(CONFIGS).expect("configs");
    let cases: Vec<(usize, bool)> =
        (0..configs.len()).map(|c| (c, false)).chain(RGB_FIRST.iter().map(|&c| (c, true))).collect();
    let cases_json: Vec<serde_json::Value> =
        cases.iter().map(|&(c, rgb_first)| serde_json::json!({"config": configs[c], "rgb_first": rgb_first})).collect();
    let cases_file = t.path().join("cases.json");
    std::fs::write(&cases_file, serde_json::Value::from(cases_json).to_string()).expect("write the cases");
    let out = t.path().join("pixels");
    let manifest = python(&jina, &["pixels".as_ref(), cases_file.as_os_str(), images.as_os_str(), out.as_os_str()]);
    let processors: Vec<ImageProcessor> = cases
        .iter()
        .map(|&(c, rgb_first)| {
            ImageProcessor::from_json(&configs[c].to_string()).expect("config").with_rgb_first(rgb_first)
        })
        .collect();
    let (mut compared, mut refused, mut worst, mut wrong) = (0, 0, 0f32, Vec::new());
    for entry in manifest.as_array().expect("a list") {
        let case = entry["case"].as_u64().expect("case") as usize;
        let (config, rgb_first) = cases[case];
        let name = entry["image"].as_str().expect("image");
        let bytes = std::fs::read(images.join(name)).expect("image");
        let got = processors[case].preprocess(&bytes, &ImageLimits::default());
        let Some(file) = entry["file"].as_str() else {
            // Pillow refused the resize (an empty side): so must this crate.
            let err = got
                .expect_err(&format!("config {config} (RGB first: {rgb_first}) {name}: Pillow refused it"))
                .to_string();
            assert!(err.contains("empty"), "config {config} (RGB first: {rgb_first}) {name}: {err}");
            refused += 1;
            continue;
        };
        let got = got.unwrap_or_else(|e| panic!("config {config} (RGB first: {rgb_first}) {name}: {e}"));
        let npy = std::fs::read(file).expect("npy");
        let npy = npyz::NpyFile::new(&npy[..]).expect("npy");
        let shape = npy.shape().to_vec();
        let want: Vec<f32> = npy.into_vec().expect("floats");
        assert_eq!(
            shape,
            [3, u64::from(got.height), u64::from(got.width)],
            "config {config} (RGB first: {rgb_first}) {name}"
        );
        let d = got.values.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        worst = worst.max(d);
        if d != 0.0 {
            wrong.push(format!("config {config} (RGB first: {rgb_first}) {name}: largest difference {d}"));
        }
        compared += 1;
    }
    eprintln!(
        "jina-clip: {} cases, {compared} images compared, {refused} refused by both, largest difference {worst}",
        cases.len()
    );
    assert!(wrong.is_empty(), "{} differ:\n{}", wrong.len(), wrong.join("\n"));
    assert!(compared > 300 && refused >= 3, "{compared} compared, {refused} refused");
}
