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
