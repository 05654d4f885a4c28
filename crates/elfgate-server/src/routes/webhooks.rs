//! GET /v1/webhooks/deliveries: the webhook deliveries of run ends, newest first, with where each
//! stands (docs/workflows.md, "Webhooks when runs end").

use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiQuery;
use crate::state::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use elfgate_store::{DeliveryStatus, WebhookDelivery};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// The routes of this module.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/webhooks/deliveries", get(deliveries))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeliveriesQuery {
    /// At most this many (default 100, 1..=1000).
    limit: Option<u32>,
}

/// One delivery.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeliveryView {
    /// Its id (the `webhook-id` and `X-Elfgate-Webhook-Id` headers).
    id: String,
    /// The target's name.
    target: String,
    /// The target's URL.
    url: String,
    /// pending, delivered or failed.
    status: String,
    /// Attempts made.
    attempts: u32,
    /// When the next attempt is due (pending ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    next_attempt_at: Option<String>,
    /// The last attempt's HTTP status.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_status: Option<u16>,
    /// Why the last attempt failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    /// What is sent.
    #[schema(value_type = Object)]
    body: serde_json::Value,
    /// When it was queued.
    created_at: String,
    /// When it last changed.
    updated_at: String,
}

impl From<WebhookDelivery> for DeliveryView {
    fn from(d: WebhookDelivery) -> Self {
        let ts = elfgate_core::timefmt::rfc3339_millis;
        DeliveryView {
            next_attempt_at: (d.status == DeliveryStatus::Pending).then(|| ts(&d.next_attempt_at)),
            status: d.status.as_str().to_string(),
            id: d.id,
            target: d.target,
            url: d.url,
            attempts: d.attempts,
            last_status: d.last_status,
            last_error: d.last_error,
            body: d.body,
            created_at: ts(&d.created_at),
            updated_at: ts(&d.updated_at),
        }
    }
}

/// The deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeliveryList {
    /// Newest first.
    deliveries: Vec<DeliveryView>,
}

/// Lists the webhook deliveries, newest first (admins only: they go to the daemon's configured
/// targets and carry every team's runs).
#[utoipa::path(
    get,
    path = "/v1/webhooks/deliveries",
    operation_id = "listWebhookDeliveries",
    tag = "workflows",
    params(DeliveriesQuery),
    responses(
        (status = 200, description = "The deliveries", body = DeliveryList),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 422, description = "limit outside 1..=1000", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn deliveries(
    State(state): State<AppState>,
    actor: crate::service::Actor,
    ApiQuery(q): ApiQuery<DeliveriesQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    if let crate::service::Actor::Principal(p) = &actor
        && !p.is_admin()
    {
        return Err(ApiError::Refused(
            "role: the webhook deliveries are an admin's to read".into(),
        ));
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::Unprocessable(format!(
            "limit: {limit} is outside 1..=1000"
        )));
    }
    let deliveries = state
        .store
        .list_deliveries(limit)
        .await?
        .into_iter()
        .map(DeliveryView::from)
        .collect();
    Ok(Json(DeliveryList { deliveries }))
}
