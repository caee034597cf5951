//! The long-text policy every surface shares (`--long`, the server's default, Python's `long=`):
//! what to do with a text longer than the model reads, and the call options it means.

use std::str::FromStr;

use crate::call::{CallOptions, Chunking, Truncation};

/// What to do with a text longer than the model reads, for a call that does not say otherwise.
///
/// ```
/// use nornir_options::LongInputs;
/// let late: LongInputs = "late".parse().unwrap();
/// let late = late.with_window(Some(256), Some(32)).unwrap();
/// assert_eq!(late.label(), "late");
/// assert!(late.call_options().chunking.is_some_and(|c| c.late && c.window == Some(256)));
/// assert!("cut".parse::<LongInputs>().unwrap_err().contains("truncate, refuse, chunk, late"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LongInputs {
    /// Keep its first tokens, as sentence-transformers does; the rows count the texts cut.
    #[default]
    Truncate,
    /// Refuse it (`EmbedError::TooLong`), naming the text and its
    /// token count: TEI's default.
    Refuse,
    /// The document's vector from overlapping chunks (late chunking when `Chunking::late`).
    Chunk(Chunking),
}

impl LongInputs {
    /// The names [`FromStr`] takes, in the order `--help` lists them.
    pub const NAMES: [&'static str; 4] = ["truncate", "refuse", "chunk", "late"];

    /// `truncate`, `refuse`, `chunk` or `late`: the name [`FromStr`] reads back.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Truncate => "truncate",
            Self::Refuse => "refuse",
            Self::Chunk(c) if c.late => "late",
            Self::Chunk(_) => "chunk",
        }
    }

    /// The chunk size (`window`, tokens) and `overlap` of a chunking policy; an error (naming
    /// what to add) when either is given to `truncate` or `refuse`.
    pub fn with_window(self, window: Option<usize>, overlap: Option<usize>) -> Result<Self, String> {
        match self {
            Self::Chunk(mut c) => {
                if let Some(w) = window {
                    c = c.with_window(w);
                }
                if let Some(o) = overlap {
                    c = c.with_overlap(o);
                }
                Ok(Self::Chunk(c))
            }
            _ if window.is_some() || overlap.is_some() => Err(format!(
                "a window and an overlap set the chunks of the \"chunk\" or \"late\" long-text policy, not of {:?}; choose one of those",
                self.label()
            )),
            other => Ok(other),
        }
    }

    /// The call options of this policy (truncation on the right, refusal, or chunking).
    pub fn call_options(&self) -> CallOptions {
        match self {
            Self::Truncate => CallOptions::new().with_truncation(Truncation::Right),
            Self::Refuse => CallOptions::new().with_truncation(Truncation::Refuse),
            Self::Chunk(c) => CallOptions::new().with_chunking(*c),
        }
    }

    /// The one long-text rule of a call under this default policy, on every route and surface:
    /// the call's own `chunking` wins (a call that cannot chunk refuses it, as the library
    /// does), then its own `truncate` (true: cut at `cut`'s end, false: refuse), then this
    /// policy, where chunking means cutting for a call that cannot chunk (`can_chunk`: only an
    /// embedder's dense vectors are made from chunks; sparse and token vectors are not).
    pub fn for_call(
        &self,
        chunking: Option<Chunking>,
        truncate: Option<bool>,
        cut: Truncation,
        can_chunk: bool,
    ) -> CallOptions {
        match (chunking, truncate, self) {
            (Some(c), _, _) => CallOptions::new().with_chunking(c),
            (None, Some(true), _) | (None, None, Self::Truncate) => CallOptions::new().with_truncation(cut),
            (None, Some(false), _) | (None, None, Self::Refuse) => {
                CallOptions::new().with_truncation(Truncation::Refuse)
            }
            (None, None, Self::Chunk(_)) if !can_chunk => CallOptions::new().with_truncation(cut),
            (None, None, Self::Chunk(c)) => CallOptions::new().with_chunking(*c),
        }
    }
}

impl FromStr for LongInputs {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "truncate" => Ok(Self::Truncate),
            "refuse" => Ok(Self::Refuse),
            "chunk" => Ok(Self::Chunk(Chunking::new())),
            "late" => Ok(Self::Chunk(Chunking::new().with_late(true))),
            other => Err(format!("{other:?} is not a long-text policy: use one of {}", Self::NAMES.join(", "))),
        }
    }
}

impl Truncation {
    /// The names [`FromStr`] takes.
    pub const NAMES: [&'static str; 3] = ["right", "left", "refuse"];
}

impl FromStr for Truncation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "right" => Ok(Self::Right),
            "left" => Ok(Self::Left),
            "refuse" => Ok(Self::Refuse),
            _ => Err(format!("{s:?} is not a truncation: use one of {}", Self::NAMES.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_own_choice_wins_and_a_call_that_cannot_chunk_cuts_under_a_chunking_default() {
        let chunk = LongInputs::Chunk(Chunking::new());
        let truncation = |o: CallOptions| (o.truncation, o.chunking.is_some());
        let (right, left) = (Truncation::Right, Truncation::Left);
        assert_eq!(truncation(chunk.for_call(None, None, left, true)), (None, true));
        assert_eq!(truncation(chunk.for_call(None, None, left, false)), (Some(left), false));
        assert_eq!(truncation(chunk.for_call(None, Some(false), left, true)), (Some(Truncation::Refuse), false));
        assert_eq!(truncation(LongInputs::Refuse.for_call(None, Some(true), left, true)), (Some(left), false));
        assert_eq!(truncation(LongInputs::Refuse.for_call(None, None, right, true)), (Some(Truncation::Refuse), false));
        assert_eq!(truncation(LongInputs::Truncate.for_call(None, None, right, false)), (Some(right), false));
        // A call's own chunking stands even where it cannot chunk: the library refuses it by name.
        assert_eq!(truncation(LongInputs::Truncate.for_call(Some(Chunking::new()), None, right, false)), (None, true));
    }

    #[test]
    fn every_name_reads_back_and_a_window_needs_chunking() {
        for name in LongInputs::NAMES {
            assert_eq!(name.parse::<LongInputs>().unwrap().label(), name);
        }
        let e = LongInputs::Truncate.with_window(Some(128), None).unwrap_err();
        assert!(e.contains("\"chunk\" or \"late\""), "{e}");
        assert_eq!(LongInputs::Refuse.with_window(None, None), Ok(LongInputs::Refuse));
        let c = "chunk".parse::<LongInputs>().unwrap().with_window(Some(128), Some(16)).unwrap();
        assert_eq!(c, LongInputs::Chunk(Chunking::new().with_window(128).with_overlap(16)));
        assert_eq!("Left".parse::<Truncation>(), Ok(Truncation::Left));
        assert!("up".parse::<Truncation>().unwrap_err().contains("right, left, refuse"));
    }
}
