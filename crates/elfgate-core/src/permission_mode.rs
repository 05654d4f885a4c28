//! The permission modes a session or a prompt may ask for, with their wire names.
//!
//! Sessions keep the mode as its wire name (what the engines read); this type is the list of
//! names a request may carry and what the API documents.

use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// How tool calls are confirmed (tinyelf; see docs/tinyelf.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum PermissionMode {
    /// Each tool's tier decides.
    Default,
    /// File edits go through without asking.
    AcceptEdits,
    /// Nothing is asked.
    BypassPermissions,
    /// Only read-only tools run.
    Plan,
}

impl PermissionMode {
    /// Every mode, in a stable order.
    pub const ALL: [PermissionMode; 4] = [
        PermissionMode::Default,
        PermissionMode::AcceptEdits,
        PermissionMode::BypassPermissions,
        PermissionMode::Plan,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::BypassPermissions => "bypassPermissions",
            PermissionMode::Plan => "plan",
        }
    }
}

/// The name given is not a permission mode.
#[derive(Debug, thiserror::Error)]
#[error("permissionMode '{0}' is not one of default, acceptEdits, bypassPermissions, plan")]
pub struct UnknownPermissionMode(pub String);

impl FromStr for PermissionMode {
    type Err = UnknownPermissionMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PermissionMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownPermissionMode(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip_through_serde_and_from_str() {
        for m in PermissionMode::ALL {
            assert_eq!(m.as_str().parse::<PermissionMode>().unwrap(), m);
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
        }
        assert!("yolo".parse::<PermissionMode>().is_err());
    }
}
