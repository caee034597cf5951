//! Test helpers: PNG files written byte by byte (stored deflate, real CRCs) so that tests can
//! declare any header, and the config that hands back decoded pixels untouched.

#![allow(dead_code)]

/// A config whose output is the decoded RGB itself, as float32 values 0 to 255.
pub const DECODED: &str = r#"{"image_processor_type": "CLIPImageProcessor", "do_resize": false,
    "do_center_crop": false, "do_rescale": false, "do_normalize": false}"#;

/// CRC-32 (ISO-HDLC), as PNG chunks carry it.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// A zlib stream holding `data` in stored (uncompressed) deflate blocks.
pub fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = if data.is_empty() { vec![&[][..]] } else { data.chunks(65535).collect() };
    for (i, block) in blocks.iter().enumerate() {
        out.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &v in data {
        a = (a + u32::from(v)) % 65521;
        b = (b + a) % 65521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

/// One PNG chunk with its length and CRC.
pub fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc_input = kind.to_vec();
    crc_input.extend_from_slice(data);
    out.extend_from_slice(&crc32(&crc_input).to_be_bytes());
    out
}

/// A PNG: signature, IHDR for `width` x `height` at `depth` bits and `color` type, the extra
/// chunks (PLTE, tRNS), then `rows` (raw scanlines, filter byte 0 added here) in one IDAT.
pub fn png(width: u32, height: u32, depth: u8, color: u8, extra: &[Vec<u8>], rows: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[depth, color, 0, 0, 0]);
    out.extend(chunk(b"IHDR", &ihdr));
    for c in extra {
        out.extend_from_slice(c);
    }
    let raw: Vec<u8> = rows.iter().flat_map(|r| std::iter::once(0u8).chain(r.iter().copied())).collect();
    out.extend(chunk(b"IDAT", &zlib_stored(&raw)));
    out.extend(chunk(b"IEND", &[]));
    out
}

/// A small deterministic pattern of bytes.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state >> 8) as u8
        })
        .collect()
}

/// The three planes of a `[3, h, w]` tensor back to interleaved bytes (values must be whole).
pub fn interleave(values: &[f32]) -> Vec<u8> {
    let plane = values.len() / 3;
    (0..plane).flat_map(|i| (0..3).map(move |c| values[c * plane + i] as u8)).collect()
}
