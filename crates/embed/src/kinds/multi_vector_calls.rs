//! The multi-vector kind's calls on an [`Embedder`]: token calls planned into parts, each part's
//! raw rows finished into token vectors (and BGE-M3's dense vector and term weights from the same
//! pass), MaxSim reranking, and the ranges of token vectors.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use crate::call::runner::{Runner, block_on};
use crate::embedder::Embedder;
use crate::engine::Engine;
use crate::error::{EmbedError, Result};
use crate::kinds::multi_vector::{Encoded, MultiVectors, Outputs, max_sim};
use crate::kinds::multi_vector_tokens::{MultiVectorOptions, parts, tokens_work};
use crate::kinds::rerank::{PairOptions, Ranked, Ranking};
use crate::kinds::sparse::{SparseOptions, SparseVector, SparseVectors};
use crate::load::multi_vector::{TokenModel, TokenRules};
use crate::math::pooling::normalize;
use crate::values::embeddings::{Embeddings, Usage};
use nornir_options::{ModelKind, Ranges};

/// An [`Embedder::encode`] call's outputs, filled part by part.
struct Accumulator {
    outputs: Outputs,
    /// The token vectors' width (the call's `dimensions`, else the head's).
    dim: usize,
    dense: Vec<f32>,
    dense_width: usize,
    sparse: Vec<SparseVector>,
    multi: MultiVectors,
    usage: Usage,
}

impl Accumulator {
    /// Adds a finished part: `rows` are its texts' kept tokens' raw rows, grouped per text.
    fn add(&mut self, engine: &Engine, tokens: &TokenModel, rules: &TokenRules, mut rows: Embeddings) {
        let groups = rows.take_groups().unwrap_or_default();
        let width = rows.dim();
        self.usage += rows.usage();
        let data = rows.as_slice();
        let (mut at, mut scratch) = (0, Vec::new());
        for &n in &groups.counts {
            let (text, ids) = (&data[at * width..(at + n) * width], &groups.ids[at..at + n]);
            at += n;
            if self.outputs.multi_vector {
                let d = self.dim;
                let mut vectors = Vec::with_capacity(n * d);
                match &rules.colbert {
                    // BGE-M3: its head on every token after the first.
                    Some(head) => text.chunks_exact(width).skip(1).for_each(|h| {
                        head.apply(h, &mut scratch);
                        vectors.extend_from_slice(&scratch[..d]);
                    }),
                    None => text.chunks_exact(width).for_each(|v| vectors.extend_from_slice(&v[..d])),
                }
                vectors.chunks_exact_mut(d.max(1)).for_each(normalize);
                self.multi.push(&vectors);
            }
            if self.outputs.dense {
                let start = self.dense.len();
                self.dense.resize(start + width, 0.0);
                let pooling = engine.settings.pooling;
                crate::math::pooling::pool_tokens(text, n, width, pooling, 0, &mut self.dense[start..]);
                if engine.info.normalize {
                    normalize(&mut self.dense[start..]);
                }
                self.dense_width = width;
            }
            if self.outputs.sparse
                && let Some(head) = &tokens.sparse_head
            {
                let mut weights: BTreeMap<u32, f32> = BTreeMap::new();
                for (h, &id) in text.chunks_exact(width).zip(ids) {
                    if head.unused.binary_search(&id).is_ok() {
                        continue;
                    }
                    head.layer.apply(h, &mut scratch);
                    let w = scratch[0];
                    if w > 0.0 {
                        let best = weights.entry(id).or_insert(0.0);
                        *best = best.max(w);
                    }
                }
                self.sparse.push(SparseVector {
                    indices: weights.keys().copied().collect(),
                    values: weights.values().copied().collect(),
                });
            }
        }
    }

    /// An empty accumulator for the same outputs.
    fn fresh(&self) -> Self {
        Self {
            outputs: self.outputs,
            dim: self.dim,
            dense: Vec::new(),
            dense_width: 0,
            sparse: Vec::new(),
            multi: MultiVectors::empty(self.dim),
            usage: Usage::default(),
        }
    }

