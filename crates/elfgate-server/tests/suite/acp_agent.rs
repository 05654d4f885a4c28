//! The cli engine's `acp` backend with a real ACP agent: gemini-cli 0.61.0 started with `--acp`,
//! its provider the mock (Gemini's wire format). The daemon is the protocol's client: a
//! permission the agent asks is answered through the API, its file writes are served through the
//! tools' firewall (a deny zone holds), an interrupt is the protocol's cancel, and a session's
//! second prompt reaches the same agent and conversation.

use crate::common;
use crate::scripted;
use crate::suite::cli_real::{
    GEMINI, MARKER, complete, errors, installed, installed_program, roles, stored_text,
};

use common::{Daemon, Ev, Opts, poll_until, text_of, types};
use elfgate_mockllm::{Format, MockServer, Outcome, RecordedRequest};
use scripted::procs::live_with_env;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// A daemon with gemini-cli configured as the ACP agent `gemini`.
pub(super) struct Acp {
    pub(super) mock: MockServer,
    pub(super) d: Daemon,
    opts: Opts,
    pub(super) project: tempfile::TempDir,
    marker: String,
}

async fn start(extra: &str) -> Option<Acp> {
    start_with_args(r#"["--acp"]"#, extra).await
}

/// [`start`] with the agent's arguments `args` (a TOML array).
pub(super) async fn start_with_args(args: &str, extra: &str) -> Option<Acp> {
    let bin = installed(GEMINI)?;
    Some(
        launch("acp", ("ACP_GEMINI_KEY", "sk-gemini"), |base, marker| {
            format!(
                r#"
[providers.real-gemini]
kind = "gemini"
base_url = "{base}"
api_key_env = "ACP_GEMINI_KEY"

[engines.cli.acp.agents.gemini]
command = "{bin}"
args = {args}
model_arg = "-m"
provider_setup = "gemini-cli"
provider = "real-gemini"
missing_file_as_empty = true
load_replay_settle_ms = 300
env = {{ {MARKER} = "{marker}", GEMINI_CLI_TRUST_WORKSPACE = "true" }}
{extra}
"#,
                bin = bin.display(),
            )
        })
        .await,
    )
}

/// A mock, a project, a marker for the agents' processes, and a daemon with the configuration
/// `toml` makes of the mock's URL and the marker; `key` is the provider key's variable.
async fn launch(
    label: &str,
    (key_var, key): (&str, &str),
    toml: impl FnOnce(&str, &str) -> String,
) -> Acp {
    let mock = MockServer::start().await.unwrap();
    let project = tempfile::tempdir().unwrap();
    let marker = format!(
        "{label}-{}-{}",
        std::process::id(),
        project.path().file_name().unwrap().to_string_lossy()
    );
    let opts = Opts {
        extra_toml: toml(&mock.base_url(), &marker),
        env: vec![(key_var.to_string(), key.to_string())],
        ..Opts::default()
    };
    let d = Daemon::start(&mock, opts.clone());
    Acp {
        mock,
        d,
        opts,
        project,
        marker,
    }
}

impl Acp {
    pub(super) fn session(&self, prompt: &str, model: &str) -> Value {
        json!({"engine": "cli", "cliBackend": "acp", "acpAgent": "gemini", "prompt": prompt,
               "model": model, "projectPath": self.project.path().display().to_string()})
    }

    /// The model calls the agent made.
    pub(super) fn calls(&self) -> Vec<RecordedRequest> {
        self.mock
            .requests()
            .into_iter()
            .filter(|r| r.format == Format::Gemini && r.model.starts_with("mock:"))
            .collect()
    }

    /// Live processes of this daemon's agents.
    fn processes(&self) -> Vec<i32> {
        let mut p = live_with_env(MARKER, &self.marker);
        p.sort_unstable();
        p
    }

    /// A session in `project` allowed every tool, its model the script `script`; returns its id
    /// and its first run's events, once it has stopped.
    async fn run_in(&self, project: &Path, prompt: &str, script: &str) -> (String, Vec<Ev>) {
        let mut body = self.session(prompt, &format!("mock:script={script}"));
        body["projectPath"] = json!(project.display().to_string());
        body["permissionMode"] = json!("bypassPermissions");
        let (sid, run) = self.d.create(body).await;
        let evs = self.d.events(&sid, None).await.until_complete(&run).await;
        assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
        (sid, evs)
    }

    async fn cli_session_id(&self, sid: &str) -> String {
        let (status, s) = self.d.get(&format!("/v1/sessions/{sid}")).await;
        assert_eq!(status, 200, "{s}");
        s["cliSessionId"].as_str().unwrap().to_string()
    }

    async fn messages(&self, sid: &str) -> Vec<Value> {
        let (status, m) = self.d.get(&format!("/v1/sessions/{sid}/messages")).await;
        assert_eq!(status, 200, "{m}");
        m["messages"].as_array().unwrap().clone()
    }
}

pub(super) fn tool_ends(evs: &[Ev]) -> Vec<&Value> {
    evs.iter()
        .filter(|e| e.event == "toolCallEnd")
        .map(|e| &e.data)
        .collect()
}

/// The agent asks before it writes a file; the client allows it through the API; the agent
/// writes through the daemon (fs/write_text_file); a second prompt goes on in the same agent
/// process and conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_over_acp_asks_writes_and_goes_on_in_the_same_conversation() {
    let Some(r) = start("").await else { return };
    let (status, engines) = r.d.get("/v1/engines").await;
    assert_eq!(status, 200, "{engines}");
    let acp = engines["engines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "cli")
        .flat_map(|e| e["backends"].as_array().unwrap())
        .find(|x| x["name"] == "acp")
        .unwrap();
    assert_eq!(acp["available"], true, "{acp}");
    assert_eq!(acp["agents"], json!(["gemini"]), "{acp}");

    let target = r.project.path().join("hello.txt");
    scripted::script(
        &r.mock,
        "acp-write",
        json!([
            {"text": "Writing it.", "toolCalls": [scripted::call("c1", "write_file",
                json!({"file_path": target.display().to_string(), "content": "hello from acp"}))]},
            {"text": "Written."},
            {"text": "You asked for hello.txt."}
        ]),
    );
    let (sid, run) =
        r.d.create(r.session("Write hello.txt.", "mock:script=acp-write"))
            .await;
    let mut sse = r.d.events(&sid, None).await;
    let mut evs = sse.until_n("permissionRequest", 1).await;
    let init = evs.iter().find(|e| e.event == "init").unwrap();
    assert_eq!(
        init.data["systemInfo"]["cliBackend"], "acp",
        "{}",
        init.data
    );
    assert_eq!(
        init.data["systemInfo"]["acpAgent"], "gemini",
        "{}",
        init.data
    );
    let ask = evs.last().unwrap().data.clone();
    assert_eq!(ask["toolName"], "edit", "{ask}");
    assert!(ask["input"].to_string().contains("hello.txt"), "{ask}");
    assert!(!target.exists(), "nothing written before the answer");
    let id = ask["requestId"].as_str().unwrap();
    let (code, body) =
        r.d.post(
            &format!("/v1/sessions/{sid}/permissions/{id}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    evs.extend(sse.until_complete(&run).await);
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    assert!(errors(&evs).is_empty(), "{:?}", errors(&evs));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello from acp");
    let ends = tool_ends(&evs);
    assert_eq!(ends.len(), 1, "{:?}", types(&evs));
    assert_eq!(ends[0]["status"], "success", "{}", ends[0]);
    assert!(text_of(&evs).contains("Written."), "{:?}", text_of(&evs));
    let calls = r.calls();
    assert_eq!(calls.len(), 2, "a call, then its result");
    assert!(calls[0].body.to_string().contains("Write hello.txt."));
    // The agent got the provider's key from the daemon (gemini-cli's own set-up).
    let key = calls[0].authorization.as_deref().unwrap_or_default();
    assert!(key.ends_with("sk-gemini"), "{key:?}");
    let first = r.cli_session_id(&sid).await;
    let agent = r.processes();
    assert!(!agent.is_empty(), "the agent is kept for the next prompt");

    // The second prompt: the same agent process, the same ACP session, the earlier turn in the
    // model's context.
    let run2 =
        r.d.send(&sid, json!({"prompt": "Which file did you write?"}))
            .await;
    let mut evs2 = sse.until_complete(&run2).await;
    evs2.retain(|e| e.run() == run2);
    assert_eq!(complete(&evs2), ["stop"], "{:?}", errors(&evs2));
    assert_eq!(text_of(&evs2), "You asked for hello.txt.");
    assert_eq!(r.cli_session_id(&sid).await, first, "the same ACP session");
    assert_eq!(r.processes(), agent, "the same agent process");
    let calls = r.calls();
    assert_eq!(calls.len(), 3);
    let history = calls[2].body.to_string();
    for earlier in [
        "Write hello.txt.",
        "hello from acp",
        "Which file did you write?",
    ] {
        assert!(
            history.contains(earlier),
            "the resumed call lacks {earlier:?}"
        );
    }
    let msgs = r.messages(&sid).await;
    let prompts: Vec<String> = msgs
        .iter()
        .zip(roles(&msgs))
        .filter(|(_, role)| *role == "user")
        .map(|(m, _)| stored_text(m))
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(prompts, ["Write hello.txt.", "Which file did you write?"]);

    // Deleting the session ends the agent kept for it.
    assert_eq!(r.d.delete(&format!("/v1/sessions/{sid}")).await, 204);
    poll_until("the deleted session's agent ended", || {
        r.processes().is_empty().then_some(())
    })
    .await;
    assert_eq!(roles(&msgs).last(), Some(&"assistant"));
    assert_eq!(
        stored_text(msgs.last().unwrap()),
        "You asked for hello.txt."
    );
}

/// A write into a deny zone of the project is refused by the daemon's firewall even though the
/// session allows every tool: the agent's fs/write_text_file gets the firewall's error, nothing
/// is written, and the model is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_over_acp_cannot_write_into_a_deny_zone() {
    let zone = tempfile::tempdir().unwrap();
    let secret = zone.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    let Some(r) = start(&format!(
        "[engines.tinyelf]\ndeny_paths = [\"{}\"]\n",
        secret.display()
    ))
    .await
    else {
        return;
    };
    let target = secret.join("key.txt");
    scripted::script(
        &r.mock,
        "acp-deny",
        json!([
            {"text": "Writing it.", "toolCalls": [scripted::call("c1", "write_file",
                json!({"file_path": target.display().to_string(), "content": "leak"}))]},
            {"text": "Could not."}
        ]),
    );
    let mut body = r.session("Write the key.", "mock:script=acp-deny");
    // The project holds the deny zone.
    body["projectPath"] = json!(zone.path().display().to_string());
    body["permissionMode"] = json!("bypassPermissions");
    let (sid, run) = r.d.create(body).await;
    let evs = r.d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    assert!(
        evs.iter().all(|e| e.event != "permissionRequest"),
        "bypassPermissions answers the agent's question: {:?}",
        types(&evs)
    );
    assert!(!target.exists(), "the firewall refused the write");
    let ends = tool_ends(&evs);
    assert_eq!(ends.len(), 1, "{:?}", types(&evs));
    assert_eq!(ends[0]["status"], "error", "{}", ends[0]);
    let calls = r.calls();
    assert_eq!(calls.len(), 2);
    let result = calls[1].body.to_string();
    assert!(result.contains("protected location"), "{result}");
}

/// gemini over ACP whose project (the temporary directory returned) holds a deny zone, `secret/`
/// in `engines.tinyelf.deny_paths`, with `key.txt` (the path returned) holding `content`; None
/// when gemini-cli is not installed.
async fn start_with_a_zone(content: &str) -> Option<(Acp, tempfile::TempDir, PathBuf)> {
    let zone = tempfile::tempdir().unwrap();
    let secret = zone.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    let target = secret.join("key.txt");
    std::fs::write(&target, content).unwrap();
    let r = start(&format!(
        "[engines.tinyelf]\ndeny_paths = [\"{}\"]\n",
        secret.display()
    ))
    .await?;
    Some((r, zone, target))
}

/// A read of a deny zone through the client is refused by the daemon's firewall even though the
/// session allows every tool, and the session's audit keeps the refusal with its gate. gemini-cli
/// reads through the client (fs/read_text_file) the file it edits (its own `read_file` tool reads
/// the disk itself: what confines that is the process's sandbox): the edit finds nothing to
/// replace and the file is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_over_acp_cannot_read_a_deny_zone_and_the_refusal_is_audited() {
    let Some((r, zone, target)) = start_with_a_zone("TOPSECRET-7f3a").await else {
        return;
    };
    scripted::script(
        &r.mock,
        "acp-deny-read",
        json!([
            {"text": "Editing it.", "toolCalls": [scripted::call("c1", "replace",
                json!({"file_path": target.display().to_string(), "instruction": "Blank the key.",
                       "old_string": "TOPSECRET-7f3a", "new_string": "x"}))]},
            {"text": "Could not."}
        ]),
    );
    let (sid, _) = r
        .run_in(zone.path(), "Blank the key.", "acp-deny-read")
        .await;
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "TOPSECRET-7f3a");
    let (status, audit) = r.d.get(&format!("/v1/sessions/{sid}/audit")).await;
    assert_eq!(status, 200, "{audit}");
    let audit = audit["audit"].as_array().unwrap();
    assert!(
        audit
            .iter()
            .any(|a| a["gate"] == "firewall" && a["toolName"] == "read_file"),
        "{audit:?}"
    );
}

