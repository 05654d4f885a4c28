//! GET /openapi.json serves a document generated from the code that lists every route of the API,
//! and the JSON the daemon really sends fits the schemas it names.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Daemon, Opts, chat};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Resolves a local `$ref` (one level at a time, as often as needed).
fn resolve<'a>(doc: &'a Value, mut schema: &'a Value) -> &'a Value {
    while let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("non-local $ref {r}"));
        schema = doc["components"]["schemas"]
            .get(name)
            .unwrap_or_else(|| panic!("dangling $ref {r}"));
    }
    schema
}

/// Property names a schema allows, through `$ref` and `allOf`.
fn props(doc: &Value, schema: &Value) -> BTreeSet<String> {
    let schema = resolve(doc, schema);
    let mut out: BTreeSet<String> = schema["properties"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        out.extend(props(doc, part));
    }
    out
}

/// Required property names of a schema, through `$ref` and `allOf`.
fn required(doc: &Value, schema: &Value) -> BTreeSet<String> {
    let schema = resolve(doc, schema);
    let mut out: BTreeSet<String> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        out.extend(required(doc, part));
    }
    out
}

fn named(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Asserts that every key of `value` is a property of schema `name`, and every required one is there.
fn fits(doc: &Value, name: &str, value: &Value) {
    let allowed = props(doc, &named(name));
    let obj = value
        .as_object()
        .unwrap_or_else(|| panic!("{name}: not an object: {value}"));
    for k in obj.keys() {
        assert!(
            allowed.contains(k),
            "{name} has no property '{k}' (has {allowed:?}); value {value}"
        );
    }
    for k in required(doc, &named(name)) {
        assert!(obj.contains_key(&k), "{name} requires '{k}'; value {value}");
    }
}

/// Asserts that an event (envelope + payload) fits EventEnvelope with the EventPayload variant of its type.
fn event_fits(doc: &Value, ev: &Value) {
    let ty = ev["type"].as_str().unwrap();
    let payload = &doc["components"]["schemas"]["EventPayload"];
    let variant = payload["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["properties"]["type"]["enum"][0] == ty)
        .unwrap_or_else(|| panic!("EventPayload has no variant for '{ty}'"));
    let envelope = &doc["components"]["schemas"]["EventEnvelope"];
    let mut allowed = BTreeSet::new();
    for part in envelope["allOf"].as_array().unwrap() {
        if part.get("$ref").is_none() {
            allowed.extend(props(doc, part));
        }
    }
    allowed.extend(props(doc, variant));
    for k in ev.as_object().unwrap().keys() {
        assert!(
            allowed.contains(k),
            "event '{ty}' has '{k}' that its schema lacks ({allowed:?})"
        );
    }
    for k in required(doc, variant) {
        assert!(ev.get(&k).is_some(), "event '{ty}' lacks required '{k}'");
    }
}

#[tokio::test]
async fn openapi_document_lists_every_route_and_fits_real_responses() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());

    let (status, doc) = d.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3."),
        "{}",
        doc["openapi"]
    );
    assert_eq!(doc["info"]["title"], "Elfgate");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));

    // Every route of the API, with its method; the path parameters are the router's.
    let routes = [
        ("post", "/v1/sessions"),
        ("get", "/v1/sessions"),
        ("get", "/v1/sessions/{id}"),
        ("delete", "/v1/sessions/{id}"),
        ("post", "/v1/sessions/{id}/messages"),
        ("get", "/v1/sessions/{id}/messages"),
        ("get", "/v1/sessions/{id}/events"),
        ("post", "/v1/sessions/{id}/interrupt"),
        ("post", "/v1/sessions/{id}/permissions/{requestId}"),
        ("get", "/v1/sessions/{id}/runs/{runId}"),
        ("get", "/v1/engines"),
        ("post", "/v1/mcp/reload"),
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/metrics"),
        ("get", "/openapi.json"),
    ];
    let mut operation_ids = BTreeSet::new();
    for (method, path) in routes {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} missing from the document");
        assert!(
            op["responses"].is_object(),
            "{method} {path} has no responses"
        );
        assert!(
            operation_ids.insert(op["operationId"].as_str().unwrap().to_string()),
            "duplicate operationId at {method} {path}"
        );
        // Path parameters are declared with the names in the path template.
        for seg in path.split('/').filter(|s| s.starts_with('{')) {
            let name = seg.trim_matches(|c| c == '{' || c == '}');
            assert!(
                op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| p["in"] == "path" && p["name"] == name),
                "{method} {path} does not declare path parameter {name}"
            );
        }
        let secured = op["security"].as_array().is_some_and(|s| !s.is_empty());
        let public = path == "/healthz" || path == "/readyz";
        assert_eq!(secured, !public, "{method} {path} security");
    }
    let documented: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(
        documented,
        routes.len(),
        "undocumented extras or duplicates"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );

    // Status codes as the handlers produce them.
    let codes = |method: &str, path: &str| -> BTreeSet<String> {
        doc["paths"][path][method]["responses"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    assert!(codes("post", "/v1/sessions").contains("201"));
    assert!(
        codes("post", "/v1/sessions/{id}/messages")
            .is_superset(&["202".into(), "409".into()].into())
    );
    assert!(codes("delete", "/v1/sessions/{id}").contains("204"));
    assert!(codes("post", "/v1/mcp/reload").contains("501"));
    assert!(codes("get", "/readyz").contains("503"));
    assert!(
        doc["paths"]["/v1/sessions/{id}/events"]["get"]["responses"]["200"]["content"]
            ["text/event-stream"]
            .is_object()
    );

    // The schemas, and the required fields of a create.
    for name in [
        "Message",
        "ContentBlock",
        "Session",
        "Run",
        "CreateSessionRequest",
        "EventPayload",
        "EventEnvelope",
        "ErrorBody",
    ] {
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "schema {name} missing"
        );
    }
    let req = required(&doc, &named("CreateSessionRequest"));
    assert!(req.contains("engine") && req.contains("prompt"), "{req:?}");
    let create_props = props(&doc, &named("CreateSessionRequest"));
    for k in [
        "providerId",
        "model",
        "systemPrompt",
        "engineConfig",
        "attachments",
        "clientMsgId",
    ] {
        assert!(create_props.contains(k), "CreateSessionRequest lacks {k}");
    }

    // Every $ref resolves.
    fn walk(doc: &Value, v: &Value) {
        match v {
            Value::Object(m) => {
                if m.contains_key("$ref") {
                    resolve(doc, v);
                }
                m.values().for_each(|x| walk(doc, x));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(doc, x)),
            _ => {}
        }
    }
    walk(&doc, &doc);

    // Real responses fit their schemas.
    let (status, created) = d.post("/v1/sessions", chat("hello", "mock:tokens=5")).await;
    assert_eq!(status, 201, "{created}");
    fits(&doc, "CreateSessionResponse", &created);
    let sid = created["sessionId"].as_str().unwrap().to_string();
    let run = created["runId"].as_str().unwrap().to_string();

    let evs = d.all_events_until_complete_of(&sid, &run).await;
    for ev in &evs {
        assert_eq!(ev.data["type"], ev.event.as_str());
        event_fits(&doc, &ev.data);
    }

    let (_, session) = d.get(&format!("/v1/sessions/{sid}")).await;
    fits(&doc, "SessionView", &session);
    let (_, list) = d.get("/v1/sessions?limit=1").await;
    fits(&doc, "SessionList", &list);
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    fits(&doc, "MessageList", &msgs);
    for m in msgs["messages"].as_array().unwrap() {
        fits(&doc, "Message", m);
    }
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    fits(&doc, "Run", &r);
    let (_, engines) = d.get("/v1/engines").await;
    fits(&doc, "EngineList", &engines);
    fits(&doc, "EngineInfo", &engines["engines"][0]);
    let (_, health) = d.get("/healthz").await;
    fits(&doc, "HealthStatus", &health);
    let (status, interrupted) = d
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 200);
    fits(&doc, "InterruptResponse", &interrupted);
    let (status, err) = d.get(&format!("/v1/sessions/{run}")).await;
    assert_eq!(status, 404);
    fits(&doc, "ErrorBody", &err);
}
