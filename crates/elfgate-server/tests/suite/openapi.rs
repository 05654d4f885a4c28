//! GET /openapi.json serves a document generated from the code that lists every route of the API,
//! and the JSON the daemon really sends fits the schemas it names.

use crate::common;
use crate::scripted;

use common::{Daemon, Opts, chat};
use elfgate_mockllm::MockServer;
use scripted::script;
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

/// A validator of the document's schema `name`: OpenAPI 3.1 schemas are JSON Schema 2020-12.
fn validator(doc: &Value, name: &str) -> jsonschema::Validator {
    let schema = json!({
        "$ref": format!("#/components/schemas/{name}"),
        "components": doc["components"],
    });
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("schema {name} does not compile: {e}"))
}

/// Asserts that `value` is valid against `v`, listing every violation when it is not.
fn assert_valid(v: &jsonschema::Validator, what: &str, value: &Value) {
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| {
            format!(
                "{} at {} (schema {})",
                e,
                e.instance_path(),
                e.schema_path()
            )
        })
        .collect();
    assert!(errors.is_empty(), "{what} {value}\n{}", errors.join("\n"));
}

/// Asserts that every key of `value` is a property of schema `name`, every required one is
/// there, and the value is valid against the schema.
fn fits(doc: &Value, name: &str, value: &Value) {
    assert_valid(&validator(doc, name), name, value);
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

/// Asserts that an event is valid against EventEnvelope and has no field its variant lacks.
fn event_fits(doc: &Value, envelope: &jsonschema::Validator, ev: &Value) {
    assert_valid(envelope, "event", ev);
    let ty = ev["type"].as_str().unwrap();
    let variant = doc["components"]["schemas"]["EventEnvelope"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["properties"]["type"]["const"] == ty)
        .unwrap_or_else(|| panic!("EventEnvelope has no variant for '{ty}'"));
    let allowed = props(doc, variant);
    for k in ev.as_object().unwrap().keys() {
        assert!(
            allowed.contains(k),
            "event '{ty}' has '{k}' that its schema lacks ({allowed:?})"
        );
    }
}

#[tokio::test]
async fn openapi_document_lists_every_route_and_fits_real_responses() {
    let mock = MockServer::start().await.unwrap();
    // A configured MCP server, switched off: listed, never started.
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: "[mcp.servers.off]\ncommand = \"true\"\nenabled = false\n".into(),
            ..Opts::default()
        },
    );

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
        ("get", "/v1/sessions/{id}/audit"),
        ("get", "/v1/sessions/{id}/events"),
        ("post", "/v1/sessions/{id}/interrupt"),
        ("post", "/v1/sessions/{id}/resume"),
        ("post", "/v1/sessions/{id}/permissions/{requestId}"),
        ("get", "/v1/sessions/{id}/runs/{runId}"),
        ("post", "/v1/sessions/{id}/tools/{name}"),
        ("post", "/v1/workflows"),
        ("get", "/v1/workflows"),
        ("get", "/v1/workflows/{name}"),
        ("put", "/v1/workflows/{name}"),
        ("delete", "/v1/workflows/{name}"),
        ("post", "/v1/workflows/{name}/runs"),
        ("post", "/v1/workflows/{name}/runs/{runId}/resume"),
        ("post", "/v1/hooks/{name}"),
        ("get", "/v1/webhooks/deliveries"),
        ("get", "/v1/engines"),
        ("get", "/v1/cluster"),
        ("get", "/v1/skills"),
        ("post", "/v1/mcp/reload"),
        ("get", "/v1/mcp/servers"),
        ("post", "/v1/admin/keys"),
        ("get", "/v1/admin/keys"),
        ("patch", "/v1/admin/keys/{id}"),
        ("delete", "/v1/admin/keys/{id}"),
        ("get", "/v1/me"),
        ("get", "/v1/admin/audit"),
        ("post", "/v1/admin/budgets"),
        ("get", "/v1/admin/budgets"),
        ("get", "/v1/admin/budgets/{id}"),
        ("patch", "/v1/admin/budgets/{id}"),
        ("delete", "/v1/admin/budgets/{id}"),
        ("get", "/v1/spend"),
        ("post", "/v1/chat/completions"),
        ("post", "/v1/messages"),
        ("post", "/v1/responses"),
        ("post", "/v1beta/models/{call}"),
        ("get", "/v1beta/models"),
        ("get", "/v1/models"),
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
        // The hooks are signed by their senders instead.
        let public = path == "/healthz" || path == "/readyz" || path == "/v1/hooks/{name}";
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
    assert!(codes("post", "/v1/mcp/reload").is_superset(&["200".into(), "422".into()].into()));
    assert!(codes("get", "/v1/mcp/servers").contains("200"));
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
    let envelope = validator(&doc, "EventEnvelope");
    for ev in &evs {
        assert_eq!(ev.data["type"], ev.event.as_str());
        event_fits(&doc, &envelope, &ev.data);
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
    let (_, audit) = d.get(&format!("/v1/sessions/{sid}/audit")).await;
    fits(&doc, "AuditList", &audit);
    let (_, engines) = d.get("/v1/engines").await;
    fits(&doc, "EngineList", &engines);
    fits(&doc, "EngineInfo", &engines["engines"][0]);
    let (_, skills) = d.get("/v1/skills").await;
    fits(&doc, "SkillSet", &skills);
    // A tool run in a chat session is refused with a body of the documented shape.
    let (status, err) = d
        .post(
            &format!("/v1/sessions/{sid}/tools/read_file"),
            json!({"arguments": {"path": "x"}}),
        )
        .await;
    assert_eq!(status, 422);
    fits(&doc, "ErrorBody", &err);
    let (_, health) = d.get("/healthz").await;
    fits(&doc, "HealthStatus", &health);
    let (status, workflow) = d
        .post(
            "/v1/workflows",
            json!({"name": "w", "inputs": {"n": {"type": "integer", "default": 3}},
                   "schedule": {"cron": "0 7 * * *"},
                   "steps": [{"id": "a", "tool": "glob", "arguments": {"pattern": "*"},
                              "retries": {"max": 2}},
                             {"id": "b", "model": {"prompt": "{{ steps.a.output }}"}},
                             {"id": "c", "if": "{{ inputs.n > 2 }}", "otherwise": "skipNext"},
                             {"id": "d", "agent": {"prompt": "go", "permissionMode": "plan"}}]}),
        )
        .await;
    assert_eq!(status, 201, "{workflow}");
    fits(&doc, "WorkflowView", &workflow);
    let (_, workflows) = d.get("/v1/workflows").await;
    fits(&doc, "WorkflowList", &workflows);
    let (status, budget) = d
        .post(
            "/v1/admin/budgets",
            json!({"scope": {"team": "t"}, "maxUsd": 2, "period": "week", "softUsd": 1}),
        )
        .await;
    assert_eq!(status, 201, "{budget}");
    fits(&doc, "BudgetView", &budget);
    let (_, budgets) = d.get("/v1/admin/budgets").await;
    fits(&doc, "BudgetList", &budgets);
    let (_, servers) = d.get("/v1/mcp/servers").await;
    assert_eq!(servers["servers"][0]["status"], "disabled", "{servers}");
    fits(&doc, "ServerList", &servers);
    let (status, reloaded) = d.post("/v1/mcp/reload", json!({})).await;
    assert_eq!(status, 200, "{reloaded}");
    assert_eq!(reloaded["unchanged"], json!(["off"]));
    fits(&doc, "ReloadAnswer", &reloaded);
    let (status, interrupted) = d
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 200);
    fits(&doc, "InterruptResponse", &interrupted);
    let (status, err) = d.get(&format!("/v1/sessions/{run}")).await;
    assert_eq!(status, 404);
    fits(&doc, "ErrorBody", &err);
}

