//! How a run's events look in the terminal: text as it streams, thinking dimmed, one line per
//! tool call, errors in red. Colours and the spinner only when stdout is a terminal. Errors (the
//! run's and the client's own) go to stderr, and with `--json` so do the client's notes: stdout
//! then holds nothing but the events, for `jq` and the like.

use elfgate_core::{ContentBlock, DeltaKind, EventPayload, FinishReason, ToolCallStatus};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};

const DIM: &str = "\x1b[2m";
const RED: &str = "\x1b[31m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";
const SPINNER: [char; 4] = ['|', '/', '-', '\\'];

/// Prints events for a person.
pub struct Renderer {
    color: bool,
    /// Colours on stderr (a terminal there).
    err_color: bool,
    /// `--json`: stdout is for the events alone.
    raw: bool,
    at_line_start: bool,
    thinking: bool,
    spinner: Option<usize>,
    tools: HashMap<String, String>,
}

impl Renderer {
    /// A renderer; `color` turns on colours and the spinner; `raw` (`--json`) keeps the
    /// client's notes off stdout.
    pub fn new(color: bool, raw: bool) -> Renderer {
        Renderer {
            color,
            err_color: std::io::stderr().is_terminal(),
            raw,
            at_line_start: true,
            thinking: false,
            spinner: None,
            tools: HashMap::new(),
        }
    }

    fn paint(&self, style: &str, text: &str) -> String {
        if self.color {
            format!("{style}{text}{RESET}")
        } else {
            text.to_string()
        }
    }

