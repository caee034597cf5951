//! Untrusted bytes: over-large files and declared sizes are refused before decoding, broken
//! files are errors, and no input (mangled, truncated, random) makes the crate panic.

mod common;

use common::{chunk, pattern, png};
use nornir_image::{ImageError, ImageLimits, ImageProcessor, fuzzing};

fn clip() -> ImageProcessor {
    ImageProcessor::from_json(r#"{"image_processor_type": "CLIPImageProcessor", "size": 32, "crop_size": 32}"#)
        .expect("config")
}

fn run(bytes: &[u8]) -> Result<nornir_image::PixelTensor, ImageError> {
    clip().preprocess(bytes, &ImageLimits::default())
}

#[test]
fn the_byte_limit_is_checked_first() {
    let limits = ImageLimits { max_bytes: 10, max_pixels: 1 };
    let err = clip().preprocess(&[0u8; 11], &limits).expect_err("over");
    assert!(matches!(err, ImageError::TooManyBytes { len: 11, max: 10 }), "{err}");
    assert!(err.to_string().contains("max_bytes"));
}

#[test]
fn a_png_declaring_60000_squared_is_refused_from_its_header() {
    // A valid signature and IHDR (correct CRC), then a tiny IDAT: nothing to decode, nothing allocated.
    let bytes = png(60000, 60000, 8, 2, &[], &[vec![0; 3]]);
    let err = run(&bytes).expect_err("too many pixels");
    assert!(matches!(err, ImageError::TooManyPixels { width: 60000, height: 60000, .. }), "{err}");
    assert!(err.to_string().contains("max_pixels"));
}

#[test]
fn a_side_over_65535_is_refused_whatever_the_pixel_count() {
    let bytes = png(70000, 1, 8, 0, &[], &[vec![0; 70000]]);
    assert!(matches!(run(&bytes), Err(ImageError::TooManyPixels { width: 70000, height: 1, .. })));
}

#[test]
fn gif_jpeg_and_webp_headers_declaring_huge_sizes_are_refused() {
    let mut gif = b"GIF89a".to_vec();
    gif.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0]);
    gif.extend_from_slice(b",\0\0\0\0\x01\0\x01\0\0\x02\x02\x44\x01\0;");
    assert!(matches!(run(&gif), Err(ImageError::TooManyPixels { width: 65535, .. })));
    // A JPEG whose SOF0 says 65000 x 65000.
    let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, 0xFD, 0xE8, 0xFD, 0xE8, 1, 1, 0x11, 0];
    jpeg.extend_from_slice(&[0xFF, 0xDB, 0, 67, 0]);
    jpeg.extend_from_slice(&[1; 64]);
    jpeg.extend_from_slice(&[0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0, 0xFF, 0xD9]);
    assert!(matches!(run(&jpeg), Err(ImageError::TooManyPixels { width: 65000, height: 65000, .. })));
    // A lossless WebP whose header says 16000 x 16000.
    let mut webp = b"RIFF\0\0\0\0WEBPVP8L".to_vec();
    webp.extend_from_slice(&[5, 0, 0, 0, 0x2F, 0x7F, 0xFE, 0x9F, 0x0F]);
    let len = (webp.len() - 8) as u32;
    webp[4..8].copy_from_slice(&len.to_le_bytes());
    assert!(matches!(run(&webp), Err(ImageError::TooManyPixels { width: 16000, height: 16000, .. })));
}

#[test]
fn bytes_that_are_no_image_are_refused() {
    for bytes in [&b""[..], b"hello", b"GIF", &[0xFF, 0xD8], b"\x89PNG\r\n\x1a\n", b"RIFF\0\0\0\0WEBPVP8 "] {
        let err = run(bytes).expect_err("refused");
        assert!(matches!(err, ImageError::UnknownFormat | ImageError::Decode { .. }), "{bytes:?}: {err}");
        assert!(!err.to_string().contains('\n'));
    }
}

