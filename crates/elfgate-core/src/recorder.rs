//! The one writer of a run's state: its messages, its start and its end.
//!
//! Engines report what a run produced to its [`RunRecorder`] (in `ctx.recorder`) instead of writing
//! to the store themselves, and the dispatcher records the run's start and end through the same
//! recorder. The recorder remembers what it has written, so that a write done ahead of the run (a
//! session's first prompt and its `running` status, committed with the session) is not done twice.

use crate::ids::{RunId, SessionId};
use crate::model::Message;
use crate::outcome::RunOutcome;
use crate::sync::lock;
use async_trait::async_trait;
use std::sync::{Arc, Mutex};

/// A failure to record a run's state: the store's report of it, and whether the same write may
/// succeed if tried again (a full disk, a busy database) rather than being refused for itself.
#[derive(Debug, thiserror::Error)]
#[error("run ledger: {0}")]
pub struct LedgerError(pub String, pub bool);

impl LedgerError {
    /// A failure that trying again would not undo.
    pub fn permanent(report: impl Into<String>) -> Self {
        LedgerError(report.into(), false)
    }

    /// Whether trying again may work.
    pub fn is_transient(&self) -> bool {
        self.1
    }
}

/// Where runs' writes go (the store implements it).
#[async_trait]
pub trait RunLedger: Send + Sync {
    /// The run starts now; `trace_id`, the trace its spans are in when runs are traced.
    async fn run_started(
        &self,
        session_id: SessionId,
        run_id: RunId,
        trace_id: Option<String>,
    ) -> Result<(), LedgerError>;
    /// Stores the id of the trace a run that is stored as running already is in (a session's
    /// first run, committed with the session before its trace began). Nothing by default: a
    /// ledger that keeps no traces.
    async fn run_traced(
        &self,
        _session_id: SessionId,
        _run_id: RunId,
        _trace_id: &str,
    ) -> Result<(), LedgerError> {
        Ok(())
    }
    /// The run ended; `answer`, its closing message, is stored in the same commit.
    async fn run_finished(
        &self,
        session_id: SessionId,
        run_id: RunId,
        outcome: &RunOutcome,
        answer: Option<&Message>,
    ) -> Result<(), LedgerError>;
    /// A message of a run (the prompt, or an intermediate assistant or tool message).
    async fn message_added(&self, message: &Message) -> Result<(), LedgerError>;
    /// The session's CLI backend reported its own session id (cli engine), which a later run
    /// resumes.
    async fn cli_session_id_set(
        &self,
        session_id: SessionId,
        cli_session_id: &str,
    ) -> Result<(), LedgerError>;
}

/// What the recorder has written of its run.
#[derive(Debug, Default)]
struct Written {
    /// The run's user message, once stored.
    user: Option<Message>,
    /// Whether the run is stored as running.
    running: bool,
}

/// The writer of one run's state. Shared by the run's context and the dispatcher.
pub struct RunRecorder {
    ledger: Arc<dyn RunLedger>,
    session_id: SessionId,
    run_id: RunId,
    written: Mutex<Written>,
    /// The run's model calls so far, stored with its end.
    calls: Mutex<Vec<crate::ModelCall>>,
}

impl std::fmt::Debug for RunRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRecorder")
            .field("run_id", &self.run_id)
            .field("written", &self.written)
            .finish()
    }
}

impl RunRecorder {
    /// A recorder of a run that nothing has been written of yet but its `queued` row.
    pub fn new(ledger: Arc<dyn RunLedger>, session_id: SessionId, run_id: RunId) -> Arc<Self> {
        Arc::new(RunRecorder {
            ledger,
            session_id,
            run_id,
            written: Mutex::default(),
            calls: Mutex::default(),
        })
    }

    /// A recorder of a session's first run, which is committed with the session as `running`
    /// together with its user message `user` (one commit instead of three before the request
    /// goes upstream). The session is created by the caller, whose errors are the store's own;
    /// the recorder only learns that these writes are done, so that it does not repeat them.
    pub fn stored_with_session(
        ledger: Arc<dyn RunLedger>,
        session_id: SessionId,
        run_id: RunId,
        user: Message,
    ) -> Arc<Self> {
        Arc::new(RunRecorder {
            ledger,
            session_id,
            run_id,
            written: Mutex::new(Written {
                user: Some(user),
                running: true,
            }),
            calls: Mutex::default(),
        })
    }

