//! An image's bytes with a `preprocessor_config.json`: the first two bytes (little-endian) say
//! how many of the next are the config, the rest is the image. A tensor or an error, never a
//! panic, within the fuzz limits (1 MiB, 4 megapixels).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (n, rest) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), rest),
        _ => return,
    };
    let (config, image) = rest.split_at(n.min(rest.len()));
    let _ = nornir_image::fuzzing::preprocess(config, image);
});
