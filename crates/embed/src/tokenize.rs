//! Tokenizing long texts cheaply: a prefix cut at whitespace, long enough for the length limit.

/// Bytes of text per token kept when cutting a long text before tokenizing: far more than any
/// tokenizer needs (an English token is about 4 bytes; a word piece never spans whitespace).
pub(crate) const PREFIX_BYTES_PER_TOKEN: usize = 64;

/// The start of `text` that is enough for `max_length` tokens, cut at whitespace so that its
/// tokens are the first tokens of the whole text; the whole text when it is short.
pub(crate) fn prefix_for_tokens(text: &str, max_length: usize) -> &str {
    let limit = max_length.saturating_mul(PREFIX_BYTES_PER_TOKEN).max(4096);
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    // Without whitespace there is no safe cut: a word piece depends on the whole word.
    match text[..end].rfind(char::is_whitespace) {
        Some(i) if i > 0 => &text[..i],
        _ => text,
    }
}

/// The end of `text` that is enough for `max_length` tokens, starting after whitespace, so that
/// its tokens but perhaps the first are the last tokens of the whole text (a byte-level BPE's
/// first word loses its space); the whole text when it is short.
pub(crate) fn suffix_for_tokens(text: &str, max_length: usize) -> &str {
    let limit = max_length.saturating_mul(PREFIX_BYTES_PER_TOKEN).max(4096);
    if text.len() <= limit {
        return text;
    }
    let mut start = text.len() - limit;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    match text[start..].find(char::is_whitespace) {
        Some(i) => {
            let from = start + i;
            let ws = text[from..].chars().next().map_or(1, char::len_utf8);
            if from + ws < text.len() { &text[from + ws..] } else { text }
        }
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_at_whitespace_on_the_side_that_is_kept() {
        let long = format!("{} tail end", "word ".repeat(2000));
        let p = prefix_for_tokens(&long, 10);
        assert!(long.starts_with(p) && p.len() < long.len() && p.len() <= 4096 && !p.ends_with(' '), "{p:?}");
        let s = suffix_for_tokens(&long, 10);
        assert!(long.ends_with(s) && s.len() < long.len() && s.len() <= 4096 && !s.starts_with(' '), "{s:?}");
        assert!(s.ends_with("tail end"));
        let solid = "x".repeat(10_000);
        assert_eq!(suffix_for_tokens(&solid, 10), solid, "no whitespace: no safe cut");
        assert_eq!(suffix_for_tokens("short", 10), "short");
    }
}
