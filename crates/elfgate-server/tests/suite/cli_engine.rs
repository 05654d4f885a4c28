//! The cli engine end to end: the real daemon runs fake CLIs (tests/fixtures/cli/) that print
//! each backend's own stdout format, and the tests look at what a client sees: events, stored
//! messages, the session's cliSessionId, and, from the fakes' records and /proc, the command line,
//! environment and processes of each run.

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts, poll_until, text_of, types};
use elfgate_mockllm::MockServer;
use scripted::procs::{
    alive, host_pid, is_other_pid_ns, live_in_group, live_in_pid_ns, until_dead,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const BACKENDS: [&str; 3] = ["codex", "claude-code", "gemini-cli"];

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cli")
        .join(name)
        .display()
        .to_string()
}

fn fake_of(backend: &str) -> &'static str {
    match backend {
        "codex" => "fake-codex",
        "claude-code" => "fake-claude",
        _ => "fake-gemini",
    }
}

/// A daemon whose three backends are the fakes, each recording its last run into
/// `records/<backend>`, with `cli` keys added to `[engines.cli]`, `backend` keys to every backend's
/// table and `env` entries to every backend's variables. The providers the CLIs get have keys in
/// the daemon's environment, as has a provider no CLI uses.
pub(crate) struct CliDaemon {
    pub(crate) d: Daemon,
    opts: Opts,
    records: PathBuf,
    pub(crate) project: PathBuf,
}

pub(crate) fn start(mock: &MockServer, cli: &str, backend: &str) -> CliDaemon {
    start_with(mock, cli, backend, "")
}

