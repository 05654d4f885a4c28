//! An ACP agent's terminals (`terminal/create`, `output`, `wait_for_exit`, `kill`, `release`):
//! the commands it runs through the client instead of on its own. Each command passes the tool
//! gate as the shell tool's calls do ([`ShellRules`]: the PreToolUse hooks, the firewall, a
//! directory inside the project; then the session's environment and network, a process group of
//! its own; no guardian, see docs/security.md) and is allowed like the shell tool's calls: an `execute` permission the client has just granted the
//! agent covers the command that follows it; otherwise the session's mode decides or the client
//! is asked. A terminal lives until the agent releases it or the prompt's turn ends (answered or
//! interrupted): nothing runs on a session's behalf after its run.

use super::CliEngine;
use super::acp;
use super::adapter::str_of;
use elfgate_core::EngineSessionContext;
use elfgate_tools::gate::Refusal;
use elfgate_tools::terminal::{CommandRequest, Terminal, TerminalExit};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The terminals of one prompt's turn.
pub(crate) struct Terminals {
    next: u64,
    open: HashMap<String, Arc<Terminal>>,
    /// Waits for a terminal's exit, each answering the agent when it comes.
    waits: JoinSet<()>,
    waiting: Arc<AtomicUsize>,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    /// The answers of the waits, for the agent's stdin.
    pub(crate) answers: mpsc::UnboundedReceiver<Vec<u8>>,
    /// Fired at the turn's end or interrupt: every terminal is killed.
    kill: CancellationToken,
    /// `execute` permissions the client granted that no command has used yet.
    granted: u32,
}

impl Terminals {
    /// The terminals of a turn that `cancel` interrupts.
    pub(crate) fn new(cancel: &CancellationToken) -> Self {
        let (tx, answers) = mpsc::unbounded_channel();
        Terminals {
            next: 1,
            open: HashMap::new(),
            waits: JoinSet::new(),
            waiting: Arc::new(AtomicUsize::new(0)),
            tx,
            answers,
            kill: cancel.child_token(),
            granted: 0,
        }
    }

    /// Whether the agent waits for a terminal's exit (it is then silent by right).
    pub(crate) fn busy(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }

    /// The client allowed the agent an `execute` call: its command may run without asking again.
    pub(crate) fn grant(&mut self) {
        self.granted += 1;
    }

    fn take_grant(&mut self) -> bool {
        let had = self.granted > 0;
        self.granted = self.granted.saturating_sub(1);
        had
    }

    /// A terminal's output so far, for a tool call's content that names it.
    pub(crate) fn text(&self, id: &str) -> Option<String> {
        self.open.get(id).map(|t| t.output().text)
    }

    fn get<'a>(&'a self, req: &Value, params: &Value) -> Result<&'a Arc<Terminal>, Vec<u8>> {
        let Some(id) = str_of(params, "terminalId") else {
            return Err(acp::error_response(
                req,
                acp::INVALID_PARAMS,
                "terminalId: a string is required",
            ));
        };
        self.open.get(id).ok_or_else(|| {
            acp::error_response(
                req,
                acp::INVALID_PARAMS,
                &format!("terminalId: no terminal '{id}' (never created, or released)"),
            )
        })
    }

    /// `terminal/output`.
    pub(crate) fn output(&self, req: &Value, params: &Value) -> Vec<u8> {
        match self.get(req, params) {
            Ok(t) => {
                let out = t.output();
                let mut result = json!({"output": out.text, "truncated": out.truncated});
                if let Some(exit) = out.exit {
                    result["exitStatus"] = exit_status(exit);
                }
                acp::response(req, result)
            }
            Err(e) => e,
        }
    }

    /// `terminal/wait_for_exit`: answered now when the command has ended, else when it does
    /// (through [`Self::answers`]).
    pub(crate) fn wait_for_exit(&mut self, req: &Value, params: &Value) -> Option<Vec<u8>> {
        let t = match self.get(req, params) {
            Ok(t) => t,
            Err(e) => return Some(e),
        };
        if let Some(exit) = t.output().exit {
            return Some(acp::response(req, exit_status(exit)));
        }
        let wait = t.wait();
        let (tx, req, waiting) = (self.tx.clone(), req.clone(), self.waiting.clone());
        waiting.fetch_add(1, Ordering::Relaxed);
        self.waits.spawn(async move {
            let exit = wait.await;
            let _ = tx.send(acp::response(&req, exit_status(exit)));
            waiting.fetch_sub(1, Ordering::Relaxed);
        });
        None
    }

    /// `terminal/kill`: the command's group ends; the terminal stays for its output.
    pub(crate) fn kill(&self, req: &Value, params: &Value) -> Vec<u8> {
        match self.get(req, params) {
            Ok(t) => {
                t.kill();
                acp::response(req, json!({}))
            }
            Err(e) => e,
        }
    }

    /// `terminal/release`: the command's group ends and the terminal is forgotten.
    pub(crate) fn release(&mut self, req: &Value, params: &Value) -> Vec<u8> {
        if let Err(e) = self.get(req, params) {
            return e;
        }
        if let Some(t) = str_of(params, "terminalId").and_then(|id| self.open.remove(id)) {
            t.kill();
        }
        acp::response(req, json!({}))
    }
}

impl Drop for Terminals {
    fn drop(&mut self) {
        self.kill.cancel();
    }
}

