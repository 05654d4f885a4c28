//! Permissions: the policy (tier x permissionMode x channel permissions) and the broker that asks the
//! client and waits for its answer.

use crate::tool::{PermissionTier, ToolKind};
use chrono::Utc;
use dashmap::DashMap;
pub use elfgate_core::{Decision, Scope};
use elfgate_core::{
    EventEmitter, EventPayload, EventRecord, PermissionAnswers, PermissionMode, RequestId,
    SessionId,
};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// A client's answer to a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionAnswer {
    /// Allow or deny.
    pub decision: Decision,
    /// Once or for the session.
    pub scope: Scope,
    /// A note for the model (e.g. why it was denied).
    pub message: Option<String>,
}

/// How a permission request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionOutcome {
    /// The client allowed it.
    Allowed,
    /// The client denied it, maybe with a message.
    Denied(Option<String>),
    /// Nobody answered in time.
    TimedOut,
    /// The run was interrupted while waiting.
    Interrupted,
    /// Nobody could answer: the run's caller cannot (a gateway call) and no client follows the
    /// session's events. Nothing was asked.
    Unanswerable,
}

impl PermissionOutcome {
    /// Why a call that was not allowed is denied, for the model and the client; None when it was
    /// allowed or the run was interrupted (the caller says so itself).
    pub fn denial(&self, timeout: Duration) -> Option<String> {
        match self {
            PermissionOutcome::Allowed | PermissionOutcome::Interrupted => None,
            PermissionOutcome::Denied(msg) => {
                Some(match msg.as_deref().filter(|m| !m.is_empty()) {
                    Some(m) => format!("the user denied permission: {m}"),
                    None => "the user denied permission".to_string(),
                })
            }
            PermissionOutcome::TimedOut => Some(format!(
                "nobody answered the permission request within {:.1}s",
                timeout.as_secs_f64()
            )),
            PermissionOutcome::Unanswerable => Some(UNANSWERABLE.to_string()),
        }
    }
}

/// The reason of [`PermissionOutcome::Unanswerable`].
pub const UNANSWERABLE: &str = "this call needs permission, and nobody can give it: the run was      started through a gateway door, which cannot answer permission requests, and no client      follows the session's events (GET /v1/sessions/{id}/events) to answer them. Send the      x-elfgate-permission-mode header (acceptEdits, bypassPermissions or plan) to decide ahead";

/// Why an answer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No such request in this session.
    #[error("unknown permission request '{0}'")]
    NotFound(String),
    /// The request was already answered or expired.
    #[error("permission request '{0}' was already decided")]
    AlreadyDecided(String),
}

/// What the policy says about a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyDecision {
    /// Run it without asking.
    Allow,
    /// Ask the client.
    Ask,
    /// Refuse it, with a reason for the model.
    Deny(String),
}

/// Who asked for a call: the model (inside a turn) or the client itself (the tool-run route,
/// `POST /v1/sessions/{id}/tools/{name}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The model asked for it.
    Model,
    /// The client ran it itself: its request is the decision a manual_only tool waits for.
    Client,
    /// A workflow's tool step: nobody decided this one call, so a manual_only tool never runs.
    Workflow,
}

/// What the permission policy looks at for one call.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts {
    /// The tool's tier.
    pub tier: PermissionTier,
    /// What the tool does (acceptEdits lets `Edit` tools through).
    pub kind: ToolKind,
    /// The session's permissionMode.
    pub mode: PermissionMode,
    /// The channel's `requireConfirmation`: every call asks.
    pub require_confirmation: bool,
    /// What the client decided for this session and tool, if it is remembered.
    pub remembered: Option<Decision>,
    /// Who asked for the call.
    pub caller: Caller,
}

/// The permission policy, the one place where tier x permissionMode x caller x channel x memory
/// is decided (docs/tinyelf.md, "Permissions", has its table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierPolicy {
    /// The permission modes in which always_confirm tools run without asking
    /// (`always_confirm_skip_modes`; by default bypassPermissions only).
    always_confirm_skip_modes: Vec<PermissionMode>,
}

impl Default for TierPolicy {
    fn default() -> Self {
        TierPolicy {
            always_confirm_skip_modes: vec![PermissionMode::BypassPermissions],
        }
    }
}

/// A policy that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TierPolicyError {
    /// plan denies every tool that is not read-only, so it cannot let always_confirm tools run.
    #[error(
        "always_confirm_skip_modes cannot hold plan: plan mode denies every tool that is not \
         read_only"
    )]
    PlanSkips,
}

