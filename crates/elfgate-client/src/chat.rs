//! `elfgate chat`: reads prompts (from the terminal, or one per line from a pipe), sends each
//! after the previous run's `complete`, and shows each run as it happens.

use super::args::ChatArgs;
use super::conn::{ClientError, Conn};
use super::exit;
use super::render::Renderer;
use super::stream::EventStream;
use elfgate_api::{
    CreateSessionRequest, CreateSessionResponse, InterruptRequest, InterruptResponse,
    PermissionAnswered, PermissionBody, RunOverrides, SendMessageRequest, SendMessageResponse,
    SessionView,
};
use elfgate_core::{Decision, EventPayload, FinishReason, Scope};
use std::collections::HashSet;
use std::io::{BufRead, IsTerminal};
use std::time::Duration;
use tokio::sync::mpsc;

/// The engine of a new session when `--engine` is not given: plain chat.
const DEFAULT_ENGINE: &str = "chat";

/// What the user does while a run goes on.
struct Inputs {
    /// Lines from stdin; `None` at its end.
    lines: mpsc::UnboundedReceiver<Option<String>>,
    /// Ctrl-C presses.
    interrupts: mpsc::UnboundedReceiver<()>,
    /// Whether stdin is a terminal (a person to ask).
    interactive: bool,
}

/// How following a run ended, when not with its `complete`.
enum Stop {
    /// The user wants out (second Ctrl-C).
    Quit,
    /// The daemon failed us.
    Failed(ClientError),
}

