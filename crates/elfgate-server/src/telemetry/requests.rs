//! Requests as server spans: a gateway door's call always (its run's spans under it), any other
//! request when it came with a caller's `traceparent` (so that the run it starts joins the
//! caller's trace). Present in the router only when runs are traced.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use elfgate_core::Principal;
use elfgate_core::telemetry::{TARGET, extract_parent};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The doors whose calls are model calls of their own.
fn is_door(path: &str) -> bool {
    matches!(
        path,
        "/v1/chat/completions" | "/v1/messages" | "/v1/responses"
    )
}

/// Middleware (inside auth: the principal is known).
pub async fn trace_requests(req: Request, next: Next) -> Response {
    let parent = extract_parent(|name| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    });
    let path = req.uri().path();
    if parent.is_none() && !is_door(path) {
        return next.run(req).await;
    }
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = format!("{} {path}", req.method()),
        otel.kind = "server",
    );
    if let Some(parent) = parent {
        let _ = span.set_parent(parent);
    }
    span.set_attribute("http.request.method", req.method().as_str().to_string());
    span.set_attribute("url.path", path.to_string());
    if let Some(principal) = req.extensions().get::<Principal>() {
        span.set_attribute("elfgate.user", principal.user.clone());
        span.set_attribute("elfgate.team", principal.team.clone());
        if let Some(key_id) = &principal.key_id {
            span.set_attribute("elfgate.key.id", key_id.clone());
        }
    }
    let response = next.run(req).instrument(span.clone()).await;
    span.set_attribute(
        "http.response.status_code",
        i64::from(response.status().as_u16()),
    );
    if response.status().is_server_error() {
        span.set_status(opentelemetry::trace::Status::error(
            response.status().as_str().to_string(),
        ));
    }
    response
}