/// gemini-cli's own `read_file` tool reads the disk itself, not through the client: under the
/// sandbox a deny zone of its project is not there for it, so the model never gets the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_over_acp_reads_nothing_of_a_deny_zone_with_its_own_read_file() {
    let Some((r, zone, target)) = start_with_a_zone("TOPSECRET-5e1d").await else {
        return;
    };
    scripted::script(
        &r.mock,
        "acp-read-zone",
        json!([
            {"text": "Reading it.", "toolCalls": [scripted::call("c1", "read_file",
                json!({"file_path": target.display().to_string()}))]},
            {"text": "Done."}
        ]),
    );
    r.run_in(zone.path(), "Read the key.", "acp-read-zone")
        .await;
    let calls = r.calls();
    assert_eq!(calls.len(), 2, "the tool's result went back to the model");
    let result = calls[1].body.to_string();
    assert!(result.contains("key.txt"), "{result}");
    assert!(!result.contains("TOPSECRET-5e1d"), "{result}");
}

/// An interrupt in the middle of the agent's stream is the protocol's cancel: the run ends as
/// interrupted with its partial answer kept, the provider's stream is cut, and the session's
/// agent answers the next prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_over_acp_is_interrupted_by_cancel_and_answers_the_next_prompt() {
    let Some(r) = start("").await else { return };
    let (sid, run) =
        r.d.create(r.session("Count slowly.", "mock:tokens=100,delay_ms=30"))
            .await;
    let mut sse = r.d.events(&sid, None).await;
    let mut evs = sse.until_text("tok0 ").await;
    let (status, body) =
        r.d.post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
            .await;
    assert_eq!(status, 200, "{body}");
    evs.extend(sse.until_complete(&run).await);
    assert_eq!(complete(&evs), ["interrupted"], "{:?}", types(&evs));
    assert!(errors(&evs).is_empty(), "{:?}", errors(&evs));
    poll_until("the model call cut", || {
        let calls = r.calls();
        calls
            .iter()
            .all(|c| c.outcome != Outcome::InProgress)
            .then_some(())
    })
    .await;
    assert_eq!(r.calls()[0].outcome, Outcome::ClientDisconnected);
    let msgs = r.messages(&sid).await;
    assert!(stored_text(&msgs[1]).starts_with("tok0 "), "{}", msgs[1]);

    let agent = r.processes();
    assert!(!agent.is_empty(), "the agent outlives the cancelled prompt");
    let run2 = r.d.send(&sid, json!({"prompt": "Count again."})).await;
    let mut evs2 = sse.until_complete(&run2).await;
    evs2.retain(|e| e.run() == run2);
    assert_eq!(complete(&evs2), ["stop"], "{:?}", errors(&evs2));
    assert!(
        text_of(&evs2).starts_with("tok0 tok1 "),
        "{}",
        text_of(&evs2)
    );
    assert_eq!(r.processes(), agent, "the same agent answered");
}