/// Runs `elfgate chat`; returns the exit status.
pub async fn run(conn: &Conn, args: &ChatArgs) -> Result<u8, ClientError> {
    let mut inputs = Inputs {
        lines: read_stdin(),
        interrupts: watch_ctrl_c(),
        interactive: std::io::stdin().is_terminal(),
    };
    let mut view = Renderer::new(std::io::stdout().is_terminal() && !args.json, args.json);
    let mut session = args.session.clone();
    let mut stream = match &session {
        Some(sid) => {
            let s: SessionView = conn.get(&format!("/v1/sessions/{sid}")).await?;
            if inputs.interactive && !args.json {
                view.note(&format!(
                    "session {sid} ({}, {})",
                    s.session.engine,
                    s.session.model.as_deref().unwrap_or("default model")
                ));
            }
            Some(EventStream::new(conn, sid, None))
        }
        None => None,
    };
    let mut code = exit::OK;
    loop {
        if inputs.interactive && !args.json {
            view.prompt();
        }
        let line = tokio::select! {
            l = inputs.lines.recv() => l.flatten(),
            _ = inputs.interrupts.recv() => {
                view.note("quitting");
                return Ok(exit::INTERRUPTED);
            }
        };
        let Some(prompt) = line else {
            // Ctrl-D at the prompt: end the prompt's line, so the shell's prompt starts on one
            // of its own.
            if inputs.interactive && !args.json {
                view.end_line();
            }
            break;
        };
        if prompt.trim().is_empty() {
            continue;
        }
        let (sid, run_id) = match &session {
            Some(sid) => {
                let body = SendMessageRequest {
                    prompt,
                    ..SendMessageRequest::default()
                };
                let sent: Result<SendMessageResponse, _> = conn
                    .post(&format!("/v1/sessions/{sid}/messages"), &body)
                    .await;
                match sent {
                    Ok(v) => (sid.clone(), v.run_id.to_string()),
                    Err(e @ ClientError::Refused { .. }) => {
                        view.error(&e.to_string());
                        code = exit::RUN_ERROR;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            None => {
                let created: Result<CreateSessionResponse, _> =
                    conn.post("/v1/sessions", &create_body(args, prompt)).await;
                let v = match created {
                    Ok(v) => v,
                    Err(e @ ClientError::Refused { .. }) => {
                        view.error(&e.to_string());
                        code = exit::RUN_ERROR;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let sid = v.session_id.to_string();
                if inputs.interactive && !args.json {
                    view.note(&format!("session {sid}"));
                }
                stream = Some(EventStream::new(conn, &sid, None));
                session = Some(sid.clone());
                (sid, v.run_id.to_string())
            }
        };
        let Some(events) = stream.as_mut() else {
            break;
        };
        match follow(
            conn,
            &sid,
            &run_id,
            events,
            &mut inputs,
            &mut view,
            args.json,
        )
        .await
        {
            Ok(finish) => {
                if finish == FinishReason::Error {
                    code = exit::RUN_ERROR;
                }
            }
            Err(Stop::Quit) => return Ok(exit::INTERRUPTED),
            Err(Stop::Failed(e)) => return Err(e),
        }
    }
    Ok(code)
}

/// The `POST /v1/sessions` body for the first prompt.
fn create_body(args: &ChatArgs, prompt: String) -> CreateSessionRequest {
    CreateSessionRequest {
        engine: args
            .engine
            .clone()
            .unwrap_or_else(|| DEFAULT_ENGINE.to_string()),
        prompt,
        // The daemon resolves paths itself: a relative one would be relative to its directory.
        project_path: args.project.as_ref().map(|p| {
            std::path::absolute(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string()
        }),
        overrides: RunOverrides {
            provider_id: args.model.as_ref().and_then(|m| m.provider.clone()),
            model: args.model.as_ref().map(|m| m.model.clone()),
            permission_mode: args.permission_mode.clone(),
            ..RunOverrides::default()
        },
        ..CreateSessionRequest::default()
    }
}

/// Shows run `run_id` until its `complete`, answering permission requests and turning Ctrl-C
/// into an interrupt. Returns the run's finish reason.
async fn follow(
    conn: &Conn,
    sid: &str,
    run_id: &str,
    events: &mut EventStream,
    inputs: &mut Inputs,
    view: &mut Renderer,
    raw: bool,
) -> Result<FinishReason, Stop> {
    let mut asked: HashSet<String> = HashSet::new();
    let mut pending: Vec<String> = Vec::new();
    let mut interrupts = 0;
    let mut first_seq: Option<u64> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    if !raw {
        view.start_spinner();
    }
    loop {
        let ask = inputs.interactive && !pending.is_empty();
        tokio::select! {
            ev = events.next() => {
                let ev = ev.map_err(Stop::Failed)?;
                let env = &ev.envelope;
                let seq = env.seq.unwrap_or_default();
                if env.run_id.is_some_and(|r| r.to_string() == run_id) {
                    first_seq.get_or_insert(seq);
                } else if !(is_permission(&env.payload) && first_seq.is_some_and(|f| seq > f)) {
                    // Another run's event; but a sub-agent asks under its own run id, during ours.
                    continue;
                }
                if raw {
                    println!("{}", ev.json);
                }
                match &env.payload {
                    EventPayload::PermissionRequest { request_id, tool_name, input, .. } => {
                        if !asked.insert(request_id.clone()) {
                            continue;
                        }
                        if inputs.interactive {
                            view.permission(tool_name, input);
                            pending.push(request_id.clone());
                        } else {
                            view.note("permission request denied: stdin is not a terminal to ask");
                            answer(conn, sid, request_id, Decision::Deny, Scope::Once, view).await;
                        }
                    }
                    EventPayload::PermissionResolved { request_id, .. } => {
                        pending.retain(|p| p != request_id);
                        if !raw {
                            view.event(&env.payload);
                        }
                    }
                    EventPayload::Complete { finish_reason } => {
                        if !raw {
                            view.event(&env.payload);
                        }
                        return Ok(*finish_reason);
                    }
                    other => {
                        if !raw {
                            view.event(other);
                        }
                    }
                }
            }
            line = inputs.lines.recv(), if ask => {
                let Some(reply) = line.flatten() else {
                    // End of input: nobody is left to ask.
                    inputs.interactive = false;
                    for rid in std::mem::take(&mut pending) {
                        answer(conn, sid, &rid, Decision::Deny, Scope::Once, view).await;
                    }
                    continue;
                };
                let (decision, scope) = match reply.trim().to_ascii_lowercase().as_str() {
                    "y" | "yes" => (Decision::Allow, Scope::Once),
                    "a" | "always" => (Decision::Allow, Scope::Session),
                    "n" | "no" => (Decision::Deny, Scope::Once),
                    _ => {
                        view.note("answer y (allow once), n (deny) or a (allow for this session)");
                        continue;
                    }
                };
                if !pending.is_empty() {
                    let rid = pending.remove(0);
                    answer(conn, sid, &rid, decision, scope, view).await;
                }
            }
            _ = inputs.interrupts.recv() => {
                interrupts += 1;
                if interrupts > 1 {
                    view.note("quitting");
                    return Err(Stop::Quit);
                }
                view.note("interrupting… (Ctrl-C again to quit)");
                let asked: Result<InterruptResponse, _> =
                    conn.post(&format!("/v1/sessions/{sid}/interrupt"), &InterruptRequest::default()).await;
                if let Err(e) = asked {
                    view.error(&format!("cannot interrupt: {e}"));
                }
            }
            _ = tick.tick(), if view.spinning() => view.spin(),
        }
    }
}

fn is_permission(ev: &EventPayload) -> bool {
    matches!(
        ev,
        EventPayload::PermissionRequest { .. } | EventPayload::PermissionResolved { .. }
    )
}

async fn answer(
    conn: &Conn,
    sid: &str,
    rid: &str,
    decision: Decision,
    scope: Scope,
    view: &mut Renderer,
) {
    let body = PermissionBody {
        decision,
        scope,
        message: None,
    };
    let answered: Result<PermissionAnswered, _> = conn
        .post(&format!("/v1/sessions/{sid}/permissions/{rid}"), &body)
        .await;
    if let Err(e) = answered {
        view.error(&format!("cannot answer the permission request: {e}"));
    }
}

/// Stdin's lines, read on a thread of their own (a blocking read cannot be cancelled).
fn read_stdin() -> mpsc::UnboundedReceiver<Option<String>> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) => {
                    if tx.send(Some(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(None);
    });
    rx
}

/// Ctrl-C presses. Once this listens, Ctrl-C no longer kills the process. One listener for the
/// process's life: a new one per press would leave a moment after each press in which the next
/// press reaches no listener and is lost.
fn watch_ctrl_c() -> mpsc::UnboundedReceiver<()> {
    let (tx, rx) = mpsc::unbounded_channel();
    let interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt());
    tokio::spawn(async move {
        let Ok(mut interrupts) = interrupts else {
            return;
        };
        while interrupts.recv().await.is_some() {
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    rx
}