    fn done(self) -> Encoded {
        let Self { outputs, dense, dense_width, sparse, mut multi, usage, .. } = self;
        multi.usage = usage;
        Encoded {
            // Every text added a whole row of `dense_width`.
            dense: outputs.dense.then(|| Embeddings::from_whole_rows(dense, dense_width, Vec::new())),
            sparse: outputs.sparse.then_some(sparse),
            multi_vector: outputs.multi_vector.then_some(multi),
            usage,
        }
    }
}

impl Embedder {
    /// The model's token rules, or the error for a call (`call`) on a model that makes no token
    /// vectors.
    pub(crate) fn token_rules(&self, call: &'static str) -> Result<&Arc<TokenRules>> {
        self.tokens.rules.as_ref().ok_or(EmbedError::WrongKind {
            call,
            wanted: ModelKind::MultiVector,
            kind: self.engine.info.folder.kind.kind,
        })
    }

    /// Checks a token call (`outputs` of `options`) against the model; its accumulator.
    fn token_call(&self, outputs: Outputs, options: &MultiVectorOptions, call: &'static str) -> Result<Accumulator> {
        options.check()?;
        let rules = self.token_rules(call)?;
        let info = &self.engine.info;
        let bge_m3 = rules.colbert.is_some();
        if outputs.dense && !(bge_m3 && info.folder.kind.kind == ModelKind::Embedder) {
            return Err(EmbedError::invalid(
                "outputs",
                "dense vectors come from one pass with token vectors only on a model that makes both (BGE-M3); call embed",
            ));
        }
        if outputs.sparse && self.tokens.sparse_head.is_none() {
            return Err(EmbedError::invalid(
                "outputs",
                "this model has no sparse head (BGE-M3's sparse_linear.safetensors, which `nornir vector convert` writes from sparse_linear.pt)",
            ));
        }
        if !(outputs.dense || outputs.sparse || outputs.multi_vector) {
            return Err(EmbedError::invalid("outputs", "asks for nothing: ask for dense, sparse or multi_vector"));
        }
        let width = rules.colbert.as_ref().map_or(info.model_dimension, |h| h.out_features);
        let dim = match options.call.dimensions {
            None => width,
            Some(d) if (1..=width).contains(&d) => d,
            Some(d) => {
                return Err(EmbedError::invalid(
                    "dimensions",
                    format!("must be between 1 and {width} for this model's token vectors, not {d}"),
                ));
            }
        };
        let empty = MultiVectors::empty(dim);
        let (dense, sparse, usage) = (Vec::new(), Vec::new(), Usage::default());
        Ok(Accumulator { outputs, dim, dense, dense_width: 0, sparse, multi: empty, usage })
    }
}

impl Embedder {
    /// Each text's token vectors, as PyLate's `encode` makes them (queries or documents, as
    /// `options` say): a long list runs in parts of at most [`ROWS_PER_PART`](crate::ROWS_PER_PART) rows. An error
    /// ([`EmbedError::WrongKind`]) unless the model makes token vectors (a ColBERT model, or
    /// BGE-M3 converted with its `colbert_linear`).
    pub fn embed_multi_vector<S: AsRef<str>>(&self, texts: &[S], options: &MultiVectorOptions) -> Result<MultiVectors> {
        block_on(self.multi_vector_body(self.blocking(), texts, options))
    }

