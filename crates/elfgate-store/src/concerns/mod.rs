//! What the daemon stores, one trait per concern: sessions and their messages, runs, the audit
//! of refused tool calls, the event log, workflows, webhook deliveries, inbound hooks'
//! delivery ids, API keys, the access audit and budgets. [`Store`](crate::Store) is all of them together; code that needs one concern
//! takes that trait alone (a `dyn Store` upcasts to any of them).

mod access_audit;
mod budgets;
mod deliveries;
mod event_log;
mod keys;
mod runs;
mod sessions;
mod spend;
mod workflows;

pub use access_audit::{AccessAudit, AccessEvent, StoredAccessEvent};
pub use budgets::{BudgetChange, BudgetStore, Reservation, StoredBudget};
pub use deliveries::{
    DeliveryStatus, DeliveryStore, InboundHookStore, RunEndNotice, WebhookDelivery,
};
pub use event_log::{EventLog, StoredEvent};
pub use keys::{KeyChange, KeyStore, StoredKey};
pub use runs::{AuditLog, RecoveredRun, RunStore};
pub use sessions::{FIRST_PROMPT_CHARS, SessionPage, SessionReads, SessionStore, SessionsSeen};
pub use spend::{SpendGroupBy, SpendQuery, SpendStore, SpendSum};
pub use workflows::{StoredWorkflow, WorkflowStore, WorkflowWrite};
