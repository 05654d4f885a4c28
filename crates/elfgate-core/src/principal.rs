//! Who a request acts for ([`Principal`]), how far its key reaches ([`Scopes`]), who owns a
//! session or workflow ([`Ownership`]), and the one rule that decides whether a principal may
//! read or steer what someone owns ([`Principal::access`]).

use crate::modes::{PermissionMode, PrincipalRole, Visibility, WorkflowScope};
use serde::{Deserialize, Serialize};

/// Who a request acts for, as the node that checked its credentials found it: a user with a
/// team and a role, and the key (if any) with its scopes. What a request forwarded to another
/// node carries instead of its credentials (no secret goes on the bus); `GET /v1/me`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Principal {
    /// The user's name.
    pub user: String,
    /// The user's team.
    pub team: String,
    /// What the user may do.
    pub role: PrincipalRole,
    /// The key's public id (`egk_<id>_…`), when the request came with an API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// How far the key reaches, within what the role allows.
    #[serde(default)]
    pub scopes: Scopes,
}

/// What a key may reach, each limit optional (absent: as far as the role goes). A request past
/// one is refused with 403 naming the scope.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scopes {
    /// The engines it may start sessions on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engines: Option<Vec<String>>,
    /// Globs of the provider names it may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub providers: Option<Vec<String>>,
    /// Globs of the models it may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// Directories a session's projectPath must be under (symlinks resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_roots: Option<Vec<String>>,
    /// The permission modes it may choose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_modes: Option<Vec<PermissionMode>>,
    /// Whether it may answer permission requests (false: it may watch them, not approve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_permissions: Option<bool>,
    /// How far it may go with workflows (absent: as far as the role goes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflows: Option<WorkflowScope>,
}

/// Who owns a session (or a workflow): its creator, the creator's team, and who else sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ownership {
    /// The user that created it.
    pub owner: String,
    /// The owner's team when it was created.
    pub team: String,
    /// Who besides the owner sees it.
    pub visibility: Visibility,
}

impl Ownership {
    /// What the daemon's root key owns, and what rows stored before principals existed belong to.
    pub fn root() -> Self {
        Ownership {
            owner: ROOT_USER.into(),
            team: ROOT_TEAM.into(),
            visibility: Visibility::Team,
        }
    }
}

/// The root key's user name.
pub const ROOT_USER: &str = "root";
/// The root key's team.
pub const ROOT_TEAM: &str = "root";

/// What a principal wants to do with something owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// See it: a session's record, messages, events, runs, audit.
    Read,
    /// Change it: prompt, interrupt, answer, delete.
    Steer,
}

/// Why a principal may not do what it asked with something owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// It may not even see it: answered as if it did not exist (404), so that a key does not
    /// learn which ids exist.
    Hidden,
    /// It may see it but not change it (403).
    ReadOnly,
}

impl Principal {
    /// The holder of the daemon's token (`ELFGATE_TOKEN` or the token file), or anyone when the
    /// daemon runs without one on loopback: an admin named `root`.
    pub fn root() -> Self {
        Principal {
            user: ROOT_USER.into(),
            team: ROOT_TEAM.into(),
            role: PrincipalRole::Admin,
            key_id: None,
            scopes: Scopes::default(),
        }
    }

    /// Whether the principal is an admin (sees and steers everything).
    pub fn is_admin(&self) -> bool {
        self.role == PrincipalRole::Admin
    }

    /// What something this principal creates belongs to.
    pub fn ownership(&self, visibility: Visibility) -> Ownership {
        Ownership {
            owner: self.user.clone(),
            team: self.team.clone(),
            visibility,
        }
    }

    /// Whether the principal may do `want` with what `owned` describes: admins everything; the
    /// owner and (for `team` visibility) the owner's team see it; of those, viewers only read.
    pub fn access(&self, owned: &Ownership, want: Access) -> Result<(), Denied> {
        if self.is_admin() {
            return Ok(());
        }
        let sees = owned.owner == self.user
            || (owned.visibility == Visibility::Team && owned.team == self.team);
        if !sees {
            return Err(Denied::Hidden);
        }
        match (want, self.role) {
            (Access::Steer, PrincipalRole::Viewer) => Err(Denied::ReadOnly),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(user: &str, team: &str, role: PrincipalRole) -> Principal {
        Principal {
            user: user.into(),
            team: team.into(),
            role,
            key_id: Some("k1".into()),
            scopes: Scopes::default(),
        }
    }

    #[test]
    fn the_role_table_holds_for_each_visibility() {
        let alice = principal("alice", "a", PrincipalRole::Member);
        let team_a = alice.ownership(Visibility::Team);
        let private_a = alice.ownership(Visibility::Private);
        let bob = principal("bob", "a", PrincipalRole::Member);
        let vera = principal("vera", "a", PrincipalRole::Viewer);
        let carol = principal("carol", "b", PrincipalRole::Member);
        let root = Principal::root();
        for want in [Access::Read, Access::Steer] {
            assert_eq!(alice.access(&private_a, want), Ok(()));
            assert_eq!(root.access(&private_a, want), Ok(()));
            assert_eq!(bob.access(&team_a, want), Ok(()));
            assert_eq!(bob.access(&private_a, want), Err(Denied::Hidden));
            assert_eq!(vera.access(&private_a, want), Err(Denied::Hidden));
            assert_eq!(carol.access(&team_a, want), Err(Denied::Hidden));
        }
        assert_eq!(vera.access(&team_a, Access::Read), Ok(()));
        assert_eq!(vera.access(&team_a, Access::Steer), Err(Denied::ReadOnly));
    }

    #[test]
    fn scopes_refuse_unknown_fields_and_round_trip() {
        let s: Scopes = serde_json::from_str(
            r#"{"engines":["chat"],"permissionModes":["default"],"workflows":"run","answerPermissions":false}"#,
        )
        .unwrap();
        assert_eq!(s.workflows, Some(WorkflowScope::Run));
        let back: Scopes = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert!(serde_json::from_str::<Scopes>(r#"{"engine":["chat"]}"#).is_err());
    }
}