    /// [`embed_multi_vector`](Self::embed_multi_vector) as a future (dropping it cancels the call).
    pub fn embed_multi_vector_async<S: AsRef<str>>(
        &self,
        texts: &[S],
        options: &MultiVectorOptions,
    ) -> impl Future<Output = Result<MultiVectors>> + '_ {
        self.multi_vector_body(self.queued(), texts, options)
    }

    /// [`embed_multi_vector`](Self::embed_multi_vector)'s one body: planned now, run as `runner` says.
    fn multi_vector_body<'a, S: AsRef<str>>(
        &'a self,
        runner: Runner<'a>,
        texts: &[S],
        options: &MultiVectorOptions,
    ) -> impl Future<Output = Result<MultiVectors>> + 'a {
        let planned = self.plan_parts(texts, Outputs::multi_vector(), options, "embed_multi_vector");
        async move { Ok(self.run_planned(runner, planned?).await?.multi_vector.unwrap_or_default()) }
    }

    /// BGE-M3's outputs, as FlagEmbedding's `BGEM3FlagModel.encode` makes them, from one pass
    /// per text: the dense vector, term weights and token vectors, as `outputs` asks. A ColBERT
    /// model makes token vectors only.
    pub fn encode<S: AsRef<str>>(
        &self,
        texts: &[S],
        outputs: Outputs,
        options: &MultiVectorOptions,
    ) -> Result<Encoded> {
        let planned = self.plan_parts(texts, outputs, options, "encode");
        block_on(async { self.run_planned(self.blocking(), planned?).await })
    }

    /// [`encode`](Self::encode) as a future (dropping it cancels the call).
    pub fn encode_async<S: AsRef<str>>(
        &self,
        texts: &[S],
        outputs: Outputs,
        options: &MultiVectorOptions,
    ) -> impl Future<Output = Result<Encoded>> + '_ {
        let planned = self.plan_parts(texts, outputs, options, "encode");
        async move { self.run_planned(self.queued(), planned?).await }
    }

    /// A token call's checks and parts, planned before it runs (so an async call's future
    /// holds no borrow of the caller's texts).
    pub(crate) fn plan_parts<S: AsRef<str>>(
        &self,
        texts: &[S],
        outputs: Outputs,
        options: &MultiVectorOptions,
        call: &'static str,
    ) -> Result<Planned> {
        let acc = self.token_call(outputs, options, call)?;
        let rules = self.token_rules(call)?;
        let prompt = crate::call::prepare::plan_call(&self.engine, &options.call)?.prompt;
        let parts = parts(rules, texts, prompt, options.is_query)
            .into_iter()
            .map(|r| (r.start, texts[r].iter().map(|t| t.as_ref().to_owned()).collect()))
            .collect();
        Ok(Planned { acc, parts, options: options.clone(), call })
    }

    /// A planned token call's one body: its parts run as `runner` says, each added as it ends.
    pub(crate) async fn run_planned(&self, runner: Runner<'_>, planned: Planned) -> Result<Encoded> {
        let Planned { mut acc, parts, options, call } = planned;
        let rules = self.token_rules(call)?;
        for (first, part) in parts {
            let rows = runner.run(tokens_work(part, options.clone(), first, Arc::clone(rules))).await?;
            acc.add(&self.engine, &self.tokens, rules, rows);
        }
        Ok(acc.done())
    }
}

/// A token call planned: its accumulator, its parts (each with its first text's index).
pub(crate) struct Planned {
    acc: Accumulator,
    parts: Vec<(usize, Vec<String>)>,
    options: MultiVectorOptions,
    call: &'static str,
}

impl Embedder {
    /// `documents` ranked by MaxSim against `query` (see [`rerank`](Self::rerank)), planned: the
    /// query's token call and the documents'.
    pub(crate) fn plan_max_sim<S: AsRef<str>>(
        &self,
        query: &str,
        documents: &[S],
        options: &PairOptions,
    ) -> Result<(Planned, Planned)> {
        let only = Outputs::multi_vector();
        let (as_query, as_documents) = max_sim_options(query, options)?;
        let q = self.plan_parts(&[query], only, &as_query, "rerank")?;
        Ok((q, self.plan_parts(documents, only, &as_documents, "rerank")?))
    }

    /// A MaxSim rerank's one body: the query's token vectors made once, the documents' part by
    /// part, each part scored and dropped.
    pub(crate) async fn rerank_by_max_sim(
        &self,
        runner: Runner<'_>,
        (query, documents): (Planned, Planned),
        top_n: Option<usize>,
    ) -> Result<Ranking> {
        let mean = self.token_rules("rerank")?.mean_score;
        let mut scorer = Scorer::new(mean, self.run_planned(runner, query).await?);
        let Planned { acc, parts, options, call } = documents;
        for (first, part) in parts {
            let one = Planned { acc: acc.fresh(), parts: vec![(first, part)], options: options.clone(), call };
            scorer.score(self.run_planned(runner, one).await?);
        }
        Ok(scorer.ranking(top_n))
    }
}