/// Requests the backend cannot serve are refused before anything starts, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_sessions_name_a_configured_agent() {
    let Some(r) = start("").await else { return };
    let base = json!({"engine": "cli", "cliBackend": "acp", "prompt": "hi",
        "projectPath": r.project.path().display().to_string()});
    for (patch, field) in [
        (json!({}), "acpAgent"),
        (json!({"acpAgent": "nobody"}), "acpAgent"),
        (
            json!({"acpAgent": "gemini", "cliArgs": ["--yolo"]}),
            "cliArgs",
        ),
    ] {
        let mut body = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, answer) = r.d.post("/v1/sessions", body.clone()).await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert!(answer.to_string().contains(field), "{body}: {answer}");
    }
    let (status, sessions) = r.d.get("/v1/sessions").await;
    assert_eq!(status, 200);
    assert_eq!(sessions["sessions"], json!([]), "nothing stored");
}

/// A restart: the session's next prompt, on a new daemon, starts a new agent that loads the ACP
/// session it had (`session/load`): the same `cliSessionId`, the earlier turn in the model's
/// context. With `keep_alive_secs = 0` the agent ends after each prompt, with its run `stop`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_over_acp_resumes_its_session_after_a_restart() {
    let Some(mut r) = start("[engines.cli.acp]\nkeep_alive_secs = 0\n").await else {
        return;
    };
    let (sid, run) =
        r.d.create(r.session("Remember the word heron.", "mock:tokens=3"))
            .await;
    let evs = r.d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    let written_in = minute();
    let first = r.cli_session_id(&sid).await;
    poll_until("the agent ended after its prompt", || {
        r.processes().is_empty().then_some(())
    })
    .await;
    r.d.terminate();
    // gemini-cli 0.61 names its session files by the minute and, loading a session in the
    // minute it was written, overwrites the file it then reads (docs/cli.md, "ACP agents"): the
    // restart waits for the next minute, as any real one comes later.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(75);
    while minute() == written_in {
        assert!(
            std::time::Instant::now() < deadline,
            "the clock stands still"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    r.d = Daemon::start_in(r.d.dir.clone(), &r.mock, r.opts.clone());
    let run2 = r.d.send(&sid, json!({"prompt": "Which word?"})).await;
    let evs2 = r.d.events(&sid, None).await.until_complete(&run2).await;
    let evs2: Vec<Ev> = evs2.into_iter().filter(|e| e.run() == run2).collect();
    assert_eq!(complete(&evs2), ["stop"], "{:?}", errors(&evs2));
    assert_eq!(text_of(&evs2), "tok0 tok1 tok2 ");
    assert_eq!(r.cli_session_id(&sid).await, first, "the same ACP session");
    let calls = r.calls();
    assert_eq!(calls.len(), 2);
    let history = calls[1].body.to_string();
    for earlier in ["Remember the word heron.", "tok0 tok1 tok2", "Which word?"] {
        assert!(
            history.contains(earlier),
            "the resumed call lacks {earlier:?}"
        );
    }
}

/// The wall clock's minute.
fn minute() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60
}

