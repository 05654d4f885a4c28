//! What a turn decided and used (the `postTurn` event), and the audit record of each call a gate
//! of the tool pipeline blocked (`GET /v1/sessions/{id}/audit`).

use crate::event::ToolCallStatus;
use crate::ids::{RunId, SessionId};
use crate::model::FinishReason;
use crate::modes::Gate;
use crate::usage::TokenUsage;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One tool call of the turn and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CalledTool {
    /// The call's id.
    pub tool_use_id: String,
    /// The tool.
    pub name: String,
    /// How it ended (`denied` for a blocked call).
    pub status: ToolCallStatus,
}

/// A call a gate blocked, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockedCall {
    /// The call's id.
    pub tool_use_id: String,
    /// The tool.
    pub tool_name: String,
    /// The gate that blocked it.
    pub gate: Gate,
    /// Why (what the model was told).
    pub reason: String,
}

/// What a turn (one run of the agent loop) decided and used: the `postTurn` event, sent after
/// `result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnRecord {
    /// Every tool call, sub-agents' included, in the order they ended.
    pub tools_called: Vec<CalledTool>,
    /// The calls a gate blocked, with the gate and the reason.
    pub denied: Vec<BlockedCall>,
    /// Tokens of the turn (as `result` counts them).
    #[serde(flatten)]
    pub usage: TokenUsage,
    /// What the tokens cost in US dollars, when the model's prices are configured
    /// (`input_usd_per_mtok`, `output_usd_per_mtok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Why the turn ended.
    pub finish_reason: FinishReason,
}

/// One blocked call as the audit keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// The session.
    pub session_id: SessionId,
    /// The run the call was made in.
    pub run_id: RunId,
    /// The call, the gate and the reason.
    #[serde(flatten)]
    pub call: BlockedCall,
    /// The call's input as the model (or the client) gave it.
    pub input: Value,
    /// When it was blocked.
    pub created_at: DateTime<Utc>,
}
