//! The `tei.v1` services' calls, each as text-embeddings-inference answers it, on nornir's
//! embedder: a unary call takes one input, its stream twin a stream of them (answered in order).

use nornir_vector::{CallOptions, PairOptions, SparseOptions, Truncation};
use tonic::{Request, Response, Status, Streaming};

use super::pb::{self, TruncationDirection};
use super::{Answers, Grpc, answer_each, metadata, status};
use nornir_vector::ModelKind;

type Reply<T> = Result<Response<T>, Status>;

/// A request's truncation as TEI reads it: `truncate` cuts on `truncation_direction`'s side,
/// else a text longer than the model is refused.
fn truncation(truncate: bool, direction: i32) -> Truncation {
    match (truncate, TruncationDirection::try_from(direction)) {
        (false, _) => Truncation::Refuse,
        (true, Ok(TruncationDirection::Left)) => Truncation::Left,
        (true, _) => Truncation::Right,
    }
}

/// The options of an embedding call.
fn embed_options(truncate: bool, direction: i32, prompt_name: Option<String>) -> CallOptions {
    let mut o = CallOptions::new().with_truncation(truncation(truncate, direction));
    if let Some(name) = prompt_name {
        o = o.with_prompt_name(name);
    }
    o
}

/// An input that must not be empty, as TEI checks it.
fn not_empty(text: &str) -> Result<(), Status> {
    if text.is_empty() {
        return Err(Status::invalid_argument("`inputs` cannot be empty"));
    }
    Ok(())
}

impl Grpc {
    async fn embed_one(&self, req: pb::EmbedRequest) -> Result<pb::EmbedResponse, Status> {
        not_empty(&req.inputs)?;
        let (entry, embedder, started) = self.model()?;
        let mut options = embed_options(req.truncate, req.truncation_direction, req.prompt_name);
        if let Some(n) = req.normalize {
            options = options.with_normalize(n);
        }
        if let Some(d) = req.dimensions {
            options = options.with_dimensions(d as usize);
        }
        let texts = [req.inputs];
        let options = options.with_max_wait(self.0.max_wait());
        let rows = self.in_time(embedder.embed_with_async(&texts, &options)).await?;
        let metadata = self.counted(entry, started, &texts[0], &rows);
        Ok(pb::EmbedResponse { embeddings: rows.row(0).to_vec(), metadata })
    }

    async fn embed_sparse_one(&self, req: pb::EmbedSparseRequest) -> Result<pb::EmbedSparseResponse, Status> {
        not_empty(&req.inputs)?;
        let (entry, embedder, started) = self.model()?;
        let call = embed_options(req.truncate, req.truncation_direction, req.prompt_name);
        let options = SparseOptions::new().with_call(call.with_max_wait(self.0.max_wait()));
        let texts = [req.inputs];
        let vectors = self.in_time(embedder.embed_sparse_async(&texts, &options)).await?;
        self.0.metrics.count_texts(entry, 1, vectors.usage.tokens, vectors.usage.truncated);
        let v = &vectors.vectors[0];
        let sparse_embeddings =
            v.indices.iter().zip(&v.values).map(|(&index, &value)| pb::SparseValue { index, value }).collect();
        Ok(pb::EmbedSparseResponse {
            sparse_embeddings,
            metadata: Some(metadata(started, &texts[0], vectors.usage.tokens)),
        })
    }

    async fn embed_all_one(&self, req: pb::EmbedAllRequest) -> Result<pb::EmbedAllResponse, Status> {
        not_empty(&req.inputs)?;
        let (entry, embedder, started) = self.model()?;
        let options = embed_options(req.truncate, req.truncation_direction, req.prompt_name);
        let texts = [req.inputs];
        let vectors =
            crate::tei::all_token_vectors(&self.0, entry, embedder, &texts, options).await.map_err(|e| status(&e))?;
        let rows = vectors.into_iter().next().unwrap_or_default();
        let tokens = rows.len();
        let token_embeddings = rows.into_iter().map(|embeddings| pb::TokenEmbedding { embeddings }).collect();
        Ok(pb::EmbedAllResponse { token_embeddings, metadata: Some(metadata(started, &texts[0], tokens)) })
    }

    /// A classifier's scores of a text or a pair, every label best first.
    async fn predict_one(
        &self,
        input: (String, Option<String>),
        truncate: bool,
        raw_scores: bool,
        direction: i32,
    ) -> Result<pb::PredictResponse, Status> {
        not_empty(&input.0)?;
        let (entry, embedder, started) = self.model()?;
        let call = CallOptions::new().with_truncation(truncation(truncate, direction)).with_max_wait(self.0.max_wait());
        let options = PairOptions::new().with_call(call).with_raw_scores(raw_scores);
        let text = format!("{}{}", input.0, input.1.as_deref().unwrap_or_default());
        let rows = self.in_time(embedder.score_async(&[input], &options)).await?;
        let metadata = self.counted(entry, started, &text, &rows);
        let labels = &embedder.model_info().folder.kind.labels;
        let mut predictions: Vec<pb::Prediction> = rows
            .row(0)
            .iter()
            .zip(labels)
            .map(|(&score, label)| pb::Prediction { score, label: label.clone() })
            .collect();
        predictions.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(pb::PredictResponse { predictions, metadata })
    }