fn exit_status(exit: TerminalExit) -> Value {
    json!({"exitCode": exit.code, "signal": exit.signal_name()})
}

/// A `terminal/create` request's parameters, checked.
struct CreateParams {
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    limit: Option<usize>,
}

fn create_params(params: &Value) -> Result<CreateParams, String> {
    let command = match params.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
        _ => return Err("command: a non-empty string is required".to_string()),
    };
    let args = match params.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or("args: an array of strings is required")?,
        Some(_) => return Err("args: an array of strings is required".to_string()),
    };
    let mut env = BTreeMap::new();
    match params.get("env") {
        None | Some(Value::Null) => {}
        Some(Value::Array(vars)) => {
            for v in vars {
                match (str_of(v, "name"), str_of(v, "value")) {
                    (Some(name), Some(value)) if !name.is_empty() && !name.contains('=') => {
                        env.insert(name.to_string(), value.to_string());
                    }
                    _ => {
                        return Err(
                            "env: each variable needs a name (without '=') and a string value"
                                .to_string(),
                        );
                    }
                }
            }
        }
        Some(_) => return Err("env: an array of {name, value} is required".to_string()),
    }
    let cwd = match params.get("cwd") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.clone()),
        Some(_) => return Err("cwd: a string path is required".to_string()),
    };
    let limit = match params.get("outputByteLimit") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or("outputByteLimit: a non-negative integer is required")?,
        ),
    };
    Ok(CreateParams {
        command,
        args,
        env,
        cwd,
        limit,
    })
}

impl CliEngine {
    /// `terminal/create`: the command checked (firewall, hooks), allowed (a grant, the session's
    /// mode, or the client's answer) and started in `cwd`, the session's project.
    pub(crate) async fn create_terminal(
        &self,
        ctx: &EngineSessionContext,
        terms: &mut Terminals,
        cwd: &Path,
        req: &Value,
        params: &Value,
    ) -> Vec<u8> {
        let p = match create_params(params) {
            Ok(p) => p,
            Err(why) => return acp::error_response(req, acp::INVALID_PARAMS, &why),
        };
        let id = format!("term-{}", terms.next);
        terms.next += 1;
        let request = CommandRequest {
            command: &p.command,
            args: &p.args,
            env: &p.env,
            cwd: p.cwd.as_deref(),
        };
        let line = request.line();
        let child = self.shell.child_for(
            ctx.engine_config.shell_env.as_ref(),
            ctx.engine_config.shell_network,
        );
        let hook_payload = |line: &str| {
            let mut payload = json!({
                "event": "PreToolUse",
                "sessionId": ctx.session_id(),
                "runId": ctx.run_id,
                "toolName": "shell",
                "toolUseId": id,
                "input": {"command": line},
                "projectPath": cwd.display().to_string(),
            });
            ctx.channel.add_to(&mut payload);
            payload
        };
        let spec = match self
            .shell
            .prepare(cwd, &request, &child, hook_payload)
            .await
        {
            Ok(spec) => spec,
            Err(refused) => return self.refuse_terminal(ctx, req, &id, &line, refused).await,
        };
        if !terms.take_grant()
            && let Err(refused) = self
                .acp_permission(ctx, "execute", &json!({"command": line}))
                .await
        {
            return self.refuse_terminal(ctx, req, &id, &line, refused).await;
        }
        let limit = p
            .limit
            .unwrap_or(self.shell.max_output_bytes)
            .min(self.shell.max_output_bytes);
        match Terminal::start(&spec, limit, terms.kill.child_token()) {
            Ok(t) => {
                tracing::debug!(terminal = %id, command = %line, "an ACP agent's terminal started");
                terms.open.insert(id.clone(), Arc::new(t));
                acp::response(req, json!({"terminalId": id}))
            }
            Err(e) => acp::error_response(req, acp::INTERNAL_ERROR, &e.to_string()),
        }
    }

    /// Refuses a terminal: the agent is told why, the session's audit keeps which gate it was.
    async fn refuse_terminal(
        &self,
        ctx: &EngineSessionContext,
        req: &Value,
        id: &str,
        line: &str,
        refused: Refusal,
    ) -> Vec<u8> {
        let answer = acp::error_response(
            req,
            acp::INTERNAL_ERROR,
            &format!("the command was not run: {}", refused.why),
        );
        self.audit_acp_refusal(ctx, id, "shell", refused, json!({"command": line}))
            .await;
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_params_name_the_field_that_is_wrong() {
        let ok = create_params(&json!({"sessionId": "s", "command": "ls", "args": ["-l"],
            "env": [{"name": "A", "value": "1"}], "cwd": "sub", "outputByteLimit": 10}))
        .unwrap();
        assert_eq!(ok.args, vec!["-l"]);
        assert_eq!(ok.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(ok.limit, Some(10));
        for (params, field) in [
            (json!({}), "command"),
            (json!({"command": " "}), "command"),
            (json!({"command": "ls", "args": [1]}), "args"),
            (
                json!({"command": "ls", "env": [{"name": "A=B", "value": "x"}]}),
                "env",
            ),
            (json!({"command": "ls", "cwd": 3}), "cwd"),
            (
                json!({"command": "ls", "outputByteLimit": -1}),
                "outputByteLimit",
            ),
        ] {
            let why = create_params(&params).err().unwrap();
            assert!(why.starts_with(field), "{params}: {why}");
        }
    }
}
