//! [`CallOptions`]: what one call may choose for its own texts (prompt, normalisation,
//! dimensions, truncation) on an embedder built once. Calls with different options still share
//! batches: what the model reads is token ids, and the rest happens to each call's own rows.

/// The prompt of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallPrompt {
    /// A prompt of the folder's `config_sentence_transformers.json`, by name (`"query"`).
    Name(String),
    /// This text before every text; `""` for none, not even the folder's default.
    Text(String),
}

/// What to do with a text longer than the model reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Truncation {
    /// Keep its first tokens (as sentence-transformers does).
    #[default]
    Right,
    /// Keep its last tokens (TEI's `truncation_direction: "Left"`). A prompt before the text is
    /// cut first, and the whole text is then pooled.
    Left,
    /// Fail the call with [`EmbedError::TooLong`](crate::EmbedError::TooLong), naming the text
    /// and its token count.
    Refuse,
}

/// Options of one call of [`Embedder::embed_with`](crate::Embedder::embed_with); each `None`
/// keeps what the embedder was built with ([`EmbedderOptions`](crate::EmbedderOptions) and the
/// model folder).
///
/// ```
/// use nornir_embed::{CallOptions, Truncation};
/// let query = CallOptions::new().with_prompt_name("query").with_dimensions(256);
/// let passage = CallOptions::new().with_prompt("").with_truncation(Truncation::Refuse);
/// # let _ = (query, passage);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallOptions {
    pub prompt: Option<CallPrompt>,
    /// L2-normalise each vector (after cutting it to `dimensions`).
    pub normalize: Option<bool>,
    /// Keep the first `dimensions` values of each vector (Matryoshka models); at most the model's
    /// width.
    pub dimensions: Option<usize>,
    pub truncation: Option<Truncation>,
}

impl CallOptions {
    /// Everything as the embedder was built.
    pub fn new() -> Self {
        Self::default()
    }
    /// Use this named prompt of the folder's `config_sentence_transformers.json`.
    pub fn with_prompt_name(mut self, name: impl Into<String>) -> Self {
        self.prompt = Some(CallPrompt::Name(name.into()));
        self
    }
    /// Put this text before every text (`""`: no prompt at all).
    pub fn with_prompt(mut self, text: impl Into<String>) -> Self {
        self.prompt = Some(CallPrompt::Text(text.into()));
        self
    }
    pub fn with_normalize(mut self, normalize: bool) -> Self {
        self.normalize = Some(normalize);
        self
    }
    pub fn with_dimensions(mut self, dimensions: usize) -> Self {
        self.dimensions = Some(dimensions);
        self
    }
    pub fn with_truncation(mut self, truncation: Truncation) -> Self {
        self.truncation = Some(truncation);
        self
    }
}
