//! [`Embeddings`]: the vectors of one call, as one row-major block whose shape cannot be broken.

/// Embeddings as one contiguous row-major block: `len()` rows of `dim` floats, row i for text i.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Embeddings {
    data: Vec<f32>,
    dim: usize,
    /// Per row: tokens fed to the model (after truncation), and whether the text was truncated.
    /// Empty when the rows did not come from an embedder.
    tokens: Vec<TextTokens>,
    /// The chunks of a call that chunks long texts; `None` otherwise.
    chunks: Option<Box<ChunkRows>>,
    /// A token call's rows per text (`tokens` then has an entry per text, not per row).
    groups: Option<TokenGroups>,
}

/// A token call's rows: how many are each text's, and the token id of each.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct TokenGroups {
    pub(crate) counts: Vec<usize>,
    pub(crate) ids: Vec<u32>,
}

/// One chunk of a text: where it lies in the text, and how many tokens the model read for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Chunk {
    /// Byte offsets of its first and past its last character in the text (char boundaries).
    pub start: usize,
    /// See `start`.
    pub end: usize,
    /// Tokens of the text in it (not counting the prompt and special tokens).
    pub tokens: usize,
}

impl Chunk {
    /// The spans of `chunks` of `text` in characters (Unicode scalar values, as Python's `str`
    /// slices count), in one pass over the text: chunks come in order, each starting after the
    /// one before starts.
    pub fn char_spans(text: &str, chunks: &[Chunk]) -> Vec<(usize, usize)> {
        let mut bounds: Vec<usize> = chunks.iter().flat_map(|c| [c.start, c.end]).collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut chars = Vec::with_capacity(bounds.len());
        let (mut at, mut count) = (0, 0);
        for &b in &bounds {
            let b = b.min(text.len()).max(at);
            count += text.get(at..b).map_or(0, |t| t.chars().count());
            at = b;
            chars.push(count);
        }
        let find = |b: usize| chars[bounds.partition_point(|&x| x < b)];
        chunks.iter().map(|c| (find(c.start), find(c.end))).collect()
    }
}

/// Every chunk of a call: their vectors (`dim` each), spans, and which belong to which text.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ChunkRows {
    pub(crate) data: Vec<f32>,
    pub(crate) spans: Vec<Chunk>,
    /// Per text, its chunks' range in `spans` (and in `data`, in rows).
    pub(crate) ranges: Vec<std::ops::Range<usize>>,
}

/// What one text cost and whether it was cut to the model's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TextTokens {
    pub(crate) count: u32,
    pub(crate) truncated: bool,
}

impl Embeddings {
    /// For the embedder, which writes whole rows only.
    pub(crate) fn from_whole_rows(data: Vec<f32>, dim: usize, tokens: Vec<TextTokens>) -> Self {
        debug_assert!(if dim == 0 { data.is_empty() } else { data.len().is_multiple_of(dim) });
        Self { data, dim, tokens, chunks: None, groups: None }
    }
    /// Rows that are token vectors, `groups[i]` of them text i's.
    pub(crate) fn with_groups(mut self, groups: TokenGroups) -> Self {
        self.groups = Some(groups);
        self
    }
    /// A token call's rows per text, taken out.
    pub(crate) fn take_groups(&mut self) -> Option<TokenGroups> {
        self.groups.take()
    }
    /// With the chunks each row was made from.
    pub(crate) fn with_chunks(mut self, chunks: ChunkRows) -> Self {
        self.chunks = Some(Box::new(chunks));
        self
    }
    /// `data` holds whole rows of `dim` floats (`dim` 0 only with no data); else `None`.
    pub fn new(data: Vec<f32>, dim: usize) -> Option<Self> {
        let whole = if dim == 0 { data.is_empty() } else { data.len().is_multiple_of(dim) };
        whole.then_some(Self { data, dim, tokens: Vec::new(), chunks: None, groups: None })
    }
    /// Tokens the model read for row `i` (special tokens and prompt included, after truncation);
    /// `None` for rows not made by an embedder.
    pub fn token_count(&self, i: usize) -> Option<usize> {
        self.tokens.get(i).map(|t| t.count as usize)
    }
    /// Tokens the model read for all rows: what an API bills as prompt tokens.
    pub fn total_tokens(&self) -> usize {
        self.tokens.iter().map(|t| t.count as usize).sum()
    }
    /// Whether text `i` was longer than the model's length and cut.
    pub fn truncated(&self, i: usize) -> bool {
        self.tokens.get(i).is_some_and(|t| t.truncated)
    }
    /// How many texts were longer than the model's length and cut.
    pub fn truncated_count(&self) -> usize {
        self.tokens.iter().filter(|t| t.truncated).count()
    }
    /// What the call read: its tokens and the texts it cut.
    pub fn usage(&self) -> Usage {
        Usage { tokens: self.total_tokens(), truncated: self.truncated_count() }
    }
    /// The width of every row.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// All rows, one after another.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }
    /// The rows as one block, `len() * dim()` floats.
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }
    /// How many rows (one per text).
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }
    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// Row `i`, the vector of text `i`; panics past `len()`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
    /// Every row in order.
    pub fn rows(&self) -> std::slice::ChunksExact<'_, f32> {
        self.data.chunks_exact(self.dim.max(1))
    }
    /// The chunks of text `i` with their vectors, in order, when the call chunked long texts
    /// (a text that fitted one window has one chunk); empty otherwise.
    pub fn chunks(&self, i: usize) -> impl Iterator<Item = (&Chunk, &[f32])> + '_ {
        let (spans, data, range): (&[Chunk], &[f32], _) = match self.chunks.as_deref() {
            Some(c) => (&c.spans, &c.data, c.ranges.get(i).cloned().unwrap_or(0..0)),
            None => (&[], &[], 0..0),
        };
        let dim = self.dim;
        range.map(move |j| (&spans[j], &data[j * dim..(j + 1) * dim]))
    }
    /// Whether the call chunked long texts.
    pub fn is_chunked(&self) -> bool {
        self.chunks.is_some()
    }

    /// Text `i`'s chunks, as [`chunks`](Self::chunks) gives them, with their spans in characters
    /// of `text` (its own text, as given to the call) instead of bytes: what a JSON answer
    /// carries.
    pub fn char_chunks<'a>(&'a self, i: usize, text: &str) -> Vec<CharChunk<'a>> {
        let parts: Vec<(&Chunk, &[f32])> = self.chunks(i).collect();
        let spans: Vec<Chunk> = parts.iter().map(|(c, _)| **c).collect();
        Chunk::char_spans(text, &spans)
            .into_iter()
            .zip(parts)
            .map(|((start, end), (c, embedding))| CharChunk { start, end, tokens: c.tokens, embedding })
            .collect()
    }
}

/// One chunk of a text with its span in characters (Unicode scalar values, as Python's `str`
/// slices count), its tokens and its vector; serialises as
/// `{"start", "end", "tokens", "embedding"}`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct CharChunk<'a> {
    /// Its first character.
    pub start: usize,
    /// Past its last character.
    pub end: usize,
    /// Tokens of the text in it.
    pub tokens: usize,
    /// Its vector.
    pub embedding: &'a [f32],
}

/// What a call read, as an API bills and reports it: the tokens the model read (special tokens
/// and prompt included, after truncation) and how many texts (or pairs) were cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// Tokens the model read.
    pub tokens: usize,
    /// Texts or pairs longer than the model reads, cut.
    pub truncated: usize,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.tokens += other.tokens;
        self.truncated += other.truncated;
    }
}
