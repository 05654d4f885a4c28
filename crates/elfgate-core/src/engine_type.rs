//! The kinds of engine the daemon hosts, with their wire names.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The engine a session runs on. The wire names are part of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum EngineType {
    /// The agent loop.
    #[serde(rename = "tinyelf")]
    TinyElf,
    /// Multi-turn chat with history.
    #[serde(rename = "chat")]
    Chat,
    /// Single-turn chat: no history is sent.
    #[serde(rename = "st-chat")]
    StChat,
    /// Stateless completion.
    #[serde(rename = "api")]
    Api,
    /// A coding CLI run as a supervised subprocess.
    #[serde(rename = "cli")]
    Cli,
    /// claude-code driven over its SDK protocol, always through the daemon's door.
    #[serde(rename = "claude-sdk")]
    ClaudeSdk,
    /// A workflow's run: its steps in order (started by POST /v1/workflows/{name}/runs).
    #[serde(rename = "workflow")]
    Workflow,
}

impl EngineType {
    /// Every engine type, in a stable order.
    pub const ALL: [EngineType; 7] = [
        EngineType::TinyElf,
        EngineType::Chat,
        EngineType::StChat,
        EngineType::Api,
        EngineType::Cli,
        EngineType::ClaudeSdk,
        EngineType::Workflow,
    ];

    /// Whether it runs a coding CLI (the cli engine and claude-sdk): the provider is the CLI's
    /// business, attachments cannot be handed over, providerEnv applies.
    pub fn runs_a_cli(self) -> bool {
        matches!(self, EngineType::Cli | EngineType::ClaudeSdk)
    }

    /// The wire name, as used in JSON and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineType::TinyElf => "tinyelf",
            EngineType::Chat => "chat",
            EngineType::StChat => "st-chat",
            EngineType::Api => "api",
            EngineType::Cli => "cli",
            EngineType::ClaudeSdk => "claude-sdk",
            EngineType::Workflow => "workflow",
        }
    }
}

impl fmt::Display for EngineType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name given is not an engine type.
#[derive(Debug, thiserror::Error)]
#[error("unknown engine '{0}'")]
pub struct UnknownEngine(pub String);

impl FromStr for EngineType {
    type Err = UnknownEngine;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EngineType::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| UnknownEngine(s.to_string()))
    }
}
