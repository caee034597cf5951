//! The tiled kernel against the whole-matrix attention in float64, written from the definition.

use super::*;

/// A reproducible uniform value in [-1, 1).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % 20_000) as f32 / 10_000.0 - 1.0
    }
    fn values(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

struct Case {
    batch: usize,
    sequence: usize,
    heads: usize,
    head: usize,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mask: Vec<i64>,
    slopes: Vec<f32>,
    bias: Option<Vec<f32>>,
    /// Keys farther than this from the query are left out.
    window: Option<usize>,
}

impl Case {
    fn new(batch: usize, sequence: usize, heads: usize, head: usize, bias: bool) -> Case {
        let mut n = Noise(0x9e37_79b9_7f4a_7c15 ^ (sequence * 31 + heads) as u64);
        let size = batch * sequence * heads * head;
        let slopes = (0..heads).map(|h| -(0.5f32.powi(h as i32 + 1))).collect();
        let bias = bias.then(|| n.values(3 * heads * head, 0.5));
        Case {
            batch,
            sequence,
            heads,
            head,
            q: n.values(size, 2.0),
            k: n.values(size, 2.0),
            v: n.values(size, 1.0),
            mask: vec![1; batch * sequence],
            slopes,
            bias,
            window: None,
        }
    }

    fn inputs(&self) -> AlibiInputs<'_> {
        let attention = AttentionInputs {
            query: &self.q,
            key: &self.k,
            value: &self.v,
            attention_mask: &self.mask,
            qkv_bias: self.bias.as_deref(),
        };
        AlibiInputs { attention, negative_slopes: &self.slopes }
    }

    fn tiled(&self, threads: usize, tiles: Tiles) -> Vec<f32> {
        let mut out = vec![f32::NAN; self.q.len()];
        attention_in_tiles(self.batch, self.sequence, &self.inputs(), &mut out, threads, tiles, self.window).unwrap();
        out
    }

    /// softmax(q k^T / sqrt(d) - slope |i - j|) v over the kept keys, in float64.
    fn whole_matrix(&self) -> Vec<f64> {
        let (s, h, d) = (self.sequence, self.heads, self.head);
        let w = h * d;
        let at = |x: &[f32], part: usize, b: usize, t: usize, hh: usize, c: usize| {
            let bias = self.bias.as_ref().map_or(0.0, |bias| bias[part * w + hh * d + c]);
            (x[(b * s + t) * w + hh * d + c] + bias) as f64
        };
        let mut out = vec![0.0; self.q.len()];
        for b in 0..self.batch {
            for hh in 0..h {
                for i in 0..s {
                    let scores: Vec<f64> = (0..s)
                        .map(|j| match self.mask[b * s + j] {
                            0 => f64::NEG_INFINITY,
                            _ if self.window.is_some_and(|w| i.abs_diff(j) > w) => f64::NEG_INFINITY,
                            _ => {
                                let dot: f64 =
                                    (0..d).map(|c| at(&self.q, 0, b, i, hh, c) * at(&self.k, 1, b, j, hh, c)).sum();
                                dot / (d as f64).sqrt() + self.slopes[hh] as f64 * (i as f64 - j as f64).abs()
                            }
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    for c in 0..d {
                        let y: f64 = (0..s).map(|j| weights[j] * at(&self.v, 2, b, j, hh, c)).sum();
                        out[(b * s + i) * w + hh * d + c] = y / total;
                    }
                }
            }
        }
        out
    }
}

fn worst(a: &[f32], b: &[f64], rows: impl Fn(usize) -> bool, width: usize) -> f64 {
    a.iter()
        .zip(b)
        .enumerate()
        .filter(|(i, _)| rows(i / width))
        .map(|(_, (x, y))| (*x as f64 - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn tiles_of_any_size_give_the_whole_matrix_attention() {
    let small = Tiles { queries: 8, keys: 16 };
    for (sequence, heads, head, bias) in [(1, 1, 4, false), (37, 3, 8, true), (64, 2, 16, false), (129, 4, 8, true)] {
        let c = Case::new(2, sequence, heads, head, bias);
        let want = c.whole_matrix();
        for tiles in [small, TILES] {
            let got = c.tiled(1, tiles);
            let err = worst(&got, &want, |_| true, heads * head);
            assert!(err < 2e-6, "sequence {sequence} heads {heads} tiles {}x{}: {err:e}", tiles.queries, tiles.keys);
        }
    }
}

#[test]
fn masked_keys_are_left_out_wherever_they_are() {
    let mut c = Case::new(3, 45, 2, 8, true);
    // Row 0 padded at the end, row 1 at the start, row 2 with holes.
    for j in 30..45 {
        c.mask[j] = 0;
    }
    for j in 0..9 {
        c.mask[45 + j] = 0;
    }
    for j in (0..45).step_by(4) {
        c.mask[90 + j] = 0;
    }
    let want = c.whole_matrix();
    let got = c.tiled(2, Tiles { queries: 8, keys: 16 });
    assert!(worst(&got, &want, |_| true, 16) < 2e-6);
}

#[test]
fn a_padded_batch_gives_each_row_what_it_gives_alone() {
    let mut c = Case::new(2, 40, 2, 8, true);
    for j in 25..40 {
        c.mask[40 + j] = 0;
    }
    let batched = c.tiled(2, TILES);
    let mut alone = Case::new(1, 25, 2, 8, true);
    alone.bias = c.bias.clone();
    let w = 16;
    for (x, part) in [(&mut alone.q, &c.q), (&mut alone.k, &c.k), (&mut alone.v, &c.v)] {
        *x = part[40 * w..(40 + 25) * w].to_vec();
    }
    let single = alone.tiled(1, TILES);
    assert_eq!(&batched[40 * w..(40 + 25) * w], &single[..]);
}

#[test]
fn the_thread_count_does_not_change_a_bit() {
    let c = Case::new(2, 70, 3, 8, false);
    let tiles = Tiles { queries: 8, keys: 32 };
    assert_eq!(c.tiled(1, tiles), c.tiled(3, tiles));
}

#[test]
fn a_row_without_a_kept_key_gives_zeros() {
    let mut c = Case::new(2, 5, 1, 4, false);
    c.mask[5..].fill(0);
    let out = c.tiled(1, TILES);
    assert!(out[20..].iter().all(|x| *x == 0.0), "{out:?}");
    assert!(out[..20].iter().all(|x| x.is_finite()));
}

#[test]
fn sizes_that_disagree_are_refused_without_writing() {
    let c = Case::new(1, 6, 2, 4, true);
    let mut out = vec![7.0; c.q.len()];
    let mut bad = c.inputs();
    bad.attention.key = &c.k[1..];
    let e = alibi_attention(1, 6, &bad, &mut out, 1).unwrap_err().to_string();
    assert!(e.contains("key has 47 values"), "{e}");
    let mut bad = c.inputs();
    bad.negative_slopes = &c.slopes[..0];
    assert!(alibi_attention(1, 6, &bad, &mut out, 1).is_err());
    let short_bias = [0.0; 5];
    let mut bad = c.inputs();
    bad.attention.qkv_bias = Some(&short_bias);
    assert!(alibi_attention(1, 6, &bad, &mut out, 1).unwrap_err().to_string().contains("qkv_bias"));
    assert!(alibi_attention(0, 6, &c.inputs(), &mut out, 1).is_err());
    assert!(alibi_attention(usize::MAX, 6, &c.inputs(), &mut out, 1).is_err());
    assert!(out.iter().all(|x| *x == 7.0));
}

#[test]
fn attention_without_a_bias_is_the_whole_matrix_softmax_and_refuses_a_wrong_head_count() {
    let mut c = Case::new(2, 70, 3, 8, true);
    c.slopes.fill(0.0);
    c.mask[120..].fill(0);
    let want = c.whole_matrix();
    let x =
        AttentionInputs { query: &c.q, key: &c.k, value: &c.v, attention_mask: &c.mask, qkv_bias: c.bias.as_deref() };
    let mut got = vec![f32::NAN; c.q.len()];
    attention(2, 70, 3, &x, &mut got, 2).unwrap();
    assert!(worst(&got, &want, |_| true, 24) < 2e-6);
    // Slopes that are not 0 give other values: the test sees a bias that is there.
    c.slopes.fill(-0.5);
    assert!(worst(&got, &c.whole_matrix(), |_| true, 24) > 1e-2);
    let mut out = vec![7.0; c.q.len()];
    for heads in [0, 5, usize::MAX] {
        assert!(attention(2, 70, heads, &x, &mut out, 1).is_err(), "{heads} heads");
    }
    assert!(out.iter().all(|v| *v == 7.0));
}

/// How many (query block, key tile) pairs of row 0 the bound leaves out after the near tiles ran,
/// each query's running maximum taken as its score with itself (a lower bound of the real one).
fn tiles_left_out(c: &Case, tiles: Tiles) -> usize {
    let p = Problem {
        query: &c.q,
        key: &c.k,
        value: &c.v,
        mask: &c.mask,
        negative_slopes: &c.slopes,
        sequence: c.sequence,
        hidden: c.heads * c.head,
        head: c.head,
        scale: 1.0 / (c.head as f32).sqrt(),
        tiles,
        window: None,
    };
    let far = reach::KeyTiles::new(&p, c.batch);
    let margin = (c.sequence as f32).ln() + 24.0;
    let mut left_out = 0;
    for head in 0..c.heads {
        for first in (0..c.sequence).step_by(tiles.queries) {
            let queries = first..(first + tiles.queries).min(c.sequence);
            let vector = |x: &[f32], t: usize| x[t * p.hidden + head * c.head..][..c.head].to_vec();
            let norms: Vec<f32> =
                queries.clone().map(|i| vector(&c.q, i).iter().map(|x| x * x).sum::<f32>().sqrt()).collect();
            let maxes: Vec<f32> = queries
                .clone()
                .map(|i| vector(&c.q, i).iter().zip(vector(&c.k, i)).map(|(q, k)| q * k).sum::<f32>() * p.scale)
                .collect();
            left_out += (0..c.sequence.div_ceil(tiles.keys))
                .filter(|&t| far.negligible(&p, [0, head, t], first, &norms, &maxes, margin))
                .count();
        }
    }
    left_out
}

#[test]
fn alibi_leaves_out_far_tiles_of_steep_heads_and_still_gives_the_whole_matrix() {
    let mut c = Case::new(1, 400, 3, 8, false);
    c.slopes = vec![-2.0, -0.5, -0.001];
    let tiles = Tiles { queries: 16, keys: 32 };
    let left_out = tiles_left_out(&c, tiles);
    // Head 0 reaches about 20 keys, head 1 about 80; head 2 reaches them all.
    assert!(left_out > 300, "{left_out} of {} tiles left out", 3 * 25 * 13);
    let got = c.tiled(2, tiles);
    assert!(worst(&got, &c.whole_matrix(), |_| true, 24) < 2e-6);
    // Without slopes no tile may be left out.
    c.slopes.fill(0.0);
    assert_eq!(tiles_left_out(&c, tiles), 0);
}

#[test]
fn a_far_key_whose_score_outweighs_the_bias_keeps_its_tile() {
    let mut c = Case::new(1, 300, 1, 8, false);
    c.slopes = vec![-1.0];
    // Key 290 points along query 3, so far (287 tokens, a bias of -287) yet its score (~750) wins.
    let q3: Vec<f32> = c.q[3 * 8..4 * 8].to_vec();
    c.k[290 * 8..291 * 8].iter_mut().zip(&q3).for_each(|(k, q)| *k = 200.0 * q);
    let want = c.whole_matrix();
    let (v290, got) = (&c.v[290 * 8..291 * 8], c.tiled(1, Tiles { queries: 8, keys: 16 }));
    assert!(got[3 * 8..4 * 8].iter().zip(v290).all(|(a, b)| (a - b).abs() < 1e-4), "query 3 must take key 290's value");
    assert!(worst(&got, &want, |_| true, 8) < 2e-6);
}

#[test]
fn key_tiles_run_from_the_query_block_outwards_each_once() {
    let order = |center, tiles| reach::outwards(center, tiles).collect::<Vec<_>>();
    assert_eq!(order(2, 5), [2, 3, 1, 4, 0]);
    assert_eq!(order(0, 3), [0, 1, 2]);
    assert_eq!(order(9, 3), [2, 1, 0]);
    assert!(order(0, 0).is_empty());
}

#[test]
fn a_window_attends_only_to_the_keys_within_it_in_any_tiles() {
    for (window, tiles) in
        [(0, Tiles { queries: 8, keys: 16 }), (5, Tiles { queries: 8, keys: 16 }), (64, WINDOW_TILES)]
    {
        let mut c = Case::new(2, 300, 3, 8, true);
        c.slopes.fill(0.0);
        c.window = Some(window);
        // Row 1 padded after 250 tokens, with a hole at 100.
        c.mask[300 + 250..].fill(0);
        c.mask[300 + 100] = 0;
        let want = c.whole_matrix();
        let got = c.tiled(2, tiles);
        let kept = |t: usize| t < 300 || (t < 550 && t != 400);
        assert!(worst(&got, &want, kept, 24) < 2e-6, "window {window}");
        // The window is there: the whole matrix's attention differs.
        c.window = None;
        assert!(worst(&got, &c.whole_matrix(), kept, 24) > 1e-3, "window {window}");
    }
    let c = Case::new(1, 20, 2, 4, false);
    let x = c.inputs().attention;
    let mut wide = vec![0.0; c.q.len()];
    // A window wider than the text is the whole matrix.
    window_attention(1, 20, [2, usize::MAX], &x, &mut wide, 1).unwrap();
    let mut whole = vec![0.0; c.q.len()];
    attention(1, 20, 2, &x, &mut whole, 1).unwrap();
    assert_eq!(wide, whole);
    assert!(window_attention(1, 20, [0, 3], &x, &mut wide, 1).is_err());
}
