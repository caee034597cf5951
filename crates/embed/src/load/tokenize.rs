//! The model's tokenizer as a call uses it: with the call's prompt, truncated to the model's
//! length on the side the call keeps (a very long text cut at whitespace before tokenizing, so a
//! 10 MB line costs no more than its kept part), counted whole for an error, listed token by
//! token for TEI's `/tokenize`, and decoded.

use std::borrow::Cow;
use std::sync::OnceLock;

use tokenizers::{Encoding, PaddingDirection, Tokenizer, TruncationDirection, TruncationParams};

use crate::error::{EmbedError, InferenceKind, Result};
use crate::load::checks::MAX_TOKENS;
use crate::load::files::{TOKENIZER_MAX_BYTES, read_bounded};
use crate::values::{ModelFolder, Token};
use nornir_options::Truncation;

/// Calls of at most this many texts are tokenized serially, in the thread that prepares the call.
pub(crate) const SERIAL_TOKENIZE: usize = 16;

/// Texts longer than this many bytes are not tokenized whole just to count their tokens for
/// [`EmbedError::TooLong`]: the count is then a lower bound.
pub(crate) const COUNT_WHOLE_BYTES: usize = 1 << 20;

/// `text` with `prompt` before it; the text itself, not a copy, when there is no prompt (a text
/// can be a 10 MB line).
pub(crate) fn with_prompt<'a>(prompt: &str, text: &'a str) -> Cow<'a, str> {
    if prompt.is_empty() { Cow::Borrowed(text) } else { Cow::Owned(format!("{prompt}{text}")) }
}

pub(crate) fn tokenizer_failed(e: tokenizers::Error) -> EmbedError {
    EmbedError::inference_because(InferenceKind::Tokenizer, "tokenization failed", e)
}

/// The model's tokenizer, in the three forms a call needs: truncating on the right (the usual
/// one), on the left, and not at all; the last two are made at their first use.
#[derive(Debug)]
pub(crate) struct ModelTokenizer {
    right: Tokenizer,
    left: OnceLock<Tokenizer>,
    whole: OnceLock<Tokenizer>,
    /// A pair's second text cut first, on the right and on the left.
    second_right: OnceLock<Tokenizer>,
    second_left: OnceLock<Tokenizer>,
    max_length: usize,
    /// Which limit `max_length` is, in words.
    max_length_reason: String,
    left_padding: bool,
    /// A static model's texts are cut to this many characters before tokenizing, as
    /// model2vec's `encode` cuts them (`max_length` x the vocabulary's median token length).
    char_limit: Option<usize>,
}

