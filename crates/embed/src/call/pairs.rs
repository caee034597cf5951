//! A cross-encoder's call before the queue: its options, its query and document pairs tokenized
//! as the tokenizer's own pair encoding into ordinary queue items (they batch by length with
//! other calls' pairs), and, after, one query's documents sorted by their score.

use serde::{Deserialize, Serialize};

use crate::call::prepare::Call;
use crate::engine::Engine;
use crate::error::{EmbedError, Result};
use crate::load::template::fill_body;
use crate::schedule::request::{Item, Request};
use crate::values::PairTemplate;
use crate::values::embeddings::{Embeddings, TextTokens, Usage};
use nornir_options::{CallOptions, Truncation};
use nornir_options::{ModelKind, ScoreActivation};

/// How a call scores its pairs: a [`CallOptions`]' truncation (a pair longer than the model
/// reads is cut on the right by default: the document first, the query too only when it alone
/// is too long; or on the left; or refused with [`EmbedError::TooLong`]), `max_wait` and
/// `cancel`, and whether the scores are raw. The call's other options (prompt, normalisation,
/// dimensions, chunking, precision) make vectors, not scores: a pair call refuses them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PairOptions {
    /// Truncation, `max_wait` and `cancel` of the call.
    pub call: CallOptions,
    /// The model's raw scores (logits), without the activation its configs name.
    pub raw_scores: bool,
}

impl PairOptions {
    /// The defaults: activated scores, pairs cut on the right.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raw scores (logits) instead of activated ones.
    pub fn with_raw_scores(mut self, raw: bool) -> Self {
        self.raw_scores = raw;
        self
    }

    /// The call's truncation, `max_wait` and cancel handle.
    pub fn with_call(mut self, call: CallOptions) -> Self {
        self.call = call;
        self
    }

    /// Refuses the call's options that make vectors, naming the first.
    pub(crate) fn check(&self) -> Result<()> {
        let c = &self.call;
        let vector_options = [
            ("prompt", c.prompt.is_some()),
            ("normalize", c.normalize.is_some()),
            ("dimensions", c.dimensions.is_some()),
            ("chunking", c.chunking.is_some()),
            ("precision", c.precision.is_some()),
            ("ranges", c.ranges.is_some()),
        ];
        match vector_options.into_iter().find(|(_, set)| *set) {
            Some((option, _)) => Err(EmbedError::invalid(
                option,
                "shapes vectors, and a cross-encoder's call gives scores: leave it out (truncation, max_wait and cancel apply)",
            )),
            None => Ok(()),
        }
    }
}

/// One document of a [`rerank`](crate::Embedder::rerank): its index in the call and its score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    /// The document's index among the call's documents.
    pub index: usize,
    /// Its score: the model's one label, activated unless raw scores were asked for.
    pub score: f32,
}

/// One query's documents best first, with what scoring them read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Ranking {
    /// The documents best first (ties in input order), the first `top_n` when asked.
    pub ranked: Vec<Ranked>,
    /// The tokens of every (query, document) pair scored, and how many pairs were cut: all the
    /// documents, not only the `top_n` returned.
    pub usage: Usage,
}

/// `scores` (one row of one score per document) as documents best first, ties in input order,
/// the first `top_n` when given.
pub fn rank(scores: &Embeddings, top_n: Option<usize>) -> Ranking {
    let mut ranked: Vec<Ranked> = scores.rows().enumerate().map(|(index, r)| Ranked { index, score: r[0] }).collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    ranked.truncate(top_n.unwrap_or(usize::MAX));
    Ranking { ranked, usage: scores.usage() }
}

/// A call's inputs, each a pair or a text alone, as queue items with the request they fill.
pub(crate) fn prepare_pairs<A: AsRef<str>, B: AsRef<str>>(
    engine: &Engine,
    inputs: &[(A, Option<B>)],
    options: &PairOptions,
) -> Result<Call> {
    engine.expect_kind(ModelKind::CrossEncoder, "predict")?;
    options.check()?;
    let truncation = engine.long_choice(&options.call).0.unwrap_or_default();
    let tokenizer = &engine.tokenizer;
    let labels = engine.info.model_dimension;
    let request = Request::new(inputs.len(), labels);
    let mut items = Vec::with_capacity(inputs.len());
    let mut tokens = Vec::with_capacity(inputs.len());
    let template = engine.info.folder.pair_template.as_ref();
    for (index, (first, second)) in inputs.iter().enumerate() {
        let (first, second) = (first.as_ref(), second.as_ref().map(AsRef::as_ref));
        if let Some(t) = template {
            let (ids, truncated) = templated(engine, t, first, second.unwrap_or_default(), truncation, index)?;
            let count = u32::try_from(ids.len()).unwrap_or(u32::MAX);
            tokens.push(TextTokens { count, truncated });
            items.push(Item::pair(ids, Vec::new(), &request, index));
            continue;
        }
        if truncation == Truncation::Refuse
            && let Some(count) = tokenizer.pair_too_long(first, second)?
        {
            let max_length = engine.info.max_length;
            return Err(EmbedError::TooLong { index, tokens: count, exact: true, max_length });
        }
        let enc = tokenizer.encode_pair(first, second, truncation)?;
        let count = u32::try_from(enc.len()).unwrap_or(u32::MAX);
        tokens.push(TextTokens { count, truncated: !enc.get_overflowing().is_empty() });
        items.push(Item::pair(enc.get_ids().to_vec(), enc.get_type_ids().to_vec(), &request, index));
    }
    let activation = match (options.raw_scores, engine.info.folder.kind.activation) {
        (false, Some(a)) => a,
        _ => ScoreActivation::Identity,
    };
    let call = Call::of_pairs(request, items, tokens, labels, activation, engine.max_wait(&options.call));
    if let Some(handle) = &options.call.cancel
        && !handle.watch(call.request.watchable())
    {
        return Err(EmbedError::Cancelled);
    }
    Ok(call)
}

/// A pair in the folder's prompt: the prefix's, body's and suffix's ids (no special tokens), the
/// body cut to what the model's length leaves (from the side `truncation` keeps), and whether
/// it was cut.
fn templated(
    engine: &Engine,
    t: &PairTemplate,
    query: &str,
    document: &str,
    truncation: Truncation,
    index: usize,
) -> Result<(Vec<u32>, bool)> {
    let tok = engine.tokenizer.whole();
    let ids = |text: &str| -> Result<Vec<u32>> {
        Ok(tok.encode(text, false).map_err(crate::load::tokenize::tokenizer_failed)?.get_ids().to_vec())
    };
    let body = fill_body(t, query, document);
    let (prefix, mut body, suffix) = (ids(&t.prefix)?, ids(&body)?, ids(&t.suffix)?);
    let max_length = engine.info.max_length;
    let room = max_length.saturating_sub(prefix.len() + suffix.len());
    let truncated = body.len() > room;
    if truncated {
        match truncation {
            Truncation::Refuse => {
                let tokens = prefix.len() + body.len() + suffix.len();
                return Err(EmbedError::TooLong { index, tokens, exact: true, max_length });
            }
            Truncation::Left => drop(body.drain(..body.len() - room)),
            _ => body.truncate(room),
        }
    }
    Ok(([prefix, body, suffix].concat(), truncated))
}
