//! Each file kind decoded to the RGB Pillow's `convert("RGB")` gives: PNG of every colour type
//! and depth (written byte by byte here), GIF (first frame, palettes, transparency, a frame off
//! the screen's corner), lossless WebP, and JPEG through libjpeg.

mod common;

use std::borrow::Cow;

use common::{DECODED, chunk, interleave, pattern, png};
use nornir_image::{ImageLimits, ImageProcessor};

/// The decoded RGB of `bytes`.
fn decoded(bytes: &[u8]) -> Vec<u8> {
    let t =
        ImageProcessor::from_json(DECODED).expect("config").preprocess(bytes, &ImageLimits::default()).expect("decode");
    interleave(&t.values)
}

fn gray3(values: &[u8]) -> Vec<u8> {
    values.iter().flat_map(|&v| [v, v, v]).collect()
}

#[test]
fn eight_bit_png_colour_types() {
    let rgb = pattern(3 * 4 * 3, 1);
    let rows: Vec<Vec<u8>> = rgb.chunks(9).map(<[u8]>::to_vec).collect();
    assert_eq!(decoded(&png(3, 4, 8, 2, &[], &rows)), rgb);
    // RGBA: the alpha is dropped, not blended.
    let rgba: Vec<u8> = rgb.chunks(3).flat_map(|p| [p[0], p[1], p[2], 0]).collect();
    let rows: Vec<Vec<u8>> = rgba.chunks(12).map(<[u8]>::to_vec).collect();
    assert_eq!(decoded(&png(3, 4, 8, 6, &[], &rows)), rgb);
    // Gray, and gray with alpha.
    assert_eq!(decoded(&png(2, 1, 8, 0, &[], &[vec![5, 250]])), gray3(&[5, 250]));
    assert_eq!(decoded(&png(2, 1, 8, 4, &[], &[vec![5, 0, 250, 9]])), gray3(&[5, 250]));
    // 2-bit gray is scaled (L;2): 0, 85, 170, 255.
    assert_eq!(decoded(&png(4, 1, 2, 0, &[], &[vec![0b00_01_10_11]])), gray3(&[0, 85, 170, 255]));
    // 1-bit: 0 and 255.
    assert_eq!(decoded(&png(3, 1, 1, 0, &[], &[vec![0b101_00000]])), gray3(&[255, 0, 255]));
}

#[test]
fn palettes_are_looked_up_and_their_transparency_ignored() {
    let plte = chunk(b"PLTE", &[10, 20, 30, 40, 50, 60, 70, 80, 90]);
    let trns = chunk(b"tRNS", &[0, 128]);
    let want = vec![70, 80, 90, 10, 20, 30, 40, 50, 60];
    assert_eq!(decoded(&png(3, 1, 8, 3, std::slice::from_ref(&plte), &[vec![2, 0, 1]])), want);
    assert_eq!(decoded(&png(3, 1, 8, 3, &[plte.clone(), trns], &[vec![2, 0, 1]])), want);
    // 4-bit indices.
    assert_eq!(decoded(&png(2, 1, 4, 3, &[plte], &[vec![0x21]])), vec![70, 80, 90, 40, 50, 60]);
}

#[test]
fn sixteen_bit_pngs_are_read_as_pillow_reads_them() {
    let be = |v: &[u16]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
    // Gray opens as I;16 and is clipped to 255, not scaled.
    let gray = [0u16, 100, 255, 256, 40000];
    assert_eq!(decoded(&png(5, 1, 16, 0, &[], &[be(&gray)])), gray3(&[0, 100, 255, 255, 255]));
    // The same with a tRNS colour: still I;16.
    let trns = chunk(b"tRNS", &100u16.to_be_bytes());
    assert_eq!(decoded(&png(5, 1, 16, 0, &[trns], &[be(&gray)])), gray3(&[0, 100, 255, 255, 255]));
    // Colour, and gray with alpha, take the high byte.
    let rgb = [0x1234u16, 0xFF00, 0x00FF];
    assert_eq!(decoded(&png(1, 1, 16, 2, &[], &[be(&rgb)])), vec![0x12, 0xFF, 0x00]);
    assert_eq!(decoded(&png(1, 1, 16, 6, &[], &[be(&[0xABCD, 1, 0x8000, 0])])), vec![0xAB, 0, 0x80]);
    assert_eq!(decoded(&png(2, 1, 16, 4, &[], &[be(&[0x7F01, 0, 0x0102, 0xFFFF])])), gray3(&[0x7F, 0x01]));
}

