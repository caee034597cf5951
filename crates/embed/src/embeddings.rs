//! [`Embeddings`]: the vectors of one call, as one row-major block whose shape cannot be broken.

/// Embeddings as one contiguous row-major block: `len()` rows of `dim` floats, row i for text i.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Embeddings {
    data: Vec<f32>,
    dim: usize,
}

impl Embeddings {
    /// For the embedder, which writes whole rows only.
    pub(crate) fn from_whole_rows(data: Vec<f32>, dim: usize) -> Self {
        debug_assert!(if dim == 0 { data.is_empty() } else { data.len().is_multiple_of(dim) });
        Self { data, dim }
    }
    /// `data` holds whole rows of `dim` floats (`dim` 0 only with no data); else `None`.
    pub fn new(data: Vec<f32>, dim: usize) -> Option<Self> {
        let whole = if dim == 0 { data.is_empty() } else { data.len().is_multiple_of(dim) };
        whole.then_some(Self { data, dim })
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
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
    pub fn rows(&self) -> std::slice::ChunksExact<'_, f32> {
        self.data.chunks_exact(self.dim.max(1))
    }
}
