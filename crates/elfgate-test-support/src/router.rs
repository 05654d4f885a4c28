//! The daemon's router served in-process: the same `Daemon::build` and router as `elfgate serve`,
//! with requests handed to it directly instead of over a socket. For tests of what a request
//! answers (validation, status codes, error bodies) that need no process, no port and no child
//! of their own: a fraction of the cost of starting the binary.

use crate::common::write_config;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use elfgate_mockllm::MockServer;
use elfgate_server::{Config, Daemon};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

/// A daemon without a listener.
pub struct InProcess {
    router: axum::Router,
    /// The bearer token the daemon expects.
    pub token: Option<String>,
    /// Kept for the daemon's state (its background tasks, its store).
    pub daemon: Daemon,
    /// The data directory, removed with the harness.
    _dir: tempfile::TempDir,
}

/// An answer: its status and its body (JSON, or `Value::String` of the text when it is not).
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body.
    pub body: Value,
}

impl InProcess {
    /// Builds the daemon on a fresh data directory, with `extra` TOML over the test
    /// configuration (see [`write_config`]).
    pub async fn start(mock: &MockServer, extra: &str) -> InProcess {
        let dir = tempfile::tempdir().unwrap();
        let path = write_config(dir.path(), mock, extra);
        let config = Config::load(Some(&path)).unwrap();
        let daemon = Daemon::build(config).await.unwrap();
        let token = daemon.state.config.token.clone();
        InProcess {
            router: daemon.router(),
            token,
            daemon,
            _dir: dir,
        }
    }

    /// Sends a request with the daemon's token; `body` as JSON when given.
    pub async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Answer {
        self.send_as(self.token.as_deref(), method, path, body)
            .await
    }

    /// Sends a request with `bearer` (an API key, a wrong token; None: no credentials) instead
    /// of the daemon's token.
    pub async fn send_as(
        &self,
        bearer: Option<&str>,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Answer {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = bearer {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = match body {
            Some(b) => req
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(b).unwrap())),
            None => req.body(Body::empty()),
        }
        .unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Answer { status, body }
    }

    /// GET `path`.
    pub async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, path, None).await
    }

    /// POST `body` to `path`.
    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        self.send(Method::POST, path, Some(body)).await
    }

    /// Creates an API key with the daemon's token (see [`crate::keys::key_body`]) and returns
    /// the key itself, `egk_<id>_<secret>`; panics unless 201.
    pub async fn create_key(&self, body: &Value) -> String {
        let a = self.post("/v1/admin/keys", body).await;
        assert_eq!(
            a.status,
            StatusCode::CREATED,
            "creating a key failed: {a:?}"
        );
        a.body["key"].as_str().expect("a key").to_string()
    }
}
