//! What a quantization compares, by kind: each kind's own output on the built-in sample,
//! float32 against int8 (and a fused graph against the unfused one). An embedder's vectors by
//! cosine; a sparse encoder's term weights by the cosine of the sparse vectors and the overlap of
//! their top terms; a cross-encoder's raw scores (logits) on query/document pairs made from the
//! sample, by their largest difference and whether each query's documents keep their order; a
//! late-interaction model's token vectors by cosine, and whether each query's MaxSim order of its
//! documents is kept.

use nornir_options::ModelKind;

use crate::embedder::Embedder;
use crate::error::Result;
use crate::kinds::multi_vector::{MultiVectors, max_sim};
use crate::kinds::multi_vector_tokens::MultiVectorOptions;
use crate::kinds::rerank::PairOptions;
use crate::kinds::rerank::rank;
use crate::kinds::sparse::{SparseOptions, SparseVector};
use crate::values::embeddings::Embeddings;

/// Queries of the cross-encoder's sample, each paired with the next `DOCUMENTS` texts.
const DOCUMENTS: usize = 10;
/// The top terms of a sparse vector whose overlap is reported.
const TOP_TERMS: usize = 10;

/// The sample as a kind reads it: every text, and for a cross-encoder the texts in groups of
/// eleven, the first of each group the query of the other ten.
pub(crate) struct Sample<'a> {
    pub(crate) texts: Vec<&'a str>,
    queries: Vec<(&'a str, Vec<&'a str>)>,
}

impl<'a> Sample<'a> {
    pub(crate) fn new(texts: Vec<&'a str>) -> Self {
        let queries = texts.chunks_exact(DOCUMENTS + 1).map(|group| (group[0], group[1..].to_vec())).collect();
        Self { texts, queries }
    }

    /// What the sample is, in words, for quantization.json.
    pub(crate) fn describe(&self, kind: ModelKind) -> String {
        let texts = "built-in sample (testdata/parity-sample.txt, 99 texts)";
        match kind {
            ModelKind::CrossEncoder => format!(
                "{texts} as {} queries of {DOCUMENTS} documents each (each 11th text the query of the next ten)",
                self.queries.len()
            ),
            _ => texts.to_owned(),
        }
    }
}

/// One model's output on the sample, of its kind.
pub(crate) enum Outputs {
    Dense(Embeddings),
    Sparse(Vec<SparseVector>),
    /// Raw scores, one row of labels per pair, query by query.
    Scores(Vec<Embeddings>),
    /// Every text's token vectors as a document, and each sample query's as a query.
    Tokens {
        documents: MultiVectors,
        queries: MultiVectors,
    },
}

/// Runs `embedder` on the sample as its kind runs.
pub(crate) fn run(embedder: &Embedder, sample: &Sample<'_>) -> Result<Outputs> {
    Ok(match embedder.model_info().folder.kind.kind {
        ModelKind::SparseEncoder => {
            Outputs::Sparse(embedder.embed_sparse(&sample.texts, &SparseOptions::new())?.vectors)
        }
        ModelKind::CrossEncoder => {
            let raw = PairOptions::new().with_raw_scores(true);
            let mut per_query = Vec::with_capacity(sample.queries.len());
            for (query, documents) in &sample.queries {
                let pairs: Vec<(&str, &str)> = documents.iter().map(|d| (*query, *d)).collect();
                per_query.push(embedder.predict(&pairs, &raw)?);
            }
            Outputs::Scores(per_query)
        }
        ModelKind::MultiVector => {
            let documents = embedder.embed_multi_vector(&sample.texts, &MultiVectorOptions::new())?;
            let queries: Vec<&str> = sample.queries.iter().map(|(q, _)| *q).collect();
            let queries = embedder.embed_multi_vector(&queries, &MultiVectorOptions::new().with_query(true))?;
            Outputs::Tokens { documents, queries }
        }
        _ => Outputs::Dense(embedder.embed(&sample.texts)?),
    })
}

