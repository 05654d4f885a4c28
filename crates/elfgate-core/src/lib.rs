//! Elfgate's domain: ids, engine types, sessions, runs, messages, events, the Engine trait,
//! the dispatcher and the map of active runs. No HTTP and no SQL live here.

pub mod active;
pub mod budget;
pub mod bus;
pub mod decimal;
pub mod dispatcher;
pub mod engine;
pub mod engine_config;
pub mod engine_type;
pub mod error_code;
pub mod event;
pub mod event_type;
pub mod ids;
pub mod lease;
pub mod log_queue;
pub mod mcp_config;
pub mod meter;
pub mod metrics;
pub mod model;
pub mod modes;
pub mod outcome;
pub mod principal;
pub mod private_files;
pub mod provider_kind;
pub mod recorder;
pub mod run_error;
pub mod run_tokens;
pub mod spend;
pub mod sync;
pub mod telemetry;
pub mod timefmt;
pub mod turn;
pub mod usage;

pub use active::{ActiveSessions, OnBusy};
pub use budget::{BudgetHolder, BudgetNotice, BudgetScope, NanoUsd};
pub use bus::{
    EventEmitter, EventHub, EventRelay, SEQ_RESERVE_BLOCK, SUBSCRIBER_BUFFER, SessionBus,
    Subscription, Watching,
};
pub use dispatcher::{
    DispatchError, DispatchStatus, EngineDispatcher, InterruptResult, LedgerError, RunEnded,
    RunLedger,
};
pub use engine::{
    Attachment, BackendInfo, Engine, EngineInfo, EngineSessionContext, HeadStart,
    PermissionAnswers, StartRefused, StartRequest, ToolRun,
};
pub use engine_config::{
    ChannelPermissions, EngineConfig, EngineConfigError, WorkflowRef, WorkflowResume,
};
pub use engine_type::EngineType;
pub use error_code::ErrorCode;
pub use event::{
    Delta, DeltaKind, ErrorInfo, EventEnvelope, EventPayload, EventRecord, ModelFinish, RetryInfo,
    RunStats, StepStatus, StepUsage, ToolCallStatus,
};
pub use event_type::EventType;
pub use ids::{MessageId, RequestId, RunId, SessionId};
pub use lease::{LeaseGuard, LeaseState};
pub use log_queue::{
    LOG_QUEUE_EVENTS, LogCommand, LogQueueFull, LogReceiver, LogRoom, LogSender, log_channel,
};
pub use mcp_config::{McpConfigError, McpSection, McpServerConfig, McpSessionConfig, McpTransport};
pub use meter::{
    BudgetRefusal, CallGrant, CallPlan, CallRefusal, CallReport, Meters, MetersGrant, ModelMeter,
    Payer, Prices, RateLimitKind, RateLimitRefusal,
};
pub use metrics::Metrics;
pub use model::{
    ChannelOrigin, ContentBlock, FinishReason, Message, Role, Run, RunStatus, Session,
    provider_block_label,
};
pub use modes::{
    BudgetPeriod, BudgetSource, CliBackend, Decision, Gate, Network, PermissionMode,
    PermissionTier, PrincipalRole, Scope, ThinkingLevel, UnknownName, Visibility, WorkflowScope,
};
pub use outcome::RunOutcome;
pub use principal::{Access, Denied, Ownership, Principal, Scopes};
pub use provider_kind::ProviderKind;
pub use recorder::RunRecorder;
pub use run_error::RunError;
pub use run_tokens::{ProxyDoor, RunGrant, RunToken, RunTokens};
pub use spend::{ModelCall, SpendCounters};
pub use turn::{AuditRecord, BlockedCall, CalledTool, TurnRecord};
pub use usage::TokenUsage;
