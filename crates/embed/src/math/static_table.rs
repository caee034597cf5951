//! A static model's table (Model2Vec): a text's vector is the mean of its tokens' rows, each row
//! found through the token mapping and scaled by its token's weight where the model has them, as
//! model2vec's `StaticModel.encode` computes it. No ONNX Runtime.

/// The table and what picks and scales its rows. Every id the tokenizer gives was checked
/// against it when it was read (`load/static_model.rs`).
#[derive(Debug)]
pub(crate) struct StaticTable {
    /// `rows x width`, row-major, as float32.
    pub(crate) rows: Vec<f32>,
    pub(crate) width: usize,
    /// Token id -> row (a vocabulary-quantized model's `mapping`); none: the id is the row.
    pub(crate) mapping: Option<Vec<u32>>,
    /// Per token id, the scale of its row (a vocabulary-quantized model's `weights`).
    pub(crate) weights: Option<Vec<f32>>,
    /// The tokenizer's unknown token, left out of every mean (model2vec drops it).
    pub(crate) unknown: Option<u32>,
}

impl StaticTable {
    /// The row of token `id`, scaled by its weight into `out`; false for the unknown token or an
    /// id past the table.
    fn add_row(&self, id: u32, out: &mut [f32]) -> bool {
        if Some(id) == self.unknown {
            return false;
        }
        let row = match &self.mapping {
            Some(m) => m.get(id as usize).copied(),
            None => Some(id),
        };
        let Some(row) = row.map(|r| r as usize).filter(|&r| (r + 1) * self.width <= self.rows.len()) else {
            return false;
        };
        let scale = self.weights.as_ref().map_or(1.0, |w| w.get(id as usize).copied().unwrap_or(1.0));
        let values = &self.rows[row * self.width..(row + 1) * self.width];
        for (o, v) in out.iter_mut().zip(values) {
            *o += v * scale;
        }
        true
    }

    /// The mean of the rows of `ids` into `out` (`width` long); zeros when no token counts, as
    /// model2vec gives a text with no known token.
    pub(crate) fn mean(&self, ids: &[u32], out: &mut [f32]) {
        out.fill(0.0);
        let counted = ids.iter().filter(|&&id| self.add_row(id, out)).count();
        if counted > 1 {
            let n = counted as f32;
            out.iter_mut().for_each(|v| *v /= n);
        }
    }

    /// Each of `ids`' rows, scaled, one after another (`ids.len() x width`): a text's token
    /// vectors (TEI's `/embed_all`); the unknown token's row is zeros.
    pub(crate) fn token_rows(&self, ids: &[u32]) -> Vec<f32> {
        let mut out = vec![0.0; ids.len() * self.width];
        for (id, row) in ids.iter().zip(out.chunks_exact_mut(self.width.max(1))) {
            self.add_row(*id, row);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> StaticTable {
        StaticTable {
            rows: vec![1.0, 0.0, 0.0, 2.0, 4.0, 4.0],
            width: 2,
            mapping: None,
            weights: None,
            unknown: Some(1),
        }
    }

    #[test]
    fn a_mean_of_rows_leaves_out_the_unknown_token() {
        let mut out = [9.0; 2];
        table().mean(&[0, 1, 2], &mut out);
        assert_eq!(out, [2.5, 2.0]);
        table().mean(&[1], &mut out);
        assert_eq!(out, [0.0, 0.0], "only the unknown token: zeros");
        table().mean(&[], &mut out);
        assert_eq!(out, [0.0, 0.0]);
    }

    #[test]
    fn a_mapping_and_weights_pick_and_scale_rows() {
        let t = StaticTable { mapping: Some(vec![2, 2, 0]), weights: Some(vec![0.5, 1.0, 2.0]), ..table() };
        let mut out = [0.0; 2];
        t.mean(&[0, 2], &mut out);
        assert_eq!(out, [(2.0 + 2.0) / 2.0, 1.0]);
        assert_eq!(t.token_rows(&[2, 1]), [2.0, 0.0, 0.0, 0.0]);
    }
}
