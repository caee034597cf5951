//! Pooling token vectors into one sentence vector, and L2 normalisation: sentence-transformers'
//! pooling modes, with its names.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How token vectors become one sentence vector (sentence-transformers' `Pooling` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
