//! The cli engine with the real coding CLIs (codex, claude-code, gemini-cli), installed by
//! scripts/install-cli-tools.sh into tools/cli/ and pointed at the in-process mock provider on
//! loopback: a prompt runs to completion, a second message resumes the CLI's own session, and an
//! interrupt in the middle of a slow stream ends the run and every process of the CLI.
//!
//! Without the CLIs these tests say so and pass, unless REQUIRE_CLI_TESTS=require (which
//! scripts/test.sh sets): then they fail.

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts, poll_until, text_of, types};
use elfgate_mockllm::{Format, MockServer, Outcome, RecordedRequest};
use scripted::procs::{live_in, live_with_env, until_dead};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One backend as the tests drive it.
#[derive(Clone, Copy)]
pub(super) struct Cli {
    /// `cliBackend`.
    backend: &'static str,
    /// The program in tools/cli/node_modules/.bin/.
    pub(super) program: &'static str,
    /// Its version as scripts/install-cli-tools.sh pins it.
    version: &'static str,
    /// The wire format it speaks to its provider.
    format: Format,
    /// Its shell tool and the arguments that run `command` with it.
    shell: fn(&str) -> (&'static str, Value),
    /// The provider table the daemon hands it (written by `start`).
    provider: &'static str,
    /// That provider's key, which the daemon has in its environment.
    key: &'static str,
}

const CODEX: Cli = Cli {
    backend: "codex",
    program: "codex",
    version: "0.169.0",
    format: Format::OpenAiResponses,
    shell: |c| ("exec_command", json!({"cmd": c})),
    provider: "real-responses",
    key: "sk-responses",
};
pub(super) const CLAUDE: Cli = Cli {
    backend: "claude-code",
    program: "claude",
    version: "2.1.328",
    format: Format::Anthropic,
    shell: |c| ("Bash", json!({"command": c, "description": "run it"})),
    provider: "real-anthropic",
    key: "sk-anthropic",
};
pub(super) const GEMINI: Cli = Cli {
    backend: "gemini-cli",
    program: "gemini",
    version: "0.61.0",
    format: Format::Gemini,
    shell: |c| ("run_shell_command", json!({"command": c})),
    provider: "real-gemini",
    key: "sk-gemini",
};

/// The variable whose value marks every process of one test's CLI runs (they inherit it).
pub(super) const MARKER: &str = "CLIREAL_MARKER";

/// The installed program, or None (with a notice) when it is missing and not required.
pub(super) fn installed(cli: Cli) -> Option<PathBuf> {
    installed_program(cli.program)
}

/// A program of tools/cli (scripts/install-cli-tools.sh), or None (the test is skipped) when it
/// is not installed and not required.
pub(super) fn installed_program(program: &str) -> Option<PathBuf> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/cli/node_modules/.bin")
        .join(program);
    if bin.is_file() {
        return Some(bin.canonicalize().unwrap());
    }
    assert_ne!(
        std::env::var("REQUIRE_CLI_TESTS").as_deref(),
        Ok("require"),
        "{program} is required at {} (scripts/install-cli-tools.sh installs it)",
        bin.display()
    );
    eprintln!(
        "real-CLI test skipped: {program} is not installed (run scripts/install-cli-tools.sh)"
    );
    None
}

/// A daemon whose `cli` backend is the real program, pointed at the mock.
pub(super) struct Real {
    cli: Cli,
    pub(super) mock: MockServer,
    pub(super) d: Daemon,
    /// The session's projectPath, a fresh directory.
    pub(super) project: tempfile::TempDir,
    /// The value of MARKER in this daemon's CLI runs.
    marker: String,
}

