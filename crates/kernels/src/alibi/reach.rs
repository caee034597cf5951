//! Which key tiles a block of queries may leave out under ALiBi. A key whose score, bias included,
//! lies more than `margin` below its query's running maximum adds less than e^-margin to the
//! softmax's sum, whose largest term is 1; with `margin = ln(keys) + 24` every left-out key of a
//! query together moves its result by less than 4e-11 of it, far under float32's rounding. So the
//! result is the whole matrix's softmax, while a head with a steep slope reads only the keys near
//! each query.
//!
//! The bound on a tile's scores is rigorous: for keys within `radius` of their `centroid`,
//! `q.k <= q.centroid + |q| radius` (Cauchy-Schwarz), and ALiBi's bias is largest at the key
//! nearest the query. A tile is left out only when that bound is under every query's running
//! maximum by the margin; large or far-reaching keys, or a NaN, keep it in.

use super::Problem;

/// The centroid and radius of every tile of keys, per (row, head), for heads with a negative slope.
pub(super) struct KeyTiles {
    tiles: usize,
    centroids: Vec<f32>,
    radii: Vec<f32>,
}

impl KeyTiles {
    /// Empty where no slope is negative (no tile is ever weighed): attention without ALiBi
    /// allocates nothing here.
    pub(super) fn new(p: &Problem, batch: usize) -> KeyTiles {
        let (d, keys) = (p.head, p.tiles.keys);
        let heads = p.negative_slopes.len();
        let tiles = p.sequence.div_ceil(keys);
        if !p.negative_slopes.iter().any(|s| *s < 0.0) {
            return KeyTiles { tiles, centroids: Vec::new(), radii: Vec::new() };
        }
        let mut centroids = vec![0.0f32; batch * heads * tiles * d];
        let mut radii = vec![f32::INFINITY; batch * heads * tiles];
        for row in 0..batch {
            for head in (0..heads).filter(|&h| p.negative_slopes[h] < 0.0) {
                for tile in 0..tiles {
                    let at = (row * heads + head) * tiles + tile;
                    let first = tile * keys;
                    let members = first..(first + keys).min(p.sequence);
                    let key = |j: usize| &p.key[(row * p.sequence + j) * p.hidden + head * d..][..d];
                    let centroid = &mut centroids[at * d..(at + 1) * d];
                    for j in members.clone() {
                        centroid.iter_mut().zip(key(j)).for_each(|(c, k)| *c += k);
                    }
                    let count = members.len() as f32;
                    centroid.iter_mut().for_each(|c| *c /= count);
                    let farthest = members
                        .map(|j| key(j).iter().zip(&*centroid).map(|(k, c)| (k - c) * (k - c)).sum::<f32>())
                        .fold(0.0f32, |a, b| if b > a || b.is_nan() { b } else { a });
                    // Slack for the rounding of the sums above.
                    radii[at] = farthest.sqrt() * (1.0 + 1e-4) + 1e-6;
                }
            }
        }
        KeyTiles { tiles, centroids, radii }
    }

    /// Whether each of `queries` (their norms given) leaves key tile `tile` of (`row`, `head`) at
    /// least `margin` below its running maximum in `maxes`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn negligible(
        &self,
        p: &Problem,
        [row, head, tile]: [usize; 3],
        first_query: usize,
        norms: &[f32],
        maxes: &[f32],
        margin: f32,
    ) -> bool {
        let slope = p.negative_slopes[head];
        // Only a negative slope has tables (and only it makes far keys weigh less).
        if slope.is_nan() || slope >= 0.0 {
            return false;
        }
        let (d, keys) = (p.head, p.tiles.keys);
        let at = (row * p.negative_slopes.len() + head) * self.tiles + tile;
        let (centroid, radius) = (&self.centroids[at * d..(at + 1) * d], self.radii[at]);
        let (first_key, last_key) = (tile * keys, ((tile + 1) * keys).min(p.sequence) - 1);
        norms.iter().zip(maxes).enumerate().all(|(a, (norm, max))| {
            let i = first_query + a;
            let query = &p.query[(row * p.sequence + i) * p.hidden + head * d..][..d];
            let toward: f32 = query.iter().zip(centroid).map(|(q, c)| q * c).sum();
            let nearest = if i < first_key { first_key - i } else { i.saturating_sub(last_key) };
            let bound = p.scale * (toward + norm * radius) + slope * nearest as f32;
            // Written so that a NaN keeps the tile.
            bound < max - margin
        })
    }
}

/// Key tiles `0..tiles` from the one at `center` outwards, alternating sides: the near keys first,
/// so that the running maximums are high when the far tiles are weighed.
pub(super) fn outwards(center: usize, tiles: usize) -> impl Iterator<Item = usize> {
    let center = center.min(tiles.saturating_sub(1));
    (0..2 * tiles)
        .filter_map(move |t| if t % 2 == 0 { center.checked_sub(t / 2) } else { Some(center + t.div_ceil(2)) })
        .filter(move |&k| k < tiles)
        .take(tiles)
}
