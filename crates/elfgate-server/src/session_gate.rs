//! Keeps prompts and the deletion of a session apart.
//!
//! A prompt checks that its session exists and is not being deleted, then stores its run and
//! has it admitted; a DELETE marks the session, stops what runs in it, and deletes it. Without a
//! lock, a prompt that passed its check before the mark could store and start its run after the
//! DELETE had looked for runs to stop: a run on a deleted session. A prompt holds its session's
//! gate shared from its check until its run is admitted (or withdrawn); a DELETE takes the gate
//! alone only to set the mark. So every prompt is either admitted before the mark (and the DELETE
//! stops its run and waits for it) or checks after it (and finds the mark, or no session).

use crate::keyed_lock::{KeyedGuard, KeyedLocks};
use dashmap::DashSet;
use elfgate_core::SessionId;

/// The gates of the sessions in use and the sessions being deleted.
#[derive(Default)]
pub struct SessionGates {
    gates: KeyedLocks<SessionId>,
    deleting: DashSet<SessionId>,
}

/// Held by a prompt between its checks and the admission of its run.
pub type PromptPass<'a> = KeyedGuard<'a, SessionId>;

/// A session marked as being deleted; the mark goes when this is dropped (deleted or not).
pub struct DeleteMark<'a> {
    gates: &'a SessionGates,
    session_id: SessionId,
}

impl SessionGates {
    /// Lets a prompt in, unless the session is being deleted. Waits while a DELETE sets its mark.
    pub async fn enter(&self, session_id: SessionId) -> Option<PromptPass<'_>> {
        let pass = self.gates.shared(session_id).await;
        (!self.deleting.contains(&session_id)).then_some(pass)
    }

    /// Marks the session as being deleted once no prompt is between its checks and its run's
    /// admission. None when it is already marked.
    pub async fn begin_delete(&self, session_id: SessionId) -> Option<DeleteMark<'_>> {
        let _alone = self.gates.exclusive(session_id).await;
        self.deleting.insert(session_id).then_some(DeleteMark {
            gates: self,
            session_id,
        })
    }
}

impl Drop for DeleteMark<'_> {
    fn drop(&mut self) {
        self.gates.deleting.remove(&self.session_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn a_delete_waits_for_prompts_in_flight_and_shuts_out_later_ones() {
        let gates = SessionGates::default();
        let id = SessionId::new();
        let prompt = gates.enter(id).await.expect("open");
        let mut delete = Box::pin(gates.begin_delete(id));
        assert!(
            (&mut delete).now_or_never().is_none(),
            "the mark waits for the prompt"
        );
        drop(prompt);
        let mark = delete.await.expect("marked");
        assert!(gates.enter(id).await.is_none(), "no prompt while marked");
        assert!(
            gates.begin_delete(id).await.is_none(),
            "one delete at a time"
        );
        assert!(
            gates.enter(SessionId::new()).await.is_some(),
            "other sessions"
        );
        drop(mark);
        assert!(gates.enter(id).await.is_some(), "unmarked when dropped");
    }
}
