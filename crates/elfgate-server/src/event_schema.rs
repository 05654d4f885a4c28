//! The schema of one event as a client receives it (the `data` of an SSE message, a row of the
//! log): one complete object per event type, built from `EventPayload`'s variants and the
//! envelope fields, so that every real event validates against exactly one variant.
//!
//! utoipa would describe an event as `allOf: [EventPayload, envelope fields]`, which requires
//! `seq` and `ts` of every event: the `reset` frame, which is not logged, has neither, and failed
//! validation. Here each variant carries its `type` as a required `const` (no discriminator
//! needed) and the envelope fields it really has.

use chrono::{DateTime, Utc};
use elfgate_core::{RunId, SessionId};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema};
use utoipa::{PartialSchema, ToSchema};

/// The fields around every logged event's payload.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventFields {
    /// Per-session sequence number; also the SSE `id`.
    pub seq: u64,
    /// The session.
    pub session_id: SessionId,
    /// The run, for events that belong to one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// When it was published (RFC 3339, milliseconds, UTC).
    pub ts: DateTime<Utc>,
}

/// Event types that are sent but never logged: they have no `seq`, `ts` or `runId`.
const NOT_LOGGED: [&str; 1] = ["reset"];

/// One event as sent in the `data` of an SSE message and stored in the log. Its schema in the
/// document is built by [`complete`]; this type only names it for the handlers' annotations.
pub struct EventEnvelope;

impl PartialSchema for EventEnvelope {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some("Filled in from EventPayload and EventFields."))
            .into()
    }
}

impl ToSchema for EventEnvelope {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("EventEnvelope")
    }
}

/// Replaces the document's `EventEnvelope` schema by a `oneOf` of complete events, one per
/// variant of `EventPayload`. Leaves the document as it is when those schemas are missing.
pub fn complete(doc: &mut Value) {
    let Ok(fields) = serde_json::to_value(EventFields::schema()) else {
        return;
    };
    let schemas = &mut doc["components"]["schemas"];
    let Some(variants) = schemas["EventPayload"]["oneOf"].as_array() else {
        return;
    };
    let events: Vec<Value> = variants.iter().map(|v| event(&fields, v)).collect();
    schemas["EventEnvelope"] = json!({
        "description": "One event as sent in the `data` of an SSE message (`event` is its `type`, \
                        `id` its `seq`) and stored in the log: the envelope fields next to the \
                        payload's `type` and fields. Exactly one variant matches, by `type`.",
        "oneOf": events,
    });
}

/// One complete event: the envelope fields it has, the variant's fields, `type` as a const.
fn event(fields: &Value, variant: &Value) -> Value {
    let ty = variant["properties"]["type"]["enum"][0]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let logged = !NOT_LOGGED.contains(&ty.as_str());
    let mut properties = Map::new();
    let mut required: Vec<Value> = Vec::new();
    for (name, schema) in fields["properties"].as_object().into_iter().flatten() {
        if logged || name == "sessionId" {
            properties.insert(name.clone(), schema.clone());
        }
    }
    for name in fields["required"].as_array().into_iter().flatten() {
        if properties.contains_key(name.as_str().unwrap_or_default()) {
            required.push(name.clone());
        }
    }
    for (name, schema) in variant["properties"].as_object().into_iter().flatten() {
        properties.insert(name.clone(), schema.clone());
    }
    properties.insert("type".into(), json!({"type": "string", "const": ty}));
    for name in variant["required"].as_array().into_iter().flatten() {
        if !required.contains(name) {
            required.push(name.clone());
        }
    }
    let mut out = json!({
        "title": ty,
        "type": "object",
        "properties": properties,
        "required": required,
    });
    if let Some(d) = variant.get("description") {
        out["description"] = d.clone();
    }
    out
}
