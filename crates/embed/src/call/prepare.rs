//! A call, before and after the queue: the call's plan (prompt, width, normalisation,
//! truncation), identical texts collapsed, tokenizing into queue items (or chunks), and, when the
//! rows come back, each call's own finishing (cut to its width, normalised, chunks combined).
//! Calls with different options share batches because everything per call happens here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::call::chunk::{late_passes, windows};
use crate::engine::Engine;
use crate::error::{EmbedError, InferenceKind, Result};
use crate::load::prompt::named_prompt;
use crate::load::tokenize::{tokenizer_failed, with_prompt};
use crate::schedule::request::{Item, Request, TextInput};
use crate::values::Token;
use crate::values::embeddings::{Chunk, ChunkRows, Embeddings, TextTokens};
use nornir_options::{CallOptions, Chunking, DocumentVector, Prompt, Truncation};

/// A call on its way: the request its rows go to, its items until they are queued, and what its
/// kind does with the rows once every one is done.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) request: Arc<Request>,
    pub(crate) items: Vec<Item>,
    /// Refuse the call when the queue ahead of it would take longer (`CallOptions::max_wait`).
    pub(crate) max_wait: Option<std::time::Duration>,
    finish: Box<dyn Finish>,
}

/// What a kind makes of its call's rows once every one is done (its rows in the request's
/// order, each the model's width): its result, counted in the embedder's stats. Each kind
/// writes its own, so the queue and the workers carry no kind's state.
pub(crate) trait Finish: std::fmt::Debug + Send {
    fn finish(self: Box<Self>, engine: &Engine, rows: Vec<f32>) -> Embeddings;
}

impl Call {
    pub(crate) fn new(
        request: Arc<Request>,
        items: Vec<Item>,
        max_wait: Option<std::time::Duration>,
        finish: impl Finish + 'static,
    ) -> Self {
        Self { request, items, max_wait, finish: Box::new(finish) }
    }

    /// Its result from its request's rows.
    pub(crate) fn finish(self, engine: &Engine, rows: Vec<f32>) -> Embeddings {
        self.finish.finish(engine, rows)
    }
}

/// A text call's finishing: duplicates expanded, each row cut to the call's width and
/// normalised if it asks, chunks combined into their document's vector.
#[derive(Debug)]
struct TextRows {
    /// For each text of the call, its row among the unique texts; `None` when all are unique.
    expand: Option<Vec<usize>>,
    /// Per unique text.
    tokens: Vec<TextTokens>,
    dim: usize,
    normalize: bool,
    /// Per unique text, its chunks, when the call chunks long texts.
    chunked: Option<Chunked>,
}

/// How a chunking call's texts were cut.
#[derive(Debug)]
pub(crate) struct Chunked {
    /// Per unique text: its first row in the request and its chunks (a row each).
    texts: Vec<(usize, Vec<Chunk>)>,
    document: DocumentVector,
}

/// A call's options with the embedder's defaults filled in.
#[derive(Debug)]
pub(crate) struct CallPlan<'a> {
    /// The call's prompt, or the embedder's (borrowed: no copy per call).
    pub(crate) prompt: &'a str,
    /// Prompt tokens the pooling leaves out.
    pub(crate) skip: usize,
    pub(crate) normalize: bool,
    pub(crate) dim: usize,
    pub(crate) truncation: Truncation,
    /// Refuse the call when the queue ahead would keep it longer.
    pub(crate) max_wait: Option<std::time::Duration>,
}

/// A document's vector from its chunks' (`dim` each, finished as the call asks): their mean
/// weighted by each chunk's tokens, or their element-wise maximum.
pub(crate) fn combine(vectors: &[f32], dim: usize, spans: &[Chunk], how: DocumentVector) -> Vec<f32> {
    let mut out = vec![0f32; dim];
    match how {
        DocumentVector::Max => {
            out.fill(f32::NEG_INFINITY);
            for v in vectors.chunks_exact(dim.max(1)) {
                for (o, x) in out.iter_mut().zip(v) {
                    *o = o.max(*x);
                }
            }
        }
        _ => {
            let total: usize = spans.iter().map(|c| c.tokens.max(1)).sum();
            for (v, c) in vectors.chunks_exact(dim.max(1)).zip(spans) {
                let w = c.tokens.max(1) as f32 / total.max(1) as f32;
                for (o, x) in out.iter_mut().zip(v) {
                    *o += w * x;
                }
            }
        }
    }
    out
}