/// A daemon with Zed's Claude Code ACP adapter (claude-code-acp, running the pinned claude-code
/// against the mock's Anthropic format) as the ACP agent `claude`: an agent that runs its
/// commands through the client's terminals. The adapter picks a model of claude-code's own list
/// (its default is the opus alias, which ANTHROPIC_DEFAULT_OPUS_MODEL names), and claude-code
/// refuses to start as root without IS_SANDBOX (docs/cli.md, "ACP agents"). The PreToolUse hook writes each payload it sees
/// into the project (hook.json); `forbidden-cmd` is on the firewall's deny list.
async fn start_claude(script: &str) -> Option<Acp> {
    start_claude_with(script, "").await
}

/// [`start_claude`] with `extra` appended to its configuration.
pub(super) async fn start_claude_with(script: &str, extra: &str) -> Option<Acp> {
    let adapter = installed_program("claude-code-acp")?;
    let claude = installed_program("claude")?;
    Some(
        launch("acp-claude", ("ACP_ANTHROPIC_KEY", "sk-anthropic"), |base, marker| {
            format!(
                r#"
[providers.real-anthropic]
kind = "anthropic"
base_url = "{base}"
api_key_env = "ACP_ANTHROPIC_KEY"

[engines.cli.acp.agents.claude]
command = "{adapter}"
provider_setup = "claude-code"
provider = "real-anthropic"
env = {{ {MARKER} = "{marker}", CLAUDE_CODE_EXECUTABLE = "{claude}", IS_SANDBOX = "1", ANTHROPIC_DEFAULT_OPUS_MODEL = "mock:script={script}" }}

[engines.tinyelf]
deny_commands = ["forbidden-cmd"]

[[engines.tinyelf.hooks]]
event = "PreToolUse"
matcher = "shell"
command = "cat >> hook.json"
{extra}
"#,
                adapter = adapter.display(),
                claude = claude.display(),
            )
        })
        .await,
    )
}

