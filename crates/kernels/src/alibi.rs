//! ALiBi attention (JinaBERT), and attention without a positional bias, in tiles: each (row, head, block of queries) runs over the keys a
//! tile at a time, its scores made by one matrix product, ALiBi's `-slope x |i - j|` added in the
//! same pass, and the softmax kept online (running maximum and sum, FlashAttention's rule), so
//! memory holds a tile of scores per thread. The result is the softmax attention of the whole
//! matrix up to float32 rounding, for any tile size. Under ALiBi the tiles run from the query
//! block outwards, and a tile whose every score is provably too far below its queries' maxima to
//! count is left out (`reach`): a head with a steep slope reads only the keys near each query.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::lanes::{alibi_scores, exp_minus};

mod reach;
use reach::{KeyTiles, outwards};

/// The inputs of [`attention`], as `com.microsoft.MultiHeadAttention` takes them.
#[derive(Debug, Clone, Copy)]
pub struct AttentionInputs<'a> {
    /// `[batch, sequence, hidden]`, the heads side by side in `hidden`; so are `key` and `value`.
    pub query: &'a [f32],
    pub key: &'a [f32],
    pub value: &'a [f32],
    /// `[batch, sequence]`: nonzero where a key is attended.
    pub attention_mask: &'a [i64],
    /// `[3 x hidden]` added to the query, key and value, where given.
    pub qkv_bias: Option<&'a [f32]>,
}

/// The inputs of [`alibi_attention`]: those of [`attention`] and ALiBi's slopes.
#[derive(Debug, Clone, Copy)]
pub struct AlibiInputs<'a> {
    pub attention: AttentionInputs<'a>,
    /// `-slope` of each head: `[heads]`.
    pub negative_slopes: &'a [f32],
}

/// Inputs whose sizes do not agree; says which.
#[derive(Debug, thiserror::Error)]
#[error("attention: {0}")]
pub struct AttentionShapeError(String);

/// Queries and keys per tile.
#[derive(Clone, Copy)]
struct Tiles {
    queries: usize,
    keys: usize,
}

/// 256 queries x 512 keys: 512 KiB of scores per thread, in L2. At 8,192 tokens on a Xeon with
/// AVX-512, 128 to 512 x 256 to 1,024 all ran within 10% of it (90 to 101 GFLOP/s a thread).
const TILES: Tiles = Tiles { queries: 256, keys: 512 };

/// A window's tiles: 128 queries see 128 + 2 x window keys, one tile for ModernBERT's 64.
const WINDOW_TILES: Tiles = Tiles { queries: 128, keys: 256 };

/// Softmax attention of each query over the keys its row's mask keeps, scores scaled by
/// `1 / sqrt(head width)` plus `-slope(head) x |i - j|`, on `threads` threads; writes
/// `output` (`[batch, sequence, hidden]`). A query whose row keeps no key gets zeros. Tiles of
/// keys whose weights are all below e^-(ln(keys) + 24) of the query's largest are left out, a
/// bound checked from the keys, not assumed from the slope. Fails, writing nothing, when the
/// sizes disagree.
pub fn alibi_attention(
    batch: usize,
    sequence: usize,
    inputs: &AlibiInputs,
    output: &mut [f32],
    threads: usize,
) -> Result<(), AttentionShapeError> {
    attention_in_tiles(batch, sequence, inputs, output, threads, TILES, None)
}

/// Softmax attention of `heads` heads without a positional bias (BERT's, or rotary after the
/// rotation): [`alibi_attention`] with every slope 0, in the same tiles. Fails, writing nothing,
/// when the sizes disagree.
pub fn attention(
    batch: usize,
    sequence: usize,
    heads: usize,
    inputs: &AttentionInputs,
    output: &mut [f32],
    threads: usize,
) -> Result<(), AttentionShapeError> {
    let flat = flat_slopes(heads, inputs)?;
    alibi_attention(batch, sequence, &AlibiInputs { attention: *inputs, negative_slopes: &flat }, output, threads)
}

