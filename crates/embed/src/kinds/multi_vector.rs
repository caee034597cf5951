//! Late interaction: a vector per token (ColBERT, as PyLate makes them; BGE-M3's three outputs
//! from one pass), and MaxSim, the score of a query's token vectors against a document's.
//!
//! A text's tokens run through the ordinary queue as one item whose rows are its kept tokens
//! (a span of one token each: any pooling of one token is that token), so token calls batch with
//! every other call. A long list runs in parts of at most [`ROWS_PER_PART`](crate::ROWS_PER_PART) token rows, each
//! finished (projected, normalised) before the next is queued: the memory a call holds beyond
//! its answer is one part's raw rows.

use crate::error::Result;
use crate::kinds::compact::CompactVectors;
use crate::kinds::sparse::SparseVector;
use crate::math::dense::dot;
use crate::values::embeddings::{Embeddings, Usage};
use nornir_options::{Precision, Ranges};

/// The token vectors of a call's texts: text i's are `get(i)`, `token_count(i)` rows of `dim()`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MultiVectors {
    data: Vec<f32>,
    dim: usize,
    /// Text i's rows are `offsets[i]..offsets[i + 1]`.
    offsets: Vec<usize>,
    pub(crate) usage: Usage,
}

impl MultiVectors {
    pub(crate) fn empty(dim: usize) -> Self {
        Self { data: Vec::new(), dim, offsets: vec![0], usage: Usage::default() }
    }

    /// One text's token vectors, appended.
    pub(crate) fn push(&mut self, rows: &[f32]) {
        self.data.extend_from_slice(rows);
        self.offsets.push(self.data.len() / self.dim.max(1));
    }

    /// How many texts.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }
    /// No texts.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The width of every token vector.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Text `i`'s token vectors, one after another (`token_count(i) * dim()` floats); panics
    /// past `len()`.
    pub fn get(&self, i: usize) -> &[f32] {
        &self.data[self.offsets[i] * self.dim..self.offsets[i + 1] * self.dim]
    }
    /// How many token vectors text `i` has.
    pub fn token_count(&self, i: usize) -> usize {
        self.offsets[i + 1] - self.offsets[i]
    }
    /// Every text's token vectors, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[f32]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
    /// All token vectors as rows, text after text (`offsets()` says where each text starts).
    pub fn rows(&self) -> Embeddings {
        Embeddings::from_whole_rows(self.data.clone(), self.dim, Vec::new())
    }
    /// Text `i`'s token vectors as rows (`token_count(i)` of `dim()`); panics past `len()`.
    pub fn text_rows(&self, i: usize) -> Embeddings {
        Embeddings::from_whole_rows(self.get(i).to_vec(), self.dim, Vec::new())
    }
    /// Where each text's rows start in [`rows`](Self::rows), and past the last: `len() + 1`
    /// offsets (an `.npz`'s `offsets`).
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }
    /// All token vectors, one after another.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }
    /// The tokens the model read and how many texts were cut.
    pub fn usage(&self) -> Usage {
        self.usage
    }
}

/// MaxSim as PyLate scores: for each query token vector, its largest dot product with a
/// document token vector, summed over the query's tokens (both `dim` wide, rows one after
/// another). A document without tokens scores 0.
pub fn max_sim(query: &[f32], document: &[f32], dim: usize) -> f32 {
    if document.is_empty() || dim == 0 {
        return 0.0;
    }
    query
        .chunks_exact(dim)
        .map(|q| document.chunks_exact(dim).map(|d| dot(q, d)).fold(f32::NEG_INFINITY, f32::max))
        .sum()
}

/// Which of BGE-M3's outputs an [`Embedder::encode`](crate::Embedder::encode) call makes from its one pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outputs {
    /// The dense vector (the first token's, normalised).
    pub dense: bool,
    /// Term weights (the sparse head on every token, the largest per token id).
    pub sparse: bool,
    /// Token vectors (the ColBERT head on every token after the first, normalised).
    pub multi_vector: bool,
}

impl Outputs {
    /// All three.
    pub fn all() -> Self {
        Self { dense: true, sparse: true, multi_vector: true }
    }

    /// The ones asked for.
    pub fn new(dense: bool, sparse: bool, multi_vector: bool) -> Self {
        Self { dense, sparse, multi_vector }
    }

    /// Token vectors alone.
    pub fn multi_vector() -> Self {
        Self::new(false, false, true)
    }
}

/// What an [`Embedder::encode`](crate::Embedder::encode) call made, one entry per text for each output asked.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Encoded {
    /// Dense vectors, a row per text.
    pub dense: Option<Embeddings>,
    /// Term weights per text.
    pub sparse: Option<Vec<SparseVector>>,
    /// Token vectors per text.
    pub multi_vector: Option<MultiVectors>,
    /// The tokens the model read (once per text, whatever the outputs) and the texts cut.
    pub usage: Usage,
}

impl MultiVectors {
    /// Every token vector in `precision` (as [`to_precision`](crate::to_precision) makes dense
    /// vectors: int8 and uint8 need `ranges` of the vectors' width, the binary kinds a width that
    /// is a multiple of 8), rows in the order of [`offsets`](Self::offsets).
    pub fn to_precision(&self, precision: Precision, ranges: Option<&Ranges>) -> Result<CompactVectors> {
        crate::kinds::compact::to_precision(&self.rows(), precision, ranges)
    }

    /// Text `i`'s token vectors in `precision`, as [`to_precision`](Self::to_precision) makes
    /// them: what every surface writes for one text; panics past `len()`.
    pub fn text_to_precision(&self, i: usize, precision: Precision, ranges: Option<&Ranges>) -> Result<CompactVectors> {
        crate::kinds::compact::to_precision(&self.text_rows(i), precision, ranges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_sim_is_the_sum_of_each_query_tokens_best_match() {
        // Query tokens (1, 0) and (0, 1); document tokens (0.6, 0.8), (1, 0), (-1, 0).
        let q = [1.0, 0.0, 0.0, 1.0];
        let d = [0.6, 0.8, 1.0, 0.0, -1.0, 0.0];
        assert!((max_sim(&q, &d, 2) - (1.0 + 0.8)).abs() < 1e-6);
        // A query token whose every match is negative counts its best, not 0 (the pairwise form).
        assert!((max_sim(&[-1.0, 0.0], &[1.0, 0.0], 2) + 1.0).abs() < 1e-6);
        assert_eq!(max_sim(&q, &[], 2), 0.0);
    }
}