/// A daemon whose fakes ignore SIGINT and SIGTERM.
fn start_deaf(mock: &MockServer) -> CliDaemon {
    start_with(mock, "", "", r#", FAKE_CLI_IGNORE_SIGNALS = "1""#)
}

fn start_with(mock: &MockServer, cli: &str, backend: &str, env: &str) -> CliDaemon {
    CliDaemon::start(mock, cli_opts(mock, cli, backend, env))
}

/// [`start_with`]'s options (and its records and project folders), for a test that changes
/// them before it starts the daemon with [`CliDaemon::start`].
pub(crate) fn cli_opts(
    mock: &MockServer,
    cli: &str,
    backend: &str,
    env: &str,
) -> (Opts, PathBuf, PathBuf) {
    let work = tempfile::tempdir().unwrap().keep();
    let records = work.join("records");
    let project = work.join("project");
    std::fs::create_dir_all(&records).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let base = mock.base_url();
    // The fakes write their records outside their project, which the sandbox keeps read-only
    // unless it is named writable.
    let mut toml = format!(
        r#"
[sandbox]
writable_paths = ["{records}"]

[providers.cli-responses]
kind = "openai-responses"
base_url = "{base}/v1"
api_key_env = "FAKE_RESPONSES_KEY"
default_model = "gpt-fake"

[providers.cli-anthropic]
kind = "anthropic"
base_url = "{base}"
api_key_env = "FAKE_ANTHROPIC_KEY"

[providers.cli-gemini]
kind = "gemini"
base_url = "{base}"
api_key_env = "FAKE_GEMINI_KEY"
default_model = "gemini-fake"

[providers.unused]
kind = "openai"
base_url = "{base}/v1"
api_key_env = "FAKE_UNUSED_KEY"

[engines.cli]
kill_grace_ms = 1000
interrupt_grace_ms = 1000
{cli}
"#,
        records = records.display(),
    );
    for (b, provider) in [
        ("codex", "cli-responses"),
        ("claude-code", "cli-anthropic"),
        ("gemini-cli", "cli-gemini"),
    ] {
        toml.push_str(&format!(
            r#"
[engines.cli.{b}]
binary = "{bin}"
provider = "{provider}"
env = {{ FAKE_CLI_RECORD = "{rec}"{env} }}
{backend}
"#,
            bin = fixture(fake_of(b)),
            rec = records.join(b).display(),
        ));
    }
    let opts = Opts {
        extra_toml: toml,
        env: [
            ("FAKE_RESPONSES_KEY", "sk-responses"),
            ("FAKE_ANTHROPIC_KEY", "sk-anthropic"),
            ("FAKE_GEMINI_KEY", "sk-gemini"),
            ("FAKE_UNUSED_KEY", "sk-unused"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec(),
        ..Opts::default()
    };
    (opts, records, project)
}

/// `opts` from [`cli_opts`] with the sandbox off: its CLIs run unconfined.
pub(crate) fn sandbox_off(opts: &mut Opts) {
    opts.extra_toml = opts
        .extra_toml
        .replacen("[sandbox]\n", "[sandbox]\nmode = \"off\"\n", 1);
}

/// The last run of a fake as it recorded it (each run rewrites the file).
pub(crate) struct Recorded(pub(crate) Value);

impl Recorded {
    pub(crate) fn args(&self) -> Vec<String> {
        let argv = self.0["argv"].as_array().unwrap();
        argv[1..]
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    }
    pub(crate) fn env(&self, name: &str) -> Option<&str> {
        self.0["env"][name].as_str()
    }
    fn envs(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.0["env"].as_object().unwrap().iter()
    }
    fn pid_ns(&self) -> &str {
        self.0["pid_ns"].as_str().unwrap()
    }
    /// The pid as this test sees it of a process the fake recorded under `key` (`pid`,
    /// `grandchild_pid`, `tool_pid`), while it runs (a confined fake records the pids of its own
    /// pid namespace).
    pub(crate) fn running(&self, key: &str) -> Option<i32> {
        host_pid(self.pid_ns(), self.0[key].as_i64()? as i32)
    }
    /// The grandchild, while it runs.
    fn grandchild(&self) -> Option<i32> {
        self.running("grandchild_pid")
    }
    /// What is left alive of the run: of its process group, or, when it ran confined (its group's
    /// leader, bwrap, is outside its pid namespace and its pgid reads 0 there), of its pid
    /// namespace, which holds everything it started.
    fn left_alive(&self) -> Vec<i32> {
        if is_other_pid_ns(self.pid_ns()) {
            live_in_pid_ns(self.pid_ns())
        } else {
            live_in_group(self.0["pgid"].as_i64().unwrap() as i32)
        }
    }
    fn cwd(&self) -> &str {
        self.0["cwd"].as_str().unwrap()
    }
}

impl CliDaemon {
    /// A daemon on `opts` from [`cli_opts`].
    pub(crate) fn start(
        mock: &MockServer,
        (opts, records, project): (Opts, PathBuf, PathBuf),
    ) -> CliDaemon {
        CliDaemon {
            d: Daemon::start(mock, opts.clone()),
            opts,
            records,
            project,
        }
    }

    /// A daemon on `opts` from [`cli_opts`] whose data directory is `dir`.
    pub(crate) fn start_in(
        dir: PathBuf,
        mock: &MockServer,
        (opts, records, project): (Opts, PathBuf, PathBuf),
    ) -> CliDaemon {
        CliDaemon {
            d: Daemon::start_in(dir, mock, opts.clone()),
            opts,
            records,
            project,
        }
    }

    /// The last run `backend` recorded, if any.
    fn record(&self, backend: &str) -> Option<Recorded> {
        let text = std::fs::read_to_string(self.records.join(backend)).ok()?;
        serde_json::from_str(&text).ok().map(Recorded)
    }

    /// Waits until `backend`'s record is of the run whose prompt is `prompt` (and, with
    /// `grandchild`, has the grandchild's pid).
    pub(crate) async fn until_record(
        &self,
        backend: &str,
        prompt: &str,
        grandchild: bool,
    ) -> Recorded {
        poll_until(&format!("{backend} recorded '{prompt}'"), || {
            let r = self.record(backend)?;
            (r.0["prompt"] == prompt && (!grandchild || r.grandchild().is_some())).then_some(r)
        })
        .await
    }

    pub(crate) fn session(&self, backend: &str, prompt: &str) -> Value {
        json!({"engine": "cli", "cliBackend": backend, "prompt": prompt,
               "projectPath": self.project.display().to_string()})
    }

    /// A session whose CLI may run its tools without asking (gemini-cli declares its shell tool
    /// only then).
    fn session_with_tools(&self, backend: &str, prompt: &str) -> Value {
        let mut body = self.session(backend, prompt);
        body["permissionMode"] = json!("bypassPermissions");
        body
    }

    /// Starts a session and reads its first run to its end.
    async fn run(&self, backend: &str, prompt: &str) -> (String, Vec<Ev>) {
        let (sid, run) = self.d.create(self.session(backend, prompt)).await;
        let mut sse = self.d.events(&sid, None).await;
        let evs = sse.until_complete(&run).await;
        (sid, evs)
    }

    async fn messages(&self, sid: &str) -> Vec<Value> {
        let (status, m) = self.d.get(&format!("/v1/sessions/{sid}/messages")).await;
        assert_eq!(status, 200, "{m}");
        m["messages"].as_array().unwrap().clone()
    }
}

pub(crate) fn complete(evs: &[Ev]) -> Vec<&str> {
    evs.iter()
        .filter(|e| e.event == "complete")
        .map(|e| e.data["finishReason"].as_str().unwrap())
        .collect()
}

pub(crate) fn errors(evs: &[Ev]) -> Vec<(String, String)> {
    evs.iter()
        .filter(|e| e.event == "error")
        .map(|e| {
            (
                e.data["error"]["code"].as_str().unwrap().to_string(),
                e.data["error"]["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn roles(msgs: &[Value]) -> Vec<&str> {
    msgs.iter().map(|m| m["role"].as_str().unwrap()).collect()
}

fn block_types(m: &Value) -> Vec<&str> {
    m["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect()
}

/// What the fakes answer (as the real CLIs did against the capture's provider).
const ANSWER: &str = "Hello from the scripted provider. This is a plain text answer.";
const AFTER_TOOL: &str = "The command printed hi. Done.";
const THOUGHT: &str = "Let me think about this carefully before answering.";

fn texts(m: &Value) -> String {
    m["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

#[tokio::test]
async fn each_backend_relays_text_thinking_and_tool_calls_and_stores_them() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for b in BACKENDS {
        let (sid, run) = c.d.create(c.session_with_tools(b, "tool")).await;
        let evs = c.d.events(&sid, None).await.until_complete(&run).await;
        let t = types(&evs);
        assert_eq!(complete(&evs), ["stop"], "{b}: {t:?} {:?}", errors(&evs));
        let pos = |kind: &str| t.iter().position(|x| *x == kind).unwrap();
        assert!(pos("init") < pos("toolCallStart"), "{b}: {t:?}");
        assert!(pos("toolCallStart") < pos("toolCallEnd"), "{b}: {t:?}");
        assert!(pos("toolCallEnd") < pos("result"), "{b}: {t:?}");
        assert_eq!(t[t.len() - 2..], ["result", "complete"], "{b}: {t:?}");
        assert!(
            text_of(&evs).ends_with(AFTER_TOOL),
            "{b}: {}",
            text_of(&evs)
        );
        let end = evs.iter().find(|e| e.event == "toolCallEnd").unwrap();
        assert_eq!(end.data["status"], "success", "{b}");
        let output = end.data["block"]["content"].as_str().unwrap();
        assert!(output.contains("hi"), "{b}: {end:?}");
        let result = evs.iter().find(|e| e.event == "result").unwrap();
        assert!(
            result.data["stats"]["outputTokens"].as_u64().unwrap() > 0,
            "{b}"
        );
        // Each CLI reports the prompt tokens its provider read from the cache (two calls of 20
        // here) in its own way; the run reports them as cacheReadTokens, counted in inputTokens.
        assert_eq!(
            result.data["stats"]["cacheReadTokens"], 40,
            "{b}: {result:?}"
        );
        assert!(
            result.data["stats"]["inputTokens"].as_u64().unwrap() >= 40,
            "{b}: {result:?}"
        );
        // claude-code says what its run cost (two calls here): the run's cost; the other CLIs
        // say nothing of it and their runs have no cost.
        let cost = &result.data["stats"]["costUsd"];
        match b {
            "claude-code" => assert!(
                (cost.as_f64().unwrap() - 0.002168).abs() < 1e-9,
                "{b}: {result:?}"
            ),
            _ => assert!(cost.is_null(), "{b}: {result:?}"),
        }
        let (_, stored_run) = c.d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
        assert_eq!(stored_run["cacheReadTokens"], 40, "{b}: {stored_run}");
        let msgs = c.messages(&sid).await;
        assert_eq!(
            roles(&msgs),
            ["user", "assistant", "tool", "assistant"],
            "{b}"
        );
        let call = msgs[1]["blocks"].as_array().unwrap().last().unwrap();
        assert_eq!(call["type"], "tool_use", "{b}");
        assert_eq!(block_types(&msgs[2]), ["tool_result"], "{b}");
        assert_eq!(msgs[2]["blocks"][0]["tool_use_id"], call["id"], "{b}");
        assert_eq!(texts(&msgs[3]), AFTER_TOOL, "{b}");

        let (sid, evs) = c.run(b, "text").await;
        assert_eq!(complete(&evs), ["stop"], "{b}");
        assert_eq!(text_of(&evs), ANSWER, "{b}");
        let msgs = c.messages(&sid).await;
        assert_eq!(roles(&msgs), ["user", "assistant"], "{b}");
        assert_eq!(texts(&msgs[1]), ANSWER, "{b}");

        if b == "gemini-cli" {
            // gemini-cli does not print the model's thoughts.
            continue;
        }
        let (sid, evs) = c.run(b, "thinking").await;
        assert_eq!(complete(&evs), ["stop"], "{b}");
        let kinds: Vec<&str> = evs
            .iter()
            .filter(|e| e.event == "streamDelta")
            .map(|e| e.data["delta"]["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds.first(), Some(&"thinking"), "{b}: {kinds:?}");
        assert_eq!(kinds.last(), Some(&"text"), "{b}: {kinds:?}");
        let msgs = c.messages(&sid).await;
        assert_eq!(roles(&msgs), ["user", "assistant"], "{b}");
        assert_eq!(block_types(&msgs[1]), ["thinking", "text"], "{b}");
        assert_eq!(msgs[1]["blocks"][0]["thinking"], THOUGHT, "{b}");
    }
}

#[tokio::test]
async fn a_later_prompt_resumes_the_clis_own_session() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for (b, flag) in [
        ("codex", "resume"),
        ("claude-code", "--resume"),
        ("gemini-cli", "-r"),
    ] {
        let (sid, _) = c.run(b, "text first").await;
        let first = c.until_record(b, "text first", false).await;
        assert!(!first.args().iter().any(|a| a == flag), "{b}");
        let (_, s) = c.d.get(&format!("/v1/sessions/{sid}")).await;
        let id = s["cliSessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("{b}: {s}"));
        let mut sse = c.d.events(&sid, None).await;
        let run = c.d.send(&sid, json!({"prompt": "text again"})).await;
        let evs = sse.until_complete(&run).await;
        assert_eq!(complete(&evs).last(), Some(&"stop"), "{b}");
        let args = c.until_record(b, "text again", false).await.args();
        let at = args
            .iter()
            .position(|a| a == flag)
            .unwrap_or_else(|| panic!("{b}: {args:?}"));
        assert_eq!(args[at + 1], id, "{b}: {args:?}");
        let msgs = c.messages(&sid).await;
        assert_eq!(
            roles(&msgs),
            ["user", "assistant", "user", "assistant"],
            "{b}"
        );
        // The CLI kept its session: the id is unchanged.
        let (_, s) = c.d.get(&format!("/v1/sessions/{sid}")).await;
        assert_eq!(s["cliSessionId"], id, "{b}");
    }
}

#[tokio::test]
async fn a_cli_gets_its_own_provider_and_home_and_nothing_of_the_daemons_secrets() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    let base = mock.base_url();
    for (b, key_var, key, url_var, url) in [
        ("codex", "FAKE_RESPONSES_KEY", "sk-responses", "", ""),
        (
            "claude-code",
            "ANTHROPIC_API_KEY",
            "sk-anthropic",
            "ANTHROPIC_BASE_URL",
            base.as_str(),
        ),
        (
            "gemini-cli",
            "GEMINI_API_KEY",
            "sk-gemini",
            "GOOGLE_GEMINI_BASE_URL",
            base.as_str(),
        ),
    ] {
        // The session's own variables reach the CLI; a provider's key variable does not.
        let mut body = c.session(b, "text");
        body["engineConfig"] = json!({"shellEnv": {"FROM_SESSION": "yes",
            "FAKE_UNUSED_KEY": "sk-unused", "ANTHROPIC_API_KEY": "sk-unused"}});
        let (sid, run) = c.d.create(body).await;
        let evs = c.d.events(&sid, None).await.until_complete(&run).await;
        assert_eq!(complete(&evs), ["stop"], "{b}");
        let r = c.until_record(b, "text", false).await;
        assert_eq!(r.env("FROM_SESSION"), Some("yes"), "{b}");
        assert_eq!(Path::new(r.cwd()), c.project.as_path(), "{b}");
        assert_eq!(r.env(key_var), Some(key), "{b}");
        if !url_var.is_empty() {
            assert_eq!(r.env(url_var), Some(url), "{b}");
        }
        let home = r.env("HOME").unwrap();
        assert!(
            Path::new(home).starts_with(&c.d.dir),
            "{b}: HOME {home} is not under the data directory {}",
            c.d.dir.display()
        );
        for (k, v) in r.envs() {
            let v = v.as_str().unwrap();
            assert!(!k.starts_with("ELFGATE_"), "{b}: {k}");
            for other in ["sk-responses", "sk-anthropic", "sk-gemini", "sk-unused"] {
                assert!(
                    other == key || !v.contains(other),
                    "{b}: {k} carries {other}"
                );
            }
            assert!(
                c.d.token.as_deref().is_none_or(|t| !v.contains(t)),
                "{b}: {k} carries the daemon's token"
            );
        }
        if b == "codex" {
            // codex reads its provider from the config.toml written into its home.
            let config = Path::new(r.env("CODEX_HOME").unwrap()).join("config.toml");
            let toml = std::fs::read_to_string(config).unwrap();
            assert!(
                toml.contains(&format!("base_url = \"{base}/v1\"")),
                "{toml}"
            );
            assert!(toml.contains("env_key = \"FAKE_RESPONSES_KEY\""), "{toml}");
            let args = r.args();
            assert!(
                args.windows(2)
                    .any(|w| w == ["-c", "model_provider=\"cli-responses\""]),
                "{args:?}"
            );
            // And its stdin is /dev/null: it would otherwise wait for its end.
            assert_eq!(r.0["stdin"], "", "{}", r.0);
        }
        if b == "gemini-cli" {
            let settings =
                std::fs::read_to_string(Path::new(home).join(".gemini/settings.json")).unwrap();
            assert!(settings.contains("gemini-api-key"), "{settings}");
            assert_eq!(r.env("GEMINI_CLI_NO_RELAUNCH"), Some("true"));
        }
    }
}

/// engineConfig providerEnv hands variables to the session's CLI; one the daemon sets for the
/// CLI's provider (which could point it, with the provider's key, elsewhere), an ELFGATE_* one or
/// a provider's key variable is 422 naming it, before anything is stored.
#[tokio::test]
async fn provider_env_reaches_the_cli_and_cannot_redirect_it() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    let b = "claude-code";
    let mut body = c.session(b, "text");
    body["engineConfig"] = json!({"providerEnv": {"CLAUDE_CODE_FLAG": "on"}});
    let (sid, run) = c.d.create(body).await;
    let evs = c.d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(complete(&evs), ["stop"]);
    let r = c.until_record(b, "text", false).await;
    assert_eq!(r.env("CLAUDE_CODE_FLAG"), Some("on"));
    let (_, s) = c.d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s["engineConfig"]["providerEnv"]["CLAUDE_CODE_FLAG"], "on");

    let (_, before) = c.d.get("/v1/sessions").await;
    for (name, why) in [
        ("ANTHROPIC_BASE_URL", "could send the CLI's traffic"),
        ("OTHER_BASE_URL", "could send the CLI's traffic"),
        ("https_proxy", "could send the CLI's traffic"),
        ("NODE_OPTIONS", "run code in it"),
        ("HOME", "the daemon sets it"),
        ("ELFGATE_TOKEN", "never reach a CLI"),
        ("OPENAI_API_KEY", "never reach a CLI"),
    ] {
        let mut body = c.session(b, "text");
        body["engineConfig"] = json!({"providerEnv": {name: "http://127.0.0.1:9/"}});
        let (status, v) = c.d.post("/v1/sessions", body).await;
        assert_eq!(status, 422, "{name}: {v}");
        let text = v.to_string();
        assert!(
            text.contains(&format!("engineConfig.providerEnv.{name}")) && text.contains(why),
            "{name}: {v}"
        );
    }
    // Attachments cannot be handed to a CLI: refused, not dropped.
    let mut body = c.session(b, "text");
    body["attachments"] = json!([{"mediaType": "text/plain", "text": "x"}]);
    let (status, v) = c.d.post("/v1/sessions", body).await;
    assert_eq!(status, 422, "{v}");
    assert!(
        v.to_string()
            .contains("the cli engine cannot hand attachments to a CLI"),
        "{v}"
    );
    let (_, after) = c.d.get("/v1/sessions").await;
    assert_eq!(before["sessions"], after["sessions"]);
}

/// Waits for the first words of a slow answer, interrupts, and checks the end and the processes.
async fn interrupt_mid_run(c: &CliDaemon, b: &str, prompt: &str) {
    let (sid, run) = c.d.create(c.session(b, prompt)).await;
    let mut sse = c.d.events(&sid, None).await;
    let mut evs = sse.until_n("streamDelta", 1).await;
    let rec = c
        .until_record(b, prompt, prompt.starts_with("grandchild"))
        .await;
    let grandchild = rec.grandchild();
    let (status, r) =
        c.d.post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "interrupted", "{b}: {r}");
    evs.extend(sse.until_complete(&run).await);
    assert_eq!(
        complete(&evs),
        ["interrupted"],
        "{b} {prompt}: {:?}",
        types(&evs)
    );
    assert!(errors(&evs).is_empty(), "{b}: {:?}", errors(&evs));
    let left = until_dead(|| rec.left_alive()).await;
    assert!(left.is_empty(), "{b} {prompt}: {left:?} of its group alive");
    if let Some(g) = grandchild {
        assert!(
            until_dead(|| alive(&[g])).await.is_empty(),
            "{b}: grandchild {g}"
        );
    }
    // The partial answer is stored: what was streamed.
    let msgs = c.messages(&sid).await;
    assert_eq!(roles(&msgs), ["user", "assistant"], "{b}");
    let streamed = text_of(&evs);
    assert!(!streamed.is_empty(), "{b}");
    assert_eq!(texts(&msgs[1]), streamed, "{b}");
}

#[tokio::test]
async fn an_interrupt_ends_the_whole_group_and_keeps_the_partial_answer() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for b in BACKENDS {
        interrupt_mid_run(&c, b, "grandchild").await;
    }
    // CLIs deaf to SIGINT and SIGTERM are killed at the end of the ladder (claude-code still
    // takes its interrupt on stdin).
    let c = start_deaf(&mock);
    for b in BACKENDS {
        interrupt_mid_run(&c, b, "slow").await;
    }
}

#[tokio::test]
async fn a_cli_that_goes_silent_is_stopped_by_the_idle_timeout() {
    let mock = MockServer::start().await.unwrap();
    // The CLI never prints anything again: the timeout's length does not change the outcome.
    let c = start(&mock, "idle_timeout_secs = 1", "");
    for b in BACKENDS {
        let (_, evs) = c.run(b, "hang").await;
        assert_eq!(complete(&evs), ["error"], "{b}");
        let errs = errors(&evs);
        assert_eq!(errs.len(), 1, "{b}: {errs:?}");
        assert_eq!(errs[0].0, "cli_idle_timeout", "{b}");
        // A CLI slow to start may be stopped before it recorded anything; either way nothing
        // of its group is left once the run has ended.
        if let Some(r) = c.record(b) {
            assert!(until_dead(|| r.left_alive()).await.is_empty(), "{b}");
        }
    }
}

#[tokio::test]
async fn crashes_failures_and_garbage_lines() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for b in BACKENDS {
        // A crash mid-stream: an error with the end of stderr; what came before is kept.
        let (sid, evs) = c.run(b, "crash").await;
        assert_eq!(complete(&evs), ["error"], "{b}");
        let errs = errors(&evs);
        assert_eq!(errs.len(), 1, "{b}: {errs:?}");
        assert_eq!(errs[0].0, "cli_exit", "{b}: {errs:?}");
        assert!(errs[0].1.contains("exited with status 1"), "{b}: {errs:?}");
        assert!(errs[0].1.contains("fake crash"), "{b}: {errs:?}");
        let msgs = c.messages(&sid).await;
        let streamed = text_of(&evs);
        if !streamed.is_empty() {
            assert_eq!(texts(msgs.last().unwrap()), streamed, "{b}");
        }

        let (_, evs) = c.run(b, "crash_signal").await;
        assert_eq!(complete(&evs), ["error"], "{b}");
        let errs = errors(&evs);
        assert_eq!(errs[0].0, "cli_crashed", "{b}: {errs:?}");
        assert!(errs[0].1.contains("signal 9"), "{b}: {errs:?}");

        // The CLI reports a failed run (after its own retries).
        let (_, evs) = c.run(b, "error").await;
        assert_eq!(complete(&evs), ["error"], "{b}");
        let errs = errors(&evs);
        assert_eq!(errs.len(), 1, "{b}: {errs:?}");
        assert_eq!(errs[0].0, "cli_failed", "{b}: {errs:?}");

        // A line that is not JSON is skipped.
        let (_, evs) = c.run(b, "garbage").await;
        assert_eq!(complete(&evs), ["stop"], "{b}: {:?}", errors(&evs));
        assert!(text_of(&evs).ends_with(ANSWER), "{b}");
    }
}

#[tokio::test]
async fn requests_a_backend_cannot_serve_are_refused_before_anything_is_stored() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    let missing = start_missing(&mock);
    let cli = cli_engine_info(&missing).await;
    let backend = |name: &str| {
        cli["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(backend("codex")["available"], false, "{cli}");
    let reason = backend("codex")["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("@openai/codex"), "{cli}");
    let (status, e) = missing
        .post(
            "/v1/sessions",
            json!({"engine": "cli", "cliBackend": "codex", "prompt": "hi"}),
        )
        .await;
    assert_eq!(status, 422, "{e}");
    assert!(e.to_string().contains("@openai/codex"), "{e}");

    // The fakes answer --version like the real CLIs.
    let cli = cli_engine_info(&c.d).await;
    let backends = cli["backends"].as_array().unwrap();
    // ACP agents are listed apart: none is configured here.
    let acp = backends.iter().find(|b| b["name"] == "acp").unwrap();
    assert_eq!(acp["available"], false, "{acp}");
    assert!(
        acp["reason"]
            .as_str()
            .unwrap()
            .contains("[engines.cli.acp.agents]"),
        "{acp}"
    );
    let versions: Vec<&str> = backends
        .iter()
        .filter(|b| b["name"] != "acp")
        .map(|b| {
            assert_eq!(b["available"], true, "{b}");
            b["version"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        versions,
        ["codex-cli 0.169.0", "2.1.328 (Claude Code)", "0.61.0"]
    );
    let refused = |body: Value| {
        let c = &c;
        async move {
            let (status, e) = c.d.post("/v1/sessions", body).await;
            assert_eq!(status, 422, "{e}");
            e.to_string()
        }
    };
    let e = refused(json!({"engine": "cli", "prompt": "hi"})).await;
    assert!(e.contains("cliBackend"), "{e}");
    let e = refused(json!({"engine": "cli", "cliBackend": "aider", "prompt": "hi"})).await;
    assert!(e.contains("aider"), "{e}");
    let mut body = c.session("claude-code", "text");
    body["cliArgs"] = json!(["--max-turns=3", "--dangerously-skip-permissions"]);
    let e = refused(body).await;
    assert!(
        e.contains("'--dangerously-skip-permissions' is not allowed"),
        "{e}"
    );
    let (_, list) = c.d.get("/v1/sessions").await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 0, "{list}");
    // A provider of another kind goes through the daemon's door, unless proxy = "never".
    let never = start(&mock, "proxy = \"never\"", "");
    let mut body = never.session("codex", "text");
    body["providerId"] = json!("cli-anthropic");
    let (status, e) = never.d.post("/v1/sessions", body).await;
    assert_eq!(status, 422, "{e}");
    assert!(
        e.to_string().contains("openai-responses") && e.to_string().contains("never"),
        "{e}"
    );

    // An allowed argument reaches the CLI; a later prompt's arguments are checked too.
    let mut body = c.session("claude-code", "text");
    body["cliArgs"] = json!(["--max-turns=3"]);
    let (sid, run) = c.d.create(body).await;
    c.d.events(&sid, None).await.until_complete(&run).await;
    let args = c.until_record("claude-code", "text", false).await.args();
    assert!(args.iter().any(|a| a == "--max-turns=3"), "{args:?}");
    let (status, e) =
        c.d.post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "text", "cliArgs": ["--verbose=no"]}),
        )
        .await;
    assert_eq!(status, 422, "{e}");
}

/// What GET /v1/engines shows of the cli engine.
async fn cli_engine_info(d: &Daemon) -> Value {
    let (status, e) = d.get("/v1/engines").await;
    assert_eq!(status, 200, "{e}");
    let engines = e["engines"].as_array().unwrap();
    engines.iter().find(|e| e["type"] == "cli").unwrap().clone()
}

/// A daemon whose codex binary does not exist.
fn start_missing(mock: &MockServer) -> Daemon {
    Daemon::start(
        mock,
        Opts {
            extra_toml: "[engines.cli.codex]\nbinary = \"./no/such/codex\"\n".to_string(),
            ..Opts::default()
        },
    )
}

#[tokio::test]
async fn runs_over_a_backends_limit_wait_in_line_and_say_so() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "max_concurrent = 1");
    let (first, first_run) = c.d.create(c.session("claude-code", "slow first")).await;
    let mut first_sse = c.d.events(&first, None).await;
    first_sse.until_n("streamDelta", 1).await;
    let (second, second_run) = c.d.create(c.session("claude-code", "text second")).await;
    let mut sse = c.d.events(&second, None).await;
    let waiting = sse.until_n("processing", 1).await;
    let note = waiting.last().unwrap().data["message"].as_str().unwrap();
    assert!(note.contains("queued behind 1 claude-code run"), "{note}");
    // Another backend does not wait.
    let (_, evs) = c.run("gemini-cli", "text").await;
    assert_eq!(complete(&evs), ["stop"]);
    // The second run starts only once the first has ended.
    assert_eq!(c.record("claude-code").unwrap().0["prompt"], "slow first");
    c.d.post(&format!("/v1/sessions/{first}/interrupt"), json!({}))
        .await;
    first_sse.until_complete(&first_run).await;
    let evs = sse.until_complete(&second_run).await;
    assert_eq!(complete(&evs), ["stop"], "{:?}", types(&evs));
    assert_eq!(text_of(&evs), ANSWER);
}

#[tokio::test]
async fn shutdown_leaves_no_cli_process_behind() {
    let mock = MockServer::start().await.unwrap();
    let mut c = start_deaf(&mock);
    let mut groups = Vec::new();
    for b in BACKENDS {
        let (sid, _) = c.d.create(c.session(b, "grandchild")).await;
        c.d.events(&sid, None).await.until_n("streamDelta", 1).await;
        let rec = c.until_record(b, "grandchild", true).await;
        let grandchild = rec.grandchild().unwrap();
        groups.push((rec, grandchild));
    }
    let status = c.d.terminate();
    assert!(status.success(), "{status:?}");
    for (rec, child) in groups {
        let left = until_dead(|| rec.left_alive()).await;
        assert!(left.is_empty(), "{left:?} of its group alive");
        assert!(until_dead(|| alive(&[child])).await.is_empty(), "{child}");
    }
}

#[tokio::test]
async fn a_restart_after_a_crash_ends_the_run_and_the_cli_it_left_running() {
    let mock = MockServer::start().await.unwrap();
    // A confined CLI dies with the daemon (bwrap --die-with-parent).
    let mut c = start(&mock, "", "");
    c.d.create(c.session("codex", "hang")).await;
    let rec = c.until_record("codex", "hang", false).await;
    assert!(rec.running("pid").is_some());
    c.d.kill();
    let left = until_dead(|| rec.left_alive()).await;
    assert!(
        left.is_empty(),
        "{left:?} alive after the daemon was killed"
    );
    // An unconfined one lives on until the next daemon ends it.
    let (mut opts, records, project) = cli_opts(&mock, "", "", "");
    sandbox_off(&mut opts);
    let mut c = CliDaemon::start(&mock, (opts, records, project));
    // A CLI that printed its first line and then waits: it writes nothing that would fail once
    // the daemon is gone, so it would run on for ever.
    let (sid, run) = c.d.create(c.session("codex", "hang")).await;
    let rec = c.until_record("codex", "hang", false).await;
    // Its first line was read (its group is noted before the first line is read).
    let deadline = tokio::time::Instant::now() + common::GUARD;
    while !c.d.get(&format!("/v1/sessions/{sid}")).await.1["cliSessionId"].is_string() {
        assert!(tokio::time::Instant::now() < deadline, "no cliSessionId");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    c.d.kill();
    // Nobody is left to stop it: it runs on, orphaned.
    assert!(!rec.left_alive().is_empty());
    c.d = Daemon::start_in(c.d.dir.clone(), &mock, c.opts.clone());
    let left = until_dead(|| rec.left_alive()).await;
    assert!(
        left.is_empty(),
        "{left:?} of its group alive after the restart"
    );
    let (_, r) = c.d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["finishReason"], "daemon_restart", "{r}");
    // The prompt is kept (and the partial answer, if its deltas reached the log before the kill).
    let msgs = c.messages(&sid).await;
    assert_eq!(roles(&msgs)[0], "user");
    // A new run of the session works.
    let mut sse = c.d.events(&sid, None).await;
    let next = c.d.send(&sid, json!({"prompt": "text"})).await;
    assert_eq!(
        complete(&sse.until_complete(&next).await).last(),
        Some(&"stop")
    );
}

#[tokio::test]
async fn claudes_permission_questions_are_the_clients_permission_requests() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for (prompt, answer, status, output) in [
        (
            "permission allowed",
            json!({"decision": "allow"}),
            "success",
            "done",
        ),
        (
            "permission denied",
            json!({"decision": "deny", "message": "not in this repository"}),
            "error",
            "the user denied permission: not in this repository",
        ),
    ] {
        let (sid, run) = c.d.create(c.session("claude-code", prompt)).await;
        let mut sse = c.d.events(&sid, None).await;
        let mut evs = sse.until_n("permissionRequest", 1).await;
        let ask = evs.last().unwrap().data.clone();
        assert_eq!(ask["toolName"], "Bash", "{ask}");
        let command = ask["input"]["command"].as_str().unwrap();
        assert!(command.contains("touch made-by-tool"), "{ask}");
        let id = ask["requestId"].as_str().unwrap();
        let (code, r) =
            c.d.post(&format!("/v1/sessions/{sid}/permissions/{id}"), answer)
                .await;
        assert_eq!(code, 200, "{r}");
        evs.extend(sse.until_complete(&run).await);
        assert_eq!(complete(&evs), ["stop"], "{prompt}: {:?}", errors(&evs));
        let t = types(&evs);
        let pos = |kind: &str| t.iter().position(|x| *x == kind).unwrap();
        assert!(pos("toolCallStart") < pos("permissionRequest"), "{t:?}");
        assert!(pos("permissionResolved") < pos("toolCallEnd"), "{t:?}");
        let end = &evs[pos("toolCallEnd")].data;
        assert_eq!(end["status"], status, "{prompt}: {end}");
        assert_eq!(end["block"]["content"], output, "{prompt}: {end}");
        let args = c.until_record("claude-code", prompt, false).await.args();
        assert!(
            args.windows(2)
                .any(|w| w == ["--permission-prompt-tool", "stdio"]),
            "{args:?}"
        );
    }
}

#[tokio::test]
async fn a_tool_command_in_a_session_of_its_own_does_not_outlive_an_interrupt() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for b in BACKENDS {
        // The CLIs run tool commands with setsid; gemini-cli leaves its command behind when it is
        // interrupted, and the daemon, their subreaper, ends it.
        let (sid, run) = c.d.create(c.session_with_tools(b, "tool_running")).await;
        let mut sse = c.d.events(&sid, None).await;
        let mut evs = sse.until_n("toolCallStart", 1).await;
        let tool_pid = poll_until(&format!("{b}: the tool command's pid"), || {
            let r = c.record(b)?;
            (r.0["prompt"] == "tool_running").then_some(())?;
            r.running("tool_pid")
        })
        .await;
        let (status, r) =
            c.d.post(
                &format!("/v1/sessions/{sid}/interrupt"),
                json!({"wait": true}),
            )
            .await;
        assert_eq!(status, 200, "{r}");
        evs.extend(sse.until_complete(&run).await);
        assert_eq!(complete(&evs), ["interrupted"], "{b}: {:?}", types(&evs));
        let left = until_dead(|| alive(&[tool_pid])).await;
        assert!(
            left.is_empty(),
            "{b}: the tool command {tool_pid} outlived the run"
        );
        // Every tool call has its result: the CLI's own, or one saying it was interrupted.
        let msgs = c.messages(&sid).await;
        assert_eq!(roles(&msgs), ["user", "assistant", "tool"], "{b}");
        assert_eq!(msgs[2]["blocks"][0]["is_error"], true, "{b}");
    }
}

#[tokio::test]
async fn the_cli_engine_refuses_a_protected_project_and_channel_permissions_it_cannot_hold() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    let work = tempfile::tempdir().unwrap();
    let etc_link = work.path().join("etc-link");
    std::os::unix::fs::symlink("/etc", &etc_link).unwrap();
    for b in BACKENDS {
        for path in [
            c.d.dir.display().to_string(),
            etc_link.display().to_string(),
        ] {
            let mut body = c.session(b, "hi");
            body["projectPath"] = json!(path);
            let (st, v) = c.d.post("/v1/sessions", body).await;
            assert_eq!(st, 422, "{b} {path} -> {v}");
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(
                msg.contains("projectPath") && msg.contains("protected"),
                "{msg}"
            );
        }
        for perms in [
            json!({"canUseTool": false}),
            json!({"canUseTool": true, "requireConfirmation": true}),
        ] {
            let mut body = c.session(b, "hi");
            body["channelUserPermissions"] = perms.clone();
            let (st, v) = c.d.post("/v1/sessions", body).await;
            assert_eq!(st, 422, "{b} {perms} -> {v}");
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(msg.contains("channelPermissions"), "{msg}");
        }
        assert!(c.record(b).is_none(), "{b} ran a refused session");
    }
    let (_, list) = c.d.get("/v1/sessions").await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 0, "{list}");
    // Without a restriction the same session runs.
    let mut body = c.session("codex", "plain");
    body["channelPermissions"] = json!({"canUseTool": true});
    let (st, v) = c.d.post("/v1/sessions", body).await;
    assert_eq!(st, 201, "{v}");
}

