//! One CLI process group under supervision: started in a group of its own with the clean
//! environment, its stdout read as JSON lines of bounded length, its stderr logged (the last
//! lines kept for the error event), an idle timeout, and the interrupt ladder: the polite stop the
//! backend understands, then SIGTERM, then SIGKILL of the whole group. The group is always ended
//! and its leader reaped before [`Supervised::finish`] returns.

use super::backend::Polite;
use super::lines::{LineSplitter, Piece};
use super::settings::Timeouts;
use elfgate_tools::process::{ProcessError, ProcessGroup, ProcessSpec};
use serde_json::Value;
use std::collections::VecDeque;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Lines of stderr kept for the error event.
const STDERR_TAIL: usize = 20;
/// Longest stderr line kept (longer ones are cut).
const STDERR_LINE: usize = 2000;
/// How long writing to the CLI's stdin may take before it is given up.
const STDIN_WRITE: Duration = Duration::from_secs(2);

/// What to start.
pub(crate) struct Launch {
    /// The program, arguments, directory and environment.
    pub spec: ProcessSpec,
    /// Written to stdin at start (stdin then stays open); None: stdin is /dev/null.
    pub stdin: Option<Vec<u8>>,
    /// How it is asked to stop first.
    pub polite: Polite,
    pub timeouts: Timeouts,
    /// The backend's name, for the log.
    pub label: &'static str,
}

/// A stdout line.
enum Line {
    Json(Value),
    Garbage(String),
}

/// How a supervised process ended.
#[derive(Debug)]
pub(crate) struct Ended {
    /// The leader's status, if it exited by itself before the group was stopped.
    pub exit: Option<ExitStatus>,
    /// The run was interrupted (the engine sent the stop).
    pub interrupted: bool,
    /// It printed nothing for the idle timeout.
    pub idle_timed_out: bool,
    /// The last lines of its stderr.
    pub stderr_tail: Vec<String>,
    /// Lines of stdout that were skipped.
    pub garbage: u32,
}

/// A running CLI.
pub(crate) struct Supervised {
    group: ProcessGroup,
    lines: mpsc::Receiver<Line>,
    reader: JoinHandle<()>,
    stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    stderr_task: JoinHandle<()>,
    polite: Polite,
    timeouts: Timeouts,
    label: &'static str,
    exit: Option<ExitStatus>,
    eof: bool,
    /// Set when the engine stopped listening: idle timeout, grace over, or the leader gone.
    done: bool,
    interrupted: bool,
    idle_timed_out: bool,
    escalate_at: Option<Instant>,
    drain_until: Option<Instant>,
    last_output: Instant,
    garbage: u32,
}

impl Supervised {
    /// Starts the process group and its readers.
    pub(crate) async fn start(launch: Launch) -> Result<Supervised, ProcessError> {
        let Launch {
            mut spec,
            stdin,
            polite,
            timeouts,
            label,
        } = launch;
        // Between SIGTERM and SIGKILL.
        spec.grace = timeouts.kill_grace;
        // An empty input still gives a pipe, which stays open until closed.
        spec.stdin = stdin.as_ref().map(|_| Vec::new());
        let mut group = ProcessGroup::spawn(&spec)?;
        let (tx, lines) = mpsc::channel(64);
        let reader = match group.take_stdout() {
            Some(out) => {
                tokio::spawn(read_lines(out, timeouts.max_line_bytes, tx).in_current_span())
            }
            None => tokio::spawn(async {}),
        };
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_task = match group.take_stderr() {
            Some(err) => tokio::spawn(read_stderr(err, stderr.clone(), label).in_current_span()),
            None => tokio::spawn(async {}),
        };
        // Written once its output is being read: a CLI that prints before it reads its input
        // cannot block on a full pipe while the engine blocks on its stdin.
        let mut pipe = group.take_stdin();
        if let (Some(w), Some(bytes)) = (pipe.as_mut(), stdin) {
            write_to(w, &bytes, label).await;
        }
        Ok(Supervised {
            group,
            lines,
            reader,
            stdin: pipe,
            stderr,
            stderr_task,
            polite,
            timeouts,
            label,
            exit: None,
            eof: false,
            done: false,
            interrupted: false,
            idle_timed_out: false,
            escalate_at: None,
            drain_until: None,
            last_output: Instant::now(),
            garbage: 0,
        })
    }

    /// The process group id.
    pub(crate) fn pgid(&self) -> i32 {
        self.group.id()
    }

