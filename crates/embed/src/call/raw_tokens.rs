//! TEI's token vectors (`/embed_all`) before the queue: a text tokenized with its call's prompt
//! and truncation, as one queue item whose rows are every one of its tokens, raw (as the graph
//! gives them: neither pooled nor through the Dense modules), so that it waits, batches, times
//! out and is cancelled like every other call's texts.

use crate::call::prepare::{Call, plan_call, too_long};
use crate::engine::Engine;
use crate::error::{EmbedError, Result};
use crate::schedule::request::{Item, Request};
use crate::values::embeddings::{TextTokens, TokenGroups};
use nornir_options::{CallOptions, ModelKind, Truncation};

/// `text`'s token vectors as a call: a row per token, its prompt and special tokens included,
/// after truncation. An error for a model that is not an embedder, or whose graph pools.
pub(crate) fn prepare_token_vectors(engine: &Engine, text: &str, options: &CallOptions) -> Result<Call> {
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
        let mut item = Item::new(enc.get_ids().to_vec(), 0, spans, &request, 0);
        item.types = enc.get_type_ids().to_vec();
        item.raw = true;
        items.push(item);
    }
    let call = Call::of_tokens(request, items, tokens, groups, width, plan.max_wait);
    if let Some(handle) = &options.cancel
        && !handle.watch(call.request.watchable())
    {
        engine.counters.cancelled_texts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Err(EmbedError::Cancelled);
    }
    Ok(call)
}
