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
    _config: &Config,
    _store: &Arc<dyn Store>,
    _fleet: Option<&Arc<crate::fleet::Fleet>>,
) -> Meters {
    let meters: Vec<Arc<dyn ModelMeter>> = Vec::new();
    Meters::new(meters)
}