#[test]
fn gif_first_frame_with_the_screen_filled_as_pillow_fills_it() {
    let global = [200u8, 0, 0, 0, 200, 0, 0, 0, 200, 9, 9, 9];
    let local = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
    let mut bytes = Vec::new();
    {
        let mut encoder = gif::Encoder::new(&mut bytes, 4, 3, &global).expect("encoder");
        let mut frame = gif::Frame { left: 1, top: 1, width: 2, height: 2, ..gif::Frame::default() };
        frame.buffer = Cow::Owned(vec![0, 1, 2, 3]);
        frame.palette = Some(local.to_vec());
        encoder.write_frame(&frame).expect("frame");
        let mut second = gif::Frame { width: 4, height: 3, ..gif::Frame::default() };
        second.buffer = Cow::Owned(vec![3; 12]);
        encoder.write_frame(&second).expect("frame");
    }
    // Outside the frame: index 0 of the frame's (local) palette. Inside: the local colours.
    let out = decoded(&bytes);
    let at = |x: usize, y: usize| out[(y * 4 + x) * 3..][..3].to_vec();
    assert_eq!(at(0, 0), vec![1, 2, 3]);
    assert_eq!(at(1, 1), vec![1, 2, 3]);
    assert_eq!(at(2, 1), vec![4, 5, 6]);
    assert_eq!(at(1, 2), vec![7, 8, 9]);
    assert_eq!(at(2, 2), vec![10, 11, 12]);
    assert_eq!(at(3, 2), vec![1, 2, 3]);
}

#[test]
fn gif_transparency_fills_the_screen_with_the_transparent_index() {
    let palette = [0u8, 0, 0, 50, 60, 70, 100, 110, 120, 1, 1, 1];
    let mut bytes = Vec::new();
    {
        let mut encoder = gif::Encoder::new(&mut bytes, 3, 1, &palette).expect("encoder");
        let mut frame = gif::Frame { width: 1, height: 1, transparent: Some(2), ..gif::Frame::default() };
        frame.buffer = Cow::Owned(vec![1]);
        encoder.write_frame(&frame).expect("frame");
    }
    assert_eq!(decoded(&bytes), vec![50, 60, 70, 100, 110, 120, 100, 110, 120]);
}

#[test]
fn lossless_webp_keeps_its_colours_and_drops_alpha() {
    let rgba = pattern(5 * 3 * 4, 7);
    let mut bytes = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut bytes)
        .encode(&rgba, 5, 3, image::ExtendedColorType::Rgba8)
        .expect("encode");
    let want: Vec<u8> = rgba.chunks(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
    assert_eq!(decoded(&bytes), want);
}

/// A JPEG of `rgb` (`w` x `h`) at quality 100, written by libjpeg.
pub fn jpeg(rgb: &[u8], w: usize, h: usize, gray: bool) -> Vec<u8> {
    let space = if gray { mozjpeg::ColorSpace::JCS_GRAYSCALE } else { mozjpeg::ColorSpace::JCS_RGB };
    let mut c = mozjpeg::Compress::new(space);
    c.set_size(w, h);
    c.set_quality(100.0);
    let mut c = c.start_compress(Vec::new()).expect("start");
    c.write_scanlines(rgb).expect("write");
    c.finish().expect("finish")
}

#[test]
fn jpeg_decodes_flat_colours_flat() {
    let rgb: Vec<u8> = (0..16 * 16).flat_map(|_| [200u8, 100, 50]).collect();
    let out = decoded(&jpeg(&rgb, 16, 16, false));
    assert!(out.chunks(3).all(|p| p == &out[..3]));
    assert!(out[..3].iter().zip([200u8, 100, 50]).all(|(&a, b)| a.abs_diff(b) <= 2), "{:?}", &out[..3]);
    let gray = jpeg(&[77; 64], 8, 8, true);
    assert_eq!(decoded(&gray), vec![77; 8 * 8 * 3]);
}