/// Each sample query's documents, best first by MaxSim (a query is text `11 q`, its documents the
/// next ten).
fn max_sim_orders(documents: &MultiVectors, queries: &MultiVectors) -> Vec<Vec<usize>> {
    (0..queries.len())
        .map(|q| {
            let first = q * (DOCUMENTS + 1) + 1;
            let scores: Vec<f32> = (first..first + DOCUMENTS)
                .map(|d| max_sim(queries.get(q), documents.get(d), documents.dim()))
                .collect();
            let mut order: Vec<usize> = (0..DOCUMENTS).collect();
            order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
            order
        })
        .collect()
}

pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = a.iter().map(|x| x * x).sum::<f32>().sqrt() * b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 { dot / norm } else { 0.0 }
}

fn sparse_cosine(a: &SparseVector, b: &SparseVector) -> f32 {
    let (mut i, mut j, mut dot) = (0, 0, 0f64);
    while i < a.indices.len() && j < b.indices.len() {
        match a.indices[i].cmp(&b.indices[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                dot += f64::from(a.values[i]) * f64::from(b.values[j]);
                i += 1;
                j += 1;
            }
        }
    }
    let norm = |v: &SparseVector| v.values.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let n = norm(a) * norm(b);
    if n > 0.0 {
        (dot / n) as f32
    } else if norm(a) == norm(b) {
        1.0
    } else {
        0.0
    }
}

/// The share of `a`'s top terms (by weight, at most `TOP_TERMS`) among `b`'s.
fn top_overlap(a: &SparseVector, b: &SparseVector) -> f64 {
    let top = |v: &SparseVector| {
        let mut terms: Vec<(u32, f32)> = v.indices.iter().copied().zip(v.values.iter().copied()).collect();
        terms.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
        terms.into_iter().take(TOP_TERMS).map(|t| t.0).collect::<Vec<u32>>()
    };
    let (ta, tb) = (top(a), top(b));
    if ta.is_empty() {
        return if tb.is_empty() { 1.0 } else { 0.0 };
    }
    ta.iter().filter(|t| tb.contains(t)).count() as f64 / ta.len() as f64
}

/// Ranks of `v` (0 = smallest; ties share their mean rank).
fn ranks(v: &[f32]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut out = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
            j += 1;
        }
        order[i..=j].iter().for_each(|&k| out[k] = (i + j) as f64 / 2.0);
        i = j + 1;
    }
    out
}

fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    if va == 0.0 || vb == 0.0 { if va == vb { 1.0 } else { 0.0 } } else { cov / (va * vb).sqrt() }
}

/// Each query's documents, best first by the first label's score (as `rerank` orders them).
fn order(scores: &Embeddings) -> Vec<usize> {
    rank(scores, None).ranked.iter().map(|r| r.index).collect()
}

/// How alike two outputs of one kind are, as one figure in [-1, 1] for the fused graph's check:
/// the least cosine of a row or sparse vector; for scores, their Pearson correlation over every
/// pair and label (a fusion only reorders float arithmetic, so it moves scores by a small share
/// of their spread).
pub(crate) fn similarity(a: &Outputs, b: &Outputs) -> f32 {
    match (a, b) {
        (Outputs::Dense(x), Outputs::Dense(y)) => x.rows().zip(y.rows()).map(|(p, q)| cosine(p, q)).fold(1.0, f32::min),
        (Outputs::Sparse(x), Outputs::Sparse(y)) => {
            x.iter().zip(y).map(|(p, q)| sparse_cosine(p, q)).fold(1.0, f32::min)
        }
        (Outputs::Scores(x), Outputs::Scores(y)) => {
            let all = |s: &[Embeddings]| {
                s.iter()
                    .flat_map(|e| e.rows().flatten().map(|v| f64::from(*v)).collect::<Vec<_>>())
                    .collect::<Vec<f64>>()
            };
            pearson(&all(x), &all(y)) as f32
        }
        (Outputs::Tokens { documents: x, .. }, Outputs::Tokens { documents: y, .. }) => {
            token_cosines(x, y).into_iter().fold(1.0, f32::min)
        }
        _ => f32::NAN,
    }
}