pub(super) async fn start(cli: Cli) -> Option<Real> {
    let bin = installed(cli)?;
    let mock = MockServer::start().await.unwrap();
    let base = mock.base_url();
    let project = tempfile::tempdir().unwrap();
    let marker = format!(
        "{}-{}",
        std::process::id(),
        project.path().file_name().unwrap().to_string_lossy()
    );
    let toml = format!(
        r#"
[providers.real-responses]
kind = "openai-responses"
base_url = "{base}/v1"
api_key_env = "CLIREAL_RESPONSES_KEY"

[providers.real-anthropic]
kind = "anthropic"
base_url = "{base}"
api_key_env = "CLIREAL_ANTHROPIC_KEY"

[providers.real-gemini]
kind = "gemini"
base_url = "{base}"
api_key_env = "CLIREAL_GEMINI_KEY"

[providers.real-openai]
kind = "openai"
base_url = "{base}/v1"
api_key_env = "CLIREAL_OPENAI_KEY"

[engines.cli.{backend}]
binary = "{bin}"
provider = "{provider}"
env = {{ {MARKER} = "{marker}" }}
"#,
        backend = cli.backend,
        bin = bin.display(),
        provider = cli.provider,
    );
    let opts = Opts {
        extra_toml: toml,
        env: [
            ("CLIREAL_RESPONSES_KEY", "sk-responses"),
            ("CLIREAL_ANTHROPIC_KEY", "sk-anthropic"),
            ("CLIREAL_GEMINI_KEY", "sk-gemini"),
            ("CLIREAL_OPENAI_KEY", "sk-openai"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec(),
        ..Opts::default()
    };
    let d = Daemon::start(&mock, opts);
    Some(Real {
        cli,
        mock,
        d,
        project,
        marker,
    })
}

impl Real {
    fn session(&self, prompt: &str, model: &str) -> Value {
        json!({"engine": "cli", "cliBackend": self.cli.backend, "prompt": prompt,
               "model": model, "projectPath": self.project.path().display().to_string()})
    }

    /// A session whose model asks the CLI's shell tool to run `command`, then answers "Done.".
    fn shell_session(&self, prompt: &str, command: &str) -> Value {
        let script = format!("shell-{}", self.cli.program);
        let (tool, args) = (self.cli.shell)(command);
        scripted::script(
            &self.mock,
            &script,
            json!([
                {"text": "Running it.", "toolCalls": [scripted::call("call_s1", tool, args)]},
                {"text": "Done."}
            ]),
        );
        let mut body = self.session(prompt, &format!("mock:script={script}"));
        // Every CLI runs its shell tool without asking (gemini-cli declares it only then).
        body["permissionMode"] = json!("bypassPermissions");
        body
    }

    /// Sends the first message of a session and reads its run to the end.
    async fn run(&self, prompt: &str, model: &str) -> (String, Vec<Ev>) {
        let (sid, run) = self.d.create(self.session(prompt, model)).await;
        let evs = self.d.events(&sid, None).await.until_complete(&run).await;
        (sid, evs)
    }

    /// Sends a later message of a session and reads its run to the end (its events only).
    async fn send(&self, sid: &str, prompt: &str) -> Vec<Ev> {
        let mut sse = self.d.events(sid, None).await;
        let run = self.d.send(sid, json!({"prompt": prompt})).await;
        let mut evs = sse.until_complete(&run).await;
        evs.retain(|e| e.run() == run);
        evs
    }

    async fn messages(&self, sid: &str) -> Vec<Value> {
        let (status, m) = self.d.get(&format!("/v1/sessions/{sid}/messages")).await;
        assert_eq!(status, 200, "{m}");
        m["messages"].as_array().unwrap().clone()
    }

    async fn cli_session_id(&self, sid: &str) -> String {
        let (status, s) = self.d.get(&format!("/v1/sessions/{sid}")).await;
        assert_eq!(status, 200, "{s}");
        s["cliSessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no cliSessionId: {s}", self.cli.backend))
            .to_string()
    }

    /// The model calls the CLI made.
    fn calls(&self) -> Vec<RecordedRequest> {
        self.mock
            .requests()
            .into_iter()
            .filter(|r| r.format == self.cli.format)
            .collect()
    }

    /// Live processes started for this daemon's CLI runs: the CLI and everything it started
    /// that kept its environment or works in the project.
    fn processes(&self) -> Vec<i32> {
        let project = self.project.path().canonicalize().unwrap();
        let mut pids = live_with_env(MARKER, &self.marker);
        pids.extend(live_in(&project));
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

pub(super) fn complete(evs: &[Ev]) -> Vec<&str> {
    evs.iter()
        .filter(|e| e.event == "complete")
        .map(|e| e.data["finishReason"].as_str().unwrap())
        .collect()
}

pub(super) fn errors(evs: &[Ev]) -> Vec<&Value> {
    evs.iter()
        .filter(|e| e.event == "error")
        .map(|e| &e.data["error"])
        .collect()
}

pub(super) fn roles(msgs: &[Value]) -> Vec<&str> {
    msgs.iter().map(|m| m["role"].as_str().unwrap()).collect()
}

/// The text blocks of a stored message, joined.
pub(super) fn stored_text(m: &Value) -> String {
    m["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().unwrap())
        .collect()
}

/// A prompt runs to completion: the mock's tokens arrive as text deltas and are stored as the
/// assistant's answer.
async fn runs_to_completion(cli: Cli) {
    let Some(r) = start(cli).await else { return };
    let b = cli.backend;
    // GET /v1/engines shows the installed CLI at the pinned version.
    let (status, engines) = r.d.get("/v1/engines").await;
    assert_eq!(status, 200, "{engines}");
    let backend = engines["engines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "cli")
        .flat_map(|e| e["backends"].as_array().unwrap())
        .find(|x| x["name"] == b)
        .unwrap();
    assert_eq!(backend["available"], true, "{backend}");
    let version = backend["version"].as_str().unwrap();
    assert!(version.contains(cli.version), "{b}: {version}");

    let (sid, evs) = r.run("Say five tokens.", "mock:tokens=5").await;
    assert_eq!(complete(&evs), ["stop"], "{b}: {:?}", errors(&evs));
    assert!(errors(&evs).is_empty(), "{b}: {:?}", errors(&evs));
    let want = "tok0 tok1 tok2 tok3 tok4 ";
    assert_eq!(text_of(&evs), want, "{b}: {:?}", types(&evs));
    let msgs = r.messages(&sid).await;
    assert_eq!(roles(&msgs), ["user", "assistant"], "{b}");
    assert_eq!(stored_text(&msgs[1]), want, "{b}: {}", msgs[1]);
    let calls = r.calls();
    assert_eq!(calls.len(), 1, "{b}: one model call");
    assert_eq!(calls[0].model, "mock:tokens=5", "{b}");
    let auth = calls[0].authorization.as_deref().unwrap_or_default();
    assert!(
        auth.ends_with(cli.key),
        "{b}: the provider's key, not {auth:?}"
    );
    assert!(
        calls[0].body.to_string().contains("Say five tokens."),
        "{b}: the prompt reached the provider"
    );
}

/// A second message resumes the CLI's own session: the provider sees the first turn again.
async fn resumes_its_own_session(cli: Cli) {
    let Some(r) = start(cli).await else { return };
    let b = cli.backend;
    let script = format!("resume-{}", cli.program);
    scripted::script(
        &r.mock,
        &script,
        json!([
            {"text": "The word to keep is marigold."},
            {"text": "You asked me to keep marigold."}
        ]),
    );
    let (sid, evs) = r
        .run("Keep the word marigold.", &format!("mock:script={script}"))
        .await;
    assert_eq!(complete(&evs), ["stop"], "{b}: {:?}", errors(&evs));
    let first = r.cli_session_id(&sid).await;

    let evs = r.send(&sid, "Which word did I ask you to keep?").await;
    assert_eq!(complete(&evs), ["stop"], "{b}: {:?}", errors(&evs));
    assert_eq!(text_of(&evs), "You asked me to keep marigold.", "{b}");
    assert_eq!(
        r.cli_session_id(&sid).await,
        first,
        "{b}: the CLI kept its session"
    );

    let calls = r.calls();
    assert_eq!(calls.len(), 2, "{b}: one model call per message");
    let history = calls[1].body.to_string();
    if cli.backend != "gemini-cli" {
        // codex and claude-code name their session in every request (gemini-cli does not in its
        // body): the stored id is the one the CLI resumed.
        for c in &calls {
            assert!(c.body.to_string().contains(&first), "{b}: {first}");
        }
    }
    for earlier in ["Keep the word marigold.", "The word to keep is marigold."] {
        assert!(
            history.contains(earlier),
            "{b}: the resumed request lacks {earlier:?}"
        );
    }
    let msgs = r.messages(&sid).await;
    assert_eq!(
        roles(&msgs),
        ["user", "assistant", "user", "assistant"],
        "{b}"
    );
    assert_eq!(
        stored_text(&msgs[3]),
        "You asked me to keep marigold.",
        "{b}"
    );
}

/// An interrupt in the middle of a slow stream ends the run as interrupted and leaves no process
/// of the CLI behind.
async fn interrupt_ends_the_run_and_its_processes(cli: Cli) {
    let Some(r) = start(cli).await else { return };
    let b = cli.backend;
    let (sid, run) =
        r.d.create(r.session("Count slowly.", "mock:tokens=200,delay_ms=100"))
            .await;
    let mut sse = r.d.events(&sid, None).await;
    let mut evs = if cli.backend == "codex" {
        // codex prints an answer only once it is whole: the stream being under way at the mock
        // is the middle of the run.
        poll_until(&format!("{b}: its model call streaming"), || {
            r.calls()
                .iter()
                .any(|c| c.outcome == Outcome::InProgress)
                .then_some(())
        })
        .await;
        Vec::new()
    } else {
        sse.until_text("tok0 ").await
    };
    let running = r.processes();
    assert!(!running.is_empty(), "{b}: no process of the run found");

    let asked = Instant::now();
    let (status, body) =
        r.d.post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
            .await;
    assert_eq!(status, 200, "{b}: {body}");
    evs.extend(sse.until_complete(&run).await);
    let took = asked.elapsed();
    eprintln!(
        "{b}: interrupted run ended {} ms after the request",
        took.as_millis()
    );

    assert_eq!(complete(&evs), ["interrupted"], "{b}: {:?}", types(&evs));
    assert!(errors(&evs).is_empty(), "{b}: {:?}", errors(&evs));
    // The stream was cut in its middle, by the CLI going away.
    poll_until(&format!("{b}: its model call cut"), || {
        let calls = r.calls();
        (calls.iter().all(|c| c.outcome != Outcome::InProgress)).then_some(calls)
    })
    .await;
    assert_eq!(
        r.calls().last().unwrap().outcome,
        Outcome::ClientDisconnected,
        "{b}"
    );
    let left = until_dead(|| r.processes()).await;
    assert!(
        left.is_empty(),
        "{b}: {left:?} still alive (of {running:?})"
    );
    eprintln!(
        "{b}: its last process was gone {} ms after the request",
        asked.elapsed().as_millis()
    );
    let msgs = r.messages(&sid).await;
    assert_eq!(roles(&msgs)[0], "user", "{b}");
    if cli.backend != "codex" {
        // The partial answer is kept.
        assert!(
            stored_text(&msgs[1]).starts_with("tok0 "),
            "{b}: {}",
            msgs[1]
        );
    }
}

#[tokio::test]
async fn codex_runs_a_prompt_to_completion() {
    runs_to_completion(CODEX).await;
}

#[tokio::test]
async fn claude_code_runs_a_prompt_to_completion() {
    runs_to_completion(CLAUDE).await;
}

#[tokio::test]
async fn gemini_cli_runs_a_prompt_to_completion() {
    runs_to_completion(GEMINI).await;
}

#[tokio::test]
async fn codex_resumes_its_own_session() {
    resumes_its_own_session(CODEX).await;
}

#[tokio::test]
async fn claude_code_resumes_its_own_session() {
    resumes_its_own_session(CLAUDE).await;
}

#[tokio::test]
async fn gemini_cli_resumes_its_own_session() {
    resumes_its_own_session(GEMINI).await;
}

#[tokio::test]
async fn codex_interrupt_ends_the_run_and_its_processes() {
    interrupt_ends_the_run_and_its_processes(CODEX).await;
}

#[tokio::test]
async fn claude_code_interrupt_ends_the_run_and_its_processes() {
    interrupt_ends_the_run_and_its_processes(CLAUDE).await;
}

#[tokio::test]
async fn gemini_cli_interrupt_ends_the_run_and_its_processes() {
    interrupt_ends_the_run_and_its_processes(GEMINI).await;
}

/// claude-code asks before a command that writes; the client's answer goes back to it: allowed,
/// the command runs in the project; denied, it does not, and the model is told why.
#[tokio::test]
async fn claude_code_asks_the_client_before_a_command_that_writes() {
    let Some(r) = start(CLAUDE).await else { return };
    for (answer, status, made) in [
        (json!({"decision": "allow"}), "success", true),
        (
            json!({"decision": "deny", "message": "not in this repository"}),
            "error",
            false,
        ),
    ] {
        let decision = answer["decision"].as_str().unwrap();
        let script = format!("write-{decision}");
        let file = format!("made-{decision}");
        scripted::script(
            &r.mock,
            &script,
            json!([
                {"text": "Creating it.", "toolCalls": [scripted::call("toolu_w1", "Bash",
                    json!({"command": format!("touch {file}"), "description": "create a file"}))]},
                {"text": "Finished."}
            ]),
        );
        r.mock.clear_requests();
        let (sid, run) =
            r.d.create(r.session("Create the file.", &format!("mock:script={script}")))
                .await;
        let mut sse = r.d.events(&sid, None).await;
        let mut evs = sse.until_n("permissionRequest", 1).await;
        let ask = evs.last().unwrap().data.clone();
        assert_eq!(ask["toolName"], "Bash", "{ask}");
        assert_eq!(ask["input"]["command"], format!("touch {file}"), "{ask}");
        let id = ask["requestId"].as_str().unwrap();
        let (code, body) =
            r.d.post(
                &format!("/v1/sessions/{sid}/permissions/{id}"),
                answer.clone(),
            )
            .await;
        assert_eq!(code, 200, "{body}");
        evs.extend(sse.until_complete(&run).await);
        assert_eq!(complete(&evs), ["stop"], "{decision}: {:?}", errors(&evs));
        let end = evs.iter().find(|e| e.event == "toolCallEnd").unwrap();
        assert_eq!(end.data["status"], status, "{decision}: {}", end.data);
        assert_eq!(r.project.path().join(&file).exists(), made, "{decision}");
        assert!(text_of(&evs).ends_with("Finished."), "{decision}");
        // The model got the tool's result (or the refusal) in the next request.
        let calls = r.calls();
        assert_eq!(calls.len(), 2, "{decision}");
        let next = calls[1].body.to_string();
        assert!(next.contains("tool_result"), "{decision}");
        if !made {
            assert!(next.contains("not in this repository"), "{decision}");
        }
    }
}

/// The CLI's shell tool runs a command the model asks for: the call and its output arrive as
/// toolCallStart/toolCallEnd, and the history stores the call, its result and the answer.
async fn runs_a_shell_command(cli: Cli) {
    let Some(r) = start(cli).await else { return };
    let b = cli.backend;
    let body = r.shell_session("Say hello with a command.", "echo tool-said | tr a-z A-Z");
    let (sid, run) = r.d.create(body).await;
    let evs = r.d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(complete(&evs), ["stop"], "{b}: {:?}", errors(&evs));
    let t = types(&evs);
    let starts = evs.iter().filter(|e| e.event == "toolCallStart").count();
    let ends: Vec<&Ev> = evs.iter().filter(|e| e.event == "toolCallEnd").collect();
    assert_eq!((starts, ends.len()), (1, 1), "{b}: {t:?}");
    assert_eq!(ends[0].data["status"], "success", "{b}: {}", ends[0].data);
    let output = ends[0].data["block"]["content"].to_string();
    assert!(output.contains("TOOL-SAID"), "{b}: {output}");
    assert!(text_of(&evs).ends_with("Done."), "{b}: {:?}", text_of(&evs));
    let msgs = r.messages(&sid).await;
    assert_eq!(
        roles(&msgs),
        ["user", "assistant", "tool", "assistant"],
        "{b}"
    );
    assert_eq!(stored_text(&msgs[3]), "Done.", "{b}");
    // The command's output (not its text) went back to the model.
    let calls = r.calls();
    assert_eq!(calls.len(), 2, "{b}");
    assert!(calls[1].body.to_string().contains("TOOL-SAID"), "{b}");
}

#[tokio::test]
async fn codex_runs_a_shell_command() {
    runs_a_shell_command(CODEX).await;
}

#[tokio::test]
async fn claude_code_runs_a_shell_command() {
    runs_a_shell_command(CLAUDE).await;
}

#[tokio::test]
async fn gemini_cli_runs_a_shell_command() {
    runs_a_shell_command(GEMINI).await;
}

/// An interrupt while the CLI's shell tool runs a command that would never end: the run ends
/// interrupted, the tool call with it, and neither the CLI nor the command is left.
async fn interrupt_during_a_shell_command(cli: Cli) {
    let Some(r) = start(cli).await else { return };
    let b = cli.backend;
    let body = r.shell_session("Wait forever.", "tail -f /dev/null");
    let (sid, run) = r.d.create(body).await;
    let mut sse = r.d.events(&sid, None).await;
    let mut evs = sse.until_n("toolCallStart", 1).await;
    let command = poll_until(&format!("{b}: the command running"), || {
        r.processes().into_iter().find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"/dev/null"))
        })
    })
    .await;
    let running = r.processes();

    let (status, body) =
        r.d.post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
            .await;
    assert_eq!(status, 200, "{b}: {body}");
    evs.extend(sse.until_complete(&run).await);
    assert_eq!(complete(&evs), ["interrupted"], "{b}: {:?}", types(&evs));
    assert!(errors(&evs).is_empty(), "{b}: {:?}", errors(&evs));
    let ends: Vec<&Ev> = evs.iter().filter(|e| e.event == "toolCallEnd").collect();
    assert_eq!(ends.len(), 1, "{b}: {:?}", types(&evs));
    // codex and gemini-cli print nothing more and the engine closes the call; claude-code
    // closes it itself with an error result saying the call was stopped while running. Either
    // way the client sees the call interrupted.
    assert_eq!(
        ends[0].data["status"], "interrupted",
        "{b}: {}",
        ends[0].data
    );
    let left = until_dead(|| r.processes()).await;
    assert!(
        left.is_empty(),
        "{b}: {left:?} still alive (of {running:?}, the command {command})"
    );
}

#[tokio::test]
async fn codex_interrupt_during_a_shell_command_leaves_nothing_behind() {
    interrupt_during_a_shell_command(CODEX).await;
}

#[tokio::test]
async fn claude_code_interrupt_during_a_shell_command_leaves_nothing_behind() {
    interrupt_during_a_shell_command(CLAUDE).await;
}

#[tokio::test]
async fn gemini_cli_interrupt_during_a_shell_command_leaves_nothing_behind() {
    interrupt_during_a_shell_command(GEMINI).await;
}

/// Runs codex (`bin`) in `project` with the daemon's Responses door as its provider (a fresh
/// CODEX_HOME whose config.toml names the door, the daemon's token as its key), its built-in
/// tools as they come; fails the test unless codex succeeds.
pub(super) async fn codex_at_door(
    bin: &Path,
    d: &Daemon,
    project: &Path,
    model: &str,
    prompt: &str,
) -> std::process::Output {
    // codex refuses a CODEX_HOME under /tmp.
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "check_for_update_on_startup = false\n\n[model_providers.elfgate]\nname = \
             \"elfgate\"\nbase_url = \"{}/v1\"\nenv_key = \"ELFGATE_DOOR_KEY\"\nwire_api = \
             \"responses\"\n",
            d.base
        ),
    )
    .unwrap();
    let out = tokio::process::Command::new(bin)
        .args([
            "exec",
            "--json",
            "--skip-git-repo-check",
            "-c",
            "model_provider=\"elfgate\"",
            "-m",
            model,
            "--dangerously-bypass-approvals-and-sandbox",
            "--",
            prompt,
        ])
        .current_dir(project)
        .env("CODEX_HOME", home.path())
        .env("ELFGATE_DOOR_KEY", d.token.clone().unwrap_or_default())
        .env_remove("OPENAI_API_KEY")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "codex failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// codex pointed by hand at the daemon's Responses door as its provider (`-c model_providers…`,