/// Reads events until one of `kind`, keeping all of them.
async fn until_event(sse: &mut common::Sse, kind: &str, seen: &mut Vec<Value>) -> Value {
    loop {
        let ev = sse.next().await.expect("stream ended");
        seen.push(ev.data.clone());
        if ev.event == kind {
            return ev.data;
        }
    }
}

/// Every event a client can receive validates against the served EventEnvelope schema: those of
/// chat runs (thinking, retries, a failure), of a tinyelf run with a tool call and a permission
/// request (re-announced to a reconnecting client too), and a reset.
#[tokio::test]
async fn real_events_validate_against_the_served_event_schema() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (_, doc) = d.get("/openapi.json").await;
    let envelope = validator(&doc, "EventEnvelope");
    let mut seen: Vec<Value> = Vec::new();

    let (sid, run) = d.create(chat("hello", "mock:tokens=3,think=2")).await;
    let mut sse = d.events(&sid, None).await;
    seen.extend(sse.until_complete(&run).await.into_iter().map(|e| e.data));
    for model in [
        "mock:fail=500x1,tokens=2,id=openapi",
        "mock:tokens=3,error_after=1",
    ] {
        let run = d
            .send(&sid, json!({"prompt": "more", "model": model}))
            .await;
        seen.extend(sse.until_complete(&run).await.into_iter().map(|e| e.data));
    }
    let r = d
        .http
        .get(d.url(&format!("/v1/sessions/{sid}/events")))
        .header("Last-Event-ID", u64::MAX.to_string())
        .send()
        .await
        .unwrap();
    seen.push(common::Sse::new(r).next().await.unwrap().data);

    let dir = tempfile::tempdir().unwrap();
    script(
        &mock,
        "openapi-tools",
        json!([
            {"thinking": "I will write it.", "text": "Writing.",
             "toolCalls": [{"id": "w1", "name": "write_file",
                            "arguments": json!({"path": "a.txt", "content": "x"}).to_string()}]},
            {"toolCalls": [{"id": "r1", "name": "read_file",
                            "arguments": json!({"path": "a.txt"}).to_string()}]},
            {"text": "done"}
        ]),
    );
    let (sid, run) = d
        .create(json!({"engine": "tinyelf", "prompt": "write a file",
                       "model": "mock:script=openapi-tools",
                       "projectPath": dir.path().display().to_string()}))
        .await;
    let mut sse = d.events(&sid, None).await;
    let request = until_event(&mut sse, "permissionRequest", &mut seen).await;
    let rid = request["requestId"].as_str().unwrap();
    let seq = request["seq"].as_u64().unwrap();
    let mut again = d.events(&sid, Some(seq)).await;
    seen.push(again.next().await.unwrap().data);
    drop(again);
    common::allow(&d, &sid, rid).await;
    seen.extend(sse.until_complete(&run).await.into_iter().map(|e| e.data));

    let mut types = BTreeSet::new();
    for ev in &seen {
        event_fits(&doc, &envelope, ev);
        types.insert(ev["type"].as_str().unwrap().to_string());
    }
    for want in [
        "sessionCreated",
        "userMessage",
        "init",
        "streamDelta",
        "assistantMessage",
        "toolCallStart",
        "toolCallEnd",
        "permissionRequest",
        "permissionResolved",
        "retry",
        "error",
        "result",
        "complete",
        "reset",
    ] {
        assert!(
            types.contains(want),
            "no {want} event was captured: {types:?}"
        );
    }
    // Something that is not an event does not validate: the schema says something.
    assert!(!envelope.is_valid(&json!({"type": "complete", "seq": 1})));
    assert!(
        !envelope.is_valid(&json!({"type": "nope", "seq": 1, "sessionId": sid,
                                        "ts": "2025-01-01T00:00:00.000Z"}))
    );
}

