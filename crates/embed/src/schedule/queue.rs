//! The texts (and images) waiting to run, indexed by length and by call, and the rule that cuts
//! the next batch from them: the most due call's longest text, with texts of similar length from
//! calls due soon after, under the token budget and the attention bound; or, when that call's
//! longest item is an image, images of its size alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use crate::schedule::request::Item;

/// Images per run of the vision graph.
pub(crate) const IMAGES_PER_RUN: usize = 16;

/// Texts up to this many tokens are packed by the token budget alone; longer ones by attention
/// cells too (see [`fits`]).
pub(crate) const ATTENTION_FREE_LENGTH: usize = 512;

/// Whether `texts` texts padded to `longest` tokens may run as one batch: `texts x longest`
/// within `token_budget`, and, where attention builds the `queries x keys` matrix
/// (`whole_matrix`), its scores within what a full budget of [`ATTENTION_FREE_LENGTH`]-token
/// texts holds.
pub(crate) fn within_budget(texts: usize, longest: usize, token_budget: usize, whole_matrix: bool) -> bool {
    texts.saturating_mul(longest) <= token_budget
        && (!whole_matrix
            || texts.saturating_mul(longest.saturating_mul(longest))
                <= token_budget.saturating_mul(ATTENTION_FREE_LENGTH))
}

/// How batches are cut, by where they run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BatchPolicy {
    /// Padding a batch may carry, as a fraction of its longest text (plus 2 tokens).
    max_padding: f32,
    /// How far past the most due call a batch reaches for company, in runs of a full batch.
    horizon_batches: f64,
    /// Which batches the model attends without the `queries x keys` matrix in.
    attention: Tiling,
}

/// Which batches a model attends in tiles, never holding the `queries x keys` matrix
/// (`graph_scan::Attention`): those need the token budget only; the others keep the attention
/// bound too.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Tiling {
    /// None: every batch builds the matrix.
    Never,
    /// A batch without padding (texts of one length).
    Unpadded,
    /// Every batch (nornir's attention kernels, which skip padded keys in the tile).
    Always,
}

impl BatchPolicy {
    /// On the CPU every padded token costs as much as a real one and batch size hardly matters
    /// (on the corpus, batches of 2.6 texts ran at 300 texts/s and of 9 at 322): batches keep to
    /// similar lengths (10% padding) and to calls due within half a batch's run, which keeps
    /// latency even (16 one-text callers: p99 under 2x p50). A GPU gains more from large batches
    /// than it loses to padding: no bounds there but the token budget.
    pub(crate) const CPU: Self = Self { max_padding: 0.1, horizon_batches: 0.5, attention: Tiling::Never };
    pub(crate) const GPU: Self =
        Self { max_padding: f32::INFINITY, horizon_batches: f64::INFINITY, attention: Tiling::Never };

    pub(crate) const fn with_attention(self, attention: Tiling) -> Self {
        Self { attention, ..self }
    }

    fn horizon_micros(self, micros_per_token: f64, token_budget: usize) -> i64 {
        (self.horizon_batches * micros_per_token * token_budget as f64).min(i64::MAX as f64 / 4.0) as i64
    }
}

/// A call's place in line: its arrival less its longest text's expected run time (so a long text
/// starts early enough to finish about when a short one that came with it does), then its number.
pub(crate) type CallKey = (i64, u64);

/// Texts waiting to run, indexed two ways: by length, to cut batches of similar lengths, and by
/// call, in [`CallKey`] order, so the call that is most due is always served next.
#[derive(Debug)]
pub(crate) struct Queue {
    /// Waiting texts by id, with their call.
    pub(crate) items: HashMap<u64, (CallKey, Item)>,
    /// (length, u64::MAX - id): descending order visits longer texts first, older first among equals.
    pub(crate) by_length: BTreeSet<(usize, u64)>,
    /// Per call, most due first: its waiting texts, keyed as in `by_length`.
    pub(crate) by_call: BTreeMap<CallKey, BTreeSet<(usize, u64)>>,
    pub(crate) next_id: u64,
    pub(crate) next_call: u64,
    /// When the queue was made: arrivals are microseconds since.
    pub(crate) epoch: Instant,
    /// Run time per token fed, in microseconds, averaged over recent batches.
    pub(crate) micros_per_token: f64,
    /// Tokens of the waiting texts.
    pub(crate) tokens: usize,
    /// Workers running a batch now, by worker number.
    pub(crate) busy: Vec<bool>,
    /// Texts in the batch each worker runs now.
    pub(crate) running: Vec<usize>,
    pub(crate) shutdown: bool,
}

