//! A GIF's first frame as Pillow's `GifImagePlugin` opens it: indices on a canvas the size of
//! the logical screen (grown to hold the frame if it sticks out), filled outside the frame with
//! the transparent index or else 0; mode P with the frame's palette (local, else global), or L
//! when there is none or it is the identity gray ramp. `convert("RGB")` then looks the indices
//! up (entries past the palette's end are black).

use std::num::NonZeroU64;

use crate::error::ImageError;
use crate::limits::ImageLimits;
use crate::pixels::{Opened, Palette, Pixels, require_rgb};

/// The first frame of a GIF, in mode P or L.
pub(crate) fn decode(bytes: &[u8], limits: &ImageLimits, convert_rgb: bool) -> Result<Opened, ImageError> {
    let err = |e: ::gif::DecodingError| ImageError::decode("GIF", e);
    let mut options = ::gif::DecodeOptions::new();
    options.set_color_output(::gif::ColorOutput::Indexed);
    if let Some(bytes) = NonZeroU64::new(limits.max_alloc()) {
        options.set_memory_limit(::gif::MemoryLimit::Bytes(bytes));
    }
    // The gif crate refuses a frame with no palette at all, which Pillow opens as L: a gray
    // ramp as global palette gives the same pixels (and is seen as L below).
    let with_ramp;
    let bytes = match bytes.get(10) {
        Some(flags) if flags & 0x80 == 0 => {
            with_ramp = with_gray_ramp(bytes);
            &with_ramp[..]
        }
        _ => bytes,
    };
    let mut decoder = options.read_info(bytes).map_err(err)?;
    let (screen_w, screen_h) = (usize::from(decoder.width()), usize::from(decoder.height()));
    limits.check_pixels("GIF", screen_w as u64, screen_h as u64)?;
    let global = decoder.global_palette().map(<[u8]>::to_vec);
    let Some(frame) = decoder.next_frame_info().map_err(err)? else {
        return Err(ImageError::decode("GIF", "it has no image"));
    };
    let (left, top) = (usize::from(frame.left), usize::from(frame.top));
    let (frame_w, frame_h) = (usize::from(frame.width), usize::from(frame.height));
    let transparent = frame.transparent;
    let palette = frame.palette.clone().or(global);
    // Pillow grows the image to hold a frame that sticks out of the screen.
    let (width, height) = (screen_w.max(left + frame_w), screen_h.max(top + frame_h));
    limits.check_pixels("GIF", width as u64, height as u64)?;
    let mode = if palette.as_deref().is_some_and(|p| !is_gray_ramp(p)) { "P" } else { "L" };
    require_rgb(mode, convert_rgb)?;

    let mut indices = vec![0u8; frame_w * frame_h];
    decoder.read_into_buffer(&mut indices).map_err(err)?;
    let mut canvas = vec![transparent.unwrap_or(0); width * height];
    if frame_w > 0 {
        for (row, line) in indices.chunks_exact(frame_w).enumerate() {
            let at = (top + row) * width + left;
            canvas[at..at + frame_w].copy_from_slice(line);
        }
    }
    let (width, height) = (width as u32, height as u32);
    let palette = match (mode, palette) {
        ("P", Some(p)) => p,
        // L: the index is the gray level.
        _ => return Ok(Opened { width, height, pixels: Pixels::L(canvas) }),
    };
    let mut table: Box<Palette> = Box::new([[0; 3]; 256]);
    for (entry, rgb) in table.iter_mut().zip(palette.chunks_exact(3)) {
        entry.copy_from_slice(rgb);
    }
    let mut rgb = Vec::with_capacity(canvas.len() * 3);
    for &index in &canvas {
        rgb.extend_from_slice(&table[usize::from(index)]);
    }
    Ok(Opened { width, height, pixels: Pixels::P { rgb, palette: table } })
}

/// Pillow's `_is_palette_needed` is false: entry i is (i, i, i) throughout, so the plugin opens
/// the frame as L instead of P.
fn is_gray_ramp(palette: &[u8]) -> bool {
    palette.chunks(3).enumerate().all(|(i, rgb)| rgb.len() == 3 && rgb.iter().all(|&v| usize::from(v) == i))
}

/// `bytes` (a GIF without a global palette) with a 256-entry gray ramp as its global palette.
fn with_gray_ramp(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 768);
    out.extend_from_slice(&bytes[..10]);
    out.push(bytes[10] | 0x87);
    out.extend_from_slice(&bytes[11..13.min(bytes.len())]);
    out.extend((0..=255u8).flat_map(|v| [v, v, v]));
    out.extend_from_slice(bytes.get(13..).unwrap_or_default());
    out
}
