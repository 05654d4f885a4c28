//! API keys in tests: [`Daemon::create_key`] creates one through the API with the daemon's root
//! token and returns the secret key; [`Daemon::as_key`] makes requests with any bearer (a key, a
//! wrong token, nothing) as a client holding it would.

use crate::common::{Daemon, Sse, accepted_run, created_session};
use reqwest::Method;
use serde_json::{Value, json};

/// The body of `POST /v1/admin/keys` for `user` of `team` with `role` (no expiry, no scopes).
pub fn key_body(user: &str, team: &str, role: &str) -> Value {
    json!({"name": format!("{user}'s key"), "user": user, "team": team, "role": role})
}

impl Daemon {
    /// Creates an API key (`POST /v1/admin/keys` with the root token) and returns its answer
    /// (`id`, `key`, …); panics unless 201.
    pub async fn create_key_answer(&self, body: Value) -> Value {
        let (status, v) = self.post("/v1/admin/keys", body).await;
        assert_eq!(status, 201, "creating a key failed: {v}");
        v
    }

    /// Creates an API key (see [`key_body`]) and returns the key itself, `egk_<id>_<secret>`.
    pub async fn create_key(&self, body: Value) -> String {
        let v = self.create_key_answer(body).await;
        v["key"].as_str().expect("a key").to_string()
    }

    /// Requests to this daemon with `bearer` as their credentials (`Authorization: Bearer`),
    /// instead of the root token.
    pub fn as_key(&self, bearer: &str) -> AsKey<'_> {
        AsKey {
            d: self,
            bearer: Some(bearer.to_string()),
        }
    }

    /// Requests to this daemon without credentials.
    pub fn anonymous(&self) -> AsKey<'_> {
        AsKey {
            d: self,
            bearer: None,
        }
    }
}

/// A client of a daemon holding one bearer (see [`Daemon::as_key`]). Answers are a status and
/// the JSON body (null when the body is not JSON), like [`Daemon`]'s own helpers.
pub struct AsKey<'a> {
    d: &'a Daemon,
    bearer: Option<String>,
}

impl AsKey<'_> {
    /// Any request, with an optional JSON body.
    pub async fn request(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let r = self.builder(method, path, body).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// The request, ready to send (to add headers of one's own).
    pub fn builder(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::RequestBuilder {
        let mut rb = self.d.anon.request(method, self.d.url(path));
        if let Some(b) = &self.bearer {
            rb = rb.bearer_auth(b);
        }
        if let Some(body) = body {
            rb = rb.json(&body);
        }
        rb
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.request(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.request(Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.request(Method::PUT, path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.request(Method::PATCH, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.request(Method::DELETE, path, None).await
    }

    /// Creates a session; panics unless 201. Returns its id and its first run's.
    pub async fn create(&self, body: Value) -> (String, String) {
        created_session(self.post("/v1/sessions", body).await)
    }

    /// Sends a prompt; panics unless 202. Returns the run's id.
    pub async fn send(&self, session: &str, body: Value) -> String {
        accepted_run(
            self.post(&format!("/v1/sessions/{session}/messages"), body)
                .await,
        )
    }

    /// Opens a session's event stream after `last_event_id`; panics unless 200.
    pub async fn events(&self, session: &str, last_event_id: Option<u64>) -> Sse {
        let mut rb = self.builder(Method::GET, &format!("/v1/sessions/{session}/events"), None);
        if let Some(id) = last_event_id {
            rb = rb.header("Last-Event-ID", id.to_string());
        }
        let resp = rb.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        Sse::new(resp)
    }
}