/// `options` with the embedder's defaults filled in, checked against the model.
pub(crate) fn plan_call<'a>(engine: &'a Engine, options: &'a CallOptions) -> Result<CallPlan<'a>> {
    let model = engine.info.model_dimension;
    let dim = match options.dimensions {
        None => engine.info.dimension,
        Some(d) if (1..=model).contains(&d) => d,
        Some(d) => {
            return Err(EmbedError::invalid(
                "dimensions",
                format!("must be between 1 and {model} for this model, not {d}"),
            ));
        }
    };
    let (prompt, skip) = match &options.prompt {
        None => (engine.info.prompt.text.as_str(), engine.info.pooling_skips_prompt_tokens),
        Some(p) => {
            let text = match p {
                Prompt::Text(t) => t.as_str(),
                Prompt::Name(n) => named_prompt(&engine.info.folder, n)?,
            };
            let skip = if engine.include_prompt || text.is_empty() {
                0
            } else {
                engine.tokenizer.prompt_token_count(text).map_err(|e| {
                    EmbedError::inference_because(InferenceKind::Tokenizer, "tokenizing the prompt failed", e)
                })?
            };
            (text, skip)
        }
    };
    Ok(CallPlan {
        prompt,
        skip,
        normalize: options.normalize.unwrap_or(engine.info.normalize),
        dim,
        truncation: engine.long_choice(options).0.unwrap_or_default(),
        max_wait: engine.max_wait(options),
    })
}

/// A call's texts, tokenized as `options` say, as queue items with the request they fill.
/// Identical texts are tokenized and run once.
pub(crate) fn prepare<S: AsRef<str>>(engine: &Engine, texts: &[S], options: &CallOptions) -> Result<Call> {
    let call = prepare_texts(engine, texts, options)?;
    if let Some(handle) = &options.cancel
        && !handle.watch(call.request.watchable())
    {
        engine.counters.cancelled_texts.fetch_add(call.items.len() as u64, Ordering::Relaxed);
        return Err(EmbedError::Cancelled);
    }
    Ok(call)
}

/// Takes the texts of a call that nobody waits for any more out of the queue, and counts them.
pub(crate) fn cancel_queued(engine: &Engine, request: &Arc<Request>) {
    let cancelled = engine.scheduler.cancel(request);
    engine.counters.cancelled_texts.fetch_add(cancelled as u64, Ordering::Relaxed);
}

pub(crate) fn prepare_texts<S: AsRef<str>>(engine: &Engine, texts: &[S], options: &CallOptions) -> Result<Call> {
    let plan = plan_call(engine, options)?;
    let mut first: HashMap<&str, usize> = HashMap::with_capacity(texts.len());
    let mut unique: Vec<&str> = Vec::with_capacity(texts.len());
    let unique_of: Vec<usize> = texts
        .iter()
        .map(|t| {
            *first.entry(t.as_ref()).or_insert_with(|| {
                unique.push(t.as_ref());
                unique.len() - 1
            })
        })
        .collect();
    let expand = (unique.len() < texts.len()).then_some(unique_of);
    if let (_, Some(chunking)) = engine.long_choice(options) {
        return prepare_chunks(engine, &unique, expand, &plan, &chunking);
    }
    let unique_of = expand.as_deref();
    let encodings =
        if unique.is_empty() { Vec::new() } else { engine.tokenizer.encode(&unique, plan.prompt, plan.truncation)? };
    if plan.truncation == Truncation::Refuse
        && let Some(u) = encodings.iter().position(|e| !e.get_overflowing().is_empty())
    {
        let index = unique_of.and_then(|of| of.iter().position(|&s| s == u)).unwrap_or(u);
        return Err(too_long(engine, index, unique[u], plan.prompt));
    }
    let request = Request::new(unique.len(), engine.info.model_dimension);
    let tokens = encodings
        .iter()
        .map(|e| TextTokens {
            count: u32::try_from(e.len()).unwrap_or(u32::MAX),
            truncated: !e.get_overflowing().is_empty(),
        })
        .collect();
    let items = encodings
        .into_iter()
        .enumerate()
        .map(|(index, e)| {
            // A prompt cut from the left is no longer whole at the start: pool every token.
            let cut_left = plan.truncation == Truncation::Left && !e.get_overflowing().is_empty();
            let skip = if cut_left { 0 } else { plan.skip };
            Item::text(TextInput { skip, ..TextInput::new(e.get_ids().to_vec()) }, &request, index)
        })
        .collect();
    let (dim, normalize, chunked) = (plan.dim, plan.normalize, None);
    Ok(Call::new(request, items, plan.max_wait, TextRows { expand, tokens, dim, normalize, chunked }))
}

