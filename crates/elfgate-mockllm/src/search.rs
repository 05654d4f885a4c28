//! Search backends as web_search speaks to them: SearXNG's JSON API (`GET /search?format=json`),
//! Brave Search's (`GET /res/v1/web/search`, key in `X-Subscription-Token`) and Tavily's
//! (`POST /search`, bearer key). Each answers three results made from the query, so a test sees
//! its query come back: title `Result N for QUERY`, URL `https://example.com/search/N?q=QUERY`,
//! snippet `Snippet N about QUERY`. A keyed backend without a key answers 401; a query of
//! `fail` answers 500.

use axum::Json;
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;

/// Results for `query`, with the snippet under `snippet_key` (the backend's name for it).
fn results(query: &str, n: usize, snippet_key: &str) -> Vec<Value> {
    (1..=n.min(3))
        .map(|i| {
            let mut r = json!({
                "title": format!("Result {i} for {query}"),
                "url": format!("https://example.com/search/{i}?q={query}"),
            });
            r[snippet_key] = json!(format!("Snippet {i} about {query}"));
            r
        })
        .collect()
}

fn refused(status: StatusCode, why: &str) -> Response {
    (status, Json(json!({"error": why}))).into_response()
}

/// SearXNG: `GET /search?q=…&format=json`.
pub(crate) async fn searxng(Query(q): Query<HashMap<String, String>>) -> Response {
    let query = q.get("q").cloned().unwrap_or_default();
    if q.get("format").map(String::as_str) != Some("json") {
        return refused(StatusCode::FORBIDDEN, "format=json is required");
    }
    if query == "fail" {
        return refused(StatusCode::INTERNAL_SERVER_ERROR, "search failed");
    }
    Json(json!({"query": query, "results": results(&query, 3, "content")})).into_response()
}

/// Brave: `GET /res/v1/web/search?q=…&count=N` with `X-Subscription-Token`.
pub(crate) async fn brave(
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if headers
        .get("x-subscription-token")
        .is_none_or(axum::http::HeaderValue::is_empty)
    {
        return refused(StatusCode::UNAUTHORIZED, "missing X-Subscription-Token");
    }
    let query = q.get("q").cloned().unwrap_or_default();
    let n = q.get("count").and_then(|c| c.parse().ok()).unwrap_or(3);
    Json(json!({"web": {"results": results(&query, n, "description")}})).into_response()
}

/// Tavily: `POST /search` `{query, max_results}` with a bearer key.
pub(crate) async fn tavily(headers: HeaderMap, Json(body): Json<Value>) -> Response {
    if headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| !v.starts_with("Bearer ") || v.len() <= 7)
    {
        return refused(StatusCode::UNAUTHORIZED, "missing bearer key");
    }
    let query = body["query"].as_str().unwrap_or_default().to_string();
    let n = body["max_results"].as_u64().unwrap_or(3) as usize;
    Json(json!({"query": query, "results": results(&query, n, "content")})).into_response()
}
