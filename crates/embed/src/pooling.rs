//! Pooling token vectors into one sentence vector, and L2 normalisation.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// How token vectors become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Pooling {
    /// Mean over the positions where the attention mask is 1.
    Mean,
    /// The first token's vector (`[CLS]`).
    Cls,
    /// The last non-padding token's vector.
    Last,
}

impl FromStr for Pooling {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "mean" => Ok(Self::Mean),
            "cls" => Ok(Self::Cls),
            "last" | "lasttoken" | "last-token" => Ok(Self::Last),
            other => Err(format!("unknown pooling {other:?}: use mean, cls or last")),
        }
    }
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Mean => "mean",
            Self::Cls => "cls",
            Self::Last => "last",
        })
    }
}

/// Pools one text's rows of `hidden` (`len` rows of `dim`, row-major, only the text's real tokens)
/// into `out` (`dim` values).
pub fn pool_tokens(hidden: &[f32], len: usize, dim: usize, pooling: Pooling, out: &mut [f32]) {
    debug_assert!(hidden.len() >= len * dim && out.len() == dim);
    if len == 0 {
        out.fill(0.0);
        return;
    }
    match pooling {
        Pooling::Cls => out.copy_from_slice(&hidden[..dim]),
        Pooling::Last => out.copy_from_slice(&hidden[(len - 1) * dim..len * dim]),
        Pooling::Mean => {
            out.copy_from_slice(&hidden[..dim]);
            for row in hidden[dim..len * dim].chunks_exact(dim) {
                for (o, h) in out.iter_mut().zip(row) {
                    *o += h;
                }
            }
            let inv = 1.0 / len as f32;
            out.iter_mut().for_each(|o| *o *= inv);
        }
    }
}

/// Scales `v` to unit L2 norm; a zero vector stays zero.
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

    #[test]
    fn mean_cls_last() {
        let hidden = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 100.0, 100.0];
        let mut out = [0.0; 2];
        pool_tokens(&hidden, 3, 2, Pooling::Mean, &mut out);
        assert_eq!(out, [3.0, 4.0], "padding row excluded");
        pool_tokens(&hidden, 3, 2, Pooling::Cls, &mut out);
        assert_eq!(out, [1.0, 2.0]);
        pool_tokens(&hidden, 3, 2, Pooling::Last, &mut out);
        assert_eq!(out, [5.0, 6.0]);
        pool_tokens(&hidden, 0, 2, Pooling::Mean, &mut out);
        assert_eq!(out, [0.0, 0.0]);
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
    fn parse() {
        assert_eq!("MEAN".parse::<Pooling>(), Ok(Pooling::Mean));
        assert!("max".parse::<Pooling>().is_err());
    }
}