impl TierPolicy {
    /// A policy whose always_confirm tools run unasked in `skip_modes`.
    pub fn new(skip_modes: Vec<PermissionMode>) -> Result<Self, TierPolicyError> {
        if skip_modes.contains(&PermissionMode::Plan) {
            return Err(TierPolicyError::PlanSkips);
        }
        Ok(TierPolicy {
            always_confirm_skip_modes: skip_modes,
        })
    }

    /// What to do with a call, first match wins.
    pub fn decide(&self, c: &CallFacts) -> PolicyDecision {
        use PermissionTier::*;
        if c.tier == ManualOnly {
            return match c.caller {
                Caller::Model => PolicyDecision::Deny(
                    "this tool is manual_only: only the client can run it (POST \
                     /v1/sessions/{id}/tools/{name}), never the model"
                        .to_string(),
                ),
                // The client's own request is the decision; a channel that wants every
                // call confirmed still asks.
                Caller::Client if c.require_confirmation => PolicyDecision::Ask,
                Caller::Client => PolicyDecision::Allow,
                Caller::Workflow => PolicyDecision::Deny(
                    "this tool is manual_only: only the client can run it (POST \
                     /v1/sessions/{id}/tools/{name}), never a workflow"
                        .to_string(),
                ),
            };
        }
        if c.mode == PermissionMode::Plan && c.tier != ReadOnly {
            return PolicyDecision::Deny(
                "permissionMode is plan: only read-only tools may run; describe the change instead"
                    .to_string(),
            );
        }
        if c.remembered == Some(Decision::Deny) {
            return PolicyDecision::Deny(
                "the user denied this tool for the rest of the session".to_string(),
            );
        }
        if c.require_confirmation {
            return PolicyDecision::Ask;
        }
        match c.tier {
            ReadOnly => PolicyDecision::Allow,
            AlwaysConfirm if self.always_confirm_skip_modes.contains(&c.mode) => {
                PolicyDecision::Allow
            }
            // Asks every time: an "allow for the session" is not remembered for it.
            AlwaysConfirm => PolicyDecision::Ask,
            ConfirmOnce
                if c.mode == PermissionMode::BypassPermissions
                    || (c.mode == PermissionMode::AcceptEdits && c.kind == ToolKind::Edit)
                    || c.remembered == Some(Decision::Allow) =>
            {
                PolicyDecision::Allow
            }
            // manual_only was decided above.
            ConfirmOnce | ManualOnly => PolicyDecision::Ask,
        }
    }
}

/// What to ask the client about.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The tool.
    pub tool_name: &'a str,
    /// Its input.
    pub input: &'a Value,
    /// Its tier.
    pub tier: PermissionTier,
    /// How long to wait before denying.
    pub timeout: Duration,
    /// Who can answer: with [`PermissionAnswers::WatchersOnly`] and no client following the
    /// session, the request is not made ([`PermissionOutcome::Unanswerable`]).
    pub answers: PermissionAnswers,
}

struct Pending {
    session_id: SessionId,
    tx: oneshot::Sender<PermissionAnswer>,
    record: Option<Arc<EventRecord>>,
}

/// A pending request, as the SSE layer re-announces it.
#[derive(Debug, Clone)]
pub struct PendingRequest {
    /// The request id.
    pub request_id: String,
    /// The logged permissionRequest event.
    pub record: Arc<EventRecord>,
}

/// How many remembered decisions a session keeps by default.
pub const DEFAULT_MAX_REMEMBERED_DECISIONS: usize = 64;

/// Pending permission requests and what clients decided.
pub struct PermissionBroker {
    pending: DashMap<String, Pending>,
    decided: DashMap<String, SessionId>,
    /// Per session, (tool, decision) from the oldest decision to the newest.
    remembered: DashMap<SessionId, VecDeque<(String, Decision)>>,
    max_remembered: usize,
    ask_locks: DashMap<(SessionId, String), Arc<tokio::sync::Mutex<()>>>,
}

impl std::fmt::Debug for PermissionBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermissionBroker")
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl Default for PermissionBroker {
    fn default() -> Self {
        Self::new()
    }
}

impl PermissionBroker {
    /// An empty broker that remembers up to [`DEFAULT_MAX_REMEMBERED_DECISIONS`] decisions per
    /// session.
    pub fn new() -> Self {
        Self::with_max_remembered(DEFAULT_MAX_REMEMBERED_DECISIONS)
    }

    /// An empty broker that remembers up to `max` decisions per session (0: none, every call
    /// that needs asking is asked).
    pub fn with_max_remembered(max: usize) -> Self {
        PermissionBroker {
            pending: DashMap::new(),
            decided: DashMap::new(),
            remembered: DashMap::new(),
            max_remembered: max,
            ask_locks: DashMap::new(),
        }
    }

