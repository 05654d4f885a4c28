//! Who may call each route: one declared rule per operation of the OpenAPI document, shown on it
//! as `x-elfgate-authorization`. The rules say what the handlers and the service layer enforce
//! (the session and workflow checks in `service`, the admin-only routes in auth); the route
//! matrix test holds each route to its rule for principals of every role, and fails on a route
//! that has none.

use serde_json::Value;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteRule {
    /// Anyone, without credentials (health and readiness).
    Public,
    /// A caller that signs the delivery with the hook's secret instead of a key.
    HookSignature,
    /// Any principal; what it answers is filtered to what the principal sees.
    Principal,
    /// Admins only; anyone else is refused with 403.
    Admin,
    /// Starts a session owned by the caller: members and admins; a viewer is refused (403).
    SessionCreate,
    /// Reads a session: its owner, its team when shared, admins; to anyone else it is missing
    /// (404).
    SessionRead,
    /// Changes a session: as `SessionRead`, and a viewer that may read it is refused (403).
    SessionSteer,
    /// Reads a workflow: its team and admins; another team's is missing (404).
    WorkflowRead,
    /// Starts a run of a workflow: as `WorkflowRead`, then members and admins whose key's
    /// `scopes.workflows` allows runs (else 403 naming `workflows`).
    WorkflowRun,
    /// Creates, changes or deletes a workflow: as `WorkflowRun`, with `scopes.workflows` absent
    /// or `manage`.
    WorkflowManage,
}

impl RouteRule {
    /// The name the document shows.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteRule::Public => "public",
            RouteRule::HookSignature => "hook-signature",
            RouteRule::Principal => "principal",
            RouteRule::Admin => "admin",
            RouteRule::SessionCreate => "session-create",
            RouteRule::SessionRead => "session-read",
            RouteRule::SessionSteer => "session-steer",
            RouteRule::WorkflowRead => "workflow-read",
            RouteRule::WorkflowRun => "workflow-run",
            RouteRule::WorkflowManage => "workflow-manage",
        }
    }
}

/// Every operation's rule, by method (lowercase, as the document has it) and path template.
pub const ROUTE_RULES: &[(&str, &str, RouteRule)] = {
    use RouteRule::*;
    &[
        ("get", "/healthz", Public),
        ("get", "/readyz", Public),
        ("get", "/metrics", Admin),
        ("get", "/openapi.json", Principal),
        ("post", "/v1/hooks/{name}", HookSignature),
        ("post", "/v1/sessions", SessionCreate),
        ("get", "/v1/sessions", Principal),
        ("get", "/v1/sessions/{id}", SessionRead),
        ("delete", "/v1/sessions/{id}", SessionSteer),
        ("post", "/v1/sessions/{id}/messages", SessionSteer),
        ("get", "/v1/sessions/{id}/messages", SessionRead),
        ("get", "/v1/sessions/{id}/audit", SessionRead),
        ("get", "/v1/sessions/{id}/events", SessionRead),
        ("post", "/v1/sessions/{id}/interrupt", SessionSteer),
        ("post", "/v1/sessions/{id}/resume", SessionSteer),
        ("get", "/v1/sessions/{id}/runs/{runId}", SessionRead),
        (
            "post",
            "/v1/sessions/{id}/permissions/{requestId}",
            SessionSteer,
        ),
        ("post", "/v1/sessions/{id}/tools/{name}", SessionSteer),
        ("get", "/v1/engines", Principal),
        ("get", "/v1/skills", Principal),
        ("get", "/v1/cluster", Admin),
        ("get", "/v1/mcp/servers", Principal),
        ("post", "/v1/mcp/reload", Admin),
        ("post", "/v1/workflows", WorkflowManage),
        ("get", "/v1/workflows", Principal),
        ("get", "/v1/workflows/{name}", WorkflowRead),
        ("put", "/v1/workflows/{name}", WorkflowManage),
        ("delete", "/v1/workflows/{name}", WorkflowManage),
        ("post", "/v1/workflows/{name}/runs", WorkflowRun),
        (
            "post",
            "/v1/workflows/{name}/runs/{runId}/resume",
            WorkflowRun,
        ),
        ("get", "/v1/webhooks/deliveries", Admin),
        // The gateway doors start a session of the caller's (or continue one it may steer).
        ("post", "/v1/chat/completions", SessionCreate),
        ("post", "/v1/messages", SessionCreate),
        ("post", "/v1/responses", SessionCreate),
        ("post", "/v1beta/models/{call}", SessionCreate),
        ("get", "/v1beta/models", Principal),
        ("get", "/v1/models", Principal),
        // Keys and who a key is.
        ("get", "/v1/me", Principal),
        ("post", "/v1/admin/keys", Admin),
        ("get", "/v1/admin/keys", Admin),
        ("patch", "/v1/admin/keys/{id}", Admin),
        ("delete", "/v1/admin/keys/{id}", Admin),
        ("get", "/v1/admin/audit", Admin),
        // Budgets.
        ("post", "/v1/admin/budgets", Admin),
        ("get", "/v1/admin/budgets", Admin),
        ("get", "/v1/admin/budgets/{id}", Admin),
        ("patch", "/v1/admin/budgets/{id}", Admin),
        ("delete", "/v1/admin/budgets/{id}", Admin),
        // The spend ledger: an admin's covers everyone, anyone else's their own calls.
        ("get", "/v1/spend", Principal),
    ]
};

/// The rule of an operation, None for one without.
pub fn rule_of(method: &str, path: &str) -> Option<RouteRule> {
    ROUTE_RULES
        .iter()
        .find(|(m, p, _)| m.eq_ignore_ascii_case(method) && *p == path)
        .map(|(_, _, rule)| *rule)
}

/// Shows each operation's rule on it (`x-elfgate-authorization`); an operation without one is
/// left without, for the route matrix test to find.
pub(crate) fn annotate(doc: &mut Value) {
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            if let (Some(rule), Some(op)) = (rule_of(method, path), op.as_object_mut()) {
                op.insert(
                    "x-elfgate-authorization".into(),
                    Value::String(rule.as_str().into()),
                );
            }
        }
    }
}
