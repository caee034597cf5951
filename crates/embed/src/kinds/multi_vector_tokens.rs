//! A late-interaction call before the queue: its options ([`MultiVectorOptions`]: queries or
//! documents), each text tokenized as PyLate tokenizes it (the marker after the first token, the
//! length cut, a query expanded with the mask token, a document's skiplist tokens left out), as
//! one queue item whose rows are its kept tokens, and a long list split into parts of at most
//! [`ROWS_PER_PART`] rows, so what a call holds is bounded.

use std::sync::Arc;

use crate::call::future::Work;
use crate::call::prepare::{Call, plan_call, too_long};
use crate::engine::Engine;
use crate::error::{EmbedError, Result};
use crate::kinds::token_vectors::TokenRows;
use crate::load::multi_vector::TokenRules;
use crate::load::tokenize::{tokenizer_failed, with_prompt};
use crate::schedule::request::{Item, Request, TextInput};
use crate::values::embeddings::{TextTokens, TokenGroups};
use nornir_options::{CallOptions, Truncation};

/// The most token rows one part of a call holds before it is finished (16,384 rows of a
/// 1,024-wide model's hidden states are 64 MiB).
pub const ROWS_PER_PART: usize = 16_384;

/// How a token call encodes its texts.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct MultiVectorOptions {
    /// Prompt, truncation (documents are cut to the model's `document_length`, queries to its
    /// `query_length`), `dimensions` (each token vector cut, then normalised again), `max_wait`
    /// and `cancel`.
    pub call: CallOptions,
    /// Encode as queries (the query marker; expanded with mask tokens to `query_length`),
    /// else as documents (the document marker; punctuation's vectors left out).
    pub is_query: bool,
}

impl MultiVectorOptions {
    /// Documents, the call's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queries (`true`) or documents.
    pub fn with_query(mut self, is_query: bool) -> Self {
        self.is_query = is_query;
        self
    }

    /// The call's prompt, truncation, dimensions, `max_wait` and cancel handle.
    pub fn with_call(mut self, call: CallOptions) -> Self {
        self.call = call;
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        let c = &self.call;
        if c.chunking.is_some() {
            return Err(EmbedError::invalid(
                "chunking",
                "makes dense document vectors; token vectors keep a text's first tokens (truncate) or refuse it",
            ));
        }
        if c.precision.is_some() || c.ranges.is_some() {
            return Err(EmbedError::invalid(
                "precision",
                "applies to token vectors once they are made: MultiVectors::to_precision",
            ));
        }
        if c.normalize == Some(false) {
            return Err(EmbedError::invalid("normalize", "token vectors are always normalised, as MaxSim needs"));
        }
        Ok(())
    }
}

/// A text's ids as the model reads them, and which rows come back.
struct TokenText {
    ids: Vec<u32>,
    /// Tokens attended to, from the first (`ids.len()` but for a query's unattended expansion).
    attend: usize,
    /// Positions whose vectors come back.
    keep: Vec<usize>,
    truncated: bool,
}

/// `text` as PyLate tokenizes it: the tokenizer's ids (prompt first), cut to the length less
/// the marker (content only; the special tokens stay), the marker put after the first token;
/// a query expanded with the mask token to its length; a document's skiplist tokens' vectors
/// left out. BGE-M3 (no marker, no expansion, no skiplist) keeps every token.
fn token_text(
    engine: &Engine,
    rules: &TokenRules,
    text: &str,
    prompt: &str,
    is_query: bool,
    truncation: Truncation,
    index: usize,
) -> Result<TokenText> {
    let prompted = with_prompt(prompt, text);
    let enc = engine.tokenizer.whole().encode(prompted.as_ref(), true).map_err(tokenizer_failed)?;
    let (ids, special) = (enc.get_ids(), enc.get_special_tokens_mask());
    let (prefix, length) = if is_query {
        (rules.query_prefix, rules.query_length)
    } else {
        (rules.document_prefix, rules.document_length)
    };
    let room = length - usize::from(prefix.is_some());
    let lead = special.iter().take_while(|&&m| m == 1).count().min(ids.len());
    let trail = special[lead..].iter().rev().take_while(|&&m| m == 1).count();
    let content = &ids[lead..ids.len() - trail];
    let fits = room.saturating_sub(lead + trail);
    let truncated = content.len() > fits;
    let kept = match truncation {
        _ if !truncated => content,
        Truncation::Refuse => return Err(too_long(engine, index, text, prompt)),
        Truncation::Left => &content[content.len() - fits..],
        _ => &content[..fits],
    };
    let mut out: Vec<u32> = Vec::with_capacity(length);
    out.extend_from_slice(&ids[..lead]);
    out.extend_from_slice(kept);
    out.extend_from_slice(&ids[ids.len() - trail..]);
    if let Some(p) = prefix {
        out.insert(1.min(out.len()), p);
    }
    let real = out.len();
    let mut attend = real;
    if is_query && let Some(mask) = rules.expansion {
        out.resize(length.max(real), mask);
        if rules.attend_expansion {
            attend = out.len();
        }
    }
    let keep = if is_query || rules.skiplist.is_empty() {
        (0..out.len()).collect()
    } else {
        (0..out.len()).filter(|&p| rules.skiplist.binary_search(&out[p]).is_err()).collect()
    };
    Ok(TokenText { ids: out, attend, keep, truncated })
}

