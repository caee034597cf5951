//! Pillow's NEAREST resize: not a convolution but `ImagingScaleAffine` (Geometry.c), which
//! steps a double-precision source position by `in / out` per pixel from half a step in and
//! takes the pixel it truncates to; a position past the edge leaves the output pixel black.

/// `rgb` (`w` x `h`, 3 bytes a pixel) scaled to `nw` x `nh`.
pub(crate) fn resize(rgb: &[u8], w: usize, h: usize, nw: usize, nh: usize) -> Vec<u8> {
    // The affine matrix: a[0] = width / new width, a[4] = height / new height, as doubles from
    // the box's C floats.
    let a0 = f64::from(w as f32) / nw as f64;
    let a4 = f64::from(h as f32) / nh as f64;
    // Pretabulate the source column of each output column; the copied span is [xmin, xmax).
    let mut xintab = vec![0usize; nw];
    let (mut xmin, mut xmax) = (nw, 0);
    let mut xo = 0.0 + a0 * 0.5;
    for (x, slot) in xintab.iter_mut().enumerate() {
        if let Some(xin) = coord(xo).filter(|&xin| xin < w) {
            xmax = x + 1;
            xmin = xmin.min(x);
            *slot = xin;
        }
        // Accumulated, not multiplied: the rounding of each addition is Pillow's.
        xo += a0;
    }
    let mut out = vec![0u8; nw * nh * 3];
    let mut yo = 0.0 + a4 * 0.5;
    for line_out in out.chunks_exact_mut(nw * 3) {
        if let Some(yi) = coord(yo).filter(|&yi| yi < h) {
            let line = &rgb[yi * w * 3..(yi + 1) * w * 3];
            for x in xmin..xmax {
                let src = xintab[x] * 3;
                line_out[x * 3..x * 3 + 3].copy_from_slice(&line[src..src + 3]);
            }
        }
        yo += a4;
    }
    out
}

/// Geometry.c's `COORD`: negative positions are outside, others truncate.
fn coord(v: f64) -> Option<usize> {
    if v < 0.0 { None } else { Some(v as usize) }
}