/// A chunking call: each text's whole token ids cut into windows (see [`Chunking`]), a queue
/// item per window, or per pass of the model for late chunking.
pub(crate) fn prepare_chunks(
    engine: &Engine,
    unique: &[&str],
    expand: Option<Vec<usize>>,
    plan: &CallPlan,
    chunking: &Chunking,
) -> Result<Call> {
    let max = engine.info.max_length;
    let window = chunking.window.unwrap_or(max);
    if window > max {
        return Err(EmbedError::invalid(
            "chunking.window",
            format!("{window} is longer than the {max} tokens the model reads; give at most {max}"),
        ));
    }
    if chunking.late && engine.io.pooled {
        return Err(EmbedError::invalid(
            "chunking.late",
            format!(
                "late chunking pools token vectors, but the model's output {:?} is one vector per text",
                engine.info.output
            ),
        ));
    }
    // Each queue item to be: its ids, the spans it pools (late chunking), its first row.
    struct Piece(Vec<u32>, Vec<(usize, usize)>, usize);
    let mut pieces: Vec<Piece> = Vec::new();
    let mut chunked = Vec::with_capacity(unique.len());
    let mut tokens = Vec::with_capacity(unique.len());
    let mut rows = 0;
    for text in unique {
        let prompted = with_prompt(plan.prompt, text);
        let enc = engine.tokenizer.whole().encode(prompted.as_ref(), true).map_err(tokenizer_failed)?;
        let (ids, mask, offsets) = (enc.get_ids(), enc.get_special_tokens_mask(), enc.get_offsets());
        let lead = mask.iter().take_while(|&&m| m == 1).count();
        let trail = mask[lead..].iter().rev().take_while(|&&m| m == 1).count();
        let end = ids.len() - trail;
        let prompt_bytes = plan.prompt.len();
        let head = lead + (lead..end).take_while(|&i| offsets[i].0 < prompt_bytes).count();
        let capacity = window.saturating_sub(head + trail);
        if capacity <= chunking.overlap {
            return Err(EmbedError::invalid(
                "chunking.window",
                format!(
                    "a window of {window} tokens leaves {capacity} for a text's own tokens after the prompt and special tokens, no more than the overlap of {}: give a longer window or a shorter overlap",
                    chunking.overlap
                ),
            ));
        }
        let content = &ids[head..end];
        let cuts = windows(&enc.get_word_ids()[head..end], capacity, chunking.overlap);
        let span = |&(a, b): &(usize, usize)| Chunk {
            start: offsets[head + a].0.saturating_sub(prompt_bytes),
            end: offsets[head + b - 1].1.saturating_sub(prompt_bytes),
            tokens: b - a,
        };
        let piece = |from: usize, to: usize| -> Vec<u32> {
            ids[..head].iter().chain(&content[from..to]).chain(&ids[end..]).copied().collect()
        };
        let first = rows;
        let before = pieces.len();
        match cuts.len() {
            // No tokens of its own, or few enough for one window: the text as it is.
            0 | 1 => pieces.push(Piece(ids.to_vec(), Vec::new(), rows)),
            _ if !chunking.late => {
                for (k, &(a, b)) in cuts.iter().enumerate() {
                    pieces.push(Piece(piece(a, b), Vec::new(), rows + k));
                }
            }
            _ => {
                for (from, to, range) in late_passes(&cuts, content.len(), max - head - trail, chunking.overlap) {
                    let spans = cuts[range.clone()].iter().map(|&(a, b)| (head + a - from, head + b - from)).collect();
                    pieces.push(Piece(piece(from, to), spans, rows + range.start));
                }
            }
        }
        let spans: Vec<Chunk> = if cuts.is_empty() {
            vec![Chunk { start: 0, end: text.len(), tokens: 0 }]
        } else {
            cuts.iter().map(span).collect()
        };
        rows += spans.len();
        let read: usize = pieces[before..].iter().map(|p| p.0.len()).sum();
        tokens.push(TextTokens { count: u32::try_from(read).unwrap_or(u32::MAX), truncated: false });
        chunked.push((first, spans));
    }
    let request = Request::new(rows, engine.info.model_dimension);
    let items = pieces
        .into_iter()
        .map(|Piece(ids, spans, index)| {
            Item::text(TextInput { skip: plan.skip, spans, ..TextInput::new(ids) }, &request, index)
        })
        .collect();
    let chunked = Chunked { texts: chunked, document: chunking.document };
    let (dim, normalize, chunked) = (plan.dim, plan.normalize, Some(chunked));
    Ok(Call::new(request, items, plan.max_wait, TextRows { expand, tokens, dim, normalize, chunked }))
}

