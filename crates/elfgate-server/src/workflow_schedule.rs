//! The scheduler that fires workflows' schedules: every node looks for due fire times and claims
//! each in the store before it runs it, so that a fire time runs once, on one node, across
//! restarts (see docs/workflows.md, "Schedules"). The schedules are parsed once and kept in
//! memory with each one's next fire time; a tick asks the store only for the workflows' revision
//! (two counts), and reads the definitions again only when that changed, which is how a change
//! made on another node of a fleet arrives.

use crate::state::AppState;
use crate::workflow_runs::{Trigger, start};
use chrono::{DateTime, Utc};
use elfgate_store::StoredWorkflow;
use elfgate_workflow::{Cron, Missed, Schedule};
use serde_json::Map;
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

/// How often the scheduler looks for due fire times.
const TICK: Duration = Duration::from_millis(250);

/// A fire time first seen later than this after it passed was missed (the daemon was down): the
/// schedule's `missed` policy decides.
const LATE: Duration = Duration::from_secs(60);

/// A schedule's next fire time, as far as the scheduler knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Not computed yet (just read): look for a due fire time now.
    Unknown,
    /// Nothing is due before this.
    At(DateTime<Utc>),
    /// It never fires (a definition stored before such schedules were refused).
    Never,
}

/// One workflow's schedule, parsed.
struct Scheduled {
    stored: StoredWorkflow,
    schedule: Schedule,
    cron: Cron,
    tz: chrono_tz::Tz,
    next: Next,
}

/// The schedules of the workflows as last read, and the revision they were read at.
#[derive(Default)]
struct Schedules {
    revision: Option<(i64, i64)>,
    entries: Vec<Scheduled>,
}

impl Schedules {
    /// Reads the workflows again when their revision changed (and then the run-end triggers
    /// too); each schedule that did not change keeps what is known of its next fire time.
    async fn refresh(&mut self, state: &AppState) {
        let revision = match state.store.workflows_revision().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e.report(), "the scheduler cannot read the workflows' revision");
                return;
            }
        };
        if self.revision == Some(revision) {
            return;
        }
        let workflows = match state.store.list_workflows().await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e.report(), "the scheduler cannot list the workflows");
                return;
            }
        };
        state.run_end_triggers.set(&workflows);
        let mut known: HashMap<(String, u32), Next> = self
            .entries
            .drain(..)
            .map(|e| ((e.stored.name, e.stored.version), e.next))
            .collect();
        self.entries = workflows
            .into_iter()
            .filter_map(|stored| {
                let schedule: Schedule =
                    serde_json::from_value(stored.definition.get("schedule")?.clone()).ok()?;
                let (cron, tz) = parse(&schedule)?;
                let next = known
                    .remove(&(stored.name.clone(), stored.version))
                    .unwrap_or(Next::Unknown);
                Some(Scheduled {
                    stored,
                    schedule,
                    cron,
                    tz,
                    next,
                })
            })
            .collect();
        self.revision = Some(revision);
    }
}

/// A schedule's expression and time zone (None: they do not parse, which the checks at create
/// rule out).
fn parse(schedule: &Schedule) -> Option<(Cron, chrono_tz::Tz)> {
    let cron = elfgate_workflow::validate::check_cron(&schedule.cron).ok()?;
    let tz = match &schedule.timezone {
        Some(tz) => chrono_tz::Tz::from_str(tz).ok()?,
        None => chrono_tz::UTC,
    };
    Some((cron, tz))
}

/// The first fire time after `now`'s second.
fn next_after(cron: &Cron, tz: chrono_tz::Tz, now: DateTime<Utc>) -> Next {
    let now = chrono::SubsecRound::trunc_subsecs(now, 0);
    match cron.find_next_occurrence(&now.with_timezone(&tz), false) {
        Ok(t) => Next::At(t.with_timezone(&Utc)),
        Err(_) => Next::Never,
    }
}