/// Settings with a fixed set of values are enums in the document, and the interrupt body is
/// optional rather than nullable (a `null` body is refused with 400).
#[tokio::test]
async fn enums_and_the_optional_interrupt_body_are_declared_as_served() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (_, doc) = d.get("/openapi.json").await;
    let create = validator(&doc, "CreateSessionRequest");
    let ok = json!({"engine": "chat", "prompt": "x", "permissionMode": "acceptEdits"});
    assert_valid(&create, "create", &ok);
    for bad in [
        json!({"engine": "nope", "prompt": "x"}),
        json!({"engine": "chat", "prompt": "x", "permissionMode": "yolo"}),
    ] {
        assert!(!create.is_valid(&bad), "{bad} validates");
    }
    // A permission answer's decision and scope are enums too.
    let answer = validator(&doc, "PermissionBody");
    assert_valid(
        &answer,
        "answer",
        &json!({"decision": "allow", "scope": "session"}),
    );
    assert_valid(&answer, "answer", &json!({"decision": "deny"}));
    for bad in [
        json!({"decision": "maybe"}),
        json!({"decision": "allow", "scope": "forever"}),
    ] {
        assert!(!answer.is_valid(&bad), "{bad} validates");
    }
    let answered = validator(&doc, "PermissionAnswered");
    assert_valid(
        &answered,
        "answered",
        &json!({"requestId": "r", "decision": "deny", "scope": "once"}),
    );
    assert!(!answered.is_valid(&json!({"requestId": "r", "decision": "no", "scope": "once"})));
    let session = validator(&doc, "Session");
    let (sid, run) = d.create(ok).await;
    d.events(&sid, None).await.until_complete(&run).await;
    let (_, view) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_valid(&session, "session", &view);
    let mut wrong = view.clone();
    wrong["permissionMode"] = json!("yolo");
    assert!(!session.is_valid(&wrong));

    // Every operation declares the x-request-id it takes, and every answer the one it carries.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let params = op["parameters"].as_array().unwrap();
            assert!(
                params
                    .iter()
                    .any(|p| p["name"] == "x-request-id" && p["in"] == "header"),
                "{method} {path} takes no x-request-id"
            );
            for (status, resp) in op["responses"].as_object().unwrap() {
                assert!(
                    resp["headers"]["x-request-id"].is_object(),
                    "{method} {path} {status} carries no x-request-id"
                );
            }
        }
    }

    let body = &doc["paths"]["/v1/sessions/{id}/interrupt"]["post"]["requestBody"];
    assert_ne!(body["required"], true, "{body}");
    let schema = json!({"$ref": body["content"]["application/json"]["schema"]["$ref"],
                        "components": doc["components"]});
    let interrupt = jsonschema::draft202012::new(&schema).unwrap();
    assert!(interrupt.is_valid(&json!({"wait": true})));
    assert!(
        !interrupt.is_valid(&Value::Null),
        "the body is declared nullable"
    );
    let (s, v) = d
        .post(&format!("/v1/sessions/{sid}/interrupt"), Value::Null)
        .await;
    assert_eq!(s, 400, "{v}");
    let r = d
        .http
        .post(d.url(&format!("/v1/sessions/{sid}/interrupt")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "no body at all is fine");
}