    /// The next JSON line, or None when the run is over: the CLI exited and its output ended,
    /// the idle timeout passed, or the grace after an interrupt did. `cancel` starts the
    /// interrupt ladder; lines printed after the polite stop are still returned.
    pub(crate) async fn next(&mut self, cancel: &CancellationToken) -> Option<Value> {
        self.next_or_answer(cancel, None, false).await
    }

    /// [`Self::next`], writing meanwhile to the CLI's stdin what `answers` brings (answers to
    /// its requests that came in their own time: an ACP agent's wait for a terminal), each
    /// counting as the CLI's activity. While `client_busy` (the engine owes the CLI an answer)
    /// the idle timeout does not run.
    pub(crate) async fn next_or_answer(
        &mut self,
        cancel: &CancellationToken,
        mut answers: Option<&mut mpsc::UnboundedReceiver<Vec<u8>>>,
        client_busy: bool,
    ) -> Option<Value> {
        loop {
            if self.done || (self.eof && self.exit.is_some()) {
                return None;
            }
            let idle_at = self.last_output + self.timeouts.idle;
            let watch_idle = !self.interrupted && self.exit.is_none() && !client_busy;
            let answer = async {
                match answers.as_mut() {
                    Some(a) => a.recv().await,
                    None => std::future::pending().await,
                }
            };
            let deadline = |at: Option<Instant>| async move {
                match at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = cancel.cancelled(), if !self.interrupted => {
                    self.interrupted = true;
                    self.stop_politely().await;
                    self.escalate_at = Some(Instant::now() + self.timeouts.interrupt_grace);
                }
                _ = deadline(self.escalate_at) => {
                    tracing::debug!(cli = self.label, "the CLI did not stop within the interrupt grace");
                    self.done = true;
                }
                _ = deadline(self.drain_until) => {
                    // The leader is gone; whatever still holds its stdout is stopped with the group.
                    self.done = true;
                }
                _ = tokio::time::sleep_until(idle_at), if watch_idle => {
                    self.idle_timed_out = true;
                    self.done = true;
                }
                Some(bytes) = answer => {
                    self.last_output = Instant::now();
                    if let Some(w) = self.stdin.as_mut() {
                        write_to(w, &bytes, self.label).await;
                    }
                }
                line = self.lines.recv(), if !self.eof => match line {
                    Some(Line::Json(v)) => {
                        self.last_output = Instant::now();
                        return Some(v);
                    }
                    Some(Line::Garbage(what)) => {
                        self.last_output = Instant::now();
                        self.garbage += 1;
                        tracing::warn!(cli = self.label, "skipped a line of the CLI's output: {what}");
                    }
                    None => self.eof = true,
                },
                status = self.group.wait(), if self.exit.is_none() => match status {
                    Ok(s) => {
                        self.exit = Some(s);
                        self.drain_until = Some(Instant::now() + self.timeouts.kill_grace);
                    }
                    Err(e) => {
                        tracing::warn!(cli = self.label, error = %e, "lost the CLI's process");
                        self.done = true;
                    }
                },
            }
        }
    }

    /// The first step of the ladder.
    async fn stop_politely(&mut self) {
        match (&self.polite, self.stdin.as_mut()) {
            (Polite::Stdin(bytes), Some(w)) => {
                let bytes = bytes.clone();
                write_to(w, &bytes, self.label).await;
            }
            // stdin already closed (the run had reported its end): a signal then.
            _ => {
                self.group.interrupt();
            }
        }
    }

    /// Writes to the CLI's stdin, if it is still open.
    pub(crate) async fn send(&mut self, bytes: &[u8]) {
        if let Some(w) = self.stdin.as_mut() {
            write_to(w, bytes, self.label).await;
        }
    }

    /// Restarts the idle timeout: the CLI was waiting for the engine, not silent on its own.
    pub(crate) fn touch(&mut self) {
        self.last_output = Instant::now();
    }

    /// Sets how it is asked to stop first (an ACP agent's cancel names the session it opened).
    pub(crate) fn set_polite(&mut self, polite: Polite) {
        self.polite = polite;
    }

    /// Whether it still runs and listens: a process kept between runs (an ACP agent's) is
    /// reused only then.
    pub(crate) fn listening(&self) -> bool {
        !self.done && !self.eof && self.exit.is_none() && self.stdin.is_some()
    }

