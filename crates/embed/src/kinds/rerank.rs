//! A cross-encoder's call before the queue: its options, its query and document pairs tokenized
//! as the tokenizer's own pair encoding into ordinary queue items (they batch by length with
//! other calls' pairs), and, after, one query's documents sorted by their score.

use serde::{Deserialize, Serialize};

use crate::call::chunk::windows;
use crate::call::future::Work;
use crate::call::prepare::{Call, Finish};
use crate::engine::Engine;
use crate::error::{EmbedError, Result};
use crate::load::template::fill_body;
use crate::load::tokenize::tokenizer_failed;
use crate::schedule::request::{Item, Request, TextInput};
use crate::values::PairTemplate;
use crate::values::embeddings::{Embeddings, TextTokens, Usage};
use nornir_options::{CallOptions, Chunking, Truncation};
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
    /// Its score: the model's one label, activated unless raw scores were asked for; with
    /// chunking, its best chunk's.
    pub score: f32,
    /// With chunking, the chunk that scored (`None` without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<ChunkSpan>,
}

/// One chunk of a document reranked with chunking: its number among the document's chunks and
/// its bytes in the document, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkSpan {
    /// From 0, in the document's order.
    pub index: usize,
    /// The chunk's first byte in the document.
    pub start: usize,
    /// Past its last byte.
    pub end: usize,
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
    let ranked = scores.rows().enumerate().map(|(index, r)| Ranked { index, score: r[0], chunk: None }).collect();
    best_first(ranked, scores, top_n)
}

fn best_first(mut ranked: Vec<Ranked>, scores: &Embeddings, top_n: Option<usize>) -> Ranking {
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    ranked.truncate(top_n.unwrap_or(usize::MAX));
    Ranking { ranked, usage: scores.usage() }
}

/// A reranked chunk's document (its index among the call's) and span.
pub(crate) type ChunkOf = (usize, ChunkSpan);

/// A rerank's (query, chunk) pairs, each with its [`ChunkOf`].
pub(crate) struct ChunkedPairs {
    pub(crate) pairs: Vec<(String, Option<String>)>,
    pub(crate) owners: Vec<ChunkOf>,
}

/// The (query, chunk) pairs of a rerank with chunking, each with its document and span: every
/// document cut into chunks of what `chunking`'s window leaves after the query and the pair's
/// special tokens, overlapping and starting on a word as `embed`'s chunks do; a document that
/// fits is one chunk, itself.
pub(crate) fn chunk_pairs<S: AsRef<str>>(
    engine: &Engine,
    query: &str,
    documents: &[S],
    chunking: &Chunking,
) -> Result<ChunkedPairs> {
    let max = engine.info.max_length;
    let window = chunking.window.unwrap_or(max);
    if chunking.late || window > max || engine.info.folder.pair_template.is_some() {
        let why = if chunking.late {
            "late chunking pools token vectors; a reranker scores each chunk with the query: use chunk".to_owned()
        } else if window > max {
            format!("a window of {window} tokens is longer than the {max} the model reads; give at most {max}")
        } else {
            "a decoder reranker reads each pair in its prompt template, which nornir does not cut into chunks"
                .to_owned()
        };
        return Err(EmbedError::invalid("chunking", why));
    }
    let tok = engine.tokenizer.whole();
    let count = |e: tokenizers::Result<tokenizers::Encoding>| e.map(|e| e.len()).map_err(tokenizer_failed);
    let room = window.saturating_sub(count(tok.encode(("", ""), true))? + count(tok.encode(query, false))?);
    if room <= chunking.overlap {
        return Err(EmbedError::invalid(
            "chunking",
            format!(
                "a window of {window} tokens leaves {room} for a document's tokens after the query and the special tokens, no more than the overlap of {}: give a longer window, a shorter query or a shorter overlap",
                chunking.overlap
            ),
        ));
    }
    let (mut pairs, mut owners) = (Vec::new(), Vec::new());
    for (document, text) in documents.iter().map(AsRef::as_ref).enumerate() {
        let enc = tok.encode(text, false).map_err(tokenizer_failed)?;
        let spans: Vec<(usize, usize)> = if enc.len() <= room {
            vec![(0, text.len())]
        } else {
            let offsets = enc.get_offsets();
            windows(enc.get_word_ids(), room, chunking.overlap)
                .into_iter()
                .map(|(a, b)| (offsets[a].0, offsets[b - 1].1))
                .collect()
        };
        for (index, (start, end)) in spans.into_iter().enumerate() {
            pairs.push((query.to_owned(), Some(text.get(start..end).unwrap_or(text).to_owned())));
            owners.push((document, ChunkSpan { index, start, end }));
        }
    }
    Ok(ChunkedPairs { pairs, owners })
}

/// The documents best first by their best chunk's score (the first chunk wins a tie); `scores`
/// has a row per pair of `owners` (see [`chunk_pairs`]).
pub(crate) fn rank_chunks(scores: &Embeddings, owners: &[ChunkOf], documents: usize, top_n: Option<usize>) -> Ranking {
    let mut best: Vec<Option<Ranked>> = vec![None; documents];
    for (row, &(index, span)) in scores.rows().zip(owners) {
        let score = row[0];
        if best[index].is_none_or(|b| score > b.score) {
            best[index] = Some(Ranked { index, score, chunk: Some(span) });
        }
    }
    best_first(best.into_iter().flatten().collect(), scores, top_n)
}

/// The work of a pair call: its pairs prepared on a tokenizing thread (or the caller's).
pub(crate) fn pairs_work(pairs: Vec<(String, Option<String>)>, options: PairOptions) -> Work {
    Work::prepared(pairs.len(), move |engine| prepare_pairs(engine, &pairs, &options))
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
            items.push(Item::text(TextInput::new(ids), &request, index));
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
        let types = enc.get_type_ids().to_vec();
        items.push(Item::text(TextInput { types, ..TextInput::new(enc.get_ids().to_vec()) }, &request, index));
    }
    let activation = match (options.raw_scores, engine.info.folder.kind.activation) {
        (false, Some(a)) => a,
        _ => ScoreActivation::Identity,
    };
    let call = Call::new(request, items, engine.max_wait(&options.call), Scores { tokens, activation });
    if let Some(handle) = &options.call.cancel
        && !handle.watch(call.request.watchable())
    {
        return Err(EmbedError::Cancelled);
    }
    Ok(call)
}

/// A pair call's finishing: each row of scores activated as the call asks.
#[derive(Debug)]
struct Scores {
    tokens: Vec<TextTokens>,
    activation: ScoreActivation,
}

impl Finish for Scores {
    fn finish(self: Box<Self>, engine: &Engine, mut rows: Vec<f32>) -> Embeddings {
        let labels = engine.info.model_dimension;
        engine.counters.texts.fetch_add(self.tokens.len() as u64, std::sync::atomic::Ordering::Relaxed);
        rows.chunks_exact_mut(labels.max(1)).for_each(|r| self.activation.apply(r));
        Embeddings::from_whole_rows(rows, labels, self.tokens)
    }
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