/// the daemon's token as its key), on a Chat Completions provider behind it: the model asks for a
/// shell command, codex runs it and sends the output back through the door, and the answer comes.
#[tokio::test]
async fn codex_uses_the_daemons_responses_door_as_its_provider() {
    let Some(bin) = installed(CODEX) else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let project = tempfile::tempdir().unwrap();
    scripted::script(
        &mock,
        "codex-door",
        json!([
            {"text": "Running it.", "toolCalls": [scripted::call("call_d1", "exec_command",
                json!({"cmd": "echo door-ok > out.txt && echo written"}))]},
            {"text": "Done through the door."}
        ]),
    );
    let out = codex_at_door(
        &bin,
        &d,
        project.path(),
        "mock/mock:script=codex-door",
        "write the file",
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Done through the door."), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("out.txt")).unwrap(),
        "door-ok\n"
    );
    // Behind the door, a Chat Completions provider: the second call carries the command's output
    // as the tool message answering the call.
    let calls: Vec<Value> = mock
        .requests()
        .into_iter()
        .filter(|r| r.model == "mock:script=codex-door")
        .map(|r| r.body)
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let msgs = calls[1]["messages"].as_array().unwrap();
    let tool = msgs
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool message: {msgs:?}"));
    assert_eq!(tool["tool_call_id"], "call_d1");
    assert!(
        tool["content"].as_str().unwrap().contains("written"),
        "{tool}"
    );
    // codex sends `store: false`: each call's session is deleted once it is answered.
    assert!(
        mock.requests()
            .iter()
            .all(|r| r.model != "mock:script=codex-door" || r.outcome == Outcome::Completed)
    );
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, list) = d.get("/v1/sessions").await;
        if list["sessions"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "store: false kept {list}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// gemini-cli pointed by hand at the daemon's Gemini door (`GOOGLE_GEMINI_BASE_URL`, the
/// daemon's token as its key), on a Chat Completions provider behind it: the model asks for a
/// shell command, gemini runs it and sends the output back through the door, and the answer comes.
#[tokio::test]
async fn gemini_cli_uses_the_daemons_gemini_door_as_its_provider() {
    let Some(bin) = installed(GEMINI) else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".gemini")).unwrap();
    std::fs::write(
        home.path().join(".gemini/settings.json"),
        json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
               "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
               "privacy": {"usageStatisticsEnabled": false},
               "telemetry": {"enabled": false}})
        .to_string(),
    )
    .unwrap();
    scripted::script(
        &mock,
        "gemini-door",
        json!([
            {"text": "Running it.", "toolCalls": [scripted::call("call_g1", "run_shell_command",
                json!({"command": "echo door-ok > out.txt && echo written"}))]},
            {"text": "Done through the door."}
        ]),
    );
    let out = tokio::process::Command::new(&bin)
        .args([
            "--prompt=write the file",
            "--output-format",
            "json",
            "--skip-trust",
            "--approval-mode",
            "yolo",
            "-m",
            "mock/mock:script=gemini-door",
        ])
        .current_dir(project.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("GEMINI_CLI_NO_RELAUNCH", "true")
        .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
        .env("GOOGLE_GEMINI_BASE_URL", &d.base)
        .env("GEMINI_API_KEY", d.token.clone().unwrap_or_default())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "gemini failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Done through the door."), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("out.txt")).unwrap(),
        "door-ok\n"
    );
    // Behind the door, a Chat Completions provider: the second call carries the command's output
    // as the tool message answering the call.
    let calls: Vec<Value> = mock
        .requests()
        .into_iter()
        .filter(|r| r.model == "mock:script=gemini-door")
        .map(|r| r.body)
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let msgs = calls[1]["messages"].as_array().unwrap();
    let tool = msgs
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool message: {msgs:?}"));
    assert!(
        tool["content"].as_str().unwrap().contains("written"),
        "{tool}"
    );
    // Each call through the door is a stored session.
    let (_, list) = d.get("/v1/sessions").await;
    assert!(!list["sessions"].as_array().unwrap().is_empty(), "{list}");
}

