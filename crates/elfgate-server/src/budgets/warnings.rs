//! Announcing a passed soft limit (`softUsd`): a `budgetWarning` event on the session whose call
//! passed it, and a webhook delivery (`type: "budget.warning"`) to every `[[webhooks.targets]]`
//! target, signed and retried like the run ends' (docs/workflows.md, "Webhooks when runs end").
//! Once per budget and period, whichever node's call passes it (claimed in the store).

use super::meter::WarningSink;
use crate::config::WebhooksConfig;
use async_trait::async_trait;
use chrono::Utc;
use elfgate_core::{BudgetNotice, CallPlan, EngineDispatcher, EventPayload};
use elfgate_store::Store;
use serde_json::json;
use std::sync::Arc;

/// Where the warnings go.
pub struct Warnings {
    dispatcher: Arc<EngineDispatcher>,
    store: Arc<dyn Store>,
    /// Each target's name and URL.
    targets: Vec<(String, String)>,
    max_pending: u32,
}

impl Warnings {
    /// Warnings on the sessions' streams of `dispatcher`, and to the targets of `webhooks`.
    pub fn new(
        dispatcher: Arc<EngineDispatcher>,
        store: Arc<dyn Store>,
        webhooks: &WebhooksConfig,
    ) -> Self {
        Warnings {
            dispatcher,
            store,
            targets: webhooks
                .targets
                .iter()
                .map(|t| (t.name.clone(), t.url.clone()))
                .collect(),
            max_pending: webhooks.max_pending,
        }
    }
}

#[async_trait]
impl WarningSink for Warnings {
    async fn warn(&self, plan: &CallPlan, budget: &BudgetNotice) {
        if let Some(bus) = self.dispatcher.hub().get(plan.session_id) {
            bus.publish(
                Some(plan.run_id),
                EventPayload::BudgetWarning {
                    budget: budget.clone(),
                },
            )
            .await;
        }
        let now = Utc::now();
        for (target, url) in &self.targets {
            let id = format!("whd_{}", uuid::Uuid::now_v7().simple());
            let body = json!({
                "id": id,
                "type": "budget.warning",
                "createdAt": elfgate_core::timefmt::rfc3339_millis(&now),
                "sessionId": plan.session_id,
                "runId": plan.run_id,
                "budget": budget,
            });
            let delivery = crate::webhooks::pending(id, target, url.clone(), body, now);
            match self
                .store
                .enqueue_delivery(&delivery, self.max_pending)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(target = %target, "a budget warning's webhook was dropped: the target's queue is full");
                }
                Err(e) => {
                    tracing::warn!(target = %target, error = %e, "cannot queue a budget warning's webhook");
                }
            }
        }
    }
}
