//! Reading a run's events while it goes on: up to a kind, a number of permission requests, a
//! tool's result, a drain of background results.

use super::ends_by_id;
use crate::common::{Ev, Sse};

/// Reads events up to the next one of type `kind`; returns it.
pub async fn next_of(sse: &mut Sse, kind: &str) -> Ev {
    loop {
        let ev = sse.next().await.expect("stream ended");
        if ev.event == kind {
            return ev;
        }
    }
}

/// Reads events until `n` permission requests were seen; returns their ids and every event read.
pub async fn until_requests(sse: &mut Sse, n: usize, seen: &mut Vec<Ev>) -> Vec<String> {
    let mut ids = Vec::new();
    while ids.len() < n {
        let ev = sse.next().await.expect("stream ended");
        if ev.event == "permissionRequest" {
            ids.push(ev.data["requestId"].as_str().unwrap().to_string());
        }
        seen.push(ev);
    }
    ids
}

/// The content of the toolCallEnd of `id` among `evs`.
pub fn result_of(evs: &[Ev], id: &str) -> Option<String> {
    ends_by_id(evs).remove(id).map(|(_, content)| content)
}

/// Reads events until the toolCallEnd of `id`, adding them to `seen`; returns its content.
pub async fn until_result(sse: &mut Sse, id: &str, seen: &mut Vec<Ev>) -> String {
    loop {
        seen.push(sse.next().await.expect("stream ended"));
        if let Some(c) = result_of(&seen[seen.len() - 1..], id) {
            return c;
        }
    }
}

/// The text of a `userMessage` event that drained background results, if it is one.
pub fn drained_text(ev: &Ev) -> Option<String> {
    if ev.event != "userMessage" {
        return None;
    }
    let t = ev.data["message"]["blocks"][0]["text"].as_str()?;
    t.starts_with("[Background agent \"").then(|| t.to_string())
}

/// Reads events until the next drain `userMessage`; returns its text.
pub async fn until_drain(sse: &mut Sse, seen: &mut Vec<Ev>) -> String {
    loop {
        let ev = sse.next().await.expect("stream ended");
        let t = drained_text(&ev);
        seen.push(ev);
        if let Some(t) = t {
            return t;
        }
    }
}
