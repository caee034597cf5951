//! Pooling token vectors into one sentence vector, and L2 normalisation: sentence-transformers'
//! pooling modes, with its names.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How token vectors become one sentence vector (sentence-transformers' `Pooling` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Pooling {
    /// Mean over the text's tokens (`mean_tokens`).
    Mean,
    /// The first token's vector, `[CLS]` (`cls_token`).
    Cls,
    /// The last real token's vector, whatever side the padding is on (`lasttoken`).
    Last,
    /// The largest value of each dimension over the text's tokens (`max_tokens`).
    Max,
    /// The sum over the text's tokens divided by the square root of their number (`mean_sqrt_len_tokens`).
    MeanSqrtLen,
    /// Mean weighted by position, 1 for the first token to n for the last (`weightedmean_tokens`).
    WeightedMean,
    /// SPLADE: `log(1 + relu(x))` of each vocabulary term's logit, the maximum over the text's
    /// tokens (sentence-transformers' `SpladePooling`, `pooling_strategy: max`).
    Splade,
    /// SPLADE with the sum over the tokens instead of the maximum (`pooling_strategy: sum`).
    SpladeSum,
}

impl Pooling {
    /// Every mode, for help texts and errors.
    pub const ALL: [Pooling; 8] = [
        Self::Mean,
        Self::Cls,
        Self::Last,
        Self::Max,
        Self::MeanSqrtLen,
        Self::WeightedMean,
        Self::Splade,
        Self::SpladeSum,
    ];

    /// Whether the mode reads every token (and so leaves out prompt tokens when the pooling
    /// config says `include_prompt: false`); `cls` and `last` read one token wherever it is.
    pub fn reads_all_tokens(self) -> bool {
        !matches!(self, Self::Cls | Self::Last)
    }
}

impl FromStr for Pooling {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "mean" | "mean_tokens" => Ok(Self::Mean),
            "cls" | "cls_token" => Ok(Self::Cls),
            "last" | "lasttoken" | "last_token" => Ok(Self::Last),
            "max" | "max_tokens" => Ok(Self::Max),
            "mean_sqrt_len" | "mean_sqrt_len_tokens" => Ok(Self::MeanSqrtLen),
            "weightedmean" | "weightedmean_tokens" | "weighted_mean" => Ok(Self::WeightedMean),
            "splade" | "splade_max" => Ok(Self::Splade),
            "splade_sum" => Ok(Self::SpladeSum),
            other => Err(format!(
                "unknown pooling {other:?}: use one of {} (or sentence-transformers' names: mean_tokens, cls_token, lasttoken, ...)",
                Self::ALL.map(|p| p.to_string()).join(", ")
            )),
        }
    }
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Mean => "mean",
            Self::Cls => "cls",
            Self::Last => "last",
            Self::Max => "max",
            Self::MeanSqrtLen => "mean_sqrt_len",
            Self::WeightedMean => "weighted_mean",
            Self::Splade => "splade",
            Self::SpladeSum => "splade_sum",
        })
    }
}

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