/// A rerank's options as the query's and the documents' token calls: truncation, `max_wait`
/// and cancel apply; an empty query is refused.
fn max_sim_options(query: &str, options: &PairOptions) -> Result<(MultiVectorOptions, MultiVectorOptions)> {
    options.check()?;
    if query.trim().is_empty() {
        return Err(EmbedError::invalid("query", "is empty: give the text to rank the documents against"));
    }
    let documents = MultiVectorOptions { call: options.call.clone(), is_query: false };
    Ok((MultiVectorOptions { is_query: true, ..documents.clone() }, documents))
}

/// One query's token vectors, and the scores of the documents so far.
struct Scorer {
    query: Vec<f32>,
    dim: usize,
    /// Divide by the query's tokens (BGE-M3's mean).
    scale: f32,
    scores: Vec<f32>,
    usage: Usage,
}

impl Scorer {
    /// `mean`: the model's score is MaxSim over the query's tokens (BGE-M3).
    fn new(mean: bool, query: Encoded) -> Self {
        let q = query.multi_vector.unwrap_or_default();
        let tokens = q.token_count(0).max(1) as f32;
        let scale = if mean { 1.0 / tokens } else { 1.0 };
        Self { dim: q.dim(), query: q.get(0).to_vec(), scale, scores: Vec::new(), usage: q.usage() }
    }

    fn score(&mut self, documents: Encoded) {
        let d = documents.multi_vector.unwrap_or_default();
        self.usage += d.usage();
        self.scores.extend(d.iter().map(|doc| self.scale * max_sim(&self.query, doc, self.dim)));
    }

    fn ranking(self, top_n: Option<usize>) -> Ranking {
        let mut ranked: Vec<Ranked> =
            self.scores.iter().enumerate().map(|(index, &score)| Ranked { index, score, chunk: None }).collect();
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
        ranked.truncate(top_n.unwrap_or(usize::MAX));
        Ranking { ranked, usage: self.usage }
    }
}

impl Embedder {
    /// Each dimension's range over the token vectors of `texts` (documents, at the call's
    /// width): what int8 and uint8 token vectors are cut by ([`MultiVectors::to_precision`]).
    /// Queries and documents must share them.
    pub fn multi_vector_ranges<S: AsRef<str>>(
        &self,
        texts: &[S],
        options: &MultiVectorOptions,
        source: &str,
    ) -> Result<Ranges> {
        let documents = MultiVectorOptions { is_query: false, ..options.clone() };
        let vectors = self.embed_multi_vector(texts, &documents)?;
        let rows = vectors.as_slice().chunks_exact(vectors.dim().max(1));
        Ok(Ranges::of_rows(rows, format!("token vectors of {source}"))?)
    }

    /// [`multi_vector_ranges`](Self::multi_vector_ranges) on nornir's built-in sample of 99 texts.
    pub fn multi_vector_ranges_on_sample(&self, options: &MultiVectorOptions) -> Result<Ranges> {
        let texts: Vec<&str> = crate::kinds::compact_calls::SAMPLE_TEXTS.lines().filter(|l| !l.is_empty()).collect();
        self.multi_vector_ranges(&texts, options, "nornir's built-in sample (testdata/parity-sample.txt)")
    }
}

/// BGE-M3's term weights alone.
pub(crate) const SPARSE_ONLY: Outputs = Outputs { dense: false, sparse: true, multi_vector: false };

/// A sparse call's options as a token call's: documents.
pub(crate) fn as_tokens(options: &SparseOptions) -> MultiVectorOptions {
    MultiVectorOptions::new().with_call(options.call.clone())
}

/// A sparse head's vectors, pruned as asked.
pub(crate) fn pruned(encoded: Encoded, options: &SparseOptions) -> SparseVectors {
    let vectors = encoded.sparse.unwrap_or_default().into_iter().map(|v| options.prune(v)).collect();
    SparseVectors { vectors, usage: encoded.usage }
}
