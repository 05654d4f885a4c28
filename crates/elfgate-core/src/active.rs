//! The map of active runs, keyed by session: one running run per session, a queue behind it, and the
//! tokens that stop it and tell when it is done.

use crate::engine::EngineSessionContext;
use crate::engine_type::EngineType;
use crate::ids::{RunId, SessionId};
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The running run of a session and what waits behind it.
#[derive(Debug)]
struct ActiveRun {
    engine: EngineType,
    run_id: RunId,
    cancel: CancellationToken,
    done: CancellationToken,
    queue: VecDeque<EngineSessionContext>,
}

impl ActiveRun {
    fn cancel_all(&self) {
        self.cancel.cancel();
        for q in &self.queue {
            q.cancel.cancel();
        }
    }

    /// Queued runs that will still run (an interrupt leaves cancelled ones behind, which end
    /// without running as soon as the running run has).
    fn waiting(&self) -> usize {
        self.queue
            .iter()
            .filter(|q| !q.cancel.is_cancelled())
            .count()
    }
}

/// A view of a session's active run.
#[derive(Debug, Clone)]
pub struct ActiveRunInfo {
    /// The engine running it.
    pub engine: EngineType,
    /// The run.
    pub run_id: RunId,
    /// Fired when the run has ended (after its `complete`).
    pub done: CancellationToken,
    /// Runs waiting behind it.
    pub queued: usize,
}

/// What happened when a run was offered to the map.
#[derive(Debug)]
pub enum Admission {
    /// The session was idle: the run starts now.
    Start {
        /// Fired when the run has ended.
        done: CancellationToken,
    },
    /// The session was busy and the run was queued.
    Queued,
    /// The session was busy and the run was refused.
    Busy {
        /// The run going on.
        active_run_id: RunId,
    },
    /// The session was busy and its queue full: the run was refused.
    QueueFull {
        /// How many prompts may wait.
        max_queued: usize,
    },
}

/// What an interrupt found.
#[derive(Debug)]
pub struct Interrupted {
    /// The run that was stopped.
    pub run_id: RunId,
    /// Fired when it has ended.
    pub done: CancellationToken,
}

/// What to do with a new prompt while a run is going on.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum OnBusy {
    /// Refuse it (409).
    #[default]
    Reject,
    /// Run it after the current run (and any queued before it); refused (429) when the session's
    /// queue is full.
    Enqueue,
    /// Interrupt the current run, drop the queue, then run it.
    Interrupt,
}

/// How many prompts may wait behind a session's run by default
/// (`[server] max_queued_prompts_per_session`).
pub const MAX_QUEUED_PROMPTS: usize = 16;

/// The concurrent map of active runs. Cloning shares the map.
#[derive(Debug, Clone)]
pub struct ActiveSessions {
    map: Arc<DashMap<SessionId, ActiveRun>>,
    max_queued: usize,
}

impl Default for ActiveSessions {
    fn default() -> Self {
        Self::with_max_queued(MAX_QUEUED_PROMPTS)
    }
}

impl ActiveSessions {
    /// An empty map whose sessions queue up to [`MAX_QUEUED_PROMPTS`] prompts.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty map whose sessions queue up to `max_queued` prompts each (0: none).
    pub fn with_max_queued(max_queued: usize) -> Self {
        ActiveSessions {
            map: Arc::new(DashMap::new()),
            max_queued,
        }
    }

    /// How many prompts may wait behind a session's run.
    pub fn max_queued(&self) -> usize {
        self.max_queued
    }

    /// Whether a prompt sent with `OnBusy::Enqueue` would find the session's queue full now.
    pub fn queue_is_full(&self, session_id: SessionId) -> bool {
        self.map
            .get(&session_id)
            .is_some_and(|r| r.waiting() >= self.max_queued)
    }