impl Queue {
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            items: HashMap::new(),
            by_length: BTreeSet::new(),
            by_call: BTreeMap::new(),
            next_id: 0,
            next_call: 0,
            epoch: Instant::now(),
            micros_per_token: 0.0,
            tokens: 0,
            busy: vec![false; workers],
            running: vec![0; workers],
            shutdown: false,
        }
    }

    /// The next batch: the longest text of the most due call, with the waiting texts closest
    /// below it in length from calls due within the policy's horizon, while they fit the token
    /// budget, the attention bound and the padding bound.
    pub(crate) fn next_batch(&mut self, token_budget: usize, policy: BatchPolicy) -> Option<Vec<Item>> {
        let (&(due, _), texts) = self.by_call.iter().next()?;
        let &(longest, anchor_key) = texts.last()?;
        let anchor = u64::MAX - anchor_key;
        let horizon = due.saturating_add(policy.horizon_micros(self.micros_per_token, token_budget));
        if let Some(size) = self.items.get(&anchor).and_then(|(_, item)| item.image_size()) {
            return Some(self.next_images(anchor, longest, size, horizon));
        }
        let floor = longest.saturating_sub((policy.max_padding * longest as f32).min(longest as f32) as usize + 2);
        let mut chosen = vec![anchor];
        let mut one_length = true;
        for &(len, key) in self.by_length.range(..=(longest, u64::MAX)).rev() {
            let id = u64::MAX - key;
            if id == anchor {
                continue;
            }
            // Images never join a batch of texts.
            if self.items.get(&id).is_some_and(|(call, item)| call.0 > horizon || item.image_size().is_some()) {
                continue;
            }
            let n = chosen.len() + 1;
            one_length &= len == longest;
            let whole_matrix = match policy.attention {
                Tiling::Never => true,
                Tiling::Unpadded => !one_length,
                Tiling::Always => false,
            };
            if len < floor || !within_budget(n, longest, token_budget, whole_matrix) {
                break;
            }
            chosen.push(id);
        }
        Some(chosen.into_iter().filter_map(|id| self.remove(id)).collect())
    }

    /// A batch of images: the `anchor` image with the oldest waiting images of its pixel `size`
    /// (so of its `length`) from calls due by `horizon`, up to [`IMAGES_PER_RUN`]. The vision
    /// graph takes one size per run (a shortest-edge resize without a crop gives many).
    fn next_images(&mut self, anchor: u64, length: usize, size: (u32, u32), horizon: i64) -> Vec<Item> {
        let mut chosen = vec![anchor];
        for &(_, key) in self.by_length.range((length, 0)..=(length, u64::MAX)).rev() {
            if chosen.len() == IMAGES_PER_RUN {
                break;
            }
            let id = u64::MAX - key;
            let joins =
                self.items.get(&id).is_some_and(|(call, item)| call.0 <= horizon && item.image_size() == Some(size));
            if id != anchor && joins {
                chosen.push(id);
            }
        }
        chosen.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<Item> {
        let (call, item) = self.items.remove(&id)?;
        let len = item.length();
        self.tokens -= len;
        self.by_length.remove(&(len, u64::MAX - id));
        if let Some(texts) = self.by_call.get_mut(&call) {
            texts.remove(&(len, u64::MAX - id));
            if texts.is_empty() {
                self.by_call.remove(&call);
            }
        }
        Some(item)
    }

    pub(crate) fn push(&mut self, items: Vec<Item>) {
        let longest = items.iter().map(Item::cost).max().unwrap_or(0);
        let arrival = i64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(i64::MAX);
        let call = (arrival - (self.micros_per_token * longest as f64) as i64, self.next_call);
        self.next_call += 1;
        let texts = self.by_call.entry(call).or_default();
        for item in items {
            let (id, len) = (self.next_id, item.length());
            self.next_id += 1;
            self.by_length.insert((len, u64::MAX - id));
            texts.insert((len, u64::MAX - id));
            self.tokens += len;
            self.items.insert(id, (call, item));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_bounded_by_attention_not_only_tokens() {
        // 512 tokens and under: the token budget alone.
        assert!(within_budget(8, 512, 4096, true));
        assert!(within_budget(128, 128, 16384, true));
        assert!(!within_budget(9, 512, 4096, true));
        // Four 8,192-token texts fit a 65,536-token budget but would hold 16 times the attention
        // scores of 128 texts of 512 tokens: each runs alone.
        assert!(
            within_budget(4, 8192, 65536 * 16, true) && !within_budget(2, 8192, 65536, true),
            "the token budget alone would allow 8"
        );
        // 1,024 tokens: half the texts the token budget alone would allow.
        assert!(within_budget(4, 1024, 8192, true));
        assert!(!within_budget(5, 1024, 8192, true));
        // Attention without the matrix: the token budget alone.
        assert!(within_budget(8, 8192, 65536, false) && !within_budget(9, 8192, 65536, false));
    }
}
