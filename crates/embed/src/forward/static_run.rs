//! A static model's batch (Model2Vec), without ONNX Runtime: each row pooled from its table.

use crate::forward::run::Row;
use crate::math::static_table::StaticTable;

/// A static model's batch: each row's mean of table rows (one per span when it has spans), or a
/// raw row's token rows one by one. Returns the table's width.
pub(crate) fn pool(table: &StaticTable, rows: &[Row<'_>], emit: &mut impl FnMut(usize, &[f32])) -> usize {
    let mut v = vec![0.0; table.width];
    for (k, row) in rows.iter().enumerate() {
        let ids = &row.ids[row.skip.min(row.ids.len())..];
        if row.raw {
            let tokens = table.token_rows(row.ids);
            row.spans.iter().for_each(|&(from, to)| emit(k, &tokens[from * table.width..to * table.width]));
        } else if row.spans.is_empty() {
            table.mean(ids, &mut v);
            emit(k, &v);
        } else {
            for &(from, to) in row.spans {
                table.mean(&row.ids[from..to], &mut v);
                emit(k, &v);
            }
        }
    }
    table.width
}
