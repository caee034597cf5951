//! Pillow's NEAREST resize: not a convolution but `ImagingScaleAffine` (Geometry.c), which
//! steps a double-precision source position by `in / out` per pixel from half a step in and
//! takes the pixel it truncates to; a position past the edge leaves the output pixel zeroed
//! (`outside` here, which for a palette image is the colour of index 0).

/// `data` (`w` x `h` pixels of `N` samples each) scaled to `nw` x `nh`.
pub(crate) fn resize<T: Copy, const N: usize>(
    data: &[T],
    w: usize,
    h: usize,
    nw: usize,
    nh: usize,
    outside: [T; N],
) -> Vec<T> {
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
    let mut out = outside.repeat(nw * nh);
    let mut yo = 0.0 + a4 * 0.5;
    for line_out in out.chunks_exact_mut(nw * N) {
        if let Some(yi) = coord(yo).filter(|&yi| yi < h) {
            let line = &data[yi * w * N..(yi + 1) * w * N];
            for x in xmin..xmax {
                let src = xintab[x] * N;
                line_out[x * N..x * N + N].copy_from_slice(&line[src..src + N]);
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