impl ModelTokenizer {
    /// The folder's `tokenizer.json`, without padding, truncating at `max_length` tokens or, when
    /// that is not given, at the folder's `max_seq_length`, the tokenizer's own truncation,
    /// `max_position_embeddings` or 512, in that order, the folder's own no more than its
    /// positions (or `MAX_TOKENS` where it states none). Refused when it has more tokens than the
    /// model's embedding table has rows.
    pub(crate) fn load(folder: &ModelFolder, max_length: Option<usize>) -> Result<Self> {
        let file = &folder.tokenizer_file;
        let text =
            read_bounded(file, TOKENIZER_MAX_BYTES).map_err(|e| EmbedError::tokenizer_because(file, e.into()))?;
        let mut tokenizer: Tokenizer = text.parse().map_err(|e| EmbedError::tokenizer_because(file, e))?;
        // The folder's own limits never pass the model's positions (or, where it states none,
        // MAX_TOKENS): a tokenizer.json that truncates at 1e15 is not a length to plan for.
        if let (Some(asked), Some(rows)) = (max_length, folder.max_position_embeddings)
            && asked > rows
        {
            // ONNX Runtime would fail on the first text that long, deep in the graph.
            return Err(EmbedError::invalid(
                "max_length",
                format!(
                    "{asked} tokens is more than the model places: its positions end at {rows} (config.json's max_position_embeddings)"
                ),
            ));
        }
        let tokenizer_cut = tokenizer.get_truncation().map(|t| t.max_length);
        let (max_length, max_length_reason) =
            length_rule(max_length, folder.max_seq_length, tokenizer_cut, folder.max_position_embeddings);
        if max_length == 0 {
            return Err(EmbedError::invalid("max_length", "must be at least 1"));
        }
        let vocab = tokenizer.get_vocab_size(true);
        if let Some(rows) = folder.vocab_size
            && vocab > rows
        {
            return Err(EmbedError::tokenizer(
                file,
                format!(
                    "it has {vocab} tokens but config.json says the model has {rows} (vocab_size), so it is not this model's tokenizer"
                ),
            ));
        }
        let left_padding = tokenizer.get_padding().is_some_and(|p| matches!(p.direction, PaddingDirection::Left));
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length, ..TruncationParams::default() }))
            .map_err(|e| EmbedError::tokenizer_because(file, e))?;
        Ok(Self {
            right: tokenizer,
            left: OnceLock::new(),
            whole: OnceLock::new(),
            second_right: OnceLock::new(),
            second_left: OnceLock::new(),
            max_length,
            max_length_reason,
            left_padding,
            char_limit: None,
        })
    }

    /// The tokenizer as model2vec's `StaticModel` uses it: no special tokens (its post-processor
    /// removed, as `add_special_tokens=False` leaves them out), each text first cut to
    /// `max_length` times the vocabulary's median token length in characters (none without a
    /// `max_length`).
    pub(crate) fn for_static_model(mut self, max_length: Option<usize>) -> Self {
        self.right.with_post_processor(None::<tokenizers::PostProcessorWrapper>);
        let mut lengths: Vec<usize> = self.right.get_vocab(true).keys().map(|t| t.chars().count()).collect();
        lengths.sort_unstable();
        let n = lengths.len();
        // NumPy's median, truncated to a whole number as model2vec's int() does.
        let median = match n {
            0 => 0,
            _ if n % 2 == 1 => lengths[n / 2],
            _ => (lengths[n / 2 - 1] + lengths[n / 2]) / 2,
        };
        self.char_limit = max_length.map(|m| m.saturating_mul(median));
        // The folder's limit is model2vec's config key, not sentence-transformers'.
        let st = "sentence-transformers' max_seq_length";
        self.max_length_reason = match max_length {
            None if !self.max_length_reason.starts_with("asked for") => {
                "config.json's max_length is null: model2vec keeps every token (nornir's bound)".to_owned()
            }
            _ => self.max_length_reason.replace(st, "config.json's max_length (model2vec's)"),
        };
        self
    }

    /// The unknown token's id, as model2vec finds it: the model's `unk_token` (WordPiece, BPE,
    /// WordLevel) or `unk_id` (Unigram); `None` where it has none.
    pub(crate) fn unknown_id(&self) -> Option<u32> {
        let model = serde_json::to_value(self.right.get_model()).ok()?;
        match (model.get("unk_token").and_then(|t| t.as_str()), model.get("unk_id").and_then(|i| i.as_u64())) {
            (Some(token), _) => self.right.token_to_id(token),
            (None, Some(id)) => u32::try_from(id).ok(),
            (None, None) => None,
        }
    }

    /// `text` as it is tokenized: a static model's cut to its character limit.
    fn cut<'a>(&self, text: &'a str) -> &'a str {
        match self.char_limit {
            Some(limit) => text.char_indices().nth(limit).map_or(text, |(i, _)| &text[..i]),
            None => text,
        }
    }

    /// Which limit [`max_length`](Self::max_length) is, and the others, in words.
    pub(crate) fn max_length_reason(&self) -> &str {
        &self.max_length_reason
    }

    /// The most tokens of a text the model reads.
    pub(crate) fn max_length(&self) -> usize {
        self.max_length
    }

    /// The tokenizer pads on the left, so the graph expects texts there.
    pub(crate) fn left_padding(&self) -> bool {
        self.left_padding
    }

    /// Truncates on the right, to the model's length.
    pub(crate) fn truncating(&self) -> &Tokenizer {
        &self.right
    }

    /// Does not truncate: counts a refused text's tokens, cuts chunks, and lists tokens.
    pub(crate) fn whole(&self) -> &Tokenizer {
        self.whole.get_or_init(|| {
            let mut t = self.right.clone();
            let _ = t.with_truncation(None);
            t
        })
    }

    /// Truncates on the left.
    fn left(&self) -> &Tokenizer {
        self.left.get_or_init(|| {
            let mut t = self.right.clone();
            let params = TruncationParams {
                max_length: self.max_length,
                direction: TruncationDirection::Left,
                ..TruncationParams::default()
            };
            // Only a stride of max_length or more is refused, and the stride is 0.
            let _ = t.with_truncation(Some(params));
            t
        })
    }

    /// Truncates a pair's second text only, on the side `left` says (errs when cutting the second
    /// text alone cannot make the pair fit).
    fn second_only(&self, left: bool) -> &Tokenizer {
        let cell = if left { &self.second_left } else { &self.second_right };
        cell.get_or_init(|| {
            let mut t = self.right.clone();
            let params = TruncationParams {
                max_length: self.max_length,
                strategy: tokenizers::TruncationStrategy::OnlySecond,
                direction: if left { TruncationDirection::Left } else { TruncationDirection::Right },
                ..TruncationParams::default()
            };
            let _ = t.with_truncation(Some(params));
            t
        })
    }

    /// A (query, document) pair as the tokenizer's own pair encoding (BERT's `[CLS] q [SEP] d
    /// [SEP]` with token types 0 and 1, XLM-RoBERTa's `<s> q </s></s> d </s>`), cut to the model's
    /// length: the document first, and the query too (longest first) only when the query alone
    /// leaves no room; without a document, the query as one text. A very long text is tokenized
    /// from its kept part, as in `encode`.
    pub(crate) fn encode_pair(&self, query: &str, document: Option<&str>, truncation: Truncation) -> Result<Encoding> {
        let left = truncation == Truncation::Left;
        let part: fn(&str, usize) -> &str = if left { suffix_for_tokens } else { prefix_for_tokens };
        let longest_first = if left { self.left() } else { &self.right };
        let encode = |q: &str, d: Option<&str>| match d {
            None => longest_first.encode(q, true),
            Some(d) => {
                let pair = tokenizers::EncodeInput::Dual(q.into(), d.into());
                self.second_only(left).encode(pair.clone(), true).or_else(|_| longest_first.encode(pair, true))
            }
        };
        let (q, d) = (part(query, self.max_length), document.map(|d| part(d, self.max_length)));
        let mut enc = encode(q, d).map_err(tokenizer_failed)?;
        let cut = q.len() < query.len() || d.zip(document).is_some_and(|(d, whole)| d.len() < whole.len());
        if cut && enc.len() < self.max_length {
            enc = encode(query, document).map_err(tokenizer_failed)?;
        }
        Ok(enc)
    }

    /// The pair's (or the text's) tokens when it has more than the model reads, for a call that
    /// refuses to cut.
    pub(crate) fn pair_too_long(&self, query: &str, document: Option<&str>) -> Result<Option<usize>> {
        let enc = match document {
            Some(d) => self.whole().encode((query, d), true),
            None => self.whole().encode(query, true),
        };
        let count = enc.map_err(tokenizer_failed)?.len();
        Ok((count > self.max_length).then_some(count))
    }

    /// The tokens of `prompt` as sentence-transformers counts them for `include_prompt: false`:
    /// the prompt tokenized with the special tokens, less a special token at its end (the `[SEP]`
    /// or end-of-text that closes it alone, not the text it goes before).
    pub(crate) fn prompt_token_count(&self, prompt: &str) -> tokenizers::Result<usize> {
        let enc = self.right.encode(prompt, true)?;
        let ends_special = enc.get_special_tokens_mask().last() == Some(&1);
        Ok(enc.len() - usize::from(ends_special))
    }

    /// Token ids of each text with `prompt`, truncated to the model's length on the side
    /// `truncation` says (`Refuse` truncates on the right; the caller refuses what was cut). A very
    /// long text is tokenized from the part that is kept, cut at whitespace (a 10 MB line would
    /// otherwise cost seconds and a gigabyte); when that part yields fewer tokens than the limit,
    /// the whole text is tokenized instead, so the ids are always those of the whole text.
    pub(crate) fn encode(&self, texts: &[&str], prompt: &str, truncation: Truncation) -> Result<Vec<Encoding>> {
        let max_length = self.max_length;
        let texts: Vec<&str> = texts.iter().map(|t| self.cut(t)).collect();
        let (tokenizer, part): (&Tokenizer, fn(&str, usize) -> &str) = match truncation {
            Truncation::Left => (self.left(), suffix_for_tokens),
            Truncation::Right | Truncation::Refuse => (&self.right, prefix_for_tokens),
        };
        let parts: Vec<&str> = texts.iter().map(|t| part(t, max_length)).collect();
        let inputs: Vec<Cow<'_, str>> = parts.iter().map(|t| with_prompt(prompt, t)).collect();
        // A few texts are tokenized right here: the tokenizer's parallel batch would wake a thread
        // pool for microseconds of work, and many concurrent callers would fight over it.
        let mut encodings = if inputs.len() <= SERIAL_TOKENIZE {
            inputs.iter().map(|t| tokenizer.encode(t.as_ref(), true)).collect::<tokenizers::Result<Vec<_>>>()
        } else {
            tokenizer.encode_batch(inputs.iter().map(|t| t.as_ref()).collect(), true)
        }
        .map_err(tokenizer_failed)?;
        for (i, enc) in encodings.iter_mut().enumerate() {
            if parts[i].len() < texts[i].len() && enc.len() < max_length {
                *enc = tokenizer.encode(with_prompt(prompt, texts[i]).as_ref(), true).map_err(tokenizer_failed)?;
            }
        }
        Ok(encodings)
    }

    /// Every token of `text` with `prompt`, not cut to the model's length (TEI's `/tokenize`),
    /// special tokens included when `special`. Offsets are bytes of the prompted text.
    pub(crate) fn tokens(&self, text: &str, prompt: &str, special: bool) -> Result<Vec<Token>> {
        let prompted = with_prompt(prompt, text);
        let enc = self.whole().encode(prompted.as_ref(), special).map_err(tokenizer_failed)?;
        let mask = enc.get_special_tokens_mask();
        Ok(enc
            .get_ids()
            .iter()
            .zip(enc.get_tokens())
            .zip(enc.get_offsets())
            .enumerate()
            .map(|(k, ((&id, token), &(start, stop)))| {
                let special = mask.get(k) == Some(&1);
                let text = match prompted.get(start..stop) {
                    Some(t) if !special => t.to_owned(),
                    _ => token.clone(),
                };
                Token { id, text, special, start, stop }
            })
            .collect())
    }

    /// How many tokens `text` with `prompt` has, counted whole; `None` for a text over
    /// [`COUNT_WHOLE_BYTES`], which would cost too much to count.
    pub(crate) fn count_whole(&self, text: &str, prompt: &str) -> Option<usize> {
        if text.len() > COUNT_WHOLE_BYTES {
            return None;
        }
        self.whole().encode(with_prompt(prompt, text).as_ref(), true).ok().map(|e| e.len())
    }

    /// The text of token ids, special tokens left out when `skip_special`.
    pub(crate) fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let vocab = self.right.get_vocab_size(true);
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(EmbedError::invalid(
                "ids",
                format!("token id {id} is not in the model's vocabulary of {vocab} tokens"),
            ));
        }
        self.right
            .decode(ids, skip_special)
            .map_err(|e| EmbedError::inference_because(InferenceKind::Tokenizer, "decoding failed", e))
    }
}

