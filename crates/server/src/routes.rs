//! Every route the server answers, as one table: [`router`](crate::router) is built from it and
//! `nornir vector serve --help` lists it ([`routes`]), so the two cannot drift.

use std::sync::Arc;

use axum::Router;
use axum::routing::{MethodRouter, get, post};

use crate::api::App;
use crate::{api, cohere, multi_vector, openai, retrieval, tei};

/// The API a route speaks, as its clients know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Api {
    /// OpenAI's embeddings API.
    OpenAi,
    /// text-embeddings-inference's.
    Tei,
    /// Cohere's (its rerank route is also Jina's).
    Cohere,
    /// nornir's own.
    Nornir,
    /// For operators: health, metrics.
    Operations,
}

impl Api {
    /// Its name in help and docs.
    pub fn name(self) -> &'static str {
        match self {
            Api::OpenAi => "OpenAI",
            Api::Tei => "TEI",
            Api::Cohere => "Cohere and Jina",
            Api::Nornir => "nornir",
            Api::Operations => "operations",
        }
    }
}

/// One route as help lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouteInfo {
    /// `GET` or `POST`.
    pub method: &'static str,
    pub path: &'static str,
    pub api: Api,
    /// Also answered for any model under `/models/{name}` (TEI's routes).
    pub per_model: bool,
}

/// A route and the handler that answers it.
struct Route {
    info: RouteInfo,
    handler: fn() -> MethodRouter<Arc<App>>,
}

const fn route(method: &'static str, path: &'static str, api: Api, handler: fn() -> MethodRouter<Arc<App>>) -> Route {
    Route { info: RouteInfo { method, path, api, per_model: matches!(api, Api::Tei) }, handler }
}

/// Every route, in the order help lists them.
const ROUTES: &[Route] = &[
    route("POST", "/v1/embeddings", Api::OpenAi, || post(openai::embeddings)),
    route("POST", "/embeddings", Api::OpenAi, || post(openai::embeddings)),
    route("GET", "/v1/models", Api::OpenAi, || get(openai::models)),
    route("GET", "/models", Api::OpenAi, || get(openai::models)),
    route("POST", "/embed", Api::Tei, || post(tei::embed)),
    route("POST", "/embed_all", Api::Tei, || post(tei::embed_all)),
    route("POST", "/embed_sparse", Api::Tei, || post(retrieval::embed_sparse)),
    route("POST", "/rerank", Api::Tei, || post(retrieval::rerank)),
    route("POST", "/predict", Api::Tei, || post(retrieval::predict)),
    route("POST", "/similarity", Api::Tei, || post(tei::similarity)),
    route("POST", "/tokenize", Api::Tei, || post(tei::tokenize)),
    route("POST", "/decode", Api::Tei, || post(tei::decode)),
    route("GET", "/info", Api::Tei, || get(api::info)),
    // TEI's root answers as the first model's kind does; not under /models/{name}.
    Route {
        info: RouteInfo { method: "POST", path: "/", api: Api::Tei, per_model: false },
        handler: || post(retrieval::root),
    },
    route("POST", "/v1/embed", Api::Cohere, || post(cohere::embed)),
    route("POST", "/v2/embed", Api::Cohere, || post(cohere::embed)),
    route("POST", "/v1/rerank", Api::Cohere, || post(retrieval::cohere_rerank)),
    route("POST", "/v2/rerank", Api::Cohere, || post(retrieval::cohere_rerank)),
    route("POST", "/embed_chunks", Api::Nornir, || post(tei::embed_chunks)),
    route("POST", "/v1/multi-vector", Api::Nornir, || post(multi_vector::multi_vector)),
    route("GET", "/health", Api::Operations, || get(api::health)),
    route("GET", "/metrics", Api::Operations, || get(api::metrics)),
];

/// Every route the server answers.
pub fn routes() -> impl Iterator<Item = RouteInfo> {
    ROUTES.iter().map(|r| r.info)
}

/// The routes of the table, TEI's also under `/models/{model}` (with `/embed_chunks`, which
/// goes with `/embed`).
pub(crate) fn table() -> Router<Arc<App>> {
    let mut per_model = Router::new();
    let mut app = Router::new();
    for r in ROUTES {
        app = app.route(r.info.path, (r.handler)());
        if r.info.per_model || r.info.path == "/embed_chunks" {
            per_model = per_model.route(r.info.path, (r.handler)());
        }
    }
    app.nest("/models/{model}", per_model)
}

/// The routes as `serve --help` lists them: one line per API.
pub fn routes_help() -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut apis: Vec<Api> = Vec::new();
    for r in routes() {
        if !apis.contains(&r.api) {
            apis.push(r.api);
        }
    }
    for api in apis {
        let paths: Vec<String> =
            routes().filter(|r| r.api == api).map(|r| format!("{} {}", r.method, r.path)).collect();
        lines.push(format!("  {}: {}", api.name(), paths.join(", ")));
    }
    lines.push("  TEI's routes (and /embed_chunks) also under /models/NAME/ for any model; the others use the first model or the request's `model`".to_owned());
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_listed_once_and_help_names_each() {
        let paths: Vec<&str> = routes().map(|r| r.path).collect();
        let mut unique = paths.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), paths.len(), "{paths:?}");
        let help = routes_help();
        for r in routes() {
            assert!(help.contains(&format!("{} {}", r.method, r.path)), "{} missing from {help}", r.path);
        }
        assert!(help.contains("POST /v1/multi-vector"));
    }
}