    /// Offers a run; decides atomically whether it starts, queues, or is refused.
    /// With `OnBusy::Enqueue` it is refused when `max_queued` runs already wait. With
    /// `OnBusy::Interrupt` the current run and every queued one are cancelled; cancelled queued
    /// runs stay in the queue so that they end, in order, without running, and do not count
    /// against the bound.
    pub fn admit(
        &self,
        ctx: EngineSessionContext,
        engine: EngineType,
        on_busy: OnBusy,
    ) -> Admission {
        match self.map.entry(ctx.session_id()) {
            Entry::Vacant(v) => {
                let done = CancellationToken::new();
                v.insert(ActiveRun {
                    engine,
                    run_id: ctx.run_id,
                    cancel: ctx.cancel,
                    done: done.clone(),
                    queue: VecDeque::new(),
                });
                Admission::Start { done }
            }
            Entry::Occupied(mut o) => {
                let run = o.get_mut();
                match on_busy {
                    OnBusy::Reject => Admission::Busy {
                        active_run_id: run.run_id,
                    },
                    OnBusy::Enqueue if run.waiting() >= self.max_queued => Admission::QueueFull {
                        max_queued: self.max_queued,
                    },
                    OnBusy::Enqueue => {
                        run.queue.push_back(ctx);
                        Admission::Queued
                    }
                    OnBusy::Interrupt => {
                        run.cancel_all();
                        run.queue.push_back(ctx);
                        Admission::Queued
                    }
                }
            }
        }
    }

    /// Ends `run_id`: returns the next queued run with its `done` token (it becomes the active one),
    /// or frees the session and returns None.
    pub fn finish(
        &self,
        session_id: SessionId,
        run_id: RunId,
    ) -> Option<(EngineSessionContext, CancellationToken)> {
        match self.map.entry(session_id) {
            Entry::Occupied(mut o) if o.get().run_id == run_id => {
                let run = o.get_mut();
                match run.queue.pop_front() {
                    Some(next) => {
                        let done = CancellationToken::new();
                        run.run_id = next.run_id;
                        run.cancel = next.cancel.clone();
                        run.done = done.clone();
                        Some((next, done))
                    }
                    None => {
                        o.remove();
                        None
                    }
                }
            }
            _ => None,
        }
    }

    /// Fires the token of the running run and of every queued one (they end, in order, without
    /// running). None when the session is idle.
    pub fn interrupt(&self, session_id: SessionId) -> Option<Interrupted> {
        let run = self.map.get(&session_id)?;
        run.cancel_all();
        Some(Interrupted {
            run_id: run.run_id,
            done: run.done.clone(),
        })
    }

    /// Fires the token of one run of the session, running or queued, and of no other: the end of
    /// one caller's request (a gateway caller that left) must not take other callers' prompts
    /// with it. None when that run is neither running nor waiting.
    pub fn interrupt_run(&self, session_id: SessionId, run_id: RunId) -> Option<Interrupted> {
        let run = self.map.get(&session_id)?;
        if run.run_id == run_id {
            run.cancel.cancel();
            return Some(Interrupted {
                run_id,
                done: run.done.clone(),
            });
        }
        let queued = run.queue.iter().find(|q| q.run_id == run_id)?;
        queued.cancel.cancel();
        // A queued run has no done token of its own yet; the running run's fires first, and the
        // cancelled one ends, without running, right after it.
        Some(Interrupted {
            run_id,
            done: run.done.clone(),
        })
    }

    /// Fires the token of every running run and drops every queue (shutdown).
    pub fn interrupt_all(&self) -> Vec<Interrupted> {
        let ids: Vec<SessionId> = self.map.iter().map(|e| *e.key()).collect();
        ids.into_iter()
            .filter_map(|id| self.interrupt(id))
            .collect()
    }

    /// The active run of a session.
    pub fn get(&self, session_id: SessionId) -> Option<ActiveRunInfo> {
        self.map.get(&session_id).map(|r| ActiveRunInfo {
            engine: r.engine,
            run_id: r.run_id,
            done: r.done.clone(),
            queued: r.queue.len(),
        })
    }

    /// Whether a session has a run going on.
    pub fn contains(&self, session_id: SessionId) -> bool {
        self.map.contains_key(&session_id)
    }

    /// Runs going on now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing runs.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Runs going on now on one engine.
    pub fn count_engine(&self, engine: EngineType) -> usize {
        self.map.iter().filter(|r| r.engine == engine).count()
    }
}
