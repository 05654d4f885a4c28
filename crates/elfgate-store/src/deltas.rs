//! The compact form of a run of consecutive `streamDelta` events stored as one log row.
//!
//! A delta's envelope is `{"seq":N,"sessionId":"S","runId":"R","ts":"T","type":"streamDelta",
//! "delta":{"kind":"K","text":"X"}}`: everything but the seq, the time, the kind and the text is
//! the same for every delta of a run, and the seq of a run of consecutive deltas follows from the
//! first. A merged row keeps, per event, one line: the 24-byte time, `t` (text) or `h`
//! (thinking), the text exactly as escaped in the JSON, and `\n` (which JSON escapes inside
//! strings, so it cannot occur in the text). The session and run come from the row's columns, the
//! seqs from its first and last seq.
//!
//! An event is merged only if its JSON is exactly that template ([`split`] checks every byte that
//! [`join`] writes back), so reading a merged row gives each event's JSON byte for byte.

use elfgate_core::decimal;

use crate::StoreError;

const SEQ: &str = "{\"seq\":";
const SESSION: &str = ",\"sessionId\":\"";
const RUN: &str = "\",\"runId\":\"";
const TS: &str = "\",\"ts\":\"";
const TYPE: &str = "\",\"type\":\"streamDelta\",\"delta\":{\"kind\":\"";
const TEXT: &str = "text\",\"text\":\"";
const THINKING: &str = "thinking\",\"text\":\"";
const END: &str = "\"}}";
/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
const TS_LEN: usize = 24;

/// What distinguishes one delta of a run from the next: its time, kind and escaped text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeltaParts<'a> {
    ts: &'a str,
    thinking: bool,
    text: &'a str,
}

/// The parts of a `streamDelta` event's JSON, if it is exactly the template for this seq,
/// session and run (their text as stored in the row's columns); None otherwise (the event is then
/// stored as a row of its own).
pub(crate) fn split<'a>(
    json: &'a str,
    seq: u64,
    session: &str,
    run: &str,
) -> Option<DeltaParts<'a>> {
    let mut digits = [0u8; 20];
    let rest = json
        .strip_prefix(SEQ)?
        .strip_prefix(decimal::digits_str(seq, &mut digits))?
        .strip_prefix(SESSION)?
        .strip_prefix(session)?
        .strip_prefix(RUN)?
        .strip_prefix(run)?
        .strip_prefix(TS)?;
    let ts = rest.get(..TS_LEN)?;
    if ts.bytes().any(|b| b == b'"' || b == b'\n') {
        return None;
    }
    let rest = rest[TS_LEN..].strip_prefix(TYPE)?;
    let (thinking, rest) = match rest.strip_prefix(TEXT) {
        Some(r) => (false, r),
        None => (true, rest.strip_prefix(THINKING)?),
    };
    let text = rest.strip_suffix(END)?;
    if text.contains('\n') {
        return None;
    }
    Some(DeltaParts { ts, thinking, text })
}

/// Appends one event's line to a merged row's payload.
pub(crate) fn push_line(out: &mut String, parts: &DeltaParts<'_>) {
    out.reserve(TS_LEN + parts.text.len() + 2);
    out.push_str(parts.ts);
    out.push(if parts.thinking { 'h' } else { 't' });
    out.push_str(parts.text);
    out.push('\n');
}

/// The event JSON of `parts` at `seq` (the inverse of [`split`]).
pub(crate) fn join(seq: u64, session: &str, run: &str, parts: &DeltaParts<'_>) -> String {
    let mut digits = [0u8; 20];
    let digits = decimal::digits_str(seq, &mut digits);
    let mut out = String::with_capacity(
        SEQ.len()
            + 20
            + SESSION.len()
            + session.len()
            + RUN.len()
            + run.len()
            + TS.len()
            + TS_LEN
            + TYPE.len()
            + THINKING.len()
            + parts.text.len()
            + END.len(),
    );
    out.push_str(SEQ);
    out.push_str(digits);
    out.push_str(SESSION);
    out.push_str(session);
    out.push_str(RUN);
    out.push_str(run);
    out.push_str(TS);
    out.push_str(parts.ts);
    out.push_str(TYPE);
    out.push_str(if parts.thinking { THINKING } else { TEXT });
    out.push_str(parts.text);
    out.push_str(END);
    out
}