/// The error for text `index` of a call that refuses truncation, with its token count.
pub(crate) fn too_long(engine: &Engine, index: usize, text: &str, prompt: &str) -> EmbedError {
    let max_length = engine.info.max_length;
    let counted = engine.tokenizer.count_whole(text, prompt);
    EmbedError::TooLong { index, tokens: counted.unwrap_or(max_length), exact: counted.is_some(), max_length }
}

/// A row of `raw` (the model's width) cut to `dim` onto `out`, normalised if asked.
pub(crate) fn finish_row(out: &mut Vec<f32>, raw: &[f32], dim: usize, normalize: bool) {
    let start = out.len();
    out.extend_from_slice(&raw[..dim]);
    if normalize {
        crate::math::pooling::normalize(&mut out[start..]);
    }
}

impl Finish for TextRows {
    /// The call's embeddings in the call's order, duplicates expanded, each cut to the call's
    /// width and normalised if it asks.
    fn finish(self: Box<Self>, engine: &Engine, rows: Vec<f32>) -> Embeddings {
        let call = *self;
        let (width, dim, normalize) = (engine.info.model_dimension, call.dim, call.normalize);
        // Text i's row among the unique texts (the same when the call had no duplicates).
        let texts = call.expand.as_ref().map_or(call.tokens.len(), Vec::len);
        let unique = |i: usize| call.expand.as_ref().map_or(i, |of| of[i]);
        engine.counters.texts.fetch_add(texts as u64, Ordering::Relaxed);
        let tokens = (0..texts).map(|i| call.tokens[unique(i)]).collect();
        if let Some(chunked) = &call.chunked {
            let mut chunks = ChunkRows::default();
            let mut data = Vec::with_capacity(texts * dim);
            for u in (0..texts).map(unique) {
                let (first, spans) = &chunked.texts[u];
                let from = chunks.spans.len();
                for (j, span) in spans.iter().enumerate() {
                    let row = first + j;
                    finish_row(&mut chunks.data, &rows[row * width..(row + 1) * width], dim, normalize);
                    chunks.spans.push(*span);
                }
                chunks.ranges.push(from..chunks.spans.len());
                let vectors = &chunks.data[from * dim..];
                if spans.len() == 1 {
                    data.extend_from_slice(vectors);
                } else {
                    finish_row(&mut data, &combine(vectors, dim, spans, chunked.document), dim, normalize);
                }
            }
            return Embeddings::from_whole_rows(data, dim, tokens).with_chunks(chunks);
        }
        let data = if call.expand.is_none() && dim == width {
            let mut rows = rows;
            if normalize {
                rows.chunks_exact_mut(width.max(1)).for_each(crate::math::pooling::normalize);
            }
            rows
        } else {
            let mut data = Vec::with_capacity(texts * dim);
            for u in (0..texts).map(unique) {
                finish_row(&mut data, &rows[u * width..(u + 1) * width], dim, normalize);
            }
            data
        };
        Embeddings::from_whole_rows(data, dim, tokens)
    }
}

/// Every token of `text` with the call's prompt, not cut to the model's length (TEI's
/// `/tokenize`), special tokens included when `special`.
pub(crate) fn tokens(engine: &Engine, text: &str, options: &CallOptions, special: bool) -> Result<Vec<Token>> {
    let plan = plan_call(engine, options)?;
    engine.tokenizer.tokens(text, plan.prompt, special)
}
