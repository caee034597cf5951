//! Packing texts into batches by length under a token budget.

/// Indices of texts that run together, all padded to `max_len`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub indices: Vec<usize>,
    pub max_len: usize,
}

/// Sorts texts by token length (longest first) and packs them so that every batch's
/// `texts x longest length` stays within `token_budget`. A text longer than the budget runs alone.
/// Ties keep input order, so the packing is deterministic.
pub fn pack(lengths: &[usize], token_budget: usize) -> Vec<Batch> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
    let mut batches: Vec<Batch> = Vec::new();
    for i in order {
        let len = lengths[i].max(1);
        match batches.last_mut() {
            // Sorted descending: the batch's first text is its longest.
            Some(b) if (b.indices.len() + 1) * b.max_len <= token_budget => b.indices.push(i),
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
}
