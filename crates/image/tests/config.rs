//! Reading `preprocessor_config.json`: each class's defaults, the old forms of `size` and
//! `crop_size`, and a one-line refusal for every value the processor could not follow.

use nornir_image::{ImageError, ImageProcessor};

fn read(json: &str) -> Result<ImageProcessor, ImageError> {
    ImageProcessor::from_json(json)
}

fn refusal(json: &str) -> String {
    let err = read(json).expect_err(json).to_string();
    assert!(!err.contains('\n'), "one line: {err}");
    err
}

const OPENAI: &str = "mean [0.48145466, 0.4578275, 0.40821073] std [0.26862954, 0.26130258, 0.27577711]";

#[test]
fn clip_defaults_are_the_classs() {
    let p = read(r#"{"image_processor_type": "CLIPImageProcessor"}"#).expect("config");
    assert_eq!(p.output_size(), Some((224, 224)));
    assert_eq!(
        p.to_string(),
        format!(
            "CLIPImageProcessor; resize shortest edge 224 BICUBIC; center crop 224x224; rescale 0.00392156862745098; {OPENAI}; convert to RGB"
        )
    );
}

#[test]
fn the_old_feature_extractor_form_reads_the_same() {
    let old = read(
        r#"{"feature_extractor_type": "CLIPFeatureExtractor", "size": 224, "crop_size": 224, "resample": 3,
            "do_center_crop": true, "do_normalize": true, "do_resize": true,
            "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}"#,
    )
    .expect("config");
    assert!(old.to_string().starts_with("CLIPFeatureExtractor (as CLIPImageProcessor); resize shortest edge 224"));
    assert!(old.to_string().contains(OPENAI));
    assert_eq!(old.output_size(), Some((224, 224)));
}

#[test]
fn siglip_defaults_are_the_classs() {
    let p = read(r#"{"image_processor_type": "SiglipImageProcessor"}"#).expect("config");
    assert_eq!(p.output_size(), Some((224, 224)));
    assert_eq!(
        p.to_string(),
        "SiglipImageProcessor; resize 224x224 BICUBIC; no crop; rescale 0.00392156862745098; \
         mean [0.5, 0.5, 0.5] std [0.5, 0.5, 0.5]; RGB images only"
    );
    // SigLIP has no crop step: crop keys are never read.
    let p = read(
        r#"{"image_processor_type": "SiglipImageProcessor", "size": {"height": 384, "width": 384},
                     "do_center_crop": true, "crop_size": "nonsense", "do_convert_rgb": true}"#,
    )
    .expect("config");
    assert_eq!(p.output_size(), Some((384, 384)));
    assert!(p.to_string().ends_with("convert to RGB"));
}

#[test]
fn sizes_take_every_form_get_size_dict_takes() {
    let size = |s: &str| read(&format!(r#"{{"image_processor_type": "CLIPImageProcessor", {s}}}"#)).expect(s);
    assert_eq!(size(r#""size": [100, 200], "do_center_crop": false"#).output_size(), Some((100, 200)));
    assert_eq!(size(r#""size": {"height": 30, "width": 40}, "do_center_crop": false"#).output_size(), Some((30, 40)));
    assert_eq!(size(r#""size": 300, "do_center_crop": false"#).output_size(), None);
    assert_eq!(size(r#""crop_size": [10, 20]"#).output_size(), Some((10, 20)));
    assert_eq!(size(r#""crop_size": 99"#).output_size(), Some((99, 99)));
    // CLIP's resize ignores a longest_edge beside shortest_edge.
    let p = size(r#""size": {"shortest_edge": 64, "longest_edge": 100}"#);
    assert!(p.to_string().contains("resize shortest edge 64 BICUBIC"));
    // KOSMOS-2's use_square_size makes the shortest edge a square.
    assert!(size(r#""use_square_size": true, "do_center_crop": false"#).to_string().contains("resize 224x224"));
    // null is None: the default size; a null flag is false.
    assert_eq!(size(r#""size": null, "do_center_crop": null"#).output_size(), None);
    assert!(size(r#""do_resize": false"#).to_string().contains("no resize"));
}

#[test]
fn unknown_or_missing_processors_are_refused() {
    let err = refusal(r#"{"image_processor_type": "ViTImageProcessor"}"#);
    assert!(
        err.contains("ViTImageProcessor") && err.contains("CLIPImageProcessor") && err.contains("SiglipImageProcessor")
    );
    assert!(refusal(r#"{"image_processor_type": "CLIPImageProcessorFast"}"#).contains("not supported"));
    assert!(refusal(r#"{"size": 224}"#).contains("image_processor_type"));
    assert!(refusal(r#"{"image_processor_type": 3}"#).contains("image_processor_type"));
}

#[test]
fn bad_values_are_refused_naming_the_key() {
    let cases = [
        (r#""size": 0"#, "`size`"),
        (r#""size": 9000"#, "`size`"),
        (r#""size": -5"#, "`size`"),
        (r#""size": 224.5"#, "`size`"),
        (r#""size": "224""#, "`size`"),
        (r#""size": [224]"#, "`size`"),
        (r#""size": {"height": 224}"#, "`size`"),
        (r#""size": {"longest_edge": 224}"#, "`size`"),
        (r#""crop_size": {"shortest_edge": 224}"#, "`crop_size`"),
        (r#""crop_size": {"height": 0, "width": 4}"#, "`crop_size`"),
        (r#""resample": 6"#, "`resample`"),
        (r#""resample": -1"#, "`resample`"),
        (r#""resample": 2.5"#, "`resample`"),
        (r#""resample": "bicubic""#, "`resample`"),
        (r#""resample": null"#, "`resample`"),
        (r#""rescale_factor": "x""#, "`rescale_factor`"),
        (r#""rescale_factor": null"#, "`rescale_factor`"),
        (r#""image_mean": [0.5, 0.5]"#, "`image_mean`"),
        (r#""image_mean": [0.5, 0.5, 0.5, 0.5]"#, "`image_mean`"),
        (r#""image_mean": [0.5, "a", 0.5]"#, "`image_mean`"),
        (r#""image_mean": 1e39"#, "`image_mean`"),
        (r#""image_std": [0.5, 0, 0.5]"#, "`image_std`"),
        (r#""image_std": 1e-50"#, "`image_std`"),
        (r#""do_resize": "yes""#, "`do_resize`"),
        (r#""do_normalize": 1"#, "`do_normalize`"),
    ];
    for (setting, key) in cases {
        let err = refusal(&format!(r#"{{"image_processor_type": "CLIPImageProcessor", {setting}}}"#));
        assert!(err.contains(key), "{setting}: {err}");
    }
    // SigLIP resizes to height and width only.
    assert!(refusal(r#"{"image_processor_type": "SiglipImageProcessor", "size": 224}"#).contains("`size`"));
}

#[test]
fn values_the_steps_do_not_use_are_not_refused() {
    // The crop size is only needed when cropping, the filter only when resizing, the mean and
    // std only when normalising, the factor only when rescaling (as the processor does).
    let p = read(
        r#"{"image_processor_type": "CLIPImageProcessor", "do_center_crop": false, "crop_size": {"shortest_edge": 3},
            "do_resize": false, "resample": 99, "do_normalize": false, "image_std": [0, 0, 0],
            "do_rescale": false, "rescale_factor": "x", "unknown_key": [1, 2]}"#,
    )
    .expect("config");
    assert_eq!(p.to_string(), "CLIPImageProcessor; no resize; no crop; no rescale; no normalize; convert to RGB");
    // A scalar mean or std stands for all three channels.
    let p =
        read(r#"{"image_processor_type": "CLIPImageProcessor", "image_mean": 0.25, "image_std": 2}"#).expect("config");
    assert!(p.to_string().contains("mean [0.25, 0.25, 0.25] std [2.0, 2.0, 2.0]"));
}

#[test]
fn the_file_must_be_a_json_object_of_bounded_size() {
    assert!(refusal("not json").contains("not valid JSON"));
    assert!(refusal("[1, 2]").contains("not a JSON object"));
    let big = format!(r#"{{"image_processor_type": "CLIPImageProcessor", "pad": "{}"}}"#, "x".repeat(1 << 20));
    assert!(refusal(&big).contains("over"));
}

#[test]
fn folders_without_a_config_have_no_processor() {
    let dir = std::env::temp_dir().join(format!("nornir-image-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    assert!(ImageProcessor::from_folder(&dir).expect("no file is fine").is_none());
    std::fs::write(dir.join("preprocessor_config.json"), r#"{"image_processor_type": "SiglipImageProcessor"}"#)
        .expect("write");
    let p = ImageProcessor::from_folder(&dir).expect("read").expect("a processor");
    assert_eq!(p.output_size(), Some((224, 224)));
    std::fs::write(dir.join("preprocessor_config.json"), vec![b' '; (1 << 20) + 10]).expect("write");
    assert!(ImageProcessor::from_folder(&dir).is_err());
    std::fs::write(dir.join("preprocessor_config.json"), [0xFFu8, 0xFE]).expect("write");
    assert!(ImageProcessor::from_folder(&dir).expect_err("not UTF-8").to_string().contains("UTF-8"));
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// jina-clip-v2's `preprocessor_config.json`.
const JINA_V2: &str = r#"{"auto_map": {"AutoImageProcessor": "jinaai/jina-clip-implementation--processing_clip.JinaCLIPImageProcessor",
    "AutoProcessor": "jinaai/jina-clip-implementation--processing_clip.JinaCLIPProcessor"}, "fill_color": 0,
    "image_processor_type": "JinaCLIPImageProcessor", "interpolation": "bicubic", "mean": null,
    "processor_class": "JinaCLIPProcessor", "resize_mode": "shortest", "size": 512, "std": null}"#;

fn jina(settings: &str) -> Result<ImageProcessor, ImageError> {
    let sep = if settings.is_empty() { "" } else { ", " };
    read(&format!(r#"{{"image_processor_type": "JinaCLIPImageProcessor"{sep}{settings}}}"#))
}

#[test]
fn jina_clip_reads_open_clips_transform_settings() {
    let p = read(JINA_V2).expect("config");
    assert_eq!(p.output_size(), Some((512, 512)));
    assert_eq!(
        p.to_string(),
        format!(
            "JinaCLIPImageProcessor; resize shortest edge 512 BICUBIC; center crop 512x512 (torchvision rounding); \
             converted to RGB first (jina's encode_image); divide by 255 in float32; {OPENAI}"
        )
    );
    // The processor's own order, for the processor called on the opened image.
    assert!(p.with_rgb_first(false).to_string().contains("resized in the image's own mode, then converted to RGB"));
    // The class defaults; and Python's `value or default`: null, 0, "" and [] are the default.
    let default = jina("").expect("config");
    assert_eq!(default.output_size(), Some((224, 224)));
    assert!(default.to_string().contains("resize shortest edge 224 BICUBIC") && default.to_string().contains(OPENAI));
    let falsy = jina(r#""mean": 0, "std": [], "resize_mode": "", "interpolation": null"#).expect("config");
    assert_eq!(falsy.to_string(), default.to_string());
    // "random" is BICUBIC at inference; a non-square shortest size is open_clip's ResizeKeepRatio,
    // built without the interpolation.
    assert!(jina(r#""interpolation": "random""#).expect("config").to_string().contains("224 BICUBIC"));
    let p = jina(r#""size": [48, 40], "interpolation": "bilinear""#).expect("config");
    assert_eq!(p.output_size(), Some((48, 40)));
    assert!(p.to_string().contains("resize to cover 48x40 keeping the ratio BICUBIC; center crop 48x40"));
    let p = jina(r#""size": 50, "resize_mode": "squash", "interpolation": "bilinear", "mean": 0.5, "std": [2]"#)
        .expect("config");
    assert!(p.to_string().contains("resize 50x50 BILINEAR; no crop"));
    assert!(p.to_string().contains("mean [0.5, 0.5, 0.5] std [2.0, 2.0, 2.0]"));
    let p = jina(r#""size": [30, 20], "resize_mode": "longest", "fill_color": 255"#).expect("config");
    assert!(p.to_string().contains("resize to fit 30x20 keeping the ratio BICUBIC; center crop or pad 30x20 with 255"));
    // fill_color is only read where it is used.
    assert!(jina(r#""fill_color": "white""#).is_ok());
}

#[test]
fn jina_clip_refuses_what_open_clip_would_not_run_naming_the_key() {
    let cases = [
        (r#""size": 0"#, "`size`"),
        (r#""size": 9000"#, "`size`"),
        (r#""size": 512.5"#, "`size`"),
        (r#""size": "512""#, "`size`"),
        (r#""size": null"#, "`size`"),
        (r#""size": [512]"#, "`size`"),
        (r#""size": [512, 0]"#, "`size`"),
        (r#""size": {"height": 512, "width": 512}"#, "`size`"),
        (r#""resize_mode": "crop""#, "`resize_mode`"),
        (r#""resize_mode": 2"#, "`resize_mode`"),
        (r#""interpolation": "lanczos""#, "`interpolation`"),
        (r#""interpolation": 3"#, "`interpolation`"),
        (r#""mean": [0.5, 0.5]"#, "`mean`"),
        (r#""mean": [0.5, "a", 0.5]"#, "`mean`"),
        (r#""mean": "x""#, "`mean`"),
        (r#""mean": true"#, "`mean`"),
        (r#""mean": 1e39"#, "`mean`"),
        (r#""std": [0.5, 0, 0.5]"#, "`std`"),
        (r#""std": 1e-50"#, "`std`"),
        (r#""resize_mode": "longest", "fill_color": 256"#, "`fill_color`"),
        (r#""resize_mode": "longest", "fill_color": -1"#, "`fill_color`"),
        (r#""resize_mode": "longest", "fill_color": 1.5"#, "`fill_color`"),
        (r#""resize_mode": "longest", "fill_color": [0, 0, 0]"#, "`fill_color`"),
    ];
    for (setting, key) in cases {
        let err = jina(setting).expect_err(setting).to_string();
        assert!(!err.contains('\n') && err.contains(key), "{setting}: {err}");
    }
    assert!(
        jina(r#""resize_mode": "crop""#)
            .expect_err("mode")
            .to_string()
            .contains(r#""shortest", "longest" or "squash""#)
    );
}
