//! /v1/cluster: the fleet's nodes as the shared store sees them.

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

/// The cluster routes.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/cluster", get(cluster))
}

/// One node of the fleet.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeView {
    /// Its id (`cluster.node_id`).
    id: String,
    /// Where it listens (`http://` and its `server.bind`).
    address: String,
    /// Its version.
    version: String,
    /// Milliseconds since its last heartbeat, by the database's clock: a node whose age passes
    /// its lease is gone, and its sessions are being adopted.
    heartbeat_age_ms: u64,
    /// Sessions it is running (holds a live lease on).
    active_sessions: u64,
    /// Whether it is draining (takes no new runs).
    draining: bool,
}

/// Answer of GET /v1/cluster.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterView {
    /// The node that answered; null for a single node (no `[cluster]`).
    node_id: Option<String>,
    /// Whether the node that answered is connected to the fleet's bus (NATS); null for a single
    /// node.
    bus_connected: Option<bool>,
    /// Every node that has run in the fleet, by id (empty for a single node).
    nodes: Vec<NodeView>,
}

/// The fleet's nodes.
#[utoipa::path(
    get,
    path = "/v1/cluster",
    operation_id = "getCluster",
    tag = "operations",
    responses(
        (status = 200, description = "The fleet's nodes; none for a single node", body = ClusterView),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn cluster(State(state): State<AppState>) -> Result<Json<ClusterView>, ApiError> {
    let Some(fleet) = &state.fleet else {
        return Ok(Json(ClusterView {
            node_id: None,
            bus_connected: None,
            nodes: Vec::new(),
        }));
    };
    let nodes = fleet.store.nodes().await?;
    Ok(Json(ClusterView {
        node_id: Some(fleet.node_id.to_string()),
        bus_connected: Some(fleet.nats_connected()),
        nodes: nodes
            .into_iter()
            .map(|n| NodeView {
                id: n.id,
                address: n.address,
                version: n.version,
                heartbeat_age_ms: n.heartbeat_age_ms,
                active_sessions: n.active_sessions,
                draining: n.draining,
            })
            .collect(),
    }))
}
