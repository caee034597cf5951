//! TEI's token vectors (`/embed_all`): a text tokenized with its call's prompt and truncation,
//! as one queue item whose rows are every one of its tokens, raw (as the graph gives them:
//! neither pooled nor through the Dense modules), so that it waits, batches, times out and is
//! cancelled like every other call's texts; and [`TokenRows`], how a call of token rows is
//! handed back (the multi-vector kind's too).

use std::sync::atomic::Ordering;

use crate::call::future::{EmbedFuture, Work};
use crate::call::prepare::{Call, Finish, plan_call, too_long};
use crate::call::runner::block_on;
use crate::embedder::Embedder;
use crate::engine::Engine;
use crate::error::{EmbedError, Result};
use crate::schedule::request::{Item, Request, TextInput};
use crate::values::embeddings::{Embeddings, TextTokens, TokenGroups};
use nornir_options::{CallOptions, ModelKind, Truncation};

impl Embedder {
    /// The model's raw token vectors for `text` (its prompt and special tokens included, after
    /// truncation), one row of the graph's width per token, as the graph gives them (neither
    /// pooled nor through Dense modules), for TEI's `/embed_all`; an error for a graph that
    /// pools. The text goes through the queue as every call's texts do: it shares batches, and
    /// `max_wait`, a full queue and `cancel` apply to it; `total_tokens()` counts its tokens.
    pub fn token_vectors(&self, text: &str, options: &CallOptions) -> Result<Embeddings> {
        block_on(self.blocking().run(token_vectors_work(text, options)))
    }

    /// [`token_vectors`](Self::token_vectors) as a future, as [`embed_async`](Self::embed_async)
    /// is: tokenized on the embedder's threads, queued at its first poll, cancelled when dropped.
    pub fn token_vectors_async(&self, text: &str, options: &CallOptions) -> EmbedFuture<'_> {
        self.future(token_vectors_work(text, options))
    }
}

/// The work of a token vectors call.
fn token_vectors_work(text: &str, options: &CallOptions) -> Work {
    let (text, options) = (text.to_owned(), options.clone());
    Work::prepared(1, move |engine| prepare_token_vectors(engine, &text, &options))
}

/// `text`'s token vectors as a call: a row per token, its prompt and special tokens included,
/// after truncation. An error for a model that is not an embedder, or whose graph pools.
fn prepare_token_vectors(engine: &Engine, text: &str, options: &CallOptions) -> Result<Call> {
    // A cross-encoder's or sparse encoder's per-token output is not a text's token vectors.
    engine.expect_kind(ModelKind::Embedder, "token_vectors")?;
    if engine.io.pooled {
        return Err(EmbedError::invalid(
            "output_name",
            format!("the model's output {:?} is one vector per text, so it has no token vectors", engine.info.output),
        ));
    }
    let plan = plan_call(engine, options)?;
    let enc = engine.tokenizer.encode(&[text], plan.prompt, plan.truncation)?.remove(0);
    let truncated = !enc.get_overflowing().is_empty();
    if plan.truncation == Truncation::Refuse && truncated {
        return Err(too_long(engine, 0, text, plan.prompt));
    }
    // The graph's own width: the Dense modules' input when nornir applies them after pooling.
    let width = engine.head.in_features().unwrap_or(engine.info.model_dimension);
    let count = enc.len();
    let request = Request::new(count, width);
    let tokens = vec![TextTokens { count: u32::try_from(count).unwrap_or(u32::MAX), truncated }];
    let groups = TokenGroups { counts: vec![count], ids: enc.get_ids().to_vec() };
    let mut items = Vec::with_capacity(1);
    if count > 0 {
        let spans = (0..count).map(|p| (p, p + 1)).collect();
        let types = enc.get_type_ids().to_vec();
        let input = TextInput { types, spans, raw: true, ..TextInput::new(enc.get_ids().to_vec()) };
        items.push(Item::text(input, &request, 0));
    }
    let call = Call::new(request, items, plan.max_wait, TokenRows { tokens, groups, width });
    if let Some(handle) = &options.cancel
        && !handle.watch(call.request.watchable())
    {
        engine.counters.cancelled_texts.fetch_add(1, Ordering::Relaxed);
        return Err(EmbedError::Cancelled);
    }
    Ok(call)
}

/// A call of token rows: text i fills `groups.counts[i]` rows of `width`, in order, handed back
/// as they came (a raw row per token, or a multi-vector model's rows its kind finishes).
#[derive(Debug)]
pub(crate) struct TokenRows {
    pub(crate) tokens: Vec<TextTokens>,
    pub(crate) groups: TokenGroups,
    pub(crate) width: usize,
}

impl Finish for TokenRows {
    fn finish(self: Box<Self>, engine: &Engine, rows: Vec<f32>) -> Embeddings {
        engine.counters.texts.fetch_add(self.groups.counts.len() as u64, Ordering::Relaxed);
        Embeddings::from_whole_rows(rows, self.width, self.tokens).with_groups(self.groups)
    }
}
