//! The daemon's model-call meters (see `elfgate_core::meter`): every concern that watches or
//! limits model calls (budgets, rate limits, spend) registers its meter here, once at start.
//! With none registered, a model call asks nothing.

use crate::config::Config;
use elfgate_core::{Meters, ModelMeter};
use elfgate_store::Store;
use std::sync::Arc;

/// The meters of a daemon with `config`, in the order they are asked before a call: limits that
/// refuse first, so that a refused call reserves nothing elsewhere.
pub fn model_meters(
    config: &Config,
    store: &Arc<dyn Store>,
    _fleet: Option<&Arc<crate::fleet::Fleet>>,
    budgets: &Arc<crate::budgets::BudgetBook>,
    dispatcher: &Arc<elfgate_core::EngineDispatcher>,
    rate_limits: &Arc<crate::rate_limits::RateLimits>,
) -> Meters {
    let mut meters: Vec<Arc<dyn ModelMeter>> = Vec::new();
    // Tokens per minute: refuses (the run waits for the bucket), so among the first.
    if rate_limits.limits_any_tokens() {
        meters.push(Arc::new(crate::rate_limits::RateLimitMeter(
            rate_limits.clone(),
        )));
    }
    let warnings = crate::budgets::warnings::Warnings::new(
        dispatcher.clone(),
        store.clone(),
        &config.webhooks,
    );
    meters.push(Arc::new(crate::budgets::meter::BudgetMeter::new(
        budgets.clone(),
        Arc::new(warnings),
    )));
    Meters::new(meters)
}
