//! The SSE stream of a session: the events after the client's cursor and then live ones, with no
//! gap and no duplicate, as [`crate::follower`] hands them on; here they are only framed
//! (`id: SEQ\nevent: TYPE\ndata: JSON\n\n`), gathered into large writes, and a `reset`, the
//! pending permission requests the cursor had passed and keep-alive comments are said.

use crate::error::ApiError;
use crate::event_frame::push_frame;
use crate::follower::{Event, Follower, Next, client};
use crate::state::AppState;
use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use elfgate_core::{EventPayload, SessionId, Watching};
use futures_util::stream;
use std::collections::VecDeque;
use std::convert::Infallible;

/// Frames are gathered into writes of up to this many bytes when several are ready.
const COALESCE_BYTES: usize = 32 * 1024;

fn reset_frame(session_id: SessionId, from_seq: u64) -> Bytes {
    let reset = EventPayload::Reset { from_seq };
    // Not a logged event: it carries no id, so the client's Last-Event-ID stays at what it has.
    Bytes::from(format!(
        "event: {}\ndata: {}\n\n",
        reset.type_name(),
        reset.unlogged_json(session_id)
    ))
}

/// Appends the frame of `e` to `out`.
fn push_event(out: &mut BytesMut, e: &Event) {
    match e {
        Event::Live(e) => push_frame(out, e.seq, e.event_type(), &e.json),
        Event::Logged(e) => push_frame(out, e.seq, e.event_type.as_str(), &e.json),
        Event::Relayed(f) => out.extend_from_slice(&f.frame),
    }
}

/// Frames `first` and the events `more` has at hand after it, up to [`COALESCE_BYTES`], so that a
/// burst leaves in one write; with `until_complete`, stops after a `complete`. Returns the
/// frames and whether a `complete` ended them.
fn gather(
    first: &Event,
    until_complete: bool,
    mut more: impl FnMut() -> Option<Event>,
) -> (Bytes, bool) {
    let mut out = BytesMut::new();
    push_event(&mut out, first);
    if until_complete && first.is_complete() {
        return (out.freeze(), true);
    }
    while out.len() < COALESCE_BYTES {
        let Some(e) = more() else {
            break;
        };
        push_event(&mut out, &e);
        if until_complete && e.is_complete() {
            return (out.freeze(), true);
        }
    }
    (out.freeze(), false)
}

struct Stream {
    /// The client's cursor when it connected.
    from: u64,
    /// Frames outside the log to send next: pending permission requests re-announced after the
    /// replay, or a `reset`.
    unlogged: VecDeque<Bytes>,
    /// End the stream after the first `complete` sent (`?until=complete`).
    until_complete: bool,
    done: bool,
    /// Counts this client among the session's watchers while the stream lives.
    _watching: Watching,
    follower: Follower,
}

impl Stream {
    /// Pending permission requests whose `permissionRequest` event the client's cursor had already
    /// passed (so the replay did not carry it) are sent again, as frames without an `id` so that
    /// the client's Last-Event-ID does not move back. Requests replayed or published later reach the
    /// client as ordinary events.
    fn queue_reannouncements(&mut self) {
        let state = self.follower.state();
        for p in state.permissions.pending_for(self.follower.session_id()) {
            if p.record.seq <= self.from {
                let mut s = String::with_capacity(p.record.json.len() + 48);
                s.push_str("event: permissionRequest\ndata: ");
                s.push_str(&p.record.json);
                s.push_str("\n\n");
                self.unlogged.push_back(Bytes::from(s));
            }
        }
    }

    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(f) = self.unlogged.pop_front() {
                return Some(f);
            }
            if self.done {
                return None;
            }
            match self.follower.next().await {
                Next::Event(first) => {
                    let follower = &mut self.follower;
                    let (frames, ended) =
                        gather(&first, self.until_complete, || follower.try_next());
                    self.done = ended;
                    return Some(frames);
                }
                Next::CaughtUp => self.queue_reannouncements(),
                Next::Idle => return Some(Bytes::from_static(b": keep-alive\n\n")),
                Next::Reset(from_seq) => {
                    self.done = true;
                    return Some(reset_frame(self.follower.session_id(), from_seq));
                }
                Next::Closed => return None,
            }
        }
    }
}

/// Opens the stream of a session after `after` (0 replays everything); with `until_complete`, the
/// stream ends after the first `complete` it sends.
pub async fn session_events(
    state: AppState,
    session_id: SessionId,
    after: u64,
    until_complete: bool,
) -> Result<Response, ApiError> {
    let opened = client::open(state, session_id, after).await?;
    let mut stream = Stream {
        from: after,
        unlogged: VecDeque::new(),
        until_complete,
        done: false,
        _watching: opened.watching,
        follower: opened.follower,
    };
    if opened.cursor_ahead {
        // The client claims events this session never had: it must reload.
        stream.done = true;
        stream.unlogged.push_back(reset_frame(session_id, 1));
    }
    let body = stream::unfold(stream, |mut stream| async move {
        let f = stream.next_frame().await?;
        Some((Ok::<_, Infallible>(f), stream))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfgate_core::EventRecord;
    use std::sync::Arc;

    fn event(seq: u64, payload: EventPayload) -> Event {
        Event::Live(Arc::new(EventRecord::build(
            SessionId::new(),
            seq,
            None,
            payload,
        )))
    }

    fn note(seq: u64) -> Event {
        event(
            seq,
            EventPayload::Processing {
                message: format!("n{seq}"),
            },
        )
    }

    fn complete(seq: u64) -> Event {
        event(
            seq,
            EventPayload::Complete {
                finish_reason: elfgate_core::FinishReason::Stop,
            },
        )
    }

    fn seqs(frames: &Bytes) -> Vec<u64> {
        std::str::from_utf8(frames)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|v| v.parse().unwrap())
            .collect()
    }

    #[test]
    fn a_reset_frame_carries_the_type_the_session_and_the_cursor_and_no_id() {
        let s = SessionId::new();
        assert_eq!(
            reset_frame(s, 42),
            format!(
                "event: reset\ndata: {{\"type\":\"reset\",\"sessionId\":\"{s}\",\"fromSeq\":42}}\n\n"
            )
        );
    }

    #[test]
    fn gathers_what_is_at_hand_and_stops_at_complete() {
        let mut at_hand = VecDeque::from([note(2), note(3), complete(4), note(5)]);
        let (out, ended) = gather(&note(1), true, || at_hand.pop_front());
        assert_eq!((seqs(&out), ended), (vec![1, 2, 3, 4], true));
        // What follows the complete is left for the next write.
        assert_eq!(at_hand.len(), 1);
        let (out, ended) = gather(&complete(6), false, || at_hand.pop_front());
        assert_eq!((seqs(&out), ended), (vec![6, 5], false));
    }

    #[test]
    fn every_kind_of_event_is_framed_alike() {
        let record = Arc::new(EventRecord::build(
            SessionId::new(),
            7,
            None,
            EventPayload::Processing {
                message: "n7".into(),
            },
        ));
        let live = Event::Live(record.clone());
        let mut framed = BytesMut::new();
        push_event(&mut framed, &live);
        let logged = Event::Logged(elfgate_store::StoredEvent {
            seq: 7,
            event_type: record.kind(),
            json: record.json.clone(),
        });
        let relayed =
            Event::Relayed(crate::event_frame::single_frame(&framed.clone().freeze()).unwrap());
        for other in [logged, relayed] {
            let mut out = BytesMut::new();
            push_event(&mut out, &other);
            assert_eq!(out, framed);
        }
    }
}