impl Acp {
    pub(super) fn claude_session(&self, prompt: &str, extra: Value) -> Value {
        let mut body = json!({"engine": "cli", "cliBackend": "acp", "acpAgent": "claude",
            "prompt": prompt, "projectPath": self.project.path().display().to_string()});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    }

    /// The agent's calls of the scripted model, with their bodies.
    fn script_calls(&self) -> Vec<String> {
        self.mock
            .requests()
            .into_iter()
            .filter(|r| r.format == Format::Anthropic && r.model.starts_with("mock:script="))
            .map(|r| r.body.to_string())
            .collect()
    }
}

pub(super) fn bash(id: &str, command: &str) -> Value {
    scripted::call(
        id,
        "mcp__acp__Bash",
        json!({"command": command, "description": "run it", "timeout": 120_000}),
    )
}

/// Answers the next permission request of `sse` with `decision`; returns the request.
async fn answer_next(
    r: &Acp,
    sid: &str,
    sse: &mut common::Sse,
    decision: &str,
) -> (Vec<Ev>, Value) {
    let evs = sse.until_n("permissionRequest", 1).await;
    let ask = evs
        .iter()
        .rev()
        .find(|e| e.event == "permissionRequest")
        .unwrap()
        .data
        .clone();
    let id = ask["requestId"].as_str().unwrap();
    let (code, body) =
        r.d.post(
            &format!("/v1/sessions/{sid}/permissions/{id}"),
            json!({"decision": decision}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    (evs, ask)
}

/// The client offers terminals, and the agent's commands run in them: the command the client
/// allowed runs once, through the shell tool's PreToolUse hook, in the project, its output back
/// to the model; a command the firewall refuses is not run, the model is told why and the
/// session's audit names the gate; both in one agent process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_over_acp_runs_its_commands_in_the_daemons_terminals() {
    let Some(r) = start_claude("acp-term").await else {
        return;
    };
    scripted::script(
        &r.mock,
        "acp-term",
        json!([
            {"text": "Running it.", "toolCalls": [bash("t1",
                "echo made > made.txt; echo \"from-terminal in $(pwd)\"")]},
            {"text": "Made it."},
            {"text": "Trying.", "toolCalls": [bash("t2", "forbidden-cmd --now > gone.txt")]},
            {"text": "Refused."}
        ]),
    );
    let (sid, run) =
        r.d.create(r.claude_session("Make the file.", json!({})))
            .await;
    let mut sse = r.d.events(&sid, None).await;
    let (mut evs, ask) = answer_next(&r, &sid, &mut sse, "allow").await;
    assert_eq!(ask["toolName"], "execute", "{ask}");
    assert!(ask["input"].to_string().contains("made.txt"), "{ask}");
    evs.extend(sse.until_complete(&run).await);
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    assert_eq!(
        evs.iter()
            .filter(|e| e.event == "permissionRequest")
            .count(),
        1,
        "the client's allow covered the command: {:?}",
        types(&evs)
    );
    let project = r.project.path().canonicalize().unwrap();
    assert_eq!(
        std::fs::read_to_string(project.join("made.txt")).unwrap(),
        "made\n"
    );
    let hook = std::fs::read_to_string(project.join("hook.json")).unwrap();
    let seen: Value = serde_json::from_str(hook.trim()).unwrap();
    assert_eq!(seen["toolName"], "shell", "{seen}");
    assert!(
        seen["input"]["command"]
            .as_str()
            .unwrap()
            .starts_with("echo made > made.txt"),
        "{seen}"
    );
    let calls = r.script_calls();
    assert_eq!(calls.len(), 2, "a call, then its result");
    let result = &calls[1];
    assert!(
        result.contains(&format!("from-terminal in {}", project.display())),
        "the terminal's output went back to the model: {result}"
    );
    assert!(text_of(&evs).contains("Made it."), "{}", text_of(&evs));
    let agent = r.processes();
    assert!(!agent.is_empty(), "the agent is kept for the next prompt");

    // The next prompt: the firewall refuses the command even though the client allows it.
    let run2 =
        r.d.send(&sid, json!({"prompt": "Now the other one."}))
            .await;
    answer_next(&r, &sid, &mut sse, "allow").await;
    let mut evs2 = sse.until_complete(&run2).await;
    evs2.retain(|e| e.run() == run2);
    assert_eq!(complete(&evs2), ["stop"], "{:?}", errors(&evs2));
    assert!(!project.join("gone.txt").exists(), "the command never ran");
    let calls = r.script_calls();
    assert_eq!(calls.len(), 4);
    assert!(
        calls[3].contains("blocked by the firewall"),
        "the model is told why: {}",
        calls[3]
    );
    let (status, audit) = r.d.get(&format!("/v1/sessions/{sid}/audit")).await;
    assert_eq!(status, 200, "{audit}");
    let audit = audit["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["gate"], "firewall", "{}", audit[0]);
    assert_eq!(audit[0]["toolName"], "shell", "{}", audit[0]);
    assert_eq!(r.processes(), agent, "the same agent process");
}

/// An interrupt while the agent waits for its terminal: the run ends interrupted, and the
/// command's whole group is killed with it (the client kills its terminals at the turn's end,
/// whatever the agent does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_over_acp_interrupted_mid_command_kills_its_terminal() {
    let Some(r) = start_claude("acp-term-stop").await else {
        return;
    };
    scripted::script(
        &r.mock,
        "acp-term-stop",
        json!([
            {"text": "Waiting.", "toolCalls": [bash("t1",
                "ns=$(readlink /proc/self/ns/pid); sleep 600 & echo $! $ns > bg.pid; \
                 echo $$ $ns > fg.pid; wait")]},
            {"text": "Stopped."}
        ]),
    );
    let body = r.claude_session(
        "Wait for a long time.",
        json!({"permissionMode": "bypassPermissions"}),
    );
    let (sid, run) = r.d.create(body).await;
    let project = r.project.path().canonicalize().unwrap();
    let pids = poll_until("the command started", || {
        // As this test sees them: the terminal's command runs in a pid namespace of its own (the
        // files name it: the confined agent works in the same directory with pids of its own).
        let read = |f: &str| scripted::procs::read_pid(&project.join(f));
        Some([read("bg.pid")?, read("fg.pid")?])
    })
    .await;
    let alive = |pids: &[i32]| scripted::procs::alive(pids);
    assert_eq!(alive(&pids).len(), 2, "both run");
    let mut sse = r.d.events(&sid, None).await;
    let (status, body) =
        r.d.post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
            .await;
    assert_eq!(status, 200, "{body}");
    let evs = sse.until_complete(&run).await;
    assert_eq!(complete(&evs), ["interrupted"], "{:?}", types(&evs));
    let left = scripted::procs::until_dead(|| alive(&pids)).await;
    assert!(
        left.is_empty(),
        "the terminal's group outlived the run: {left:?}"
    );
}

/// A command the agent runs in the background (its terminal waited for apart) and then kills
/// through `terminal/kill`: the wait the agent left open does not hold the turn, the kill ends
/// the command's group, and the agent tells the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_over_acp_kills_a_background_command_through_its_terminal() {
    let Some(r) = start_claude("acp-term-kill").await else {
        return;
    };
    let name = format!("elfgate-acp-bg-{}", r.marker);
    scripted::script(
        &r.mock,
        "acp-term-kill",
        json!([
            {"text": "Starting.", "toolCalls": [scripted::call("b1", "mcp__acp__Bash",
                json!({"command": format!("exec -a {name} sleep 600"), "description": "wait",
                       "timeout": 120_000, "run_in_background": true}))]},
            {"text": "Stopping.", "toolCalls": [scripted::call("k1", "mcp__acp__KillShell",
                json!({"shell_id": "term-1"}))]},
            {"text": "Stopped it."}
        ]),
    );
    let body = r.claude_session(
        "Start and stop a job.",
        json!({"permissionMode": "bypassPermissions"}),
    );
    let (sid, run) = r.d.create(body).await;
    let evs = r.d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    let calls = r.script_calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls[1].contains("Command started in background with id: term-1"),
        "{}",
        calls[1]
    );
    assert!(
        calls[2].contains("Command killed successfully."),
        "{}",
        calls[2]
    );
    let left = scripted::procs::until_dead(|| scripted::procs::live_named(&name)).await;
    assert!(left.is_empty(), "the killed command lives on: {left:?}");
    assert!(text_of(&evs).contains("Stopped it."), "{}", text_of(&evs));
}