    async fn rerank_all(&self, req: pb::RerankRequest) -> Result<pb::RerankResponse, Status> {
        not_empty(&req.query)?;
        if req.texts.is_empty() {
            return Err(Status::invalid_argument("`texts` cannot be empty"));
        }
        self.0.check_inputs(req.texts.len()).map_err(|e| status(&e))?;
        let (entry, embedder, started) = self.model()?;
        let call = CallOptions::new()
            .with_truncation(truncation(req.truncate, req.truncation_direction))
            .with_max_wait(self.0.max_wait());
        let options = PairOptions::new().with_call(call).with_raw_scores(req.raw_scores);
        let ranking = self.in_time(embedder.rerank_async(&req.query, &req.texts, None, &options)).await?;
        self.0.metrics.count_texts(entry, req.texts.len(), ranking.usage.tokens, ranking.usage.truncated);
        let ranks = ranking
            .ranked
            .iter()
            .map(|r| pb::Rank {
                index: u32::try_from(r.index).unwrap_or(u32::MAX),
                text: req.return_text.then(|| req.texts[r.index].clone()),
                score: r.score,
            })
            .collect();
        let chars: String = req.texts.concat();
        Ok(pb::RerankResponse { ranks, metadata: Some(metadata(started, &chars, ranking.usage.tokens)) })
    }

    fn tokenize_one(&self, req: pb::EncodeRequest) -> Result<pb::EncodeResponse, Status> {
        let (_, embedder, _) = self.model()?;
        let mut options = CallOptions::new();
        if let Some(p) = req.prompt_name {
            options = options.with_prompt_name(p);
        }
        let tokens = embedder.tokenize(&req.inputs, &options, req.add_special_tokens).map_err(super::embed_status)?;
        let tokens = tokens
            .into_iter()
            .map(|t| pb::SimpleToken {
                id: t.id,
                text: t.text,
                special: t.special,
                start: (!t.special).then(|| u32::try_from(t.start).unwrap_or(u32::MAX)),
                stop: (!t.special).then(|| u32::try_from(t.stop).unwrap_or(u32::MAX)),
            })
            .collect();
        Ok(pb::EncodeResponse { tokens })
    }

    fn decode_one(&self, req: pb::DecodeRequest) -> Result<pb::DecodeResponse, Status> {
        let (_, embedder, _) = self.model()?;
        let text = embedder.decode(&req.ids, req.skip_special_tokens).map_err(super::embed_status)?;
        Ok(pb::DecodeResponse { text })
    }
}

#[tonic::async_trait]
impl pb::info_server::Info for Grpc {
    async fn info(&self, _: Request<pb::InfoRequest>) -> Reply<pb::InfoResponse> {
        let (entry, embedder, _) = self.model()?;
        let info = embedder.model_info();
        let kind = &info.folder.kind;
        let model_type = match kind.kind {
            ModelKind::CrossEncoder if kind.labels.len() == 1 => pb::ModelType::Reranker,
            ModelKind::CrossEncoder => pb::ModelType::Classifier,
            _ => pb::ModelType::Embedding,
        };
        let max_inputs = u32::try_from(self.0.max_inputs).unwrap_or(u32::MAX);
        Ok(Response::new(pb::InfoResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            model_id: entry.name.clone(),
            model_dtype: if info.folder.quantization.is_some() { "int8" } else { "float32" }.to_owned(),
            model_type: model_type.into(),
            max_input_length: u32::try_from(info.max_length).unwrap_or(u32::MAX),
            max_client_batch_size: max_inputs,
            max_concurrent_requests: max_inputs,
            tokenization_workers: 1,
            ..pb::InfoResponse::default()
        }))
    }
}

#[tonic::async_trait]
impl pb::embed_server::Embed for Grpc {
    async fn embed(&self, r: Request<pb::EmbedRequest>) -> Reply<pb::EmbedResponse> {
        self.embed_one(r.into_inner()).await.map(Response::new)
    }
    type EmbedStreamStream = Answers<pb::EmbedResponse>;
    async fn embed_stream(&self, r: Request<Streaming<pb::EmbedRequest>>) -> Reply<Self::EmbedStreamStream> {
        Ok(Response::new(answer_each(self, r.into_inner(), |g, req| async move { g.embed_one(req).await })))
    }
    async fn embed_sparse(&self, r: Request<pb::EmbedSparseRequest>) -> Reply<pb::EmbedSparseResponse> {
        self.embed_sparse_one(r.into_inner()).await.map(Response::new)
    }
    type EmbedSparseStreamStream = Answers<pb::EmbedSparseResponse>;
    async fn embed_sparse_stream(
        &self,
        r: Request<Streaming<pb::EmbedSparseRequest>>,
    ) -> Reply<Self::EmbedSparseStreamStream> {
        Ok(Response::new(answer_each(self, r.into_inner(), |g, req| async move { g.embed_sparse_one(req).await })))
    }
    async fn embed_all(&self, r: Request<pb::EmbedAllRequest>) -> Reply<pb::EmbedAllResponse> {
        self.embed_all_one(r.into_inner()).await.map(Response::new)
    }
    type EmbedAllStreamStream = Answers<pb::EmbedAllResponse>;
    async fn embed_all_stream(&self, r: Request<Streaming<pb::EmbedAllRequest>>) -> Reply<Self::EmbedAllStreamStream> {
        Ok(Response::new(answer_each(self, r.into_inner(), |g, req| async move { g.embed_all_one(req).await })))
    }
}

