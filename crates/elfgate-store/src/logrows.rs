//! The rows a slice of the event log becomes: one per event, except that consecutive
//! `streamDelta` events of one run (seqs following each other) share one row in the compact form
//! of [`crate::deltas`]. Each row costs SQLite a row insert and a unique-index insert; paced
//! streams log one delta per token, so a commit carrying ten deltas of a session writes one row
//! for them instead of ten.

use crate::codec::ts;
use crate::deltas::{self, DeltaParts};
use chrono::{DateTime, Utc};
use elfgate_core::{EventPayload, EventRecord, RunId, SessionId};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

/// One row of the `events` table.
pub(crate) enum LogRow<'a> {
    /// One event, its JSON as published.
    One(&'a EventRecord),
    /// Deltas `first.seq..=last_seq` of one run, in the compact form.
    Deltas {
        first: &'a EventRecord,
        last_seq: u64,
        lines: String,
    },
}

impl LogRow<'_> {
    /// The row's (first) event: its session, seq, run, type and time are the row's.
    pub(crate) fn first(&self) -> &EventRecord {
        match self {
            LogRow::One(e) => e,
            LogRow::Deltas { first, .. } => first,
        }
    }

    /// The last seq of a merged row; None for a single event.
    pub(crate) fn last_seq(&self) -> Option<u64> {
        match self {
            LogRow::One(_) => None,
            LogRow::Deltas { last_seq, .. } => Some(*last_seq),
        }
    }

    /// The payload column: the event's JSON, or the merged deltas' lines.
    pub(crate) fn into_payload(self) -> String {
        match self {
            LogRow::One(e) => e.json.clone(),
            LogRow::Deltas { lines, .. } => lines,
        }
    }
}

const UUID_LEN: usize = uuid::fmt::Hyphenated::LENGTH;

/// The initial size of a merged row's payload.
const LINES_CAPACITY: usize = 512;

/// A delta row still open for the next delta of its session.
struct Open<'a> {
    row: usize,
    run: RunId,
    last_seq: u64,
    /// The parts of the row's first event while it is still a single event.
    first: Option<DeltaParts<'a>>,
    /// The session's and the run's ids as the row's columns spell them (`Display` of a uuid is
    /// this form), written once per row rather than once per delta.
    session_text: [u8; UUID_LEN],
    run_text: [u8; UUID_LEN],
}

/// `id` as its column spells it, on the stack.
fn uuid_text(id: &uuid::Uuid) -> [u8; UUID_LEN] {
    let mut text = [0u8; UUID_LEN];
    id.hyphenated().encode_lower(&mut text);
    text
}

/// The text of an id written by [`uuid_text`] (ASCII).
fn as_str(text: &[u8; UUID_LEN]) -> &str {
    std::str::from_utf8(text).unwrap_or("")
}

/// The rows of `events` (in order; a merged row at the place of its first event).
pub(crate) fn group<'a>(events: &'a [Arc<EventRecord>]) -> Vec<LogRow<'a>> {
    let mut rows = Vec::with_capacity(events.len());
    let mut open: HashMap<SessionId, Open<'a>> = HashMap::new();
    for e in events {
        let e: &'a EventRecord = e;
        let delta_run = e
            .run_id
            .filter(|_| matches!(e.payload, EventPayload::StreamDelta { .. }));
        let Some(run) = delta_run else {
            open.remove(&e.session_id);
            rows.push(LogRow::One(e));
            continue;
        };
        // A lookup in `shared` cost more than writing the ids, and writing them more than
        // the split itself: an open row of the same run already has them.
        let (session_text, run_text) = match open.get(&e.session_id) {
            Some(o) if o.run == run => (o.session_text, o.run_text),
            _ => (uuid_text(&e.session_id.0), uuid_text(&run.0)),
        };
        let Some(parts) = deltas::split(&e.json, e.seq, as_str(&session_text), as_str(&run_text))
        else {
            open.remove(&e.session_id);
            rows.push(LogRow::One(e));
            continue;
        };
        match open.entry(e.session_id) {
            Entry::Occupied(mut o)
                if o.get().run == run && o.get().last_seq.checked_add(1) == Some(e.seq) =>
            {
                let o = o.get_mut();
                if let Some(first_parts) = o.first.take()
                    && let LogRow::One(first) = rows[o.row]
                {
                    // Room for the usual run of a paced stream (about ten short deltas per
                    // commit) without growing the string line by line.
                    let mut lines = String::with_capacity(LINES_CAPACITY);
                    deltas::push_line(&mut lines, &first_parts);
                    rows[o.row] = LogRow::Deltas {
                        first,
                        last_seq: first.seq,
                        lines,
                    };
                }
                if let LogRow::Deltas {
                    last_seq, lines, ..
                } = &mut rows[o.row]
                {
                    deltas::push_line(lines, &parts);
                    *last_seq = e.seq;
                }
                o.last_seq = e.seq;
            }
            entry => {
                let start = Open {
                    row: rows.len(),
                    run,
                    last_seq: e.seq,
                    first: Some(parts),
                    session_text,
                    run_text,
                };
                match entry {
                    Entry::Occupied(mut o) => {
                        o.insert(start);
                    }
                    Entry::Vacant(v) => {
                        v.insert(start);
                    }
                }
                rows.push(LogRow::One(e));
            }
        }
    }
    rows
}

