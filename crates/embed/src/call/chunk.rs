//! Cutting a long text's token ids into overlapping windows that start on words, and grouping
//! those windows into passes of the model for late chunking. Pure functions over token indices.

use std::ops::Range;

/// Whether token `i` continues the word of token `i - 1` (a cut there would split a word).
fn inside_word(words: &[Option<u32>], i: usize) -> bool {
    i > 0 && i < words.len() && words[i].is_some() && words[i] == words[i - 1]
}

/// Windows `[a, b)` over `words.len()` tokens, each at most `capacity` long, each starting at
/// most `overlap` tokens before the previous one ends. A cut moves back to the start of the word
/// it would split, by at most half a window; a word longer than that is cut where it must be.
/// Every token is in a window; no tokens, no windows. `capacity` must exceed `overlap`.
pub(crate) fn windows(words: &[Option<u32>], capacity: usize, overlap: usize) -> Vec<(usize, usize)> {
    let n = words.len();
    let capacity = capacity.max(1);
    let mut out = Vec::new();
    let mut a = 0;
    while a < n {
        let mut b = (a + capacity).min(n);
        if b < n {
            let floor = a + capacity / 2;
            let mut e = b;
            while e > floor && inside_word(words, e) {
                e -= 1;
            }
            if !inside_word(words, e) && e > a {
                b = e;
            }
        }
        out.push((a, b));
        if b == n {
            break;
        }
        let mut next = b.saturating_sub(overlap).max(a + 1);
        let mut s = next;
        while s > a + 1 && inside_word(words, s) {
            s -= 1;
        }
        if !inside_word(words, s) {
            next = s;
        }
        a = next;
    }
    out
}

/// Passes of the model for late chunking: each `(from, to, chunks)` runs tokens `[from, to)`
/// (at most `capacity`) and holds `chunks` whole, starting up to `context` tokens before its first
/// chunk, for the context on its left, and reaching as far right as `capacity` allows.
pub(crate) fn late_passes(
    chunks: &[(usize, usize)],
    tokens: usize,
    capacity: usize,
    context: usize,
) -> Vec<(usize, usize, Range<usize>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < chunks.len() {
        let (a, b) = chunks[i];
        let from = a - context.min(capacity.saturating_sub(b - a)).min(a);
        let limit = from + capacity;
        let mut j = i + 1;
        while j < chunks.len() && chunks[j].1 <= limit {
            j += 1;
        }
        out.push((from, limit.min(tokens), i..j));
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words of `sizes[k]` tokens each, as a tokenizer's word ids.
    fn words(sizes: &[usize]) -> Vec<Option<u32>> {
        sizes.iter().enumerate().flat_map(|(w, &n)| std::iter::repeat_n(Some(w as u32), n)).collect()
    }

    #[test]
    fn windows_are_exact_and_overlap_as_asked() {
        let w = words(&[1; 100]);
        let got = windows(&w, 40, 10);
        assert_eq!(got, [(0, 40), (30, 70), (60, 100)]);
        assert_eq!(windows(&w, 100, 10), [(0, 100)], "a text that fits is one window");
        assert_eq!(windows(&w, 200, 10), [(0, 100)]);
        assert_eq!(windows(&[], 40, 10), []);
        for (cap, overlap) in [(7, 0), (7, 6), (16, 3), (1, 0)] {
            let got = windows(&w, cap, overlap);
            assert_eq!(got.first().map(|c| c.0), Some(0));
            assert_eq!(got.last().map(|c| c.1), Some(100));
            for pair in got.windows(2) {
                let ((a0, b0), (a1, b1)) = (pair[0], pair[1]);
                assert!(b0 - a0 <= cap && b1 - a1 <= cap && a1 > a0 && a1 <= b0, "{cap} {overlap}: {got:?}");
                assert_eq!(b0 - a1, overlap.min(b0 - a0 - 1), "{cap} {overlap}: {got:?}");
            }
        }
    }

    #[test]
    fn cuts_fall_on_word_starts() {
        // Words of 3 tokens: a cut at 40 would split word 13 (tokens 39..42).
        let w = words(&[3; 40]);
        let got = windows(&w, 40, 10);
        for &(a, b) in &got {
            assert!(!inside_word(&w, a) && (b == w.len() || !inside_word(&w, b)), "{got:?}");
            assert!(b - a <= 40);
        }
        assert_eq!(got[0], (0, 39));
        // One word longer than half a window is cut where it must be.
        let w = words(&[100]);
        assert_eq!(windows(&w, 40, 0), [(0, 40), (40, 80), (80, 100)]);
    }

    #[test]
    fn late_passes_hold_their_chunks_whole_with_context_before() {
        let chunks = windows(&words(&[1; 1000]), 100, 20);
        let passes = late_passes(&chunks, 1000, 510, 20);
        let mut next = 0;
        for (from, to, range) in &passes {
            assert!(to - from <= 510 && *to <= 1000);
            assert_eq!(range.start, next, "every chunk in one pass, in order");
            next = range.end;
            for &(a, b) in &chunks[range.clone()] {
                assert!(*from <= a && b <= *to, "{from}..{to} holds {a}..{b}");
            }
            if chunks[range.start].0 >= 20 {
                assert_eq!(chunks[range.start].0 - from, 20, "context on the left");
            }
        }
        assert_eq!(next, chunks.len());
        assert_eq!(late_passes(&[(0, 300)], 300, 510, 20), [(0, 300, 0..1)], "one pass for a text that fits");
        // A chunk as long as a pass gets no context.
        assert_eq!(late_passes(&[(0, 510), (490, 600)], 600, 510, 20), [(0, 510, 0..1), (470, 600, 1..2)]);
    }
}
