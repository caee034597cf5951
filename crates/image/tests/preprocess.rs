//! The steps after decoding: the shortest-edge output size, the center crop and its zero
//! padding, rescale and normalisation in the processor's float arithmetic, and the refusal of
//! non-RGB images where the processor does not convert.

mod common;

use common::{DECODED, interleave, pattern};
use nornir_image::{ImageError, ImageLimits, ImageProcessor};

fn processor(json: &str) -> ImageProcessor {
    ImageProcessor::from_json(json).expect(json)
}

#[test]
fn clip_normalises_in_float32_after_a_float64_rescale() {
    let p = processor(r#"{"image_processor_type": "CLIPImageProcessor"}"#);
    let rgb: Vec<u8> = (0..300 * 200).flat_map(|_| [255u8, 0, 128]).collect();
    let t = p.preprocess_rgb8(300, 200, &rgb).expect("preprocess");
    assert_eq!((t.height, t.width, t.values.len()), (224, 224, 3 * 224 * 224));
    // The config's doubles, cast to float32 as numpy casts them.
    let mean = [0.48145466f64, 0.4578275, 0.40821073].map(|v| v as f32);
    let std = [0.26862954f64, 0.26130258, 0.27577711].map(|v| v as f32);
    for (c, v) in [255u8, 0, 128].into_iter().enumerate() {
        let expected = ((f64::from(v) * (1.0 / 255.0)) as f32 - mean[c]) / std[c];
        assert!(t.values[c * 224 * 224..(c + 1) * 224 * 224].iter().all(|&x| x == expected), "channel {c}");
    }
    // (1 - 0.48145466) / 0.26862954 in float32, as numpy gives it: 1.9303361 (bits 0x3FF7_1641).
    assert_eq!(t.values[0].to_bits(), 1_073_157_441);
}

#[test]
fn the_shortest_edge_becomes_the_size_and_the_long_side_is_truncated() {
    let p = processor(r#"{"image_processor_type": "CLIPImageProcessor", "do_center_crop": false}"#);
    for ((w, h), (out_w, out_h)) in [((640, 480), (298, 224)), ((200, 300), (224, 336)), ((224, 224), (224, 224))] {
        let t = p.preprocess_rgb8(w, h, &pattern((w * h * 3) as usize, 1)).expect("preprocess");
        assert_eq!((t.width, t.height), (out_w, out_h), "{w}x{h}");
    }
    // int(224 * 100 / 3) = 7466, not rounded up.
    let t = p.preprocess_rgb8(100, 3, &pattern(900, 2)).expect("preprocess");
    assert_eq!((t.width, t.height), (7466, 224));
}

#[test]
fn a_crop_larger_than_the_image_pads_with_zeros_before_normalising() {
    // 100 wide, 50 tall; crop 60 tall, 120 wide: the image sits 5 rows down, 10 columns in.
    let p = processor(
        r#"{"image_processor_type": "CLIPImageProcessor", "do_resize": false,
            "crop_size": {"height": 60, "width": 120}, "do_rescale": false, "do_normalize": false}"#,
    );
    let rgb = pattern(100 * 50 * 3, 3);
    let t = p.preprocess_rgb8(100, 50, &rgb).expect("preprocess");
    assert_eq!((t.height, t.width), (60, 120));
    let out = interleave(&t.values);
    for y in 0..60usize {
        for x in 0..120usize {
            let inside = (5..55).contains(&y) && (10..110).contains(&x);
            let want = if inside { &rgb[((y - 5) * 100 + x - 10) * 3..][..3] } else { &[0, 0, 0][..] };
            assert_eq!(&out[(y * 120 + x) * 3..][..3], want, "({x}, {y})");
        }
    }
    // With normalisation the padding is (0 - mean) / std.
    let p = processor(r#"{"image_processor_type": "CLIPImageProcessor", "do_resize": false, "crop_size": 9}"#);
    let t = p.preprocess_rgb8(3, 3, &[255; 27]).expect("preprocess");
    let (mean, std) = (0.48145466f64 as f32, 0.26862954f64 as f32);
    assert_eq!(t.values[0], (0.0 - mean) / std);
    assert_eq!(t.values[4 * 9 + 4], (1.0 - mean) / std);
}

#[test]
fn an_odd_crop_starts_at_the_floor_of_half_the_margin() {
    let p = processor(
        r#"{"image_processor_type": "CLIPImageProcessor", "do_resize": false, "crop_size": [2, 3],
            "do_rescale": false, "do_normalize": false}"#,
    );
    let rgb: Vec<u8> = (0..25u8).flat_map(|v| [v, v, v]).collect(); // 5x5, value = index
    let t = p.preprocess_rgb8(5, 5, &rgb).expect("preprocess");
    // top = (5 - 2) // 2 = 1, left = (5 - 3) // 2 = 1.
    assert_eq!(&t.values[..6], &[6.0, 7.0, 8.0, 11.0, 12.0, 13.0]);
}

#[test]
fn rescale_without_normalise_and_neither() {
    let rgb = pattern(4 * 4 * 3, 4);
    let raw = processor(DECODED).preprocess_rgb8(4, 4, &rgb).expect("preprocess");
    assert_eq!(interleave(&raw.values), rgb);
    let p = processor(
        r#"{"image_processor_type": "CLIPImageProcessor", "do_resize": false, "do_center_crop": false,
            "do_normalize": false, "rescale_factor": 0.5}"#,
    );
    let t = p.preprocess_rgb8(4, 4, &rgb).expect("preprocess");
    assert_eq!(t.values, raw.values.iter().map(|v| v * 0.5).collect::<Vec<_>>());
}