/// The events of a merged row (`first..=last`), as `(seq, JSON)`, skipping those at or below
/// `after`.
pub(crate) fn expand(
    session: &str,
    run: &str,
    first: u64,
    last: u64,
    payload: &str,
    after: u64,
) -> Result<Vec<(u64, String)>, StoreError> {
    let corrupt = || StoreError::Corrupt(format!("merged delta row {first}..={last}"));
    let body = payload.strip_suffix('\n').ok_or_else(corrupt)?;
    let count = last
        .checked_sub(first)
        .and_then(|d| d.checked_add(1))
        .ok_or_else(corrupt)?;
    let mut out = Vec::with_capacity(last.saturating_sub(after).min(count) as usize);
    let mut lines = 0u64;
    for line in body.split('\n') {
        if lines == count {
            return Err(corrupt());
        }
        let seq = first + lines;
        lines += 1;
        if seq <= after {
            continue;
        }
        let ts = line.get(..TS_LEN).ok_or_else(corrupt)?;
        let thinking = match line.get(TS_LEN..TS_LEN + 1) {
            Some("t") => false,
            Some("h") => true,
            _ => return Err(corrupt()),
        };
        let text = &line[TS_LEN + 1..];
        out.push((
            seq,
            join(seq, session, run, &DeltaParts { ts, thinking, text }),
        ));
    }
    if lines != count {
        return Err(corrupt());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfgate_core::{Delta, DeltaKind, EventPayload, EventRecord, RunId, SessionId};

    fn delta(kind: DeltaKind, text: &str) -> EventPayload {
        EventPayload::StreamDelta {
            delta: Delta {
                kind,
                text: text.into(),
                signature: None,
            },
        }
    }

    #[test]
    fn every_delta_the_bus_builds_splits_and_joins_back_byte_for_byte() {
        let (session, run) = (SessionId::new(), RunId::new());
        let (s, r) = (session.to_string(), run.to_string());
        let texts = ["tok0 ", "", "a \"quoted\"\nline\t\u{1}é😀\\", "}}\"}}"];
        for (i, text) in texts.iter().enumerate() {
            for kind in [DeltaKind::Text, DeltaKind::Thinking] {
                let seq = [1, 9, 10, 4097, u64::MAX][i % 5];
                let e = EventRecord::build(session, seq, Some(run), delta(kind, text));
                let parts = split(&e.json, seq, &s, &r).expect("splits");
                assert_eq!(join(seq, &s, &r, &parts), e.json);
            }
        }
    }

    #[test]
    fn anything_but_the_exact_template_is_not_split() {
        let (session, run) = (SessionId::new(), RunId::new());
        let (s, r) = (session.to_string(), run.to_string());
        let e = EventRecord::build(session, 7, Some(run), delta(DeltaKind::Text, "x"));
        assert!(split(&e.json, 8, &s, &r).is_none(), "another seq");
        assert!(split(&e.json, 7, &r, &r).is_none(), "another session");
        assert!(split(&e.json, 7, &s, &s).is_none(), "another run");
        let other = EventRecord::build(session, 7, Some(run), EventPayload::SessionCreated {});
        assert!(split(&other.json, 7, &s, &r).is_none(), "another type");
        let no_run = EventRecord::build(session, 7, None, delta(DeltaKind::Text, "x"));
        assert!(split(&no_run.json, 7, &s, &r).is_none(), "no run");
        let raw_newline = e.json.replace("\"x\"", "\"a\nb\"");
        assert!(split(&raw_newline, 7, &s, &r).is_none(), "a raw newline");
        // A thinking delta that carries the provider's signature: whatever the parts hold, they
        // join back into the same bytes, so the signature is replayed as it was published.
        let signed = EventPayload::StreamDelta {
            delta: Delta {
                kind: DeltaKind::Thinking,
                text: String::new(),
                signature: Some("sig".into()),
            },
        };
        let signed = EventRecord::build(session, 7, Some(run), signed);
        if let Some(parts) = split(&signed.json, 7, &s, &r) {
            assert_eq!(join(7, &s, &r, &parts), signed.json);
        }
    }

    #[test]
    fn a_merged_row_expands_into_its_events_from_any_cursor() {
        let (session, run) = (SessionId::new(), RunId::new());
        let (s, r) = (session.to_string(), run.to_string());
        let events: Vec<EventRecord> = (5..=9)
            .map(|seq| {
                let kind = if seq == 6 {
                    DeltaKind::Thinking
                } else {
                    DeltaKind::Text
                };
                EventRecord::build(session, seq, Some(run), delta(kind, &format!("t{seq}\n")))
            })
            .collect();
        let mut payload = String::new();
        for e in &events {
            push_line(&mut payload, &split(&e.json, e.seq, &s, &r).unwrap());
        }
        for after in 0..=10 {
            let got = expand(&s, &r, 5, 9, &payload, after).unwrap();
            let want: Vec<(u64, String)> = events
                .iter()
                .filter(|e| e.seq > after)
                .map(|e| (e.seq, e.json.clone()))
                .collect();
            assert_eq!(got, want, "after {after}");
        }
        // A row whose lines do not match its seq range is reported, not guessed at.
        assert!(expand(&s, &r, 5, 10, &payload, 0).is_err());
        assert!(expand(&s, &r, 5, 8, &payload, 0).is_err());
        assert!(expand(&s, &r, 5, 9, "garbage", 0).is_err());
        assert!(expand(&s, &r, 5, 5, "short\n", 0).is_err());
    }
}
