//! The workflows a run's end may start, held in memory so that a run's end does not read the
//! store: refreshed by the scheduler when the workflows' revision changed and by this node's
//! workflow writes (see workflow_schedule.rs and workflow_runs.rs).

use elfgate_core::RunEnded;
use elfgate_store::StoredWorkflow;
use elfgate_workflow::RunEndTrigger;

/// The workflows with an `onRunEnd` trigger, by name, as last read from the store: by the
/// scheduler when the workflows changed (so another node's changes arrive within a tick) and by
/// this node's workflow writes at once. A run's end then looks here, not in the store.
#[derive(Default)]
pub struct RunEndTriggers(std::sync::RwLock<Vec<(String, RunEndTrigger)>>);

impl RunEndTriggers {
    pub(crate) fn set(&self, workflows: &[StoredWorkflow]) {
        let triggers = workflows
            .iter()
            .filter_map(|w| {
                let t = w.definition.get("onRunEnd")?;
                Some((w.name.clone(), serde_json::from_value(t.clone()).ok()?))
            })
            .collect();
        if let Ok(mut held) = self.0.write() {
            *held = triggers;
        }
    }

    pub(crate) fn matching(&self, ended: &RunEnded) -> Vec<String> {
        self.0
            .read()
            .map(|held| {
                held.iter()
                    .filter(|(_, t)| t.matches(ended.engine, ended.finish_reason))
                    .map(|(name, _)| name.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}