#[tokio::test]
async fn in_a_fleet_a_resume_on_a_node_without_the_clis_files_is_refused_not_started_afresh() {
    let Some((database, nats)) = elfgate_test_support::services::fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    // Two fleet nodes with the fakes, each with a data directory (and CLI homes) of its own.
    let node = |id: &str| {
        let dir = tempfile::tempdir().unwrap().keep();
        let mut o = c.opts.clone();
        o.token = Some("cli-fleet-token".into());
        o.extra_toml.push_str(&format!(
            "\n[cluster]\nnats_url = \"{nats}\"\nnode_id = \"{id}\"\nlease_secs = 2\n\
             heartbeat_secs = 1\n{}",
            elfgate_test_support::services::fleet_secret_key()
        ));
        o.env
            .push(elfgate_test_support::services::fleet_secret_var());
        o.env
            .push(("ELFGATE_DATABASE_URL".into(), database.clone()));
        o.env.push((
            "ELFGATE_STORAGE__DATA_DIR".into(),
            dir.display().to_string(),
        ));
        Daemon::start_in(dir, &mock, o)
    };
    let a = node("a");
    let b = node("b");
    let (sid, run1) = a.create(c.session("codex", "text first")).await;
    let mut sse = a.events(&sid, None).await;
    assert_eq!(complete(&sse.until_complete(&run1).await), ["stop"]);
    let (_, s) = a.get(&format!("/v1/sessions/{sid}")).await;
    let id = s["cliSessionId"].as_str().unwrap().to_string();
    a.until_no_session_is_run().await;

    // B runs the next prompt (no node holds the session), but its CLI home does not have the
    // session: the run ends with an error saying so, and the CLI is not started afresh.
    let run2 = b.send(&sid, json!({"prompt": "text on b"})).await;
    let evs = sse.until_complete(&run2).await;
    assert_eq!(complete(&evs), ["error"], "{:?}", types(&evs));
    let error = evs.iter().find(|e| e.event == "error").unwrap();
    assert_eq!(error.data["error"]["code"], "cli_setup", "{:?}", error.data);
    let message = error.data["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("session {id} on node b"))
            && message.contains("storage every node shares"),
        "{message}"
    );
    assert!(
        c.record("codex")
            .is_none_or(|r| r.0["prompt"] != "text on b"),
        "the CLI ran on b"
    );
    // On A, which has its files, the session resumes.
    a.until_no_session_is_run().await;
    let run3 = a.send(&sid, json!({"prompt": "text again"})).await;
    let evs = sse.until_complete(&run3).await;
    assert_eq!(complete(&evs), ["stop"], "{:?}", types(&evs));
    let args = c.until_record("codex", "text again", false).await.args();
    assert!(args.iter().any(|a| a == &id), "{args:?}");
}