    fn write(&mut self, text: &str) {
        self.clear_spinner();
        if text.is_empty() {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        self.at_line_start = text.ends_with('\n');
    }

    /// Writes `text` as a line of its own.
    pub fn line(&mut self, style: &str, text: &str) {
        self.end_thinking();
        let mut s = String::new();
        if !self.at_line_start {
            s.push('\n');
        }
        s.push_str(&self.paint(style, text));
        s.push('\n');
        self.write(&s);
    }

    /// Writes `text` as a line of its own on stderr, after ending the line being streamed on
    /// stdout (so that on a terminal it does not start in the middle of the answer).
    fn err_line(&mut self, style: &str, text: &str) {
        self.end_thinking();
        if !self.at_line_start {
            self.write("\n");
        }
        self.clear_spinner();
        let line = if self.err_color {
            format!("{style}{text}{RESET}\n")
        } else {
            format!("{text}\n")
        };
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(line.as_bytes());
        let _ = err.flush();
    }

    /// A note from the client itself (on stderr with `--json`).
    pub fn note(&mut self, text: &str) {
        if self.raw {
            self.err_line(DIM, text);
        } else {
            self.line(DIM, text);
        }
    }

    /// An error, on stderr.
    pub fn error(&mut self, text: &str) {
        self.err_line(RED, text);
    }

    /// The input prompt.
    pub fn prompt(&mut self) {
        let p = self.paint(BOLD, "> ");
        self.write(&p);
    }

    /// Ends the current line on stdout if something is on it (the prompt, say).
    pub fn end_line(&mut self) {
        if !self.at_line_start {
            self.write("\n");
        }
    }

    /// Whether the spinner is turning (waiting for the run's first output).
    pub fn spinning(&self) -> bool {
        self.spinner.is_some()
    }

    /// Starts the spinner (terminals only).
    pub fn start_spinner(&mut self) {
        if self.color {
            self.spinner = Some(0);
            self.spin();
        }
    }

    /// The spinner's next frame.
    pub fn spin(&mut self) {
        if let Some(i) = self.spinner {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r{DIM}{} waiting{RESET}", SPINNER[i % SPINNER.len()]);
            let _ = out.flush();
            self.spinner = Some(i + 1);
        }
    }

    fn clear_spinner(&mut self) {
        if self.spinner.take().is_some() {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r\x1b[K");
            let _ = out.flush();
        }
    }

    fn end_thinking(&mut self) {
        if self.thinking {
            self.thinking = false;
            if !self.at_line_start {
                self.write("\n");
            }
        }
    }

    /// Shows one event of the run being followed.
    pub fn event(&mut self, ev: &EventPayload) {
        match ev {
            EventPayload::StreamDelta { delta } => {
                // A delta without text carries only the provider's signature.
                if delta.text.is_empty() {
                    return;
                }
                if delta.kind == DeltaKind::Thinking {
                    if !self.thinking && !self.at_line_start {
                        self.write("\n");
                    }
                    self.thinking = true;
                    let t = self.paint(DIM, &delta.text);
                    self.write(&t);
                } else {
                    self.end_thinking();
                    self.write(&delta.text);
                }
            }
            EventPayload::ToolCallStart { block } => {
                let (name, input) = match block {
                    ContentBlock::ToolUse { id, name, input } => {
                        self.tools.insert(id.clone(), name.clone());
                        (name.as_str(), input.to_string())
                    }
                    _ => ("tool", String::new()),
                };
                self.line(DIM, &format!("⚙ {name} {}", short(&input)));
            }
            EventPayload::ToolCallEnd { block, status } => {
                let name = match block {
                    ContentBlock::ToolResult { tool_use_id, .. } => self.tools.get(tool_use_id),
                    _ => None,
                };
                let name = name.map_or("tool", String::as_str);
                let text = format!("⚙ {name}: {}", status.as_str());
                if *status == ToolCallStatus::Success {
                    self.line(DIM, &text);
                } else {
                    self.line(RED, &text);
                }
            }
            EventPayload::PermissionResolved { decision, .. } => {
                self.note(&format!("permission {}", decision.as_str()));
            }
            EventPayload::Retry { retry: r } => {
                self.note(&format!(
                    "retrying ({}/{}) in {} ms: {}",
                    r.attempt, r.max_attempts, r.delay_ms, r.reason
                ));
            }
            EventPayload::Processing { message } => self.note(message),
            EventPayload::BudgetPaused { budget } => {
                self.error(&format!("paused: {budget}"));
            }
            EventPayload::BudgetWarning { budget } => {
                self.note(&format!(
                    "budget warning: {} spent ${:.6} of its soft limit ${:.6}",
                    budget.scope, budget.spent_usd, budget.limit_usd
                ));
            }
            EventPayload::StepStart { step_id, kind, .. } => {
                self.note(&format!("[step {step_id}: {}]", kind.as_str()));
            }
            EventPayload::StepEnd {
                step_id,
                status,
                error,
                ..
            } => {
                let status = format!("{status:?}").to_lowercase();
                match error {
                    Some(why) => self.error(&format!("[step {step_id} {status}: {why}]")),
                    None => self.note(&format!("[step {step_id} {status}]")),
                }
            }
            EventPayload::Error { error } => {
                self.error(&format!(
                    "error ({}): {}",
                    error.code.as_str(),
                    error.message
                ));
            }
            EventPayload::Result { stats: s } => {
                // An interrupted call's output is counted from its text: say it is a guess.
                let about = |estimated: bool| if estimated { "~" } else { "" };
                self.note(&format!(
                    "[{}{} in, {}{} out tokens, {} ms]",
                    about(s.input_tokens_estimated),
                    s.usage.input_tokens,
                    about(s.output_tokens_estimated),
                    s.usage.output_tokens,
                    s.duration_ms
                ));
            }
            EventPayload::PostTurn { turn } => {
                // Only what `result` did not say: blocked calls and the cost.
                let mut said = Vec::new();
                if !turn.denied.is_empty() {
                    let gates: Vec<&str> = turn.denied.iter().map(|b| b.gate.as_str()).collect();
                    said.push(format!(
                        "{} blocked call(s): {}",
                        turn.denied.len(),
                        gates.join(", ")
                    ));
                }
                if let Some(cost) = turn.cost_usd {
                    said.push(format!("${cost:.4}"));
                }
                if !said.is_empty() {
                    self.note(&format!("[{}]", said.join("; ")));
                }
            }
            EventPayload::Complete { finish_reason } => {
                match finish_reason {
                    FinishReason::Stop => self.end_thinking(),
                    FinishReason::Error => self.error("[run failed]"),
                    other => self.note(&format!("[{}]", other.as_str())),
                }
                if !self.at_line_start {
                    self.write("\n");
                }
            }
            _ => {}
        }
    }

    /// Asks about a permission request; the answer is read from stdin by the caller.
    pub fn permission(&mut self, tool: &str, input: &Value) {
        let input = short(&input.to_string());
        let q = self.paint(
            BOLD,
            &format!("allow {tool} {input}? [y]es once / [n]o / [a]lways this session: "),
        );
        self.end_thinking();
        let s = if self.at_line_start {
            q
        } else {
            format!("\n{q}")
        };
        self.write(&s);
    }
}

/// `text` cut to one short line.
fn short(text: &str) -> String {
    const MAX: usize = 120;
    let one: String = text
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    if one.chars().count() > MAX {
        format!("{}…", one.chars().take(MAX).collect::<String>())
    } else {
        one
    }
}
