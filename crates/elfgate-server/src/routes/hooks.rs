//! POST /v1/hooks/{name}: inbound webhooks that start a workflow. No bearer token: a delivery is
//! authenticated by its HMAC-SHA256 signature under the hook's shared secret, Standard Webhooks'
//! scheme (the id and timestamp signed with the body), checked before anything is read from it;
//! a delivery is taken once, within five minutes of being signed (docs/workflows.md, "Inbound
//! webhooks"; docs/security.md, "Webhooks").

use crate::config::WorkflowHook;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiBytes, ApiPath};
use crate::state::AppState;
use crate::webhooks::inbound::{self, Signed};
use crate::webhooks::signature;
use crate::workflow_runs::{self, Trigger};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use elfgate_api::CreateSessionResponse;
use serde_json::{Map, Value};

/// The routes of this module (outside the bearer token's).
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/hooks/{name}", post(deliver))
}

/// The key a delivery to a hook that does not exist (or has no secret on this node) is checked
/// against, so that it is answered as a wrong signature is, after the same work.
const NO_KEY: &[u8] = b"no hook of this name";

fn unsigned(why: &str) -> ApiError {
    ApiError::Unsigned(format!("{why}; nothing started"))
}

/// The hook's key on this node: None (logged) when it has none, as for a hook that does not
/// exist.
fn key_of(name: &str, hook: &WorkflowHook) -> Option<Vec<u8>> {
    match signature::key_in(&hook.secret_env) {
        Ok(Some(key)) => Some(key),
        Ok(None) => {
            tracing::warn!(hook = %name, variable = %hook.secret_env, "a hook's secret is not set: its deliveries are refused");
            None
        }
        Err(e) => {
            tracing::warn!(hook = %name, error = %e, "a hook's secret cannot sign: its deliveries are refused");
            None
        }
    }
}

/// Starts a run of the hook's workflow with the delivery's body as its `payload` input (its JSON,
/// or its text when it is not JSON).
#[utoipa::path(
    post,
    path = "/v1/hooks/{name}",
    operation_id = "deliverHook",
    tag = "workflows",
    params(
        ("name" = String, Path, description = "A hook of [workflow_hooks]"),
        ("webhook-id" = Option<String>, Header, description = "Standard Webhooks: the delivery's id, taken once"),
        ("webhook-timestamp" = Option<String>, Header, description = "Standard Webhooks: seconds since the epoch, within 5 minutes of the daemon's clock"),
        ("webhook-signature" = Option<String>, Header, description = "Standard Webhooks: v1,BASE64 of HMAC-SHA256 over ID.TIMESTAMP.BODY under the hook's secret (space-separated, several allowed)"),
        ("X-Elfgate-Signature-256" = Option<String>, Header, description = "sha256=HEX of the body alone (X-Hub-Signature-256 is taken too); only on a hook with allow_replayable_signature"),
    ),
    request_body(content = Object, description = "Any body; it becomes the run's payload input"),
    responses(
        (status = 201, description = "The run started", body = CreateSessionResponse),
        (status = 401, description = "No signature, a malformed or wrong one, a timestamp outside 5 minutes, or no such hook (answered alike): nothing started", body = ErrorBody),
        (status = 404, description = "The hook's workflow is gone", body = ErrorBody),
        (status = 409, description = "This delivery id was received already: nothing started", body = ErrorBody),
        (status = 413, description = "The body is over server.body_limit_bytes", body = ErrorBody),
        (status = 422, description = "The workflow does not take the payload (it declares no payload input, or other inputs without defaults)", body = ErrorBody),
        (status = 503, description = "Shutting down", body = ErrorBody),
    )
)]
pub(crate) async fn deliver(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> Result<(StatusCode, Json<CreateSessionResponse>), ApiError> {
    // The form and the time first: they need no hook, so a stranger learns nothing of names.
    let signed = inbound::signature_form(&headers).map_err(|why| unsigned(&why))?;
    let now = chrono::Utc::now();
    if let Signed::Standard { timestamp, .. } = signed {
        inbound::check_timestamp(timestamp, now.timestamp()).map_err(|why| unsigned(&why))?;
    }
    let hook = state.config.workflow_hooks.get(&name);
    let key = hook.and_then(|hook| key_of(&name, hook));
    let verified = inbound::verifies(&signed, key.as_deref().unwrap_or(NO_KEY), &body);
    let (Some(hook), Some(_), true) = (hook, &key, verified) else {
        return Err(unsigned("no valid signature for this hook"));
    };
    if matches!(signed, Signed::BodyOnly { .. }) && !hook.allow_replayable_signature {
        return Err(unsigned(&format!(
            "hook '{name}' takes Standard Webhooks' signatures only (webhook-id, \
             webhook-timestamp, webhook-signature): a signature of the body alone can be \
             replayed (allow it with allow_replayable_signature)"
        )));
    }
    let payload = serde_json::from_slice::<Value>(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let stored = state
        .store
        .get_workflow(&hook.workflow, None)
        .await?
        .filter(|w| w.deleted_at.is_none())
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "hook '{name}': workflow '{}' does not exist",
                hook.workflow
            ))
        })?;
    // Remembered as long as its timestamp passes; past that, the timestamp refuses it.
    let once = match signed {
        Signed::Standard { id, timestamp, .. } => Some((
            id.to_string(),
            chrono::DateTime::from_timestamp(
                timestamp.saturating_add(signature::TOLERANCE_SECS + 1),
                0,
            )
            .unwrap_or(now),
        )),
        Signed::BodyOnly { .. } => None,
    };
    let inputs = Map::from_iter([("payload".to_string(), payload)]);
    // Taking the id and starting the run in a task of their own: a sender that hangs up between
    // the two cannot leave an id taken for a run that never started.
    let started = super::sessions::detached(async move {
        if let Some((id, until)) = &once
            && !state.store.claim_hook_delivery(&name, id, now, *until).await?
        {
            return Err(ApiError::Conflict(format!(
                "delivery '{id}' of hook '{name}' was received already; nothing started"
            )));
        }
        let started =
            workflow_runs::start(&state, stored, inputs, Trigger::Hook(name.clone())).await;
        if started.is_err()
            && let Some((id, _)) = &once
            && let Err(e) = state.store.release_hook_delivery(&name, id).await
        {
            // Nothing started, and the id stays taken: a retry of it is refused until its
            // timestamp expires.
            tracing::warn!(hook = %name, delivery = %id, error = %e.report(), "cannot forget a hook delivery whose run did not start");
        }
        started
    })
    .await?;
    Ok((StatusCode::CREATED, Json(started)))
}