    /// What the client decided for the rest of the session for this tool, if anything.
    pub fn remembered(&self, session_id: SessionId, tool: &str) -> Option<Decision> {
        self.remembered
            .get(&session_id)?
            .iter()
            .find(|(t, _)| t == tool)
            .map(|(_, d)| *d)
    }

    /// Remembers a decision for the session and tool. Past the per-session cap the oldest allow
    /// is forgotten: the client is asked again the next time that tool needs it, which costs a
    /// prompt, never a permission nobody gave. A forgotten deny could let a tool run unasked
    /// (bypassPermissions, acceptEdits), so denies go only when nothing else is left.
    pub fn remember(&self, session_id: SessionId, tool: &str, decision: Decision) {
        if self.max_remembered == 0 {
            return;
        }
        let mut memory = self.remembered.entry(session_id).or_default();
        memory.retain(|(t, _)| t != tool);
        memory.push_back((tool.to_string(), decision));
        while memory.len() > self.max_remembered {
            let victim = memory
                .iter()
                .position(|(_, d)| *d == Decision::Allow)
                .unwrap_or(0);
            memory.remove(victim);
        }
    }

    /// A lock per session and tool: concurrent calls of one confirm_once tool take it around
    /// "check what was remembered, else ask", so that the client is asked only once.
    pub fn ask_lock(&self, session_id: SessionId, tool: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.ask_locks
            .entry((session_id, tool.to_string()))
            .or_default()
            .clone()
    }

    /// Forgets everything about a session (deleted).
    pub fn forget_session(&self, session_id: SessionId) {
        self.ask_locks.retain(|(s, _), _| *s != session_id);
        self.remembered.remove(&session_id);
        self.decided.retain(|_, s| *s != session_id);
        self.pending.retain(|_, p| p.session_id != session_id);
    }

    /// The pending requests of a session whose permissionRequest event was published.
    pub fn pending_for(&self, session_id: SessionId) -> Vec<PendingRequest> {
        let mut out: Vec<PendingRequest> = self
            .pending
            .iter()
            .filter(|p| p.session_id == session_id)
            .filter_map(|p| {
                p.record.clone().map(|record| PendingRequest {
                    request_id: p.key().clone(),
                    record,
                })
            })
            .collect();
        out.sort_by_key(|p| p.record.seq);
        out
    }

    /// Answers a pending request.
    pub fn resolve(
        &self,
        session_id: SessionId,
        request_id: &str,
        answer: PermissionAnswer,
    ) -> Result<(), ResolveError> {
        if let Some((id, p)) = self
            .pending
            .remove_if(request_id, |_, p| p.session_id == session_id)
        {
            self.decided.insert(id, session_id);
            // The waiter may have just given up (timeout or interrupt); then the answer is moot.
            let _ = p.tx.send(answer);
            return Ok(());
        }
        match self.decided.get(request_id) {
            Some(s) if *s == session_id => {
                Err(ResolveError::AlreadyDecided(request_id.to_string()))
            }
            _ => Err(ResolveError::NotFound(request_id.to_string())),
        }
    }