/// Softmax attention of `heads` heads without a positional bias in which query `i` attends only
/// to the keys `j` with `|i - j| <= window` (ModernBERT's local layers: half its
/// `local_attention`): only the tiles of keys in that band are computed, in blocks of 128 queries.
/// Fails, writing nothing, when the sizes disagree.
pub fn window_attention(
    batch: usize,
    sequence: usize,
    [heads, window]: [usize; 2],
    inputs: &AttentionInputs,
    output: &mut [f32],
    threads: usize,
) -> Result<(), AttentionShapeError> {
    let flat = flat_slopes(heads, inputs)?;
    let with = AlibiInputs { attention: *inputs, negative_slopes: &flat };
    attention_in_tiles(batch, sequence, &with, output, threads, WINDOW_TILES, Some(window))
}

/// A slope of 0 for each of `heads` heads.
fn flat_slopes(heads: usize, inputs: &AttentionInputs) -> Result<Vec<f32>, AttentionShapeError> {
    // Each head has at least one value per token: more heads than values is a wrong count.
    if heads == 0 || heads > inputs.query.len() {
        return Err(AttentionShapeError(format!("{heads} heads for {} query values", inputs.query.len())));
    }
    Ok(vec![0.0; heads])
}

/// The sizes [`alibi_attention`] reads: `(hidden, heads)`.
fn checked_shape(
    batch: usize,
    sequence: usize,
    x: &AlibiInputs,
    output: &[f32],
) -> Result<(usize, usize), AttentionShapeError> {
    let err = |m: String| Err(AttentionShapeError(m));
    let tokens = batch.checked_mul(sequence).filter(|&t| t > 0);
    let Some(tokens) = tokens else { return err(format!("batch {batch} x sequence {sequence} holds no token")) };
    let heads = x.negative_slopes.len();
    let x = &x.attention;
    let hidden = x.query.len() / tokens;
    if heads == 0 || hidden == 0 || !x.query.len().is_multiple_of(tokens) || !hidden.is_multiple_of(heads) {
        return err(format!("{} query values are not {tokens} tokens x a width of {heads} heads", x.query.len()));
    }
    for (name, len) in [("key", x.key.len()), ("value", x.value.len()), ("output", output.len())] {
        if len != x.query.len() {
            return err(format!("{name} has {len} values, the query {}", x.query.len()));
        }
    }
    if x.attention_mask.len() != tokens {
        return err(format!("the mask has {} values for {tokens} tokens", x.attention_mask.len()));
    }
    if let Some(b) = x.qkv_bias.filter(|b| b.len() != 3 * hidden) {
        return err(format!("qkv_bias has {} values, not 3 x {hidden}", b.len()));
    }
    Ok((hidden, heads))
}

/// `values + bias` for each token (`[tokens, hidden] + [hidden]`).
fn biased(values: &[f32], bias: &[f32]) -> Vec<f32> {
    values.chunks_exact(bias.len()).flat_map(|t| t.iter().zip(bias).map(|(v, b)| v + b)).collect()
}

/// The output, written by several threads at disjoint (token, head) places.
#[derive(Clone, Copy)]
struct Output(*mut f32);
// SAFETY: each task writes only its own queries' columns of its own head (see `run_task`).
unsafe impl Send for Output {}
// SAFETY: as for Send: no two tasks write one place, and none reads the output.
unsafe impl Sync for Output {}

/// One task's view: the matrices, laid out `[batch, sequence, hidden]`.
struct Problem<'a> {
    query: &'a [f32],
    key: &'a [f32],
    value: &'a [f32],
    mask: &'a [i64],
    negative_slopes: &'a [f32],
    sequence: usize,
    hidden: usize,
    head: usize,
    scale: f32,
    tiles: Tiles,
    /// Keys farther than this from the query are left out (a sliding window).
    window: Option<usize>,
}