/// The text columns that repeat across the rows of one log transaction, each made once: a
/// session's id, a run's id and an event type recur in every event of the batch, and most events
/// share their millisecond with the one before. A shared string is bound without a copy of its
/// own; formatting and copying them for each row cost more than the rest of the row's binds.
#[derive(Default)]
pub(crate) struct SharedText {
    sessions: HashMap<SessionId, Arc<str>>,
    runs: HashMap<RunId, Arc<str>>,
    types: HashMap<String, Arc<str>>,
    last_ts: Option<(DateTime<Utc>, Arc<str>)>,
}

impl SharedText {
    pub(crate) fn session(&mut self, id: SessionId) -> Arc<str> {
        self.sessions
            .entry(id)
            .or_insert_with(|| id.to_string().into())
            .clone()
    }

    pub(crate) fn run(&mut self, id: RunId) -> Arc<str> {
        self.runs
            .entry(id)
            .or_insert_with(|| id.to_string().into())
            .clone()
    }

    pub(crate) fn event_type(&mut self, t: &str) -> Arc<str> {
        if let Some(s) = self.types.get(t) {
            return s.clone();
        }
        let s: Arc<str> = t.into();
        self.types.insert(t.to_string(), s.clone());
        s
    }

    pub(crate) fn ts(&mut self, t: &DateTime<Utc>) -> Arc<str> {
        let millis = t.timestamp_millis();
        match &self.last_ts {
            Some((last, s)) if last.timestamp_millis() == millis => s.clone(),
            _ => {
                let s: Arc<str> = ts(t).into();
                self.last_ts = Some((*t, s.clone()));
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfgate_core::{Delta, DeltaKind};

    fn delta(session: SessionId, seq: u64, run: RunId) -> Arc<EventRecord> {
        let payload = EventPayload::StreamDelta {
            delta: Delta {
                kind: DeltaKind::Text,
                text: format!("tok{seq} "),
                signature: None,
            },
        };
        Arc::new(EventRecord::build(session, seq, Some(run), payload))
    }

    fn other(session: SessionId, seq: u64, run: RunId) -> Arc<EventRecord> {
        let payload = EventPayload::Processing {
            message: "note".into(),
        };
        Arc::new(EventRecord::build(session, seq, Some(run), payload))
    }

    /// (first seq, last seq) of each row.
    fn shape(rows: &[LogRow<'_>]) -> Vec<(u64, Option<u64>)> {
        rows.iter().map(|r| (r.first().seq, r.last_seq())).collect()
    }

    #[test]
    fn consecutive_deltas_of_a_run_share_a_row_and_nothing_else_does() {
        let (a, b) = (SessionId::new(), SessionId::new());
        let (ra, rb, ra2) = (RunId::new(), RunId::new(), RunId::new());
        let events = vec![
            delta(a, 1, ra),
            delta(b, 1, rb),
            delta(a, 2, ra),
            delta(b, 2, rb),
            delta(a, 3, ra),
            // Another event of the session ends a's row; b's goes on.
            other(a, 4, ra),
            delta(b, 3, rb),
            delta(a, 5, ra),
            // A gap in the seqs (the event in between is in another slice) starts a new row.
            delta(a, 7, ra),
            delta(a, 8, ra),
            // Another run starts a new row.
            delta(a, 9, ra2),
            delta(b, 4, rb),
        ];
        let rows = group(&events);
        assert_eq!(
            shape(&rows),
            [
                (1, Some(3)),
                (1, Some(4)),
                (4, None),
                (5, None),
                (7, Some(8)),
                (9, None),
            ]
        );
        // Each merged row reads back as its events, byte for byte.
        for row in rows {
            if let Some(last) = row.last_seq() {
                let first = row.first().clone();
                let run = first.run_id.unwrap();
                let got = deltas::expand(
                    &first.session_id.to_string(),
                    &run.to_string(),
                    first.seq,
                    last,
                    &row.into_payload(),
                    0,
                )
                .unwrap();
                let want: Vec<(u64, String)> = events
                    .iter()
                    .filter(|e| e.session_id == first.session_id && e.run_id == Some(run))
                    .filter(|e| (first.seq..=last).contains(&e.seq))
                    .map(|e| (e.seq, e.json.clone()))
                    .collect();
                assert_eq!(got, want);
            }
        }
    }
}