/// Bytes of text per token kept when cutting a long text before tokenizing: far more than any
/// tokenizer needs (an English token is about 4 bytes; a word piece never spans whitespace).
pub(crate) const PREFIX_BYTES_PER_TOKEN: usize = 64;

/// The length rule: the caller's length where given; else sentence-transformers' `max_seq_length`
/// (which it tokenizes with, whatever tokenizer.json's own truncation says), else the
/// tokenizer's; either no more than the model's positions (`MAX_TOKENS` where it states none);
/// else the positions, else 512. With the reason in words, naming the limits not taken.
fn length_rule(
    asked: Option<usize>,
    sentence_transformers: Option<usize>,
    tokenizer: Option<usize>,
    positions: Option<usize>,
) -> (usize, String) {
    let mut others = Vec::new();
    if let Some(n) = sentence_transformers {
        others.push(format!("sentence-transformers' max_seq_length {n}"));
    }
    if let Some(n) = tokenizer.filter(|&n| n <= MAX_TOKENS) {
        others.push(format!("tokenizer.json's truncation {n}"));
    }
    if let Some(n) = positions {
        others.push(format!("{n} positions"));
    }
    let limits = if others.is_empty() { "the folder states no limit".to_owned() } else { others.join(", ") };
    let cap = positions.unwrap_or(MAX_TOKENS);
    match (asked, sentence_transformers, tokenizer, positions) {
        (Some(n), ..) => (n, format!("asked for ({limits})")),
        (None, Some(n), _, _) if n > cap => (cap, format!("the model's positions ({limits})")),
        (None, Some(n), _, _) => (n, format!("sentence-transformers' max_seq_length ({limits})")),
        (None, None, Some(n), _) if n > cap => (cap, format!("the model's positions ({limits})")),
        (None, None, Some(n), _) => (n, format!("tokenizer.json's truncation ({limits})")),
        (None, None, None, Some(n)) => (n, format!("the model's positions ({limits})")),
        (None, None, None, None) => (512, "nornir's default: the folder states no limit".to_owned()),
    }
}

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
mod tests;