#[test]
fn siglip_without_do_convert_rgb_refuses_what_is_not_rgb() {
    let gray = common::png(2, 2, 8, 0, &[], &[vec![1, 2], vec![3, 4]]);
    let rgb = common::png(1, 1, 8, 2, &[], &[vec![9, 8, 7]]);
    let limits = ImageLimits::default();
    let siglip = processor(r#"{"image_processor_type": "SiglipImageProcessor"}"#);
    match siglip.preprocess(&gray, &limits) {
        Err(e @ ImageError::NotRgb { mode: "L" }) => assert!(e.to_string().contains("do_convert_rgb")),
        other => panic!("expected NotRgb, got {other:?}"),
    }
    assert!(siglip.preprocess(&rgb, &limits).is_ok());
    let converting = processor(r#"{"image_processor_type": "SiglipImageProcessor", "do_convert_rgb": true}"#);
    assert!(converting.preprocess(&gray, &limits).is_ok());
}

#[test]
fn pixels_that_do_not_fit_their_size_are_refused() {
    let p = processor(DECODED);
    assert!(matches!(p.preprocess_rgb8(2, 2, &[0; 11]), Err(ImageError::BadPixels(_))));
    assert!(matches!(p.preprocess_rgb8(0, 2, &[]), Err(ImageError::BadPixels(_))));
}

#[test]
fn a_resize_beyond_the_pixel_limit_is_refused() {
    // 1 x 3000 with a shortest edge of 8192: 8192 x 24,576,000 pixels.
    let p = processor(r#"{"image_processor_type": "CLIPImageProcessor", "size": 8192, "do_center_crop": false}"#);
    assert!(matches!(p.preprocess_rgb8(1, 3000, &[7; 9000]), Err(ImageError::ResizeTooLarge { .. })));
}

/// A jina-clip config whose output is each byte / 255 (mean 0 and std 1, given as lists: a
/// bare 0 would be open_clip's default mean).
fn jina_plain(settings: &str) -> ImageProcessor {
    processor(&format!(
        r#"{{"image_processor_type": "JinaCLIPImageProcessor", "mean": [0, 0, 0], "std": [1, 1, 1], {settings}}}"#
    ))
}

/// The bytes of a `v / 255` tensor, interleaved.
fn bytes_of(values: &[f32]) -> Vec<u8> {
    interleave(&values.iter().map(|v| (v * 255.0).round()).collect::<Vec<_>>())
}

#[test]
fn jina_clip_divides_by_255_in_float32_then_normalises() {
    let p = processor(r#"{"image_processor_type": "JinaCLIPImageProcessor", "size": 4}"#);
    let t = p.preprocess_rgb8(4, 4, &[200; 48]).expect("preprocess");
    let (mean, std) = (0.48145466f64 as f32, 0.26862954f64 as f32);
    assert_eq!(t.values[0], (200.0f32 / 255.0 - mean) / std);
}

#[test]
fn jina_clip_crops_at_pythons_round_half_to_even() {
    // 4 wide, 7 tall, no resize (the short side is the size): the margin 3 is 1.5 each side,
    // which Python's round takes to 2 (transformers' floor would start at row 1).
    let p = jina_plain(r#""size": 4"#);
    let rgb: Vec<u8> = (0..28u8).flat_map(|v| [v, v, v]).collect(); // value = pixel index
    let t = p.preprocess_rgb8(4, 7, &rgb).expect("preprocess");
    assert_eq!((t.height, t.width), (4, 4));
    assert_eq!(bytes_of(&t.values)[..12], [8, 8, 8, 9, 9, 9, 10, 10, 10, 11, 11, 11]);
    // A margin of 5 (2.5) rounds to 2, as the floor does.
    let rgb: Vec<u8> = (0..36u8).flat_map(|v| [v, v, v]).collect();
    let t = p.preprocess_rgb8(4, 9, &rgb).expect("preprocess");
    assert_eq!(bytes_of(&t.values)[0], 8);
}

#[test]
fn jina_clip_longest_fits_then_pads_with_fill_color() {
    // 20 x 10 fitted into 16: 16 x 8, padded with 4 rows of 9 above and below.
    let p = jina_plain(r#""size": 16, "resize_mode": "longest", "fill_color": 9"#);
    let t = p.preprocess_rgb8(20, 10, &[100; 600]).expect("preprocess");
    assert_eq!((t.height, t.width), (16, 16));
    let out = bytes_of(&t.values);
    for y in 0..16 {
        let want = if (4..12).contains(&y) { 100 } else { 9 };
        assert!(out[y * 48..(y + 1) * 48].iter().all(|&v| v == want), "row {y}");
    }
    // 300 x 2 fitted into 64 rounds its height to 0 rows: Pillow refuses that resize.
    let p = jina_plain(r#""size": 64, "resize_mode": "longest""#);
    let err = p.preprocess_rgb8(300, 2, &[1; 1800]).expect_err("empty");
    assert!(matches!(err, ImageError::ResizeToNothing { width: 64, height: 0 }), "{err}");
}

#[test]
fn jina_clip_in_the_images_own_mode_resizes_rgba_premultiplied() {
    // A transparent red beside an opaque blue, squashed to one pixel: Pillow resizes RGBA
    // premultiplied, so the red weighs nothing and the blue comes back whole (128 alpha).
    let rgba = common::png(2, 1, 8, 6, &[], &[vec![255, 0, 0, 0, 0, 0, 255, 255]]);
    let settings = r#""size": 1, "resize_mode": "squash", "interpolation": "bilinear""#;
    let p = jina_plain(settings).with_rgb_first(false);
    let t = p.preprocess(&rgba, &ImageLimits::default()).expect("preprocess");
    assert_eq!(bytes_of(&t.values), [0, 0, 255]);
    // Gray with alpha: (0 * 0 + 10 * 255) / 2 = 5 premultiplied, 255 * 5 / 128 = 9 after.
    let la = common::png(2, 1, 8, 4, &[], &[vec![200, 0, 10, 255]]);
    assert_eq!(bytes_of(&p.preprocess(&la, &ImageLimits::default()).expect("LA").values), [9, 9, 9]);
    // Converted to RGB first (the default, jina's encode_image), as CLIP converts: the plain
    // average.
    let first = jina_plain(settings);
    assert_eq!(bytes_of(&first.preprocess(&rgba, &ImageLimits::default()).expect("RGB first").values), [128, 0, 128]);
    assert_eq!(bytes_of(&first.preprocess(&la, &ImageLimits::default()).expect("LA").values), [105, 105, 105]);
    let clip = processor(
        r#"{"image_processor_type": "CLIPImageProcessor", "size": {"height": 1, "width": 1}, "resample": 2,
            "do_center_crop": false, "do_rescale": false, "do_normalize": false}"#,
    );
    assert_eq!(interleave(&clip.preprocess(&rgba, &ImageLimits::default()).expect("clip").values), [128, 0, 128]);
}

#[test]
fn jina_clip_in_the_images_own_mode_resizes_palettes_by_nearest_and_pads_with_an_index() {
    // A 4 x 2 palette image fitted into 2: 2 x 1 by NEAREST whatever the filter (the pixels of
    // row 1, columns 1 and 3: indices 2 and 0), then a row of fill index 1 below: its colour,
    // not the gray 1.
    let plte = common::chunk(b"PLTE", &[10, 20, 30, 200, 100, 50, 0, 255, 0, 255, 255, 255]);
    let png = common::png(4, 2, 8, 3, &[plte], &[vec![0, 1, 2, 3], vec![1, 2, 3, 0]]);
    let p = jina_plain(r#""size": 2, "resize_mode": "longest", "fill_color": 1"#);
    let t = p.clone().with_rgb_first(false).preprocess(&png, &ImageLimits::default()).expect("preprocess");
    assert_eq!((t.height, t.width), (2, 2));
    assert_eq!(bytes_of(&t.values), [0, 255, 0, 10, 20, 30, 200, 100, 50, 200, 100, 50]);
    // Converted to RGB first, the colours are blended by BICUBIC and the pad is gray 1.
    let t = p.preprocess(&png, &ImageLimits::default()).expect("preprocess");
    let out = bytes_of(&t.values);
    assert_ne!(out[..6], [0, 255, 0, 10, 20, 30]);
    assert_eq!(out[6..], [1; 6]);
}
