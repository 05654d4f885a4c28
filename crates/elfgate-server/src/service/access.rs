//! Who may see and steer a session: every command on a session loads it here, and the one rule
//! (`Principal::access`) decides. Another principal's session is answered exactly as a missing
//! one (404), so that a key does not learn which ids exist; a session a principal may read but
//! not change is refused with 403.

use super::command::Actor;
use crate::error::ApiError;
use crate::state::AppState;
use elfgate_core::{Access, Denied, Ownership, Session, SessionId};
use elfgate_store::SessionsSeen;

/// The answer for a session that is not there, or that the actor may not see: the same words,
/// so that the two cannot be told apart.
pub(crate) fn unknown_session(session_id: SessionId) -> ApiError {
    ApiError::NotFound(format!("unknown session '{session_id}'"))
}

/// Whether `actor` may do `want` with what `owned` describes: the daemon acting on its own
/// (schedules, hooks, run-end triggers) may; a principal as `Principal::access` says, `hidden`
/// answering what it may not see.
pub(crate) fn check_access(
    actor: &Actor,
    owned: &Ownership,
    want: Access,
    hidden: impl FnOnce() -> ApiError,
) -> Result<(), ApiError> {
    let Actor::Principal(principal) = actor else {
        return Ok(());
    };
    match principal.access(owned, want) {
        Ok(()) => Ok(()),
        Err(Denied::Hidden) => Err(hidden()),
        Err(Denied::ReadOnly) => Err(ApiError::Refused(format!(
            "role: {} (a viewer) may read this but not change it",
            principal.user
        ))),
    }
}

/// The stored session `session_id`, when `actor` may do `want` with it: 404 when it is not
/// stored or the actor may not see it, 403 when the actor may only read it.
pub async fn authorize_session(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
    want: Access,
) -> Result<Session, ApiError> {
    let session = state
        .store
        .get_session(session_id)
        .await?
        .ok_or_else(|| unknown_session(session_id))?;
    check_access(actor, &session.ownership, want, || {
        unknown_session(session_id)
    })?;
    Ok(session)
}

/// Which sessions a list shows `actor`: every one to the daemon and to admins; to anyone else
/// its own and its team's shared ones.
pub(crate) fn sessions_seen(actor: &Actor) -> SessionsSeen<'_> {
    match actor {
        Actor::Principal(p) if !p.is_admin() => SessionsSeen::By {
            user: &p.user,
            team: &p.team,
        },
        Actor::Principal(_) | Actor::Daemon => SessionsSeen::All,
    }
}

/// 403 for a principal that may not start anything (a viewer): it reads, and changes nothing.
pub(crate) fn check_may_start(actor: &Actor) -> Result<(), ApiError> {
    match actor {
        Actor::Principal(p) if p.role == elfgate_core::PrincipalRole::Viewer => {
            Err(ApiError::Refused(format!(
                "role: {} is a viewer; a viewer reads its team's sessions and starts none",
                p.user
            )))
        }
        Actor::Principal(_) | Actor::Daemon => Ok(()),
    }
}

/// What a principal wants to do with a workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowAct {
    /// See its definition.
    Read,
    /// Start (or resume) a run of it.
    Run,
    /// Create, change or delete it.
    Manage,
}

/// Whether `actor` may do `act` with a workflow owned as `owned`: another team's is answered as
/// a missing one (`hidden`, 404); then as [`check_workflow_act`] says.
pub fn authorize_workflow(
    actor: &Actor,
    owned: &Ownership,
    act: WorkflowAct,
    hidden: impl FnOnce() -> ApiError,
) -> Result<(), ApiError> {
    check_access(actor, owned, Access::Read, hidden)?;
    check_workflow_act(actor, act)
}

