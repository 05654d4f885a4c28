//! POST /v1/hooks/{name}: inbound webhooks that start a workflow. No bearer token: a delivery is
//! authenticated by its HMAC-SHA256 signature under the hook's shared secret, checked before
//! anything is read from it (docs/workflows.md, "Inbound webhooks").

use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiPath;
use crate::state::AppState;
use crate::workflow_runs::{self, Trigger};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use elfgate_api::CreateSessionResponse;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

/// The routes of this module (outside the bearer token's).
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/hooks/{name}", post(deliver))
}

/// The headers a signature may come in, as `sha256=HEX`: Elfgate's own, and GitHub's.
const SIGNATURE_HEADERS: [&str; 2] = ["x-elfgate-signature-256", "x-hub-signature-256"];

/// Whether `headers` carry a valid signature of `body` under `secret`.
fn signed(headers: &HeaderMap, body: &[u8], secret: &[u8]) -> bool {
    SIGNATURE_HEADERS
        .iter()
        .filter_map(|h| headers.get(*h)?.to_str().ok())
        .filter_map(|v| hex::decode(v.trim().strip_prefix("sha256=")?).ok())
        .any(|sig| {
            Hmac::<Sha256>::new_from_slice(secret).is_ok_and(|mut mac| {
                mac.update(body);
                mac.verify_slice(&sig).is_ok()
            })
        })
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
        ("X-Elfgate-Signature-256" = Option<String>, Header, description = "sha256=HEX: HMAC-SHA256 of the body under the hook's secret (X-Hub-Signature-256 is taken too)"),
    ),
    request_body(content = Object, description = "Any body; it becomes the run's payload input"),
    responses(
        (status = 201, description = "The run started", body = CreateSessionResponse),
        (status = 401, description = "No signature, or a wrong one: nothing started", body = ErrorBody),
        (status = 404, description = "No such hook, or its workflow is gone", body = ErrorBody),
        (status = 422, description = "The workflow does not take the payload (it declares no payload input, or other inputs without defaults)", body = ErrorBody),
        (status = 503, description = "Shutting down", body = ErrorBody),
    )
)]
pub(crate) async fn deliver(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<CreateSessionResponse>), ApiError> {
    let hook = state
        .config
        .workflow_hooks
        .get(&name)
        .cloned()
        .ok_or_else(|| ApiError::NotFound(format!("unknown hook '{name}'")))?;
    let Ok(secret) = std::env::var(&hook.secret_env) else {
        tracing::warn!(hook = %name, variable = %hook.secret_env, "a hook's secret is not set: its deliveries are refused");
        return Err(ApiError::Unsigned(format!(
            "hook '{name}' has no secret on this node; nothing started"
        )));
    };
    if !signed(&headers, &body, secret.as_bytes()) {
        return Err(ApiError::Unsigned(
            "no valid signature (X-Elfgate-Signature-256: sha256=HMAC-SHA256 of the body under \
             the hook's secret); nothing started"
                .to_string(),
        ));
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
    let inputs = Map::from_iter([("payload".to_string(), payload)]);
    let started = super::sessions::detached(async move {
        workflow_runs::start(&state, stored, inputs, Trigger::Hook(name)).await
    })
    .await?;
    Ok((StatusCode::CREATED, Json(started)))
}
