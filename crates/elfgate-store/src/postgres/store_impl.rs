//! [`Store`] and [`RunLedger`] for [`PgStore`]: each write a transaction on the pool, reads on
//! the pool, the event log through the log writer.

use super::PgStore;
use super::statements::{self, SessionColumn};
use crate::codec::ts;
use crate::{SessionStore, Store, StoreError, StoreResult};
use async_trait::async_trait;
use chrono::Utc;
use elfgate_core::{LedgerError, Message, RunId, RunLedger, RunOutcome, SessionId};
use sqlx::PgConnection;

fn ledger(e: StoreError) -> LedgerError {
    LedgerError(e.report(), e.is_transient())
}

/// A fleet node's lease checks around the writes below; nothing on a single node.
impl PgStore {
    /// Claims the session's lease in `tx` (a fleet node): the epoch to record once committed,
    /// and when the claim was sent (the lease lasts from no later than that).
    pub(super) async fn claim(
        &self,
        tx: &mut PgConnection,
        session: SessionId,
    ) -> StoreResult<Option<(i64, tokio::time::Instant)>> {
        match &self.fleet {
            Some(m) => {
                let sent = tokio::time::Instant::now();
                Ok(Some((m.claim(tx, session).await?, sent)))
            }
            None => Ok(None),
        }
    }

    pub(super) fn claimed(&self, session: SessionId, lease: Option<(i64, tokio::time::Instant)>) {
        if let (Some(m), Some((epoch, sent))) = (&self.fleet, lease) {
            m.claimed(session, epoch, sent);
        }
    }

    /// Refuses a write for a session whose lease this node lost.
    pub(super) async fn fence_check(
        &self,
        tx: &mut PgConnection,
        session: SessionId,
    ) -> StoreResult<()> {
        match &self.fleet {
            Some(m) => m.check(tx, session).await,
            None => Ok(()),
        }
    }

    /// Refuses to delete a session another live node is running.
    pub(super) async fn refuse_if_run_elsewhere(
        &self,
        tx: &mut PgConnection,
        session: SessionId,
    ) -> StoreResult<()> {
        let Some(m) = &self.fleet else {
            return Ok(());
        };
        let owner: Option<String> = sqlx::query_scalar(
            "SELECT node_id FROM session_leases WHERE session_id = $1 AND expires_at > now() \
             FOR UPDATE",
        )
        .bind(session.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        match owner {
            Some(node) if node != m.me.node_id => Err(StoreError::OwnedElsewhere {
                session: session.to_string(),
                node,
            }),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl RunLedger for PgStore {
    async fn run_started(
        &self,
        session_id: SessionId,
        run_id: RunId,
        trace_id: Option<String>,
    ) -> Result<(), LedgerError> {
        let at = ts(&Utc::now());
        let run = async {
            let mut tx = self.pool.begin().await?;
            self.fence_check(&mut tx, session_id).await?;
            statements::run_started(&mut tx, session_id, run_id, trace_id.as_deref(), &at).await?;
            tx.commit().await?;
            Ok::<(), StoreError>(())
        };
        run.await.map_err(ledger)
    }

    async fn run_traced(
        &self,
        session_id: SessionId,
        run_id: RunId,
        trace_id: &str,
    ) -> Result<(), LedgerError> {
        let run = async {
            let mut tx = self.pool.begin().await?;
            self.fence_check(&mut tx, session_id).await?;
            sqlx::query("UPDATE runs SET trace_id = $1 WHERE id = $2")
                .bind(trace_id)
                .bind(run_id.to_string())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok::<(), StoreError>(())
        };
        run.await.map_err(ledger)
    }

    async fn run_finished(
        &self,
        session_id: SessionId,
        run_id: RunId,
        outcome: &RunOutcome,
        answer: Option<&Message>,
    ) -> Result<(), LedgerError> {
        let at = ts(&Utc::now());
        let run = async {
            let mut tx = self.pool.begin().await?;
            self.fence_check(&mut tx, session_id).await?;
            if let Some(m) = answer {
                statements::insert_message(&mut tx, m).await?;
            }
            statements::run_finished(
                &mut tx,
                session_id,
                run_id,
                outcome,
                self.record_run_ends,
                &at,
            )
            .await?;
            tx.commit().await?;
            Ok::<(), StoreError>(())
        };
        run.await.map_err(ledger)
    }

    async fn message_added(&self, message: &Message) -> Result<(), LedgerError> {
        self.insert_message(message).await.map_err(ledger)
    }

    async fn cli_session_id_set(
        &self,
        session_id: SessionId,
        cli_session_id: &str,
    ) -> Result<(), LedgerError> {
        let at = ts(&Utc::now());
        let run = async {
            let mut tx = self.pool.begin().await?;
            self.fence_check(&mut tx, session_id).await?;
            statements::set_session_column(
                &mut tx,
                session_id,
                SessionColumn::CliSessionId,
                cli_session_id,
                &at,
            )
            .await?;
            tx.commit().await?;
            Ok::<(), StoreError>(())
        };
        run.await.map_err(ledger)
    }
}

#[async_trait]
impl Store for PgStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