/// An upper bound of the rows `text` gives: a token covers at least one byte, plus the special
/// tokens and the marker; never more than the length.
fn rows_bound(rules: &TokenRules, text: &str, prompt: &str, is_query: bool) -> usize {
    let length = if is_query { rules.query_length } else { rules.document_length };
    if is_query && rules.expansion.is_some() {
        return length;
    }
    (text.len() + prompt.len() + 8).min(length)
}

/// The texts split into parts of at most [`ROWS_PER_PART`] rows (a text alone when it has more).
pub(crate) fn parts<S: AsRef<str>>(
    rules: &TokenRules,
    texts: &[S],
    prompt: &str,
    is_query: bool,
) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut rows) = (0, 0);
    for (i, t) in texts.iter().enumerate() {
        let r = rows_bound(rules, t.as_ref(), prompt, is_query);
        if i > start && rows + r > ROWS_PER_PART {
            out.push(start..i);
            (start, rows) = (i, 0);
        }
        rows += r;
    }
    if start < texts.len() {
        out.push(start..texts.len());
    }
    out
}

/// The work of a part of a token call whose first text is `first` in the whole call.
pub(crate) fn tokens_work(
    texts: Vec<String>,
    options: MultiVectorOptions,
    first: usize,
    rules: Arc<TokenRules>,
) -> Work {
    Work::prepared(texts.len(), move |engine| prepare_tokens(engine, &rules, &texts, &options, first))
}

/// A part's texts as queue items, a row per kept token; `first` is the part's first index in
/// the whole call (for errors).
pub(crate) fn prepare_tokens<S: AsRef<str>>(
    engine: &Engine,
    rules: &TokenRules,
    texts: &[S],
    options: &MultiVectorOptions,
    first: usize,
) -> Result<Call> {
    // The call's width applies to the finished token vectors, not to the raw rows.
    let mut call = options.call.clone();
    call.dimensions = None;
    let plan = plan_call(engine, &call)?;
    let encoded: Vec<TokenText> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| token_text(engine, rules, t.as_ref(), plan.prompt, options.is_query, plan.truncation, first + i))
        .collect::<Result<_>>()?;
    let counts: Vec<usize> = encoded.iter().map(|t| t.keep.len()).collect();
    let ids = encoded.iter().flat_map(|t| t.keep.iter().map(|&p| t.ids[p])).collect();
    let request = Request::new(counts.iter().sum(), engine.info.model_dimension);
    let mut row = 0;
    let mut tokens = Vec::with_capacity(encoded.len());
    let mut items = Vec::with_capacity(encoded.len());
    for t in encoded {
        tokens.push(TextTokens { count: u32::try_from(t.ids.len()).unwrap_or(u32::MAX), truncated: t.truncated });
        let spans: Vec<(usize, usize)> = t.keep.iter().map(|&p| (p, p + 1)).collect();
        let n = spans.len();
        if n == 0 {
            continue;
        }
        let input = TextInput { attend: Some(t.attend), spans, ..TextInput::new(t.ids) };
        items.push(Item::text(input, &request, row));
        row += n;
    }
    let groups = TokenGroups { counts, ids };
    let finish = TokenRows { tokens, groups, width: engine.info.model_dimension };
    let call = Call::new(request, items, plan.max_wait, finish);
    if let Some(handle) = &options.call.cancel
        && !handle.watch(call.request.watchable())
    {
        return Err(EmbedError::Cancelled);
    }
    Ok(call)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(document_length: usize) -> TokenRules {
        TokenRules {
            query_prefix: Some(1),
            document_prefix: Some(2),
            query_length: 32,
            document_length,
            expansion: Some(103),
            attend_expansion: false,
            skiplist: Vec::new(),
            colbert: None,
            mean_score: false,
        }
    }

    #[test]
    fn long_documents_run_in_parts_that_bound_the_rows_held() {
        // Ten documents of 9,000 bytes, each cut to 8,192 tokens: two to a part.
        let long = "x".repeat(9000);
        let texts = vec![long.as_str(); 10];
        let parts = parts(&rules(8192), &texts, "", false);
        assert_eq!(parts.len(), 5);
        for p in &parts {
            let rows: usize = texts[p.clone()].iter().map(|t| rows_bound(&rules(8192), t, "", false)).sum();
            assert!(rows <= ROWS_PER_PART, "{rows}");
        }
        // A text longer than a part alone is a part of its own; short texts share one.
        assert_eq!(parts_of(&rules(40_000), &["y".repeat(30_000).as_str(), "a", "b"]), vec![0..1, 1..3]);
        // Queries expanded to their length are bound by it exactly.
        assert_eq!(rows_bound(&rules(180), "hi", "", true), 32);
    }

    fn parts_of(rules: &TokenRules, texts: &[&str]) -> Vec<std::ops::Range<usize>> {
        parts(rules, texts, "", false)
    }
}