fn attention_in_tiles(
    batch: usize,
    sequence: usize,
    inputs: &AlibiInputs,
    output: &mut [f32],
    threads: usize,
    tiles: Tiles,
    window: Option<usize>,
) -> Result<(), AttentionShapeError> {
    let (hidden, heads) = checked_shape(batch, sequence, inputs, output)?;
    let negative_slopes = inputs.negative_slopes;
    let inputs = &inputs.attention;
    let with_bias = inputs.qkv_bias.map(|b| {
        (
            biased(inputs.query, &b[..hidden]),
            biased(inputs.key, &b[hidden..2 * hidden]),
            biased(inputs.value, &b[2 * hidden..]),
        )
    });
    let (query, key, value) = match &with_bias {
        Some((q, k, v)) => (&q[..], &k[..], &v[..]),
        None => (inputs.query, inputs.key, inputs.value),
    };
    let head = hidden / heads;
    let p = Problem {
        query,
        key,
        value,
        mask: inputs.attention_mask,
        negative_slopes,
        sequence,
        hidden,
        head,
        scale: 1.0 / (head as f32).sqrt(),
        tiles,
        window,
    };
    let far = KeyTiles::new(&p, batch);
    let blocks = sequence.div_ceil(tiles.queries);
    let tasks = batch * heads * blocks;
    let next = AtomicUsize::new(0);
    let out = Output(output.as_mut_ptr());
    let work = || {
        let mut scratch = Scratch::new(&p);
        loop {
            let t = next.fetch_add(1, Ordering::Relaxed);
            if t >= tasks {
                break;
            }
            let (row, head, block) = (t / (heads * blocks), t / blocks % heads, t % blocks);
            run_task(&p, &far, &mut scratch, out, [row, head, block]);
        }
    };
    match threads.clamp(1, tasks) {
        1 => work(),
        n => std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(work);
            }
        }),
    }
    Ok(())
}

/// One thread's tile of scores and running softmax state.
struct Scratch {
    scores: Vec<f32>,
    sums: Vec<f32>,
    maxes: Vec<f32>,
    norms: Vec<f32>,
    acc: Vec<f32>,
}

impl Scratch {
    fn new(p: &Problem) -> Scratch {
        let q = p.tiles.queries;
        Scratch {
            scores: vec![0.0; q * p.tiles.keys],
            sums: vec![0.0; q],
            maxes: vec![0.0; q],
            norms: vec![0.0; q],
            acc: vec![0.0; q * p.head],
        }
    }
}