    fn written(&self) -> std::sync::MutexGuard<'_, Written> {
        lock(&self.written)
    }

    /// The run's user message, if it is stored already.
    pub fn user_message(&self) -> Option<Message> {
        self.written().user.clone()
    }

    /// Stores the run's user message.
    pub async fn add_user_message(&self, user: &Message) -> Result<(), LedgerError> {
        self.ledger.message_added(user).await?;
        self.written().user = Some(user.clone());
        Ok(())
    }

    /// Stores a message the run produced before its end (the closing one goes with the end).
    pub async fn add_message(&self, message: &Message) -> Result<(), LedgerError> {
        self.ledger.message_added(message).await
    }

    /// Stores the CLI backend's own session id on the run's session (cli engine).
    pub async fn set_cli_session_id(&self, cli_session_id: &str) -> Result<(), LedgerError> {
        self.ledger
            .cli_session_id_set(self.session_id, cli_session_id)
            .await
    }

    /// Notes a model call of the run, for the ledger (stored with the run's end); its `seq` is
    /// its place among the run's calls.
    pub fn note_model_call(&self, mut call: crate::ModelCall) {
        let mut calls = lock(&self.calls);
        call.seq = u32::try_from(calls.len()).unwrap_or(u32::MAX);
        calls.push(call);
    }

    /// Takes the calls noted so far (a workflow's agent step hands its calls to the run's).
    pub fn take_model_calls(&self) -> Vec<crate::ModelCall> {
        std::mem::take(&mut *lock(&self.calls))
    }

    /// Marks the run as running, unless it is stored that way already, with the id of the trace
    /// it is in when runs are traced (called in the run's span).
    pub(crate) async fn mark_running(&self) -> Result<(), LedgerError> {
        let trace_id = crate::telemetry::current_trace_id();
        if self.written().running {
            // A first run, stored as running with its session: only its trace is new.
            return match trace_id {
                Some(trace_id) => {
                    self.ledger
                        .run_traced(self.session_id, self.run_id, &trace_id)
                        .await
                }
                None => Ok(()),
            };
        }
        self.ledger
            .run_started(self.session_id, self.run_id, trace_id)
            .await?;
        self.written().running = true;
        Ok(())
    }

    /// Stores the run's end with its closing message, in one commit.
    pub(crate) async fn finish(
        &self,
        outcome: &RunOutcome,
        answer: Option<&Message>,
    ) -> Result<(), LedgerError> {
        self.ledger
            .run_finished(self.session_id, self.run_id, outcome, answer)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContentBlock, FinishReason, Role};

    /// Counts the writes it is asked for.
    #[derive(Default)]
    struct Counting {
        started: Mutex<u32>,
        messages: Mutex<u32>,
    }

    #[async_trait]
    impl RunLedger for Counting {
        async fn run_started(
            &self,
            _: SessionId,
            _: RunId,
            _: Option<String>,
        ) -> Result<(), LedgerError> {
            *self.started.lock().unwrap() += 1;
            Ok(())
        }
        async fn run_finished(
            &self,
            _: SessionId,
            _: RunId,
            _: &RunOutcome,
            _: Option<&Message>,
        ) -> Result<(), LedgerError> {
            Ok(())
        }
        async fn message_added(&self, _: &Message) -> Result<(), LedgerError> {
            *self.messages.lock().unwrap() += 1;
            Ok(())
        }
        async fn cli_session_id_set(&self, _: SessionId, _: &str) -> Result<(), LedgerError> {
            Ok(())
        }
    }

    fn prompt(session_id: SessionId, run_id: RunId) -> Message {
        let blocks = vec![ContentBlock::text("q")];
        Message::new(session_id, Some(run_id), None, Role::User, blocks)
    }

    #[tokio::test]
    async fn a_run_stored_with_its_session_is_not_written_again() {
        let ledger = Arc::new(Counting::default());
        let (sid, rid) = (SessionId::new(), RunId::new());
        let user = prompt(sid, rid);
        let recorder = RunRecorder::stored_with_session(ledger.clone(), sid, rid, user.clone());
        assert_eq!(recorder.user_message().map(|m| m.id), Some(user.id));
        recorder.mark_running().await.unwrap();
        assert_eq!(*ledger.started.lock().unwrap(), 0);
        assert_eq!(*ledger.messages.lock().unwrap(), 0);
    }

    #[tokio::test]
    async fn a_later_run_is_marked_running_once_and_remembers_its_prompt() {
        let ledger = Arc::new(Counting::default());
        let (sid, rid) = (SessionId::new(), RunId::new());
        let recorder = RunRecorder::new(ledger.clone(), sid, rid);
        assert!(recorder.user_message().is_none());
        let user = prompt(sid, rid);
        recorder.add_user_message(&user).await.unwrap();
        assert_eq!(recorder.user_message().map(|m| m.id), Some(user.id));
        recorder.mark_running().await.unwrap();
        recorder.mark_running().await.unwrap();
        recorder
            .finish(&RunOutcome::new(FinishReason::Stop), None)
            .await
            .unwrap();
        assert_eq!(*ledger.started.lock().unwrap(), 1);
        assert_eq!(*ledger.messages.lock().unwrap(), 1);
    }
}
