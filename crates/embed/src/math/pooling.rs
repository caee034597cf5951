//! Pooling token vectors into one sentence vector, and L2 normalisation.

use nornir_options::Pooling;

/// Pools one text's token vectors into `out` (`dim` values). `hidden` holds the text's real tokens
/// only, `len` rows of `dim`, in text order; the first `skip` of them (a prompt, when the pooling
/// config says `include_prompt: false`) are left out of the modes that read every token.
/// Weighted mean weighs token i (from 0) by i + 1, counting the skipped tokens, as
/// sentence-transformers does.
pub fn pool_tokens(hidden: &[f32], len: usize, dim: usize, pooling: Pooling, skip: usize, out: &mut [f32]) {
    debug_assert!(hidden.len() >= len * dim && out.len() == dim);
    let from = if pooling.reads_all_tokens() { skip.min(len) } else { 0 };
    if len == from {
        out.fill(0.0);
        return;
    }
    let rows = || hidden[from * dim..len * dim].chunks_exact(dim);
    match pooling {
        Pooling::Cls => out.copy_from_slice(&hidden[..dim]),
        Pooling::Last => out.copy_from_slice(&hidden[(len - 1) * dim..len * dim]),
        Pooling::Max => {
            out.fill(f32::NEG_INFINITY);
            for row in rows() {
                for (o, h) in out.iter_mut().zip(row) {
                    *o = o.max(*h);
                }
            }
        }
        Pooling::Mean | Pooling::MeanSqrtLen => {
            out.fill(0.0);
            for row in rows() {
                for (o, h) in out.iter_mut().zip(row) {
                    *o += h;
                }
            }
            let n = (len - from) as f32;
            let inv = if pooling == Pooling::Mean { 1.0 / n } else { 1.0 / n.sqrt() };
            out.iter_mut().for_each(|o| *o *= inv);
        }
        Pooling::WeightedMean => {
            out.fill(0.0);
            let mut total = 0.0f32;
            for (i, row) in rows().enumerate() {
                let w = (from + i + 1) as f32;
                total += w;
                for (o, h) in out.iter_mut().zip(row) {
                    *o += w * h;
                }
            }
            let inv = 1.0 / total;
            out.iter_mut().for_each(|o| *o *= inv);
        }
        // log(1 + relu(x)) grows with x, so the maximum of it is it of the maximum.
        Pooling::Splade => {
            out.fill(0.0);
            for row in rows() {
                for (o, h) in out.iter_mut().zip(row) {
                    *o = o.max(*h);
                }
            }
            out.iter_mut().for_each(|o| *o = o.ln_1p());
        }
        Pooling::SpladeSum => {
            out.fill(0.0);
            for row in rows() {
                for (o, h) in out.iter_mut().zip(row) {
                    *o += h.max(0.0).ln_1p();
                }
            }
        }
    }
}

/// Scales `v` to unit L2 norm; a zero vector stays zero. The embedder's own normalisation, for
/// callers that cut vectors shorter themselves (Matryoshka) and normalise again.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        let inv = 1.0 / norm;
        v.iter_mut().for_each(|x| *x *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three real tokens of width 2, then a padding row that must never be read.
    const HIDDEN: [f32; 8] = [1.0, 2.0, 3.0, -4.0, 5.0, 6.0, 100.0, 100.0];

    fn pooled(p: Pooling, skip: usize) -> [f32; 2] {
        let mut out = [0.0; 2];
        pool_tokens(&HIDDEN, 3, 2, p, skip, &mut out);
        out
    }

    fn close(a: [f32; 2], b: [f32; 2]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
    }

    #[test]
    fn every_mode() {
        assert_eq!(pooled(Pooling::Mean, 0), [3.0, 4.0 / 3.0], "padding row excluded");
        assert_eq!(pooled(Pooling::Cls, 0), [1.0, 2.0]);
        assert_eq!(pooled(Pooling::Last, 0), [5.0, 6.0]);
        assert_eq!(pooled(Pooling::Max, 0), [5.0, 6.0]);
        let s = 3f32.sqrt();
        assert!(close(pooled(Pooling::MeanSqrtLen, 0), [9.0 / s, 4.0 / s]));
        // Weights 1, 2, 3: (1 + 6 + 15) / 6, (2 - 8 + 18) / 6.
        assert!(close(pooled(Pooling::WeightedMean, 0), [22.0 / 6.0, 2.0]));
        assert!(close(pooled(Pooling::Splade, 0), [5f32.ln_1p(), 6f32.ln_1p()]));
        assert!(close(
            pooled(Pooling::SpladeSum, 0),
            [1f32.ln_1p() + 3f32.ln_1p() + 5f32.ln_1p(), 2f32.ln_1p() + 6f32.ln_1p()]
        ));
        let mut out = [7.0; 2];
        pool_tokens(&HIDDEN, 0, 2, Pooling::Mean, 0, &mut out);
        assert_eq!(out, [0.0, 0.0]);
    }

    #[test]
    fn skipped_prompt_tokens() {
        assert_eq!(pooled(Pooling::Mean, 1), [4.0, 1.0]);
        assert_eq!(pooled(Pooling::Max, 2), [5.0, 6.0]);
        // Positions keep their weights: 2 and 3.
        assert!(close(pooled(Pooling::WeightedMean, 1), [(6.0 + 15.0) / 5.0, (-8.0 + 18.0) / 5.0]));
        assert_eq!(pooled(Pooling::Cls, 2), [1.0, 2.0], "cls reads its token wherever the prompt is");
        assert_eq!(pooled(Pooling::Last, 3), [5.0, 6.0]);
        assert_eq!(pooled(Pooling::Mean, 3), [0.0, 0.0], "a text that is all prompt pools to zero");
    }

    #[test]
    fn normalize_unit_and_zero() {
        let mut v = [3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = [0.0, 0.0];
        normalize(&mut z);
        assert_eq!(z, [0.0, 0.0]);
    }

    #[test]
    fn parse_both_spellings() {
        assert_eq!("MEAN".parse::<Pooling>(), Ok(Pooling::Mean));
        assert_eq!("mean_sqrt_len_tokens".parse::<Pooling>(), Ok(Pooling::MeanSqrtLen));
        assert_eq!("weightedmean_tokens".parse::<Pooling>(), Ok(Pooling::WeightedMean));
        assert_eq!("lasttoken".parse::<Pooling>(), Ok(Pooling::Last));
        for p in Pooling::ALL {
            assert_eq!(p.to_string().parse::<Pooling>(), Ok(p));
        }
        assert!("median".parse::<Pooling>().unwrap_err().contains("weighted_mean"));
    }
}