    /// Readies a process kept from an earlier run for the next one: its interrupt ladder and
    /// idle clock start over.
    pub(crate) fn rearm(&mut self) {
        self.interrupted = false;
        self.escalate_at = None;
        self.last_output = Instant::now();
    }

    /// How a run ended that leaves the process running for the next (an ACP agent that
    /// answered the prompt).
    pub(crate) fn ended_alive(&self) -> Ended {
        use std::os::unix::process::ExitStatusExt;
        Ended {
            exit: Some(ExitStatus::from_raw(0)),
            interrupted: self.interrupted,
            idle_timed_out: false,
            stderr_tail: Vec::new(),
            garbage: self.garbage,
        }
    }

    /// Closes the CLI's stdin (it then ends once its work is done).
    pub(crate) fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Closes the CLI's stdin and gives its leader up to `grace` to exit by itself (an agent
    /// that saves its session on the way out), before `finish` stops what is left.
    pub(crate) async fn close_and_wait(&mut self, grace: Duration) {
        self.stdin = None;
        if self.exit.is_none()
            && let Ok(Ok(status)) = tokio::time::timeout(grace, self.group.wait()).await
        {
            self.exit = Some(status);
        }
    }

    /// Ends the group (SIGTERM, the grace, SIGKILL, unless its leader exited by itself; SIGKILL
    /// of what is left either way), reaps it and reports how it ended.
    pub(crate) async fn finish(mut self) -> Ended {
        self.stdin = None;
        let exited = self.exit.is_some();
        let status = self.group.stop(!exited).await;
        let exit = if exited { self.exit } else { None };
        // A straggler that escaped the group may hold the pipes: they are not waited for.
        self.reader.abort();
        let grace = self.timeouts.kill_grace;
        if tokio::time::timeout(grace, &mut self.stderr_task)
            .await
            .is_err()
        {
            self.stderr_task.abort();
        }
        tracing::debug!(cli = self.label, ?status, "CLI process group ended");
        let stderr_tail = self
            .stderr
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default();
        Ended {
            exit,
            interrupted: self.interrupted,
            idle_timed_out: self.idle_timed_out,
            stderr_tail,
            garbage: self.garbage,
        }
    }
}

async fn write_to(w: &mut ChildStdin, bytes: &[u8], label: &str) {
    let write = async {
        w.write_all(bytes).await?;
        w.flush().await
    };
    match tokio::time::timeout(STDIN_WRITE, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::debug!(cli = label, error = %e, "could not write to the CLI's stdin");
        }
        Err(_) => tracing::debug!(cli = label, "the CLI does not read its stdin"),
    }
}

/// Reads stdout into JSON lines; a line that is not a JSON object is garbage.
async fn read_lines(mut out: impl AsyncRead + Unpin, max: usize, tx: mpsc::Sender<Line>) {
    let mut split = LineSplitter::new(max);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match out.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for piece in split.feed(&chunk[..n]) {
            if let Some(line) = parse(piece, max)
                && tx.send(line).await.is_err()
            {
                return;
            }
        }
    }
    if let Some(line) = split.finish().and_then(|p| parse(p, max)) {
        let _ = tx.send(line).await;
    }
}

fn parse(piece: Piece, max: usize) -> Option<Line> {
    let bytes = match piece {
        Piece::TooLong => return Some(Line::Garbage(format!("a line longer than {max} bytes"))),
        Piece::Line(b) => b,
    };
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Some(Line::Json(v)),
        _ => Some(Line::Garbage(format!(
            "not a JSON object: {}",
            text.chars().take(200).collect::<String>()
        ))),
    }
}

/// Logs stderr line by line and keeps the last lines.
async fn read_stderr(
    mut err: impl AsyncRead + Unpin,
    tail: Arc<Mutex<VecDeque<String>>>,
    label: &'static str,
) {
    let mut split = LineSplitter::new(64 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut keep = |piece: Piece| {
        let Piece::Line(bytes) = piece else { return };
        let line: String = String::from_utf8_lossy(&bytes)
            .trim_end()
            .chars()
            .take(STDERR_LINE)
            .collect();
        if line.is_empty() {
            return;
        }
        tracing::debug!(cli = label, "stderr: {line}");
        if let Ok(mut t) = tail.lock() {
            if t.len() == STDERR_TAIL {
                t.pop_front();
            }
            t.push_back(line);
        }
    };
    loop {
        let n = match err.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        split.feed(&chunk[..n]).into_iter().for_each(&mut keep);
    }
    if let Some(p) = split.finish() {
        keep(p);
    }
}
