//! The `type` of an event as a value: what readers of the stream and of the log compare, instead
//! of the type's name.

use std::fmt;

/// An event's `type` (see `EventPayload`, whose variant it names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `init`.
    Init,
    /// `sessionCreated`.
    SessionCreated,
    /// `userMessage`.
    UserMessage,
    /// `streamDelta`.
    StreamDelta,
    /// `toolCallStart`.
    ToolCallStart,
    /// `toolCallEnd`.
    ToolCallEnd,
    /// `assistantMessage`.
    AssistantMessage,
    /// `permissionRequest`.
    PermissionRequest,
    /// `permissionResolved`.
    PermissionResolved,
    /// `result`.
    Result,
    /// `postTurn`.
    PostTurn,
    /// `complete`: the run ended.
    Complete,
    /// `error`.
    Error,
    /// `retry`.
    Retry,
    /// `budgetPaused`.
    BudgetPaused,
    /// `budgetWarning`.
    BudgetWarning,
    /// `stepStart`.
    StepStart,
    /// `stepEnd`.
    StepEnd,
    /// `processing`.
    Processing,
    /// `reset`: sent to one subscriber, never logged.
    Reset,
}

impl EventType {
    /// The wire name (the event's `type` field, the SSE `event:` line, the log's `type` column).
    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::Init => "init",
            EventType::SessionCreated => "sessionCreated",
            EventType::UserMessage => "userMessage",
            EventType::StreamDelta => "streamDelta",
            EventType::ToolCallStart => "toolCallStart",
            EventType::ToolCallEnd => "toolCallEnd",
            EventType::AssistantMessage => "assistantMessage",
            EventType::PermissionRequest => "permissionRequest",
            EventType::PermissionResolved => "permissionResolved",
            EventType::Result => "result",
            EventType::PostTurn => "postTurn",
            EventType::Complete => "complete",
            EventType::Error => "error",
            EventType::Retry => "retry",
            EventType::BudgetPaused => "budgetPaused",
            EventType::BudgetWarning => "budgetWarning",
            EventType::StepStart => "stepStart",
            EventType::StepEnd => "stepEnd",
            EventType::Processing => "processing",
            EventType::Reset => "reset",
        }
    }

    /// The type of a wire name; None for a name no event has.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "init" => EventType::Init,
            "sessionCreated" => EventType::SessionCreated,
            "userMessage" => EventType::UserMessage,
            "streamDelta" => EventType::StreamDelta,
            "toolCallStart" => EventType::ToolCallStart,
            "toolCallEnd" => EventType::ToolCallEnd,
            "assistantMessage" => EventType::AssistantMessage,
            "permissionRequest" => EventType::PermissionRequest,
            "permissionResolved" => EventType::PermissionResolved,
            "result" => EventType::Result,
            "postTurn" => EventType::PostTurn,
            "complete" => EventType::Complete,
            "error" => EventType::Error,
            "retry" => EventType::Retry,
            "budgetPaused" => EventType::BudgetPaused,
            "budgetWarning" => EventType::BudgetWarning,
            "stepStart" => EventType::StepStart,
            "stepEnd" => EventType::StepEnd,
            "processing" => EventType::Processing,
            "reset" => EventType::Reset,
            _ => return None,
        })
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