/// `dst (m x n) = lhs (m x k) rhs (k x n)`, or `+=` when `accumulate`; strides in elements,
/// `(row, column)`.
///
/// # Safety
/// Every element the strides reach must lie in its buffer.
#[allow(clippy::too_many_arguments)]
unsafe fn product(
    [m, n, k]: [usize; 3],
    dst: *mut f32,
    dst_row: usize,
    accumulate: bool,
    lhs: *const f32,
    [lhs_row, lhs_col]: [usize; 2],
    rhs: *const f32,
    [rhs_row, rhs_col]: [usize; 2],
) {
    let s = |x: usize| x as isize;
    // SAFETY: the caller's bounds.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            s(dst_row),
            accumulate,
            lhs,
            s(lhs_col),
            s(lhs_row),
            rhs,
            s(rhs_col),
            s(rhs_row),
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// The first key of each tile of keys the queries `block` read, in the order they run: a
/// window's band; under ALiBi from the block outwards; else in order.
fn first_keys(
    p: &Problem,
    block: std::ops::Range<usize>,
    end: usize,
    reaching: bool,
) -> Box<dyn Iterator<Item = usize>> {
    let (tile, tiles) = (p.tiles.keys, end.div_ceil(p.tiles.keys));
    match (p.window, reaching) {
        (Some(w), _) => Box::new((block.start.saturating_sub(w)..block.end.saturating_add(w).min(end)).step_by(tile)),
        (None, true) => Box::new(outwards((block.start + block.len() / 2) / tile, tiles).map(move |t| t * tile)),
        (None, false) => Box::new((0..tiles).map(move |t| t * tile)),
    }
}

/// The queries of block `block` of row `row`, head `head`: attention over every kept key, leaving
/// out under ALiBi the tiles that `far` shows cannot count (see `reach`).
fn run_task(p: &Problem, far: &KeyTiles, s: &mut Scratch, out: Output, [row, head, block]: [usize; 3]) {
    let (hidden, d) = (p.hidden, p.head);
    let first_query = block * p.tiles.queries;
    let queries = p.tiles.queries.min(p.sequence - first_query);
    let mask = &p.mask[row * p.sequence..(row + 1) * p.sequence];
    // Keys after the last kept one are never read; kept ones among masked ones are.
    let end = mask.iter().rposition(|&m| m != 0).map_or(0, |last| last + 1);
    let holes = mask[..end].contains(&0);
    let base = row * p.sequence * hidden + head * d;
    let slope = p.negative_slopes[head];
    s.acc[..queries * d].fill(0.0);
    s.sums[..queries].fill(0.0);
    s.maxes[..queries].fill(f32::NEG_INFINITY);
    let tile = p.tiles.keys;
    let reaching = slope < 0.0;
    if reaching {
        for (a, norm) in s.norms[..queries].iter_mut().enumerate() {
            let q = &p.query[base + (first_query + a) * hidden..][..d];
            *norm = q.iter().map(|x| x * x).sum::<f32>().sqrt() * (1.0 + 1e-4);
        }
    }
    let margin = (end as f32).ln() + 24.0;
    for first_key in first_keys(p, first_query..first_query + queries, end, reaching) {
        let (norms, maxes) = (&s.norms[..queries], &s.maxes[..queries]);
        if reaching && far.negligible(p, [row, head, first_key / tile], first_query, norms, maxes, margin) {
            continue;
        }
        let keys = p.tiles.keys.min(end - first_key);
        // SAFETY: rows first_query.. and first_key.. lie in the row's `sequence` tokens, columns
        // head x d .. + d in `hidden`; the scores tile holds queries x keys.
        unsafe {
            product(
                [queries, keys, d],
                s.scores.as_mut_ptr(),
                keys,
                false,
                p.query.as_ptr().add(base + first_query * hidden),
                [hidden, 1],
                p.key.as_ptr().add(base + first_key * hidden),
                [1, hidden],
            );
        }
        for a in 0..queries {
            let scores = &mut s.scores[a * keys..(a + 1) * keys];
            if holes {
                for (x, m) in scores.iter_mut().zip(&mask[first_key..first_key + keys]) {
                    if *m == 0 {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
            if let Some(w) = p.window {
                // Only keys first_query + a -+ w are in the band.
                let i = first_query + a;
                let before = i.saturating_sub(w).saturating_sub(first_key).min(keys);
                let after = i.saturating_add(w).saturating_add(1).saturating_sub(first_key).min(keys);
                scores[..before].fill(f32::NEG_INFINITY);
                scores[after..].fill(f32::NEG_INFINITY);
            }
            let i = (first_query + a) as f32;
            let tile_max = alibi_scores(scores, p.scale, slope, i, first_key as f32);
            let max = tile_max.max(s.maxes[a]);
            if max == f32::NEG_INFINITY {
                scores.fill(0.0);
                continue;
            }
            let correction = (s.maxes[a] - max).exp();
            s.sums[a] = s.sums[a] * correction + exp_minus(scores, max);
            s.maxes[a] = max;
            if correction != 1.0 {
                s.acc[a * d..(a + 1) * d].iter_mut().for_each(|x| *x *= correction);
            }
        }
        // SAFETY: as above; the accumulator holds queries x d.
        unsafe {
            product(
                [queries, d, keys],
                s.acc.as_mut_ptr(),
                d,
                true,
                s.scores.as_ptr(),
                [keys, 1],
                p.value.as_ptr().add(base + first_key * hidden),
                [hidden, 1],
            );
        }
    }
    for a in 0..queries {
        let inverse = if s.sums[a] > 0.0 { 1.0 / s.sums[a] } else { 0.0 };
        let at = base + (first_query + a) * hidden;
        for (c, x) in s.acc[a * d..(a + 1) * d].iter().enumerate() {
            // SAFETY: token first_query + a of this row, this head's columns: no other task
            // writes them.
            unsafe { *out.0.add(at + c) = x * inverse };
        }
    }
}

#[cfg(test)]
mod tests;