/// The cost of int8 against float32, for quantization.json's `cost` and the summary line.
pub(crate) fn cost(
    fp32: &Outputs,
    int8: &Outputs,
    sample: &Sample<'_>,
    kind: ModelKind,
) -> (serde_json::Value, String) {
    let described = sample.describe(kind);
    match (fp32, int8) {
        (Outputs::Dense(a), Outputs::Dense(b)) => {
            let cosines: Vec<f32> = a.rows().zip(b.rows()).map(|(x, y)| cosine(x, y)).collect();
            let least = |b: (usize, f32), (i, c): (usize, f32)| if c < b.1 { (i, c) } else { b };
            let (worst, min) = cosines.iter().copied().enumerate().fold((0, f32::INFINITY), least);
            let mean = cosines.iter().map(|&c| f64::from(c)).sum::<f64>() / cosines.len() as f64;
            let json = serde_json::json!({
                "kind": kind.label(),
                "sample": described,
                "cosine_min": min,
                "cosine_mean": mean,
                "worst_text": sample.texts[worst],
            });
            (
                json,
                format!("cosine to the float32 model on the built-in sample (99 texts): min {min:.4}, mean {mean:.4}"),
            )
        }
        (Outputs::Sparse(a), Outputs::Sparse(b)) => {
            let cosines: Vec<f32> = a.iter().zip(b).map(|(x, y)| sparse_cosine(x, y)).collect();
            let overlaps: Vec<f64> = a.iter().zip(b).map(|(x, y)| top_overlap(x, y)).collect();
            let min = cosines.iter().copied().fold(f32::INFINITY, f32::min);
            let mean = cosines.iter().map(|&c| f64::from(c)).sum::<f64>() / cosines.len() as f64;
            let overlap_min = overlaps.iter().copied().fold(f64::INFINITY, f64::min);
            let overlap_mean = overlaps.iter().sum::<f64>() / overlaps.len() as f64;
            let json = serde_json::json!({
                "kind": kind.label(),
                "sample": described,
                "sparse_cosine_min": min,
                "sparse_cosine_mean": mean,
                "top_terms": TOP_TERMS,
                "top_terms_overlap_min": overlap_min,
                "top_terms_overlap_mean": overlap_mean,
            });
            let line = format!(
                "sparse vectors against the float32 model on the built-in sample (99 texts): cosine min {min:.4}, mean {mean:.4}; \
                 top {TOP_TERMS} terms shared: min {:.0}%, mean {:.0}%",
                100.0 * overlap_min,
                100.0 * overlap_mean
            );
            (json, line)
        }
        (Outputs::Scores(a), Outputs::Scores(b)) => {
            let max_diff = a
                .iter()
                .zip(b)
                .flat_map(|(x, y)| {
                    x.rows().flatten().zip(y.rows().flatten()).map(|(p, q)| (p - q).abs()).collect::<Vec<f32>>()
                })
                .fold(0f32, f32::max);
            let queries = a.len();
            let (mut same_top, mut same_order, mut spearman) = (0, 0, 0.0);
            for (x, y) in a.iter().zip(b) {
                let (ox, oy) = (order(x), order(y));
                same_top += usize::from(ox.first() == oy.first());
                same_order += usize::from(ox == oy);
                let first = |e: &Embeddings| e.rows().map(|r| r[0]).collect::<Vec<f32>>();
                spearman += pearson(&ranks(&first(x)), &ranks(&first(y)));
            }
            // The float32 scores' spread, to read the difference against.
            let all: Vec<f64> =
                a.iter().flat_map(|e| e.rows().flatten().map(|v| f64::from(*v)).collect::<Vec<_>>()).collect();
            let mean = all.iter().sum::<f64>() / all.len().max(1) as f64;
            let std = (all.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / all.len().max(1) as f64).sqrt();
            let share = |n: usize| n as f64 / queries.max(1) as f64;
            let spearman = spearman / queries.max(1) as f64;
            let json = serde_json::json!({
                "kind": kind.label(),
                "sample": described,
                "pairs": queries * DOCUMENTS,
                "score_max_abs_diff": max_diff,
                "float32_score_std": std,
                "scores": "raw (logits, before the model's activation)",
                "queries": queries,
                "same_top1": share(same_top),
                "same_order": share(same_order),
                "spearman_mean": spearman,
            });
            let line = format!(
                "scores against the float32 model on {} query/document pairs of the built-in sample: max |difference| {max_diff:.4} (raw; \
                 their spread: std {std:.4}); \
                 {same_top} of {queries} queries keep their top document, {same_order} their whole order, mean Spearman {spearman:.4}",
                queries * DOCUMENTS
            );
            (json, line)
        }
        (Outputs::Tokens { documents: a, queries: qa }, Outputs::Tokens { documents: b, queries: qb }) => {
            token_cost(a, qa, b, qb, kind, &described)
        }
        _ => (serde_json::Value::Null, String::new()),
    }
}

