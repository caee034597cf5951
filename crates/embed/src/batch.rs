//! Packing texts into batches by length under a token budget.

/// Indices of texts that run together, all padded to `max_len`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The texts, by their index in the input.
    pub indices: Vec<usize>,
    /// The longest text's token count: what every text is padded to.
    pub max_len: usize,
}

/// Texts up to this many tokens are packed by the token budget alone; longer ones by attention
/// cells too (see [`pack`]).
pub const ATTENTION_FREE_LENGTH: usize = 512;

/// Whether `texts` texts padded to `longest` tokens may run as one batch: `texts x longest`
/// within `token_budget`, and the attention scores within what a full budget of
/// [`ATTENTION_FREE_LENGTH`]-token texts holds. The one rule for [`pack`] and the scheduler.
pub(crate) fn fits(texts: usize, longest: usize, token_budget: usize) -> bool {
    texts.saturating_mul(longest) <= token_budget
        && texts.saturating_mul(longest.saturating_mul(longest)) <= token_budget.saturating_mul(ATTENTION_FREE_LENGTH)
}

/// Sorts texts by token length (longest first) and packs them so that every batch's
/// `texts x longest length` stays within `token_budget`, and its attention scores (texts x
/// length², per head and layer, the only activations that grow with the square of the length)
/// within what a full budget of 512-token texts holds: `token_budget x 512`. So a long-context
/// model (8,192 tokens) gets batches no larger in memory than short texts do, whatever the budget;
/// a text over either bound runs alone. Ties keep input order, so the packing is deterministic.
pub fn pack(lengths: &[usize], token_budget: usize) -> Vec<Batch> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
    let mut batches: Vec<Batch> = Vec::new();
    for i in order {
        let len = lengths[i].max(1);
        match batches.last_mut() {
            // Sorted descending: the batch's first text is its longest.
            Some(b) if fits(b.indices.len() + 1, b.max_len, token_budget) => b.indices.push(i),
            _ => batches.push(Batch { indices: vec![i], max_len: len }),
        }
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_under_budget_and_covers_every_text_once() {
        let lengths = [5, 300, 7, 7, 1, 0, 120, 64];
        let batches = pack(&lengths, 256);
        let mut seen: Vec<usize> = batches.iter().flat_map(|b| b.indices.clone()).collect();
        seen.sort();
        assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
        for b in &batches {
            assert!(b.indices.iter().all(|&i| lengths[i].max(1) <= b.max_len));
            assert!(b.indices.len() == 1 || b.indices.len() * b.max_len <= 256, "{b:?}");
        }
        assert_eq!(batches[0], Batch { indices: vec![1], max_len: 300 }, "an over-budget text runs alone");
        assert_eq!(batches[1].indices, vec![6, 7]);
    }

    #[test]
    fn empty_input() {
        assert!(pack(&[], 512).is_empty());
    }

    #[test]
    fn long_texts_are_bounded_by_attention_not_only_tokens() {
        // 512 tokens and under: the token budget alone.
        assert_eq!(pack(&[512; 8], 4096).len(), 1);
        assert_eq!(pack(&[128; 128], 16384).len(), 1);
        // Four 8,192-token texts fit a 65,536-token budget but would hold 16 times the attention
        // scores of 128 texts of 512 tokens: each runs alone.
        assert_eq!(pack(&[8192; 4], 65536).len(), 4);
        // 1,024 tokens: half the texts the token budget alone would allow.
        assert_eq!(pack(&[1024; 8], 8192).iter().map(|b| b.indices.len()).collect::<Vec<_>>(), [4, 4]);
    }
}