    /// Asks the client: registers the waiter, then emits `permissionRequest`, then waits for an
    /// answer, `timeout` (deny) or `cancel`; emits `permissionResolved` in every case.
    /// A `session` scope answer (and any allow of a confirm_once tool) is remembered.
    pub async fn request(
        &self,
        events: &EventEmitter,
        session_id: SessionId,
        ask: Ask<'_>,
        cancel: &CancellationToken,
    ) -> PermissionOutcome {
        let Ask {
            tool_name,
            input,
            tier,
            timeout,
            answers,
        } = ask;
        if answers == PermissionAnswers::WatchersOnly && events.watchers() == 0 {
            return PermissionOutcome::Unanswerable;
        }
        let request_id = RequestId::new().to_string();
        let (tx, mut rx) = oneshot::channel();
        let expires_at = Utc::now()
            + chrono::Duration::from_std(timeout).unwrap_or(chrono::Duration::seconds(300));
        self.pending.insert(
            request_id.clone(),
            Pending {
                session_id,
                tx,
                record: None,
            },
        );
        let record = events
            .emit(EventPayload::PermissionRequest {
                request_id: request_id.clone(),
                tool_name: tool_name.to_string(),
                input: input.clone(),
                tier,
                expires_at,
            })
            .await;
        if let Some(mut p) = self.pending.get_mut(&request_id) {
            p.record = Some(record);
        }
        let answer = tokio::select! {
            biased;
            a = &mut rx => a.ok(),
            _ = cancel.cancelled() => None,
            _ = tokio::time::sleep(timeout) => None,
        };
        let answer = match answer {
            Some(a) => Some(a),
            None => {
                if self.pending.remove(&request_id).is_some() {
                    self.decided.insert(request_id.clone(), session_id);
                    None
                } else {
                    // A client answered in the same instant.
                    rx.try_recv().ok()
                }
            }
        };
        // An answer is taken only while this node holds the session's lease (a fleet node paused
        // or cut off past it may have lost the session, and another node ended this run): the
        // run then stops as interrupted, and the answer is neither acted on nor remembered.
        let lease_lost = answer.is_some() && !events.bus().lease().confirm(cancel).await;
        let outcome = match &answer {
            _ if lease_lost => PermissionOutcome::Interrupted,
            Some(a) => {
                if a.scope == Scope::Session
                    || (a.decision == Decision::Allow && tier == PermissionTier::ConfirmOnce)
                {
                    self.remember(session_id, tool_name, a.decision);
                }
                match a.decision {
                    Decision::Allow => PermissionOutcome::Allowed,
                    Decision::Deny => PermissionOutcome::Denied(a.message.clone()),
                }
            }
            None if cancel.is_cancelled() => PermissionOutcome::Interrupted,
            None => PermissionOutcome::TimedOut,
        };
        events
            .emit(EventPayload::PermissionResolved {
                request_id,
                decision: match outcome {
                    PermissionOutcome::Allowed => Decision::Allow,
                    _ => Decision::Deny,
                },
            })
            .await;
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_decisions_are_capped_per_session_oldest_allow_first() {
        let b = PermissionBroker::with_max_remembered(2);
        let (s1, s2) = (SessionId::new(), SessionId::new());
        b.remember(s1, "write_file", Decision::Allow);
        b.remember(s1, "glob", Decision::Allow);
        b.remember(s2, "web_fetch", Decision::Allow);
        // Deciding again refreshes a decision instead of adding one.
        b.remember(s1, "write_file", Decision::Allow);
        b.remember(s1, "edit_file", Decision::Allow);
        assert_eq!(b.remembered(s1, "glob"), None, "the oldest was forgotten");
        assert_eq!(b.remembered(s1, "write_file"), Some(Decision::Allow));
        assert_eq!(b.remembered(s1, "edit_file"), Some(Decision::Allow));
        // Another session's memory is its own.
        assert_eq!(b.remembered(s2, "web_fetch"), Some(Decision::Allow));
        b.forget_session(s1);
        assert_eq!(b.remembered(s1, "write_file"), None);
        assert_eq!(b.remembered(s2, "web_fetch"), Some(Decision::Allow));

        // Denies outlive allows; only a memory full of denies forgets one, the oldest.
        b.remember(s2, "shell", Decision::Deny);
        b.remember(s2, "write_file", Decision::Allow);
        assert_eq!(b.remembered(s2, "web_fetch"), None);
        assert_eq!(b.remembered(s2, "shell"), Some(Decision::Deny));
        b.remember(s2, "edit_file", Decision::Deny);
        b.remember(s2, "glob", Decision::Deny);
        assert_eq!(b.remembered(s2, "write_file"), None);
        assert_eq!(b.remembered(s2, "shell"), None);
        assert_eq!(b.remembered(s2, "edit_file"), Some(Decision::Deny));
        assert_eq!(b.remembered(s2, "glob"), Some(Decision::Deny));

        let none = PermissionBroker::with_max_remembered(0);
        none.remember(s1, "write_file", Decision::Allow);
        assert_eq!(none.remembered(s1, "write_file"), None);
    }

    /// The table of docs/tinyelf.md ("Permissions"), cell by cell: tier x mode for the model's
    /// calls, then the modifiers (memory, requireConfirmation, the client's own runs, the
    /// configurable skip modes).
    #[test]
    fn the_tier_table_cell_by_cell() {
        use PermissionTier::*;
        const A: &str = "allow";
        const K: &str = "ask";
        const D: &str = "deny";
        let cell = |policy: &TierPolicy,
                    tier,
                    kind,
                    mode: &str,
                    require_confirmation,
                    remembered,
                    caller| {
            match policy.decide(&CallFacts {
                tier,
                kind,
                mode: mode.parse().unwrap(),
                require_confirmation,
                remembered,
                caller,
            }) {
                PolicyDecision::Allow => A,
                PolicyDecision::Ask => K,
                PolicyDecision::Deny(_) => D,
            }
        };
        let p = TierPolicy::default();
        let modes = ["default", "acceptEdits", "plan", "bypassPermissions"];
        // (tier, kind, [default, acceptEdits, plan, bypassPermissions]) for the model's calls.
        let table = [
            (ReadOnly, ToolKind::Read, [A, A, A, A]),
            (ConfirmOnce, ToolKind::Edit, [K, A, D, A]),
            (ConfirmOnce, ToolKind::Network, [K, K, D, A]),
            (AlwaysConfirm, ToolKind::Execute, [K, K, D, A]),
            (ManualOnly, ToolKind::Execute, [D, D, D, D]),
        ];
        for (tier, kind, row) in table {
            for (mode, want) in modes.iter().zip(row) {
                assert_eq!(
                    cell(&p, tier, kind, mode, false, None, Caller::Model),
                    want,
                    "{tier:?} {kind:?} in {mode}"
                );
            }
        }
        for mode in modes {
            // A remembered allow skips confirm_once's question, never always_confirm's.
            let plan = mode == "plan";
            assert_eq!(
                cell(
                    &p,
                    ConfirmOnce,
                    ToolKind::Network,
                    mode,
                    false,
                    Some(Decision::Allow),
                    Caller::Model
                ),
                if plan { D } else { A },
                "{mode}"
            );
            let ac = cell(
                &p,
                AlwaysConfirm,
                ToolKind::Execute,
                mode,
                false,
                Some(Decision::Allow),
                Caller::Model,
            );
            assert_eq!(
                ac,
                match mode {
                    "plan" => D,
                    "bypassPermissions" => A,
                    _ => K,
                },
                "{mode}"
            );
            // A remembered deny denies every tier.
            for tier in [ReadOnly, ConfirmOnce, AlwaysConfirm] {
                assert_eq!(
                    cell(
                        &p,
                        tier,
                        ToolKind::Read,
                        mode,
                        false,
                        Some(Decision::Deny),
                        Caller::Model
                    ),
                    D,
                    "{tier:?} {mode}"
                );
            }
            // requireConfirmation asks for everything the mode does not deny.
            for tier in [ReadOnly, ConfirmOnce, AlwaysConfirm] {
                let want = if plan && tier != ReadOnly { D } else { K };
                assert_eq!(
                    cell(&p, tier, ToolKind::Edit, mode, true, None, Caller::Model),
                    want,
                    "{tier:?} {mode}"
                );
            }
            // manual_only runs when the client runs it itself, in every mode, and asks when the
            // channel wants every call confirmed.
            assert_eq!(
                cell(
                    &p,
                    ManualOnly,
                    ToolKind::Execute,
                    mode,
                    false,
                    None,
                    Caller::Client
                ),
                A
            );
            assert_eq!(
                cell(
                    &p,
                    ManualOnly,
                    ToolKind::Execute,
                    mode,
                    true,
                    None,
                    Caller::Client
                ),
                K
            );
            // The client's runs of other tiers follow the model's table.
            assert_eq!(
                cell(
                    &p,
                    AlwaysConfirm,
                    ToolKind::Execute,
                    mode,
                    false,
                    None,
                    Caller::Client
                ),
                cell(
                    &p,
                    AlwaysConfirm,
                    ToolKind::Execute,
                    mode,
                    false,
                    None,
                    Caller::Model
                ),
            );
        }
        // The skip modes are configuration: none, or acceptEdits too.
        let strict = TierPolicy::new(vec![]).unwrap();
        assert_eq!(
            cell(
                &strict,
                AlwaysConfirm,
                ToolKind::Execute,
                "bypassPermissions",
                false,
                None,
                Caller::Model
            ),
            K
        );
        assert_eq!(
            cell(
                &strict,
                ConfirmOnce,
                ToolKind::Edit,
                "bypassPermissions",
                false,
                None,
                Caller::Model
            ),
            A
        );
        let loose = TierPolicy::new(vec![
            PermissionMode::AcceptEdits,
            PermissionMode::BypassPermissions,
        ])
        .unwrap();
        assert_eq!(
            cell(
                &loose,
                AlwaysConfirm,
                ToolKind::Execute,
                "acceptEdits",
                false,
                None,
                Caller::Model
            ),
            A
        );
        assert_eq!(
            cell(
                &loose,
                AlwaysConfirm,
                ToolKind::Execute,
                "default",
                false,
                None,
                Caller::Model
            ),
            K
        );
        assert_eq!(
            TierPolicy::new(vec![PermissionMode::Plan]),
            Err(TierPolicyError::PlanSkips)
        );
    }
}
