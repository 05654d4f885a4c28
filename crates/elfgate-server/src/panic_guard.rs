//! A handler that panics answers 500 with the API's JSON error shape, instead of the connection
//! being dropped without an answer. (A panic inside a streaming body, once its head is sent, still
//! ends that stream: there is no answer left to replace.)

use crate::error::ApiError;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;

/// Middleware: runs the rest of the stack and turns a panic into a 500.
pub async fn answer_panics(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    // Unwind safety: the request's state is dropped with the panic; what the handler shares
    // (the store, the dispatcher) is behind locks that do not poison or that recover from it.
    match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            tracing::error!(%method, path, panic = %what, "a request handler panicked");
            ApiError::Internal(format!(
                "{method} {path} failed inside the daemon (see its log)"
            ))
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::get;

    #[tokio::test]
    async fn a_panicking_handler_answers_500_with_the_error_shape_and_the_server_keeps_serving() {
        let app = Router::new()
            .route(
                "/boom",
                get(|| async {
                    if std::hint::black_box(true) {
                        panic!("boom");
                    }
                    "unreachable"
                }),
            )
            .route("/fine", get(|| async { "fine" }))
            .layer(axum::middleware::from_fn(answer_panics));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let http = reqwest::Client::new();
        let r = http
            .get(format!("http://{addr}/boom"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 500);
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "internal");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("GET /boom failed inside the daemon"),
            "{body}"
        );
        let r = http
            .get(format!("http://{addr}/fine"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.text().await.unwrap(), "fine");
    }
}