/// Finds the run token in the environment of the probe or of its nearest ancestor that has it
/// (a CLI may keep its key from its tools' environment), writes it to token.txt, and tries it on
/// another route and on its own door with another model: probe.json has both statuses.
const TOKEN_PROBE: &str = r#"
const fs = require("fs");
const [varName, base, doorPath, body] = process.argv.slice(2);
let pid = process.pid, token = null;
while (pid > 1 && !token) {
  try {
    const env = fs.readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
    const hit = env.find((e) => e.startsWith(varName + "="));
    if (hit) token = hit.slice(varName.length + 1);
  } catch (e) {}
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  pid = parseInt(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}
fs.writeFileSync("token.txt", token || "");
(async () => {
  const headers = { authorization: "Bearer " + token, "content-type": "application/json" };
  const other = await fetch(base + "/v1/sessions", { headers });
  const wrong = await fetch(base + doorPath, { method: "POST", headers, body });
  fs.writeFileSync("probe.json", JSON.stringify({ other: other.status, wrong_route: wrong.status }));
  console.log("probed");
})();
"#;

/// The variable a CLI reads its provider key from, where the daemon puts the run token when it
/// runs the CLI through its own door; that door's path and a body naming another model.
fn door_of(cli: Cli) -> (&'static str, &'static str, Value) {
    match cli.backend {
        "codex" => (
            "CLI_DOOR_TOKEN",
            "/v1/responses",
            json!({"model": "real-openai/other", "input": "hi"}),
        ),
        "claude-code" => (
            "ANTHROPIC_API_KEY",
            "/v1/messages",
            json!({"model": "real-openai/other", "max_tokens": 5,
                   "messages": [{"role": "user", "content": "hi"}]}),
        ),
        _ => (
            "GEMINI_API_KEY",
            "/v1beta/models/real-openai/other:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
        ),
    }
}

/// A cli session on a provider of another wire format than the CLI's (`provider`, of `format`)
/// goes through the daemon's own door for the CLI's format, with a token scoped to the run: the
/// model's shell command runs, its output goes back through the door to the provider (which sees
/// the daemon's key, never the CLI's), the token works for nothing else while the run lasts and
/// for nothing at all after it.
async fn runs_through_the_door(cli: Cli, provider: &str, format: Format, key: &str) {
    let Some(r) = start(cli).await else { return };
    let b = cli.backend;
    let (var, door, wrong) = door_of(cli);
    std::fs::write(r.project.path().join("probe.js"), TOKEN_PROBE).unwrap();
    let command = format!("node probe.js {var} {} '{door}' '{wrong}'", r.d.base);
    let mut body = r.shell_session("Probe with a command.", &command);
    body["providerId"] = json!(provider);
    let (sid, run) = r.d.create(body).await;
    let evs = r.d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(complete(&evs), ["stop"], "{b}: {:?}", errors(&evs));
    let init = evs.iter().find(|e| e.event == "init").unwrap();
    assert_eq!(
        init.data["systemInfo"]["proxied"], true,
        "{b}: {}",
        init.data
    );
    let ends: Vec<&Ev> = evs.iter().filter(|e| e.event == "toolCallEnd").collect();
    assert_eq!(ends.len(), 1, "{b}: {:?}", types(&evs));
    assert!(
        ends[0].data["block"]["content"]
            .to_string()
            .contains("probed"),
        "{b}: {}",
        ends[0].data
    );
    assert!(text_of(&evs).ends_with("Done."), "{b}: {:?}", text_of(&evs));
    // The provider saw the daemon's key for it, in its own format, and the command's output.
    let calls: Vec<RecordedRequest> = r
        .mock
        .requests()
        .into_iter()
        .filter(|c| c.format == format)
        .collect();
    assert_eq!(calls.len(), 2, "{b}");
    assert!(
        calls
            .iter()
            .all(|c| c.authorization.as_deref().unwrap_or_default().contains(key)),
        "{b}: {:?}",
        calls.iter().map(|c| &c.authorization).collect::<Vec<_>>()
    );
    assert!(calls[1].body.to_string().contains("probed"), "{b}");
    // The token: a run token, refused elsewhere during the run, and everywhere after it.
    let token = std::fs::read_to_string(r.project.path().join("token.txt")).unwrap();
    assert!(token.starts_with("elfgate-run-"), "{b}: {token:?}");
    let probe: Value = serde_json::from_str(
        &std::fs::read_to_string(r.project.path().join("probe.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(probe, json!({"other": 403, "wrong_route": 403}), "{b}");
    let after = reqwest::Client::new()
        .post(format!("{}{door}", r.d.base))
        .bearer_auth(&token)
        .json(&wrong)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 403, "{b}");
}

#[tokio::test]
async fn codex_runs_on_an_anthropic_provider_through_the_responses_door() {
    runs_through_the_door(CODEX, "real-anthropic", Format::Anthropic, "sk-anthropic").await;
}

#[tokio::test]
async fn gemini_cli_runs_on_an_openai_provider_through_the_gemini_door() {
    runs_through_the_door(GEMINI, "real-openai", Format::OpenAiChat, "sk-openai").await;
}

#[tokio::test]
async fn claude_code_runs_on_an_openai_provider_through_the_messages_door() {
    runs_through_the_door(CLAUDE, "real-openai", Format::OpenAiChat, "sk-openai").await;
}

/// `engine: "claude-sdk"`: claude-code over its SDK protocol, through the daemon's Anthropic door
/// to a Chat Completions provider: an answer, a permission asked and denied (the command does not
/// run, the model is told why), a resume of claude's own session, an interrupt; listed by
/// GET /v1/engines; the session's MCP servers handed to claude-code.
#[tokio::test]
async fn claude_sdk_runs_claude_code_on_any_provider() {
    let Some(r) = start(CLAUDE).await else { return };
    let sdk_session = |prompt: &str, model: &str| {
        json!({"engine": "claude-sdk", "prompt": prompt, "model": model,
               "providerId": "real-openai",
               "projectPath": r.project.path().display().to_string()})
    };
    let (_, engines) = r.d.get("/v1/engines").await;
    let sdk = engines["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "claude-sdk")
        .unwrap_or_else(|| panic!("{engines}"));
    assert_eq!(sdk["backends"][0]["name"], "claude-code", "{sdk}");
    assert_eq!(sdk["backends"][0]["available"], true, "{sdk}");

    // An answer, then a resume of claude's own session.
    scripted::script(
        &r.mock,
        "sdk-resume",
        json!([
            {"text": "The word to keep is marigold."},
            {"text": "You asked me to keep marigold."}
        ]),
    );
    let (sid, run) =
        r.d.create(sdk_session(
            "Keep the word marigold.",
            "mock:script=sdk-resume",
        ))
        .await;
    let evs = r.d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    assert_eq!(text_of(&evs), "The word to keep is marigold.");
    let init = evs.iter().find(|e| e.event == "init").unwrap();
    assert_eq!(init.data["systemInfo"]["proxied"], true, "{}", init.data);
    let first = r.cli_session_id(&sid).await;
    let evs = r.send(&sid, "Which word did I ask you to keep?").await;
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    assert_eq!(text_of(&evs), "You asked me to keep marigold.");
    assert_eq!(r.cli_session_id(&sid).await, first);
    let chat: Vec<RecordedRequest> = r
        .mock
        .requests()
        .into_iter()
        .filter(|c| c.format == Format::OpenAiChat && c.model == "mock:script=sdk-resume")
        .collect();
    assert_eq!(chat.len(), 2);
    assert!(
        chat[1]
            .body
            .to_string()
            .contains("The word to keep is marigold.")
    );
    assert!(
        chat.iter()
            .all(|c| c.authorization.as_deref() == Some("Bearer sk-openai"))
    );

    // A permission asked and denied.
    scripted::script(
        &r.mock,
        "sdk-deny",
        json!([
            {"text": "Creating it.", "toolCalls": [scripted::call("toolu_d1", "Bash",
                json!({"command": "touch sdk-made", "description": "create a file"}))]},
            {"text": "Finished."}
        ]),
    );
    let (sid, run) =
        r.d.create(sdk_session("Create the file.", "mock:script=sdk-deny"))
            .await;
    let mut sse = r.d.events(&sid, None).await;
    let mut evs = sse.until_n("permissionRequest", 1).await;
    let ask = evs.last().unwrap().data.clone();
    assert_eq!(ask["toolName"], "Bash", "{ask}");
    let id = ask["requestId"].as_str().unwrap();
    let (code, body) =
        r.d.post(
            &format!("/v1/sessions/{sid}/permissions/{id}"),
            json!({"decision": "deny", "message": "not in this repository"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    evs.extend(sse.until_complete(&run).await);
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    assert!(!r.project.path().join("sdk-made").exists());
    let denied = r
        .mock
        .requests()
        .into_iter()
        .filter(|c| c.model == "mock:script=sdk-deny")
        .nth(1)
        .unwrap();
    assert!(denied.body.to_string().contains("not in this repository"));

    // An interrupt in the middle of a slow stream.
    let (sid, run) =
        r.d.create(sdk_session("Count slowly.", "mock:tokens=200,delay_ms=100"))
            .await;
    let mut sse = r.d.events(&sid, None).await;
    let mut evs = sse.until_text("tok0 ").await;
    let (status, body) =
        r.d.post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
            .await;
    assert_eq!(status, 200, "{body}");
    evs.extend(sse.until_complete(&run).await);
    assert_eq!(complete(&evs), ["interrupted"], "{:?}", types(&evs));
    let left = until_dead(|| r.processes()).await;
    assert!(left.is_empty(), "{left:?} still alive");

    // Another backend is refused.
    let mut body = sdk_session("hi", "mock:tokens=1");
    body["cliBackend"] = json!("codex");
    let (status, e) = r.d.post("/v1/sessions", body).await;
    assert_eq!(status, 422, "{e}");
    assert!(e.to_string().contains("claude-code only"), "{e}");
}
