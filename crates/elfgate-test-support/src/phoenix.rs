//! A real trace store for the telemetry tests: Arize Phoenix (pinned in
//! tests/phoenix/requirements.txt, installed into tools/phoenix-venv by
//! scripts/install-phoenix.sh). It receives OTLP over HTTP at `/v1/traces` under
//! [`Phoenix::endpoint`] and answers for the spans it stored through its REST API.
//!
//! [`Phoenix::shared`] is the one scripts/test-services.sh starts for the whole suite
//! (`ELFGATE_TEST_PHOENIX_URL`; it takes 20 s or more to start, too long to start one per test):
//! tests sharing it tell their spans apart by trace id. [`Phoenix::start`] starts a private one,
//! for a test that stops its collector. Without the venv a test skips, saying so, unless
//! REQUIRE_TRACE_TESTS=require (scripts/test.sh sets it), which makes a missing store a failure.

use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long Phoenix may take to start: it imports a large Python application, which takes
/// 20 s or more on a busy two-core machine.
const START_GUARD: Duration = Duration::from_secs(180);

/// How long the spans a test waits for may take to be exported and stored.
const SPANS_GUARD: Duration = Duration::from_secs(60);

/// One span as Phoenix stored it.
#[derive(Debug, Clone)]
pub struct Span {
    /// The span's name (`invoke_agent tinyelf`, `chat mock`, ...).
    pub name: String,
    /// Its trace id, 32 hex digits.
    pub trace_id: String,
    /// Its span id, 16 hex digits.
    pub span_id: String,
    /// Its parent's span id; None for a root.
    pub parent_id: Option<String>,
    /// `OK`, `ERROR` or `UNSET`.
    pub status_code: String,
    /// Its attributes, by their dotted names (`gen_ai.usage.input_tokens`).
    pub attributes: serde_json::Map<String, Value>,
    /// Its events (`{name, timestamp, attributes}`).
    pub events: Vec<Value>,
    /// The whole record as Phoenix answered it.
    pub raw: Value,
}

impl Span {
    /// An attribute, if the span has it.
    pub fn attr(&self, name: &str) -> Option<&Value> {
        self.attributes.get(name)
    }

    /// A string attribute, if the span has it.
    pub fn attr_str(&self, name: &str) -> Option<&str> {
        self.attr(name).and_then(Value::as_str)
    }

    /// An integer attribute, if the span has it.
    pub fn attr_u64(&self, name: &str) -> Option<u64> {
        self.attr(name).and_then(Value::as_u64)
    }

    fn from_record(v: &Value) -> Span {
        let text = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default();
        Span {
            name: text("/name").to_string(),
            trace_id: text("/context/trace_id").to_string(),
            span_id: text("/context/span_id").to_string(),
            parent_id: v["parent_id"].as_str().map(str::to_string),
            status_code: text("/status_code").to_string(),
            attributes: v["attributes"].as_object().cloned().unwrap_or_default(),
            events: v["events"].as_array().cloned().unwrap_or_default(),
            raw: v.clone(),
        }
    }
}

/// A running Phoenix; a private one is killed (with its process group) when dropped.
pub struct Phoenix {
    /// The private store's process; None for the shared one (or once stopped).
    child: Option<Child>,
    base: String,
    /// The private store's data and log.
    dir: Option<tempfile::TempDir>,
    http: reqwest::Client,
}

/// Phoenix's executable in the venv, if installed; otherwise the test skips saying so, or fails
/// under REQUIRE_TRACE_TESTS=require.
pub fn phoenix_bin() -> Option<PathBuf> {
    let bin =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/phoenix-venv/bin/phoenix");
    if bin.exists() {
        return Some(bin);
    }
    assert_ne!(
        std::env::var("REQUIRE_TRACE_TESTS").as_deref(),
        Ok("require"),
        "Arize Phoenix is required (scripts/install-phoenix.sh installs it)"
    );
    eprintln!("trace store test skipped: no tools/phoenix-venv (run scripts/install-phoenix.sh)");
    None
}