/// A pair request's two texts, as TEI requires them.
fn pair(mut inputs: Vec<String>) -> Result<(String, Option<String>), Status> {
    if inputs.len() != 2 {
        return Err(Status::invalid_argument(format!("`inputs` must have two texts, a pair; it has {}", inputs.len())));
    }
    let second = inputs.pop();
    Ok((inputs.pop().unwrap_or_default(), second))
}

#[tonic::async_trait]
impl pb::predict_server::Predict for Grpc {
    async fn predict(&self, r: Request<pb::PredictRequest>) -> Reply<pb::PredictResponse> {
        let q = r.into_inner();
        self.predict_one((q.inputs, None), q.truncate, q.raw_scores, q.truncation_direction).await.map(Response::new)
    }
    async fn predict_pair(&self, r: Request<pb::PredictPairRequest>) -> Reply<pb::PredictResponse> {
        let q = r.into_inner();
        let input = pair(q.inputs)?;
        self.predict_one(input, q.truncate, q.raw_scores, q.truncation_direction).await.map(Response::new)
    }
    type PredictStreamStream = Answers<pb::PredictResponse>;
    async fn predict_stream(&self, r: Request<Streaming<pb::PredictRequest>>) -> Reply<Self::PredictStreamStream> {
        Ok(Response::new(answer_each(self, r.into_inner(), |g, q| async move {
            g.predict_one((q.inputs, None), q.truncate, q.raw_scores, q.truncation_direction).await
        })))
    }
    type PredictPairStreamStream = Answers<pb::PredictResponse>;
    async fn predict_pair_stream(
        &self,
        r: Request<Streaming<pb::PredictPairRequest>>,
    ) -> Reply<Self::PredictPairStreamStream> {
        Ok(Response::new(answer_each(self, r.into_inner(), |g, q| async move {
            g.predict_one(pair(q.inputs)?, q.truncate, q.raw_scores, q.truncation_direction).await
        })))
    }
}

#[tonic::async_trait]
impl pb::rerank_server::Rerank for Grpc {
    async fn rerank(&self, r: Request<pb::RerankRequest>) -> Reply<pb::RerankResponse> {
        self.rerank_all(r.into_inner()).await.map(Response::new)
    }
    /// The texts of the whole stream ranked at once; the query and the flags are the first
    /// message's, as TEI reads them.
    async fn rerank_stream(&self, r: Request<Streaming<pb::RerankStreamRequest>>) -> Reply<pb::RerankResponse> {
        let mut stream = r.into_inner();
        let mut all: Option<pb::RerankRequest> = None;
        while let Some(m) = stream.message().await? {
            let req = all.get_or_insert_with(|| pb::RerankRequest {
                query: m.query.clone(),
                texts: Vec::new(),
                truncate: m.truncate,
                raw_scores: m.raw_scores,
                return_text: m.return_text,
                truncation_direction: m.truncation_direction,
            });
            req.texts.push(m.text);
            self.0.check_inputs(req.texts.len()).map_err(|e| status(&e))?;
        }
        let req = all.ok_or_else(|| Status::invalid_argument("the stream sent no texts to rank"))?;
        self.rerank_all(req).await.map(Response::new)
    }
}

#[tonic::async_trait]
impl pb::tokenize_server::Tokenize for Grpc {
    async fn tokenize(&self, r: Request<pb::EncodeRequest>) -> Reply<pb::EncodeResponse> {
        self.tokenize_one(r.into_inner()).map(Response::new)
    }
    type TokenizeStreamStream = Answers<pb::EncodeResponse>;
    async fn tokenize_stream(&self, r: Request<Streaming<pb::EncodeRequest>>) -> Reply<Self::TokenizeStreamStream> {
        Ok(Response::new(answer_each(self, r.into_inner(), |g, req| async move { g.tokenize_one(req) })))
    }
    async fn decode(&self, r: Request<pb::DecodeRequest>) -> Reply<pb::DecodeResponse> {
        self.decode_one(r.into_inner()).map(Response::new)
    }
    type DecodeStreamStream = Answers<pb::DecodeResponse>;
    async fn decode_stream(&self, r: Request<Streaming<pb::DecodeRequest>>) -> Reply<Self::DecodeStreamStream> {
        Ok(Response::new(answer_each(self, r.into_inner(), |g, req| async move { g.decode_one(req) })))
    }
}