/// A late-interaction model's cost: its token vectors' cosines and each query's MaxSim order.
fn token_cost(
    a: &MultiVectors,
    qa: &MultiVectors,
    b: &MultiVectors,
    qb: &MultiVectors,
    kind: ModelKind,
    described: &str,
) -> (serde_json::Value, String) {
    let cosines = token_cosines(a, b);
    let min = cosines.iter().copied().fold(f32::INFINITY, f32::min);
    let mean = cosines.iter().map(|&c| f64::from(c)).sum::<f64>() / cosines.len().max(1) as f64;
    let (oa, ob) = (max_sim_orders(a, qa), max_sim_orders(b, qb));
    let queries = oa.len();
    let same_top = oa.iter().zip(&ob).filter(|(x, y)| x.first() == y.first()).count();
    let same_order = oa.iter().zip(&ob).filter(|(x, y)| x == y).count();
    let json = serde_json::json!({
        "kind": kind.label(),
        "sample": described,
        "token_vectors": cosines.len(),
        "token_cosine_min": min,
        "token_cosine_mean": mean,
        "queries": queries,
        "same_top1": same_top as f64 / queries.max(1) as f64,
        "same_order": same_order as f64 / queries.max(1) as f64,
    });
    let line = format!(
        "token vectors against the float32 model on the built-in sample (99 texts, {} vectors): cosine min {min:.4}, mean {mean:.4}; \
                 by MaxSim {same_top} of {queries} queries keep their top document, {same_order} their whole order",
        cosines.len()
    );
    (json, line)
}

/// The cosine of each token vector with its counterpart (both models read the same tokens).
fn token_cosines(a: &MultiVectors, b: &MultiVectors) -> Vec<f32> {
    let (dim_a, dim_b) = (a.dim().max(1), b.dim().max(1));
    a.as_slice().chunks_exact(dim_a).zip(b.as_slice().chunks_exact(dim_b)).map(|(x, y)| cosine(x, y)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_and_rank_figures() {
        let v = |pairs: &[(u32, f32)]| SparseVector {
            indices: pairs.iter().map(|p| p.0).collect(),
            values: pairs.iter().map(|p| p.1).collect(),
        };
        let a = v(&[(1, 1.0), (5, 2.0), (9, 0.5)]);
        assert!((sparse_cosine(&a, &a) - 1.0).abs() < 1e-6);
        assert_eq!(sparse_cosine(&a, &v(&[(2, 1.0)])), 0.0);
        assert!((sparse_cosine(&a, &v(&[(5, 1.0)])) - 2.0 / 5.25f32.sqrt()).abs() < 1e-6);
        assert_eq!(top_overlap(&a, &v(&[(5, 3.0), (1, 1.0), (7, 1.0)])), 2.0 / 3.0);
        assert_eq!(ranks(&[3.0, 1.0, 2.0, 1.0]), [3.0, 0.5, 2.0, 0.5]);
        assert!((pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]) - 1.0).abs() < 1e-12);
        assert!((pearson(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        let sample = Sample::new(vec!["t"; 99]);
        assert_eq!(sample.queries.len(), 9);
        assert!(sample.queries.iter().all(|(_, d)| d.len() == DOCUMENTS));
    }
}