/// A client without idle connections: the store's server closes an idle one after 5 s, and a
/// request sent on it as it closes fails (`IncompleteMessage`).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// A port nobody listens on now (the store binds it a moment later).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Phoenix {
    /// The suite's shared store (`ELFGATE_TEST_PHOENIX_URL`, which scripts/test-services.sh
    /// sets), once it answers; a private one ([`Phoenix::start`]) when the variable is not set.
    /// None when Phoenix is not installed (see [`phoenix_bin`]).
    pub async fn shared() -> Option<Phoenix> {
        let Some(base) = std::env::var("ELFGATE_TEST_PHOENIX_URL")
            .ok()
            .filter(|u| !u.is_empty())
        else {
            return Self::start().await;
        };
        let phoenix = Phoenix {
            child: None,
            base: base.trim_end_matches('/').to_string(),
            dir: None,
            http: client(),
        };
        phoenix.wait_until_up().await;
        Some(phoenix)
    }

    /// Starts a private Phoenix on free loopback ports with its own SQLite in a temporary
    /// directory and waits until it answers; None when it is not installed (see
    /// [`phoenix_bin`]).
    pub async fn start() -> Option<Phoenix> {
        let bin = phoenix_bin()?;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("phoenix.log")).unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            // Its OTLP/gRPC receiver is not used, but it always listens: a port of its own, so that
            // tests running side by side do not collide on the default 4317.
            .env("PHOENIX_GRPC_PORT", free_port().to_string())
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        let phoenix = Phoenix {
            child: Some(child),
            base: format!("http://127.0.0.1:{port}"),
            dir: Some(dir),
            http: client(),
        };
        phoenix.wait_until_up().await;
        Some(phoenix)
    }

    async fn wait_until_up(&self) {
        let deadline = tokio::time::Instant::now() + START_GUARD;
        loop {
            let up = self
                .http
                .get(format!("{}/healthz", self.endpoint()))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                return;
            }
            let log = match &self.dir {
                Some(d) => {
                    std::fs::read_to_string(d.path().join("phoenix.log")).unwrap_or_default()
                }
                None => "phoenix.log in the test services' directory".to_string(),
            };
            assert!(
                tokio::time::Instant::now() < deadline,
                "Phoenix at {} did not answer within {START_GUARD:?}; its log: {log}",
                self.base
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it (traces go to
    /// `/v1/traces` under it); also the address of its web UI.
    pub fn endpoint(&self) -> String {
        self.base.clone()
    }

    /// Every span stored so far (of the default project, where spans without a project go).
    pub async fn spans(&self) -> Vec<Span> {
        self.query("").await
    }

    /// The spans of one trace stored so far.
    pub async fn trace(&self, trace_id: &str) -> Vec<Span> {
        self.query(&format!("&trace_id={trace_id}")).await
    }

    /// The stored spans that the REST API's `filter` (query parameters, each starting with `&`)
    /// selects, every page of them.
    async fn query(&self, filter: &str) -> Vec<Span> {
        let mut spans = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = format!(
                "{}/v1/projects/default/spans?limit=1000{filter}",
                self.endpoint()
            );
            if let Some(c) = &cursor {
                url.push_str(&format!("&cursor={c}"));
            }
            let resp = self.http.get(url).send().await.unwrap();
            // The default project appears with the first span stored.
            if resp.status() == reqwest::StatusCode::NOT_FOUND {
                return spans;
            }
            let page: Value = resp.error_for_status().unwrap().json().await.unwrap();
            spans.extend(
                page["data"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(Span::from_record),
            );
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return spans,
            }
        }
    }

    /// Polls the spans of `trace_id` (every stored span when None) until `done` holds of them
    /// (spans are exported in batches, so they arrive a moment after the run ends); panics past
    /// the guard, showing what came.
    pub async fn spans_until(
        &self,
        what: &str,
        trace_id: Option<&str>,
        done: impl Fn(&[Span]) -> bool,
    ) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + SPANS_GUARD;
        loop {
            let spans = match trace_id {
                Some(t) => self.trace(t).await,
                None => self.spans().await,
            };
            if done(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {SPANS_GUARD:?}; stored: {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops a private store (a collector going away): its whole process group is killed and
    /// waited for; sends to [`Phoenix::endpoint`] fail from then on. The shared one is left
    /// running.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id() as i32;
            // The group is the store and anything it started (`process_group(0)` above).
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A span named `name` in `spans`, or a panic listing the names there are.
pub fn span<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
        panic!(
            "no span {name:?} among {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        )
    })
}

/// The children of `parent` in `spans`.
pub fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.parent_id.as_deref() == Some(parent.span_id.as_str()))
        .collect()
}