/// Whether `actor`'s role and key reach `act` on its team's workflows: 403 naming `workflows`
/// past its role (a viewer runs and changes nothing) or its key's `scopes.workflows` (`run`:
/// runs only; `manage`: everything).
pub fn check_workflow_act(actor: &Actor, act: WorkflowAct) -> Result<(), ApiError> {
    let Actor::Principal(p) = actor else {
        return Ok(());
    };
    if act == WorkflowAct::Read {
        return Ok(());
    }
    if p.role == elfgate_core::PrincipalRole::Viewer {
        return Err(ApiError::Refused(format!(
            "workflows: {} is a viewer; a viewer reads its team's workflows and runs none",
            p.user
        )));
    }
    use elfgate_core::WorkflowScope;
    let allowed = match p.scopes.workflows {
        None | Some(WorkflowScope::Manage) => true,
        Some(WorkflowScope::Run) => act == WorkflowAct::Run,
    };
    if !allowed {
        return Err(ApiError::Refused(
            "workflows: the key's scopes.workflows is 'run': it starts runs, and creates, \
             changes and deletes no workflow"
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;
    use elfgate_core::{Principal, PrincipalRole, Visibility, WorkflowScope};
    use std::sync::Arc;

    fn actor(user: &str, team: &str, role: PrincipalRole) -> Actor {
        Actor::Principal(Arc::new(Principal {
            user: user.into(),
            team: team.into(),
            role,
            key_id: Some("k".into()),
            scopes: Default::default(),
        }))
    }

    fn status(r: Result<(), ApiError>) -> u16 {
        r.map_or_else(|e| e.into_response().status().as_u16(), |()| 200)
    }

    #[test]
    fn another_teams_session_is_missing_and_a_viewers_change_refused() {
        let owned = Ownership {
            owner: "alice".into(),
            team: "a".into(),
            visibility: Visibility::Team,
        };
        let id = SessionId::new();
        let check = |a: &Actor, want| status(check_access(a, &owned, want, || unknown_session(id)));
        let viewer = actor("vera", "a", PrincipalRole::Viewer);
        let stranger = actor("carol", "b", PrincipalRole::Member);
        assert_eq!(check(&viewer, Access::Read), 200);
        assert_eq!(check(&viewer, Access::Steer), 403);
        assert_eq!(check(&stranger, Access::Read), 404);
        assert_eq!(check(&stranger, Access::Steer), 404);
        assert_eq!(check(&Actor::Daemon, Access::Steer), 200);
        assert_eq!(status(check_may_start(&viewer)), 403);
        assert_eq!(status(check_may_start(&stranger)), 200);
        assert_eq!(sessions_seen(&Actor::Daemon), SessionsSeen::All);
        assert_eq!(
            sessions_seen(&viewer),
            SessionsSeen::By {
                user: "vera",
                team: "a"
            }
        );
    }

    #[test]
    fn a_keys_workflow_scope_bounds_what_its_role_allows() {
        let owned = Ownership {
            owner: "alice".into(),
            team: "a".into(),
            visibility: Visibility::Team,
        };
        let scoped = |scope| {
            Actor::Principal(Arc::new(Principal {
                user: "bob".into(),
                team: "a".into(),
                role: PrincipalRole::Member,
                key_id: Some("k".into()),
                scopes: elfgate_core::Scopes {
                    workflows: scope,
                    ..Default::default()
                },
            }))
        };
        let check = |a: &Actor, act| {
            status(authorize_workflow(a, &owned, act, || {
                ApiError::NotFound("unknown workflow".into())
            }))
        };
        let runner = scoped(Some(WorkflowScope::Run));
        assert_eq!(check(&runner, WorkflowAct::Run), 200);
        assert_eq!(check(&runner, WorkflowAct::Manage), 403);
        let manager = scoped(Some(WorkflowScope::Manage));
        assert_eq!(check(&manager, WorkflowAct::Manage), 200);
        assert_eq!(check(&scoped(None), WorkflowAct::Manage), 200);
        let viewer = actor("vera", "a", PrincipalRole::Viewer);
        assert_eq!(check(&viewer, WorkflowAct::Read), 200);
        assert_eq!(check(&viewer, WorkflowAct::Run), 403);
        let stranger = actor("carol", "b", PrincipalRole::Member);
        assert_eq!(check(&stranger, WorkflowAct::Read), 404);
        assert_eq!(check(&stranger, WorkflowAct::Manage), 404);
        let err = check_workflow_act(&runner, WorkflowAct::Manage).unwrap_err();
        assert!(err.to_string().starts_with("workflows:"), "{err}");
    }
}
