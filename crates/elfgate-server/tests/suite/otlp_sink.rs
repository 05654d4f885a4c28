//! A stand-in trace collector for the trace tests: an OTLP/HTTP endpoint on loopback that decodes
//! each `/v1/traces` body with the protocol's own types and keeps the spans (and the raw bodies,
//! to look for text that must not be there). Stopped, it answers 503 to every export.

use crate::common::poll_until;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// One exported span, as the tests read it.
#[derive(Debug, Clone)]
pub struct SpanRow {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// OTLP's span kind (2: server, 3: client).
    pub kind: i32,
    pub attributes: BTreeMap<String, Value>,
}

impl SpanRow {
    pub fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }
}

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<SpanRow>>,
    bodies: Mutex<Vec<u8>>,
    stopped: AtomicBool,
}

pub struct Sink {
    /// The base URL to configure as `otlp_endpoint`.
    pub url: String,
    received: Arc<Received>,
}

fn any_value(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> Value {
    match v.and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => json!(s),
        Some(AnyValue::IntValue(i)) => json!(i),
        Some(AnyValue::DoubleValue(d)) => json!(d),
        Some(AnyValue::BoolValue(b)) => json!(b),
        Some(AnyValue::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(|v| any_value(Some(v))).collect())
        }
        _ => Value::Null,
    }
}

async fn traces(State(received): State<Arc<Received>>, body: Bytes) -> StatusCode {
    if received.stopped.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body.clone()) else {
        return StatusCode::BAD_REQUEST;
    };
    received.bodies.lock().unwrap().extend_from_slice(&body);
    let mut spans = received.spans.lock().unwrap();
    for resource in request.resource_spans {
        for scope in resource.scope_spans {
            for span in scope.spans {
                spans.push(SpanRow {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), any_value(kv.value.as_ref())))
                        .collect(),
                });
            }
        }
    }
    StatusCode::OK
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sink {
    pub async fn start() -> Sink {
        let received = Arc::new(Received::default());
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(|| async { StatusCode::OK }))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Sink { url, received }
    }

    /// From now on every export is refused.
    pub fn stop(&self) {
        self.received.stopped.store(true, Ordering::SeqCst);
    }

    /// The spans of `trace_id` once `done` holds for them.
    pub async fn trace_until(
        &self,
        trace_id: &str,
        done: impl Fn(&[SpanRow]) -> bool,
    ) -> Vec<SpanRow> {
        poll_until(&format!("the spans of trace {trace_id}"), || {
            let spans: Vec<SpanRow> = self
                .received
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|s| s.trace_id == trace_id)
                .cloned()
                .collect();
            done(&spans).then_some(spans)
        })
        .await
    }

    /// Whether `text` is anywhere in what was exported.
    pub fn bodies_contain(&self, text: &str) -> bool {
        let bodies = self.received.bodies.lock().unwrap();
        bodies.windows(text.len()).any(|w| w == text.as_bytes())
    }
}

/// The spans named `name`.
pub fn named<'a>(spans: &'a [SpanRow], name: &str) -> Vec<&'a SpanRow> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The one span named `name`.
pub fn one<'a>(spans: &'a [SpanRow], name: &str) -> &'a SpanRow {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "{name} in {:#?}", names(spans));
    found[0]
}

pub fn names(spans: &[SpanRow]) -> Vec<(&str, &str, &str)> {
    spans
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.span_id.as_str(),
                s.parent_span_id.as_str(),
            )
        })
        .collect()
}
