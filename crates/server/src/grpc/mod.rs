//! text-embeddings-inference's gRPC API (`tei.v1`: Info, Embed, Predict, Rerank, Tokenize, with
//! their streams) over the same [`App`] as the HTTP routes: the same models and queues, limits,
//! API key and metrics. Errors take the codes TEI gives them: a bad or empty input
//! `INVALID_ARGUMENT`, a full queue `RESOURCE_EXHAUSTED`, a call of the wrong kind of model
//! `FAILED_PRECONDITION`. Each service's calls are in `calls.rs`.

mod calls;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use nornir_vector::{EmbedError, Embeddings, InferenceKind, error_chain};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Status, Streaming};

use crate::api::{ApiError, App};
use crate::models::Entry;

#[allow(clippy::all, missing_docs, missing_debug_implementations, unreachable_pub)]
pub(crate) mod pb {
    tonic::include_proto!("tei.v1");
}

/// The services, each behind the API key and the body limit, ready to serve.
pub(crate) fn services(app: Arc<App>) -> tonic::service::Routes {
    let limit = app.max_body_bytes;
    let guard = {
        let app = Arc::clone(&app);
        move |req: Request<()>| -> Result<Request<()>, Status> {
            app.authorize(&req.metadata().clone().into_headers()).map_err(|e| status(&e))?;
            Ok(req)
        }
    };
    let service = Grpc(app);
    macro_rules! guarded {
        ($server:path) => {{
            use $server as server;
            tonic::service::interceptor::InterceptedService::new(
                server::new(service.clone()).max_decoding_message_size(limit),
                guard.clone(),
            )
        }};
    }
    tonic::service::Routes::new(guarded!(pb::info_server::InfoServer))
        .add_service(guarded!(pb::embed_server::EmbedServer))
        .add_service(guarded!(pb::predict_server::PredictServer))
        .add_service(guarded!(pb::rerank_server::RerankServer))
        .add_service(guarded!(pb::tokenize_server::TokenizeServer))
}

/// Every service's handler: the shared app.
#[derive(Debug, Clone)]
pub(crate) struct Grpc(Arc<App>);

/// The code TEI answers an HTTP-side error with.
pub(crate) fn status(e: &ApiError) -> Status {
    let code = match e.status {
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::SERVICE_UNAVAILABLE if e.message.contains("still loading") => Code::Unavailable,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => Code::ResourceExhausted,
        StatusCode::GATEWAY_TIMEOUT | StatusCode::REQUEST_TIMEOUT => Code::DeadlineExceeded,
        s if s.is_client_error() => Code::InvalidArgument,
        _ => Code::Internal,
    };
    Status::new(code, e.message.clone())
}

/// An embedder's error as TEI codes it.
fn embed_status(e: EmbedError) -> Status {
    let code = match &e {
        EmbedError::Overloaded { .. } | EmbedError::WaitTooLong { .. } => Code::ResourceExhausted,
        EmbedError::WrongKind { .. } | EmbedError::Inference { kind: InferenceKind::Tokenizer, .. } => {
            Code::FailedPrecondition
        }
        EmbedError::InvalidOption { .. } | EmbedError::TooLong { .. } => Code::InvalidArgument,
        EmbedError::Inference { kind: InferenceKind::EmbedderDropped, .. } => Code::Unavailable,
        _ => Code::Internal,
    };
    let message = match &e {
        EmbedError::WrongKind { kind, .. } => {
            format!("this model is {}: call {}", kind.with_article(), kind.calls().library)
        }
        _ => error_chain(&e),
    };
    Status::new(code, message)
}

impl Grpc {
    /// The first model, loaded, and the time the call began.
    fn model(&self) -> Result<(&Entry, &Arc<nornir_vector::Embedder>, Instant), Status> {
        let (entry, embedder) = self.0.model(None).map_err(|e| status(&e))?;
        Ok((entry, embedder, Instant::now()))
    }

    /// A call's future within the request timeout, its error coded as TEI codes it.
    async fn in_time<T>(&self, call: impl Future<Output = Result<T, EmbedError>>) -> Result<T, Status> {
        match tokio::time::timeout(self.0.request_timeout, call).await {
            Ok(done) => done.map_err(embed_status),
            Err(_) => Err(Status::deadline_exceeded(
                "the request took longer than --request-timeout, so its texts that had not started were dropped",
            )),
        }
    }

    /// Counts a call's texts in the metrics and in its answer's metadata.
    fn counted(&self, entry: &Entry, started: Instant, text: &str, rows: &Embeddings) -> Option<pb::Metadata> {
        self.0.metrics.count_texts(entry, rows.len(), rows.total_tokens(), rows.truncated_count());
        Some(metadata(started, text, rows.total_tokens()))
    }
}

/// TEI's per-answer metadata: what nornir knows of it (the whole call's time, its characters and
/// tokens); the queue's and the model's shares of the time are not measured apart (0).
fn metadata(started: Instant, text: &str, tokens: usize) -> pb::Metadata {
    pb::Metadata {
        compute_chars: u32::try_from(text.chars().count()).unwrap_or(u32::MAX),
        compute_tokens: u32::try_from(tokens).unwrap_or(u32::MAX),
        total_time_ns: u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
        ..pb::Metadata::default()
    }
}

/// A bidirectional stream's answers: each request handled by `each` in order, its answer (or
/// its error, which ends the stream as TEI's do) sent as soon as it is done.
pub(crate) type Answers<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

fn answer_each<Req, Resp, F, Fut>(grpc: &Grpc, mut requests: Streaming<Req>, each: F) -> Answers<Resp>
where
    Req: Send + 'static,
    Resp: Send + 'static,
    F: Fn(Grpc, Req) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Resp, Status>> + Send,
{
    let (send, receive) = tokio::sync::mpsc::channel(4);
    let grpc = grpc.clone();
    tokio::spawn(async move {
        loop {
            let answer = match requests.message().await {
                Ok(Some(req)) => each(grpc.clone(), req).await,
                Ok(None) => break,
                Err(e) => Err(e),
            };
            let failed = answer.is_err();
            // The client went away: nothing more to answer.
            if send.send(answer).await.is_err() || failed {
                break;
            }
        }
    });
    Box::pin(ReceiverStream::new(receive))
}
