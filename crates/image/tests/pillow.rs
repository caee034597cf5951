//! The preprocessing against Pillow itself: scripts/image_reference.py (transformers' slow
//! CLIPImageProcessor and SigLIP's, written from their code, on Pillow 13.0.0 in the reference
//! venv) makes its varied image set (landscape, portrait, tiny, huge, grayscale, RGBA, palette
//! with and without transparency, 16-bit PNGs, progressive and grayscale JPEG, lossy and lossless
//! WebP, an animated GIF, an EXIF-rotated JPEG) and the pixel values of each, which this crate
//! must give exactly. Needs the reference venv `cargo xtask test` makes (NORNIR_TEST_REFERENCE_PYTHON),
//! ignored with the wording every asset-needing test shares.

use std::path::Path;
use std::process::Command;

use nornir_image::{ImageLimits, ImageProcessor};

fn reference(args: &[&std::ffi::OsStr]) -> String {
    let python =
        std::env::var_os("NORNIR_TEST_REFERENCE_PYTHON").expect("NORNIR_TEST_REFERENCE_PYTHON: run `cargo xtask test`");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/image_reference.py");
    let o = Command::new(python).arg(script).args(args).output().expect("run the reference");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn every_image_of_the_set_is_prepared_exactly_as_pillow_and_transformers_prepare_it() {
    let t = tempfile::tempdir().expect("tempdir");
    let images = t.path().join("images");
    let set: serde_json::Value =
        serde_json::from_str(&reference(&["images".as_ref(), images.as_os_str()])).expect("json");
    let names: Vec<String> = serde_json::from_value(set["images"].clone()).expect("names");
    for family in ["clip", "siglip"] {
        let folder = t.path().join(family);
        reference(&["make".as_ref(), family.as_ref(), folder.as_os_str()]);
        let processor = ImageProcessor::from_folder(&folder).expect("config").expect("a processor");
        let mut worst = 0f32;
        for name in &names {
            let path = images.join(name);
            let npy = t.path().join(format!("{family}-{name}.npy"));
            reference(&["pixels".as_ref(), folder.as_os_str(), npy.as_os_str(), path.as_os_str()]);
            let bytes = std::fs::read(&npy).expect("npy");
            let want: Vec<f32> = npyz::NpyFile::new(&bytes[..]).expect("npy").into_vec().expect("floats");
            let got = processor.preprocess(&std::fs::read(&path).expect("image"), &ImageLimits::default()).expect(name);
            assert_eq!(got.values.len(), want.len(), "{family} {name}");
            let d = got.values.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            worst = worst.max(d);
            assert!(d == 0.0, "{family} {name}: largest difference {d}");
        }
        eprintln!("{family}: {} images, largest difference after normalisation {worst}", names.len());
    }
}
