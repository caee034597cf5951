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