/// The latest fire time at or before `now`.
fn latest_fire(cron: &Cron, tz: chrono_tz::Tz, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    // On the second: the expression's finest unit (croner keeps the fraction it is given).
    let now = chrono::SubsecRound::trunc_subsecs(now, 0);
    cron.find_previous_occurrence(&now.with_timezone(&tz), true)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The fire time due at `now` of a schedule stored at `since` (a version fires only the times
/// after it was stored), and whether it was missed (first seen more than [`LATE`] after it).
fn due(
    cron: &Cron,
    tz: chrono_tz::Tz,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<(DateTime<Utc>, bool)> {
    let due = latest_fire(cron, tz, now).filter(|due| *due >= since)?;
    Some((due, (now - due).to_std().is_ok_and(|late| late > LATE)))
}

/// Runs the scheduler until the daemon stops taking work.
pub async fn schedule(state: AppState) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut schedules = Schedules::default();
    loop {
        tick.tick().await;
        if state.is_shutting_down() {
            return;
        }
        schedules.refresh(&state).await;
        fire_due(&state, &mut schedules.entries, Utc::now()).await;
    }
}

/// Starts the run of every schedule's fire time that is due and not yet claimed; a schedule
/// whose next fire time has not come costs a comparison.
async fn fire_due(state: &AppState, entries: &mut [Scheduled], now: DateTime<Utc>) {
    for entry in entries {
        match entry.next {
            Next::Never => continue,
            Next::At(next) if now < next => continue,
            // Just read: one that never fires is known as such without a search for its
            // latest fire time (back to year 1).
            Next::Unknown if next_after(&entry.cron, entry.tz, now) == Next::Never => {
                entry.next = Next::Never;
                continue;
            }
            _ => {}
        }
        let Some((due, missed)) = due(&entry.cron, entry.tz, entry.stored.created_at, now) else {
            entry.next = next_after(&entry.cron, entry.tz, now);
            continue;
        };
        let name = entry.stored.name.clone();
        match state.store.claim_workflow_fire(&name, due).await {
            Ok(true) => {}
            Ok(false) => {
                entry.next = next_after(&entry.cron, entry.tz, now);
                continue;
            }
            Err(e) => {
                // Tried again at the next tick.
                tracing::warn!(workflow = %name, error = %e.report(), "cannot claim a fire time");
                continue;
            }
        }
        entry.next = next_after(&entry.cron, entry.tz, now);
        if missed && entry.schedule.missed == Missed::Skip {
            tracing::info!(workflow = %name, at = %due, "skipped a fire time missed while no node ran");
            continue;
        }
        match start(
            state,
            entry.stored.clone(),
            Map::new(),
            Trigger::Schedule(due),
        )
        .await
        {
            Ok(started) => tracing::info!(
                workflow = %name,
                at = %due,
                session_id = %started.session_id,
                "started a scheduled run"
            ),
            Err(e) => {
                tracing::warn!(workflow = %name, at = %due, error = %e, "a scheduled run could not start");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    fn at_seven(timezone: Option<&str>) -> (Cron, chrono_tz::Tz) {
        parse(&Schedule {
            cron: "0 0 7 * * *".into(),
            timezone: timezone.map(str::to_string),
            missed: Missed::Skip,
        })
        .unwrap()
    }

    #[test]
    fn a_fire_time_is_in_the_schedules_time_zone_and_late_ones_are_missed() {
        let (cron, berlin) = at_seven(Some("Europe/Berlin"));
        let since = t("2026-12-01T00:00:00Z");
        // 07:00 in Berlin is 06:00 UTC in December.
        assert_eq!(
            due(&cron, berlin, since, t("2026-12-06T06:00:30.250Z")),
            Some((t("2026-12-06T06:00:00Z"), false))
        );
        assert_eq!(
            due(&cron, berlin, since, t("2026-12-06T06:05:00Z")),
            Some((t("2026-12-06T06:00:00Z"), true))
        );
        let (cron_utc, utc) = at_seven(None);
        assert_eq!(
            due(&cron_utc, utc, since, t("2026-12-06T06:30:00Z")),
            Some((t("2026-12-05T07:00:00Z"), true))
        );
        // A version stored after the latest fire time waits for the next.
        assert_eq!(
            due(
                &cron,
                berlin,
                t("2026-12-06T06:00:01Z"),
                t("2026-12-06T06:00:30Z")
            ),
            None
        );
        // The next fire time comes after the current second, never at it.
        assert_eq!(
            next_after(&cron, berlin, t("2026-12-06T06:00:00.400Z")),
            Next::At(t("2026-12-07T06:00:00Z"))
        );
    }

    #[test]
    fn a_schedule_that_never_fires_is_known_as_such() {
        let (cron, tz) = parse(&Schedule {
            cron: "0 0 0 31 2 *".into(),
            timezone: None,
            missed: Missed::Skip,
        })
        .unwrap();
        assert_eq!(
            next_after(&cron, tz, t("2026-12-06T06:00:00Z")),
            Next::Never
        );
    }
}