#[test]
fn a_truncated_jpeg_is_an_error() {
    let rgb = pattern(32 * 32 * 3, 5);
    let mut c = mozjpeg::Compress::new(mozjpeg::ColorSpace::JCS_RGB);
    c.set_size(32, 32);
    c.set_quality(90.0);
    let mut c = c.start_compress(Vec::new()).expect("start");
    c.write_scanlines(&rgb).expect("write");
    let full = c.finish().expect("finish");
    assert!(run(&full).is_ok());
    for cut in [full.len() - 2, full.len() / 2, 200, 20, 3] {
        let err = run(&full[..cut]).expect_err("truncated");
        assert!(matches!(err, ImageError::Decode { format: "JPEG", .. }), "cut at {cut}: {err}");
    }
    // A fatal libjpeg error (12-bit samples) unwinds out of its C code and becomes an error.
    let mut twelve = full.clone();
    let sof = twelve.windows(2).position(|w| w[0] == 0xFF && (w[1] == 0xC0 || w[1] == 0xC2)).expect("SOF");
    twelve[sof + 4] = 12;
    let err = run(&twelve).expect_err("12-bit");
    assert!(err.to_string().contains("libjpeg"), "{err}");
    // Thousands of scans are refused before decoding.
    let mut many = full[..full.len() - 2].to_vec();
    for _ in 0..1001 {
        many.extend_from_slice(&[0xFF, 0xDA]);
    }
    assert!(run(&many).expect_err("scans").to_string().contains("scans"));
}

#[test]
fn png_with_a_bad_crc_or_missing_data_is_an_error() {
    let good = png(2, 2, 8, 0, &[], &[vec![1, 2], vec![3, 4]]);
    assert!(run(&good).is_ok());
    let mut bad_crc = good.clone();
    bad_crc[29] ^= 0xFF; // the IHDR CRC
    assert!(run(&bad_crc).is_err());
    let short = png(2, 2, 8, 0, &[], &[vec![1, 2]]);
    assert!(run(&short).is_err());
    let no_plte = png(2, 1, 8, 3, &[], &[vec![0, 1]]);
    assert!(run(&no_plte).is_err());
    let small_plte = png(2, 1, 8, 3, &[chunk(b"PLTE", &[1, 2, 3])], &[vec![0, 200]]);
    let _ = run(&small_plte); // either way, no panic
}

/// Small valid files of each kind, to mangle.
fn seeds() -> Vec<Vec<u8>> {
    let rows: Vec<Vec<u8>> = pattern(6 * 5 * 3, 9).chunks(18).map(<[u8]>::to_vec).collect();
    let mut gif = Vec::new();
    {
        let mut e = gif::Encoder::new(&mut gif, 3, 2, &[0, 0, 0, 255, 255, 255]).expect("gif");
        let mut f = gif::Frame { width: 3, height: 2, ..gif::Frame::default() };
        f.buffer = std::borrow::Cow::Owned(vec![0, 1, 0, 1, 1, 0]);
        e.write_frame(&f).expect("frame");
    }
    let mut webp = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut webp)
        .encode(&pattern(4 * 4 * 4, 3), 4, 4, image::ExtendedColorType::Rgba8)
        .expect("webp");
    let mut c = mozjpeg::Compress::new(mozjpeg::ColorSpace::JCS_RGB);
    c.set_size(16, 8);
    c.set_progressive_mode();
    let mut c = c.start_compress(Vec::new()).expect("start");
    c.write_scanlines(&pattern(16 * 8 * 3, 4)).expect("write");
    let jpeg = c.finish().expect("finish");
    vec![png(6, 5, 8, 2, &[], &rows), gif, webp, jpeg]
}

#[test]
fn mangled_and_truncated_files_never_panic() {
    let config = br#"{"image_processor_type": "SiglipImageProcessor", "do_convert_rgb": true, "size": [16, 16]}"#;
    for (n, seed) in seeds().into_iter().enumerate() {
        assert!(fuzzing::preprocess(config, &seed).is_ok(), "seed {n} decodes");
        for cut in 0..seed.len() {
            let _ = fuzzing::preprocess(config, &seed[..cut]);
        }
        let noise = pattern(seed.len() * 40, n as u32 + 1);
        for (i, flips) in noise.chunks(40).enumerate().take(300) {
            let mut bytes = seed.clone();
            let at = usize::from(flips[0]) * 256 + usize::from(flips[1]);
            let at = at % bytes.len();
            bytes[at] = flips[2];
            bytes[(at + usize::from(flips[3])) % seed.len()] ^= flips[4];
            let _ = fuzzing::preprocess(config, &bytes);
            let _ = fuzzing::preprocess(&flips[5..], &bytes[..bytes.len().saturating_sub(i % 7)]);
        }
    }
}

#[test]
fn random_bytes_and_random_configs_never_panic() {
    for seed in 0..200 {
        let bytes = pattern(64 + seed as usize, seed);
        let mut with_magic = b"GIF89a".to_vec();
        with_magic.extend_from_slice(&bytes);
        let _ = fuzzing::preprocess(&bytes, &bytes);
        let _ = fuzzing::preprocess(b"{}", &with_magic);
        let mut png_magic = b"\x89PNG\r\n\x1a\n".to_vec();
        png_magic.extend_from_slice(&bytes);
        let _ = fuzzing::preprocess(b"", &png_magic);
    }
}