/// `[engines.cli] proxy = "always"`: even a provider of the CLI's own kind is reached through the
/// daemon's door, so the CLI gets the door's address, a run token and the route as its model,
/// never the provider's URL or key; the token is revoked when the run ends.
#[tokio::test]
async fn proxy_always_sends_every_cli_through_the_daemons_door() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "proxy = \"always\"", "");
    for (b, key_var, model) in [
        ("codex", "CLI_DOOR_TOKEN", "cli-responses/gpt-fake"),
        (
            "claude-code",
            "ANTHROPIC_API_KEY",
            "cli-anthropic/claude-fake",
        ),
        ("gemini-cli", "GEMINI_API_KEY", "cli-gemini/gemini-fake"),
    ] {
        let mut body = c.session(b, "text");
        if b == "claude-code" {
            body["model"] = json!("claude-fake");
        }
        let (sid, run) = c.d.create(body).await;
        let evs = c.d.events(&sid, None).await.until_complete(&run).await;
        assert_eq!(complete(&evs), ["stop"], "{b}: {:?}", errors(&evs));
        let init = evs.iter().find(|e| e.event == "init").unwrap();
        assert_eq!(init.data["systemInfo"]["proxied"], true, "{b}");
        let rec = c.until_record(b, "text", false).await;
        let token = rec
            .env(key_var)
            .unwrap_or_else(|| panic!("{b}: no {key_var}"));
        assert!(token.starts_with("elfgate-run-"), "{b}: {token}");
        let args = rec.args();
        assert!(
            args.windows(2)
                .any(|w| (w[0] == "-m" || w[0] == "--model") && w[1] == model),
            "{b}: {args:?}"
        );
        // No provider key, no provider URL: only the door's.
        for (name, value) in rec.envs() {
            let v = value.as_str().unwrap_or_default();
            assert!(!v.starts_with("sk-"), "{b}: {name} carries a provider key");
            assert!(
                !v.contains(&mock.base_url()),
                "{b}: {name} points at the provider"
            );
        }
        assert!(
            args.iter().all(|a| !a.contains(&mock.base_url())),
            "{b}: {args:?}"
        );
        // Revoked with the run's end.
        let after = reqwest::Client::new()
            .post(format!("{}/v1/responses", c.d.base))
            .bearer_auth(token)
            .json(&json!({"model": model, "input": "hi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(after.status(), 403, "{b}");
    }
}

/// A CLI's run token reaches its own session only: on the Responses door,
/// `x-elfgate-session-id` or `previous_response_id` naming another session is refused (403)
/// before anything of it is read, and that session keeps its messages, store: false or not.
#[tokio::test]
async fn a_run_token_reaches_no_other_session() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "proxy = \"always\"", "");
    let (other, other_run) =
        c.d.create(json!({"engine": "chat", "prompt": "private", "model": "mock:tokens=2"}))
            .await;
    c.d.all_events_until_complete_of(&other, &other_run).await;
    let before = c.messages(&other).await;
    // A codex run that waits, holding its token.
    let (sid, _) = c.d.create(c.session("codex", "hang")).await;
    let token = c
        .until_record("codex", "hang", false)
        .await
        .env("CLI_DOOR_TOKEN")
        .unwrap()
        .to_string();
    let door = |body: Value, session: Option<&str>| {
        let mut req = reqwest::Client::new()
            .post(format!("{}/v1/responses", c.d.base))
            .bearer_auth(&token)
            .json(&body);
        if let Some(s) = session {
            req = req.header("x-elfgate-session-id", s);
        }
        req.send()
    };
    let model = "cli-responses/gpt-fake";
    let previous = format!("resp_{other}_{other_run}");
    for (body, session) in [
        (
            json!({"model": model, "input": "append"}),
            Some(other.as_str()),
        ),
        (
            json!({"model": model, "input": "read", "previous_response_id": previous}),
            None,
        ),
        (
            json!({"model": model, "input": "delete", "store": false,
                   "previous_response_id": previous}),
            None,
        ),
    ] {
        let resp = door(body.clone(), session).await.unwrap();
        assert_eq!(resp.status(), 403, "{body}");
        let v: Value = resp.json().await.unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("reaches only its own session"),
            "{v}"
        );
    }
    assert_eq!(c.messages(&other).await, before);
    assert!(
        mock.requests().iter().all(|r| r.model != "gpt-fake"),
        "a refused call went upstream"
    );
    // Its own session is not refused for being named (it is a cli session: another engine).
    let resp = door(json!({"model": model, "input": "own"}), Some(sid.as_str()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let (status, v) = c.d.interrupt_and_wait(&sid).await;
    assert_eq!(status, 200, "{v}");
}
