//! The cli engine end to end: the real daemon runs fake CLIs (tests/fixtures/cli/) that print
//! each backend's own stdout format, and the tests look at what a client sees: events, stored
//! messages, the session's cliSessionId, and, from the fakes' records and /proc, the command line,
//! environment and processes of each run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod scripted;

use common::{Daemon, Ev, Opts, poll_until, text_of, types};
use elfgate_mockllm::MockServer;
use scripted::procs::{alive, live_in_group, until_dead};
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

/// A daemon whose three backends are the fakes, each recording its runs into `records/<backend>`,
/// with `cli` keys added to `[engines.cli]` and `backend` keys to every backend's table. The
/// providers the CLIs get have keys in the daemon's environment, as has a provider no CLI uses.
struct CliDaemon {
    d: Daemon,
    opts: Opts,
    records: PathBuf,
    project: PathBuf,
}

fn start(mock: &MockServer, cli: &str, backend: &str) -> CliDaemon {
    let work = tempfile::tempdir().unwrap().keep();
    let records = work.join("records");
    let project = work.join("project");
    std::fs::create_dir_all(&records).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let base = mock.base_url();
    let mut toml = format!(
        r#"
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
"#
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
env = {{ FAKE_CLI_RECORD = "{rec}" }}
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
    CliDaemon {
        d: Daemon::start(mock, opts.clone()),
        opts,
        records,
        project,
    }
}

/// One run of a fake as it recorded it.
#[derive(Debug, Default)]
struct Recorded {
    cwd: String,
    pgid: i32,
    args: Vec<String>,
    env: Vec<(String, String)>,
    grandchild: Option<i32>,
    /// A process that left the group (setsid).
    escapee: Option<i32>,
}

impl Recorded {
    fn env(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl CliDaemon {
    /// The runs `backend` recorded so far.
    fn runs(&self, backend: &str) -> Vec<Recorded> {
        let text = std::fs::read_to_string(self.records.join(backend)).unwrap_or_default();
        let mut runs: Vec<Recorded> = Vec::new();
        for line in text.lines() {
            if line == "---run---" {
                runs.push(Recorded::default());
                continue;
            }
            let Some(r) = runs.last_mut() else { continue };
            if let Some(v) = line.strip_prefix("cwd=") {
                r.cwd = v.to_string();
            } else if let Some(v) = line.strip_prefix("pgid=") {
                r.pgid = v.parse().unwrap();
            } else if let Some(v) = line.strip_prefix("arg=") {
                r.args.push(v.to_string());
            } else if let Some(v) = line.strip_prefix("grandchild=") {
                r.grandchild = v.parse().ok();
            } else if let Some(v) = line.strip_prefix("escapee=") {
                r.escapee = v.parse().ok();
            } else if let Some((k, v)) = line.strip_prefix("env:").and_then(|l| l.split_once('=')) {
                r.env.push((k.to_string(), v.to_string()));
            }
        }
        runs
    }

    /// Waits until `backend` has recorded `n` runs (and, with `side`, the pid of the process
    /// the last one started beside itself).
    async fn until_runs(&self, backend: &str, n: usize, side: bool) -> Vec<Recorded> {
        poll_until(&format!("{backend} run {n} recorded"), || {
            let runs = self.runs(backend);
            let has_side = |r: &Recorded| r.grandchild.or(r.escapee).is_some();
            (runs.len() >= n && (!side || has_side(&runs[n - 1]))).then_some(runs)
        })
        .await
    }

    fn session(&self, backend: &str, prompt: &str) -> Value {
        json!({"engine": "cli", "cliBackend": backend, "prompt": prompt,
               "projectPath": self.project.display().to_string()})
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

fn complete(evs: &[Ev]) -> Vec<&str> {
    evs.iter()
        .filter(|e| e.event == "complete")
        .map(|e| e.data["finishReason"].as_str().unwrap())
        .collect()
}

fn errors(evs: &[Ev]) -> Vec<(String, String)> {
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

#[tokio::test]
async fn each_backend_relays_text_thinking_and_tool_calls_and_stores_them() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for b in BACKENDS {
        let (sid, evs) = c.run(b, "tool").await;
        let t = types(&evs);
        assert_eq!(complete(&evs), ["stop"], "{b}: {t:?}");
        let pos = |kind: &str| t.iter().position(|x| *x == kind).unwrap();
        assert!(pos("init") < pos("toolCallStart"), "{b}: {t:?}");
        assert!(pos("toolCallStart") < pos("toolCallEnd"), "{b}: {t:?}");
        assert!(pos("toolCallEnd") < pos("result"), "{b}: {t:?}");
        assert_eq!(t[t.len() - 2..], ["result", "complete"], "{b}: {t:?}");
        assert!(text_of(&evs).ends_with("The command printed hi."), "{b}");
        let end = evs.iter().find(|e| e.event == "toolCallEnd").unwrap();
        assert_eq!(end.data["status"], "success", "{b}");
        assert!(
            end.data["block"]["content"]
                .as_str()
                .unwrap()
                .starts_with("hi"),
            "{b}: {end:?}"
        );
        let msgs = c.messages(&sid).await;
        assert_eq!(
            roles(&msgs),
            ["user", "assistant", "tool", "assistant"],
            "{b}"
        );
        assert!(block_types(&msgs[1]).ends_with(&["tool_use"]), "{b}");
        assert_eq!(block_types(&msgs[2]), ["tool_result"], "{b}");
        assert_eq!(
            msgs[2]["blocks"][0]["tool_use_id"],
            msgs[1]["blocks"].as_array().unwrap().last().unwrap()["id"]
        );
        assert_eq!(
            msgs[3]["blocks"][0]["text"], "The command printed hi.",
            "{b}"
        );
        let result = evs.iter().find(|e| e.event == "result").unwrap();
        assert_eq!(result.data["stats"]["outputTokens"], 30, "{b}");

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
        assert_eq!(msgs[1]["blocks"][0]["thinking"], "Let me think.", "{b}");
    }
}

#[tokio::test]
async fn a_later_prompt_resumes_the_clis_own_session() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for (b, flag, id) in [
        ("codex", "resume", "0199a213-81c0-7800-8aa1-bbab2a035a53"),
        (
            "claude-code",
            "--resume",
            "5114ce30-e425-47b1-920b-9d5e856bb590",
        ),
        ("gemini-cli", "-r", "4f1c2a52-6a86-4b5a-9c3e-8d0c0b6a1e11"),
    ] {
        let (sid, _) = c.run(b, "text").await;
        let (_, s) = c.d.get(&format!("/v1/sessions/{sid}")).await;
        assert_eq!(s["cliSessionId"], id, "{b}: {s}");
        let first = c.until_runs(b, 1, false).await;
        assert!(!first.last().unwrap().args.iter().any(|a| a == flag), "{b}");
        let before = c.runs(b).len();
        let mut sse = c.d.events(&sid, None).await;
        let run = c.d.send(&sid, json!({"prompt": "text again"})).await;
        let evs = sse.until_complete(&run).await;
        assert_eq!(complete(&evs).last(), Some(&"stop"), "{b}");
        let runs = c.until_runs(b, before + 1, false).await;
        let args = &runs[before].args;
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
        let (_, evs) = c.run(b, "text").await;
        assert_eq!(complete(&evs), ["stop"], "{b}");
        let runs = c.until_runs(b, 1, false).await;
        let r = runs.last().unwrap();
        assert_eq!(Path::new(&r.cwd), c.project.as_path(), "{b}");
        assert_eq!(r.env(key_var), Some(key), "{b}: {:?}", r.env);
        if !url_var.is_empty() {
            assert_eq!(r.env(url_var), Some(url), "{b}");
        }
        let home = r.env("HOME").unwrap();
        assert!(
            Path::new(home).starts_with(&c.d.dir),
            "{b}: HOME {home} is not under the data directory {}",
            c.d.dir.display()
        );
        for (k, v) in &r.env {
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
    }
    // codex reads its provider from the config.toml written into its home.
    let runs = c.runs("codex");
    let r = runs.last().unwrap();
    let config = Path::new(r.env("CODEX_HOME").unwrap()).join("config.toml");
    let toml = std::fs::read_to_string(config).unwrap();
    assert!(
        toml.contains(&format!("base_url = \"{base}/v1\"")),
        "{toml}"
    );
    assert!(toml.contains("env_key = \"FAKE_RESPONSES_KEY\""), "{toml}");
    assert!(
        r.args
            .windows(2)
            .any(|w| w == ["-c", "model_provider=\"cli-responses\""]),
        "{:?}",
        r.args
    );
    // gemini-cli is told to use its API key.
    let runs = c.runs("gemini-cli");
    let home = runs.last().unwrap().env("HOME").unwrap().to_string();
    let settings = std::fs::read_to_string(Path::new(&home).join(".gemini/settings.json")).unwrap();
    assert!(settings.contains("gemini-api-key"), "{settings}");
}

/// Waits for the fake's partial answer, interrupts, and checks the end and the processes.
async fn interrupt_mid_run(c: &CliDaemon, b: &str, scenario: &str) {
    let before = c.runs(b).len();
    let (sid, run) = c.d.create(c.session(b, scenario)).await;
    let mut sse = c.d.events(&sid, None).await;
    let mut evs = sse.until_text("Partial answer").await;
    let side = scenario == "grandchild" || scenario == "escapee";
    let runs = c.until_runs(b, before + 1, side).await;
    let rec = &runs[before];
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
        "{b} {scenario}: {:?}",
        types(&evs)
    );
    assert!(errors(&evs).is_empty(), "{b}: {:?}", errors(&evs));
    let left = until_dead(|| live_in_group(rec.pgid)).await;
    assert!(
        left.is_empty(),
        "{b} {scenario}: {left:?} of group {} alive",
        rec.pgid
    );
    if let Some(g) = rec.grandchild {
        assert!(
            until_dead(|| alive(&[g])).await.is_empty(),
            "{b}: grandchild {g}"
        );
    }
    let msgs = c.messages(&sid).await;
    let texts: Vec<&Value> = msgs[1]["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "text")
        .collect();
    assert_eq!(texts[0]["text"], "Partial answer", "{b}");
    if scenario == "escapee" {
        // The tool call that was going on ends as interrupted, so that the history stays valid.
        assert_eq!(roles(&msgs), ["user", "assistant", "tool"], "{b}");
        let result = &msgs[2]["blocks"][0];
        assert_eq!(result["is_error"], true, "{result}");
        let ends: Vec<&Ev> = evs.iter().filter(|e| e.event == "toolCallEnd").collect();
        assert_eq!(ends.len(), 1);
        assert_eq!(ends[0].data["status"], "interrupted");
    } else {
        assert_eq!(roles(&msgs), ["user", "assistant"], "{b}");
    }
}

#[tokio::test]
async fn an_interrupt_ends_the_whole_group_and_keeps_the_partial_answer() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for b in BACKENDS {
        interrupt_mid_run(&c, b, "grandchild").await;
    }
    // A CLI deaf to SIGINT and SIGTERM is killed at the end of the ladder.
    interrupt_mid_run(&c, "codex", "deaf").await;
    // A tool command that left gemini's group (as its shell tool does) is adopted by the daemon
    // and killed once the group has ended.
    interrupt_mid_run(&c, "gemini-cli", "escapee").await;
}

#[tokio::test]
async fn a_cli_that_goes_silent_is_stopped_by_the_idle_timeout() {
    let mock = MockServer::start().await.unwrap();
    // The CLI never prints anything again: the timeout's length does not change the outcome.
    let c = start(&mock, "idle_timeout_secs = 1", "");
    for b in BACKENDS {
        let before = c.runs(b).len();
        let (_, evs) = c.run(b, "hang").await;
        assert_eq!(complete(&evs), ["error"], "{b}");
        let errs = errors(&evs);
        assert_eq!(errs.len(), 1, "{b}: {errs:?}");
        assert_eq!(errs[0].0, "cli_idle_timeout", "{b}");
        let runs = c.until_runs(b, before + 1, false).await;
        let pgid = runs[before].pgid;
        assert!(until_dead(|| live_in_group(pgid)).await.is_empty(), "{b}");
    }
}

#[tokio::test]
async fn crashes_failures_exits_and_garbage_lines() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for b in BACKENDS {
        // A crash mid-stream: an error with the end of stderr; what came before is kept.
        let (sid, evs) = c.run(b, "crash").await;
        assert_eq!(complete(&evs), ["error"], "{b}");
        let errs = errors(&evs);
        assert_eq!(errs.len(), 1, "{b}: {errs:?}");
        assert!(errs[0].1.contains("fake crash"), "{b}: {errs:?}");
        let msgs = c.messages(&sid).await;
        assert_eq!(
            msgs.last().unwrap()["blocks"][0]["text"],
            "Half an answer",
            "{b}"
        );

        // The CLI reports a failed run.
        let (_, evs) = c.run(b, "error").await;
        assert_eq!(complete(&evs), ["error"], "{b}");
        let errs = errors(&evs);
        assert_eq!(errs.len(), 1, "{b}: {errs:?}");
        assert_eq!(errs[0].0, "cli_failed", "{b}: {errs:?}");

        // It exits non-zero without a word on stdout.
        let (_, evs) = c.run(b, "exit").await;
        assert_eq!(complete(&evs), ["error"], "{b}");
        let errs = errors(&evs);
        assert_eq!(errs[0].0, "cli_exit", "{b}: {errs:?}");

        // A line that is not JSON is skipped.
        let (_, evs) = c.run(b, "garbage").await;
        assert_eq!(complete(&evs), ["stop"], "{b}: {:?}", errors(&evs));
        assert!(text_of(&evs).ends_with("Still here."), "{b}");
    }
    // gemini's documented exit codes are named.
    let (_, evs) = c.run("gemini-cli", "exit").await;
    let errs = errors(&evs);
    assert!(
        errs[0]
            .1
            .contains("status 53: the session's turn limit was reached"),
        "{errs:?}"
    );
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
    assert!(
        backend("codex")["reason"]
            .as_str()
            .unwrap()
            .contains("@openai/codex"),
        "{cli}"
    );
    let (status, e) = missing
        .post(
            "/v1/sessions",
            json!({"engine": "cli", "cliBackend": "codex", "prompt": "hi"}),
        )
        .await;
    assert_eq!(status, 422, "{e}");
    assert!(e.to_string().contains("@openai/codex"), "{e}");

    // The fakes answer --version.
    let cli = cli_engine_info(&c.d).await;
    for b in cli["backends"].as_array().unwrap() {
        assert_eq!(b["available"], true, "{b}");
        assert!(b["version"].as_str().unwrap().contains("0.0.0-fake"), "{b}");
    }
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
    let mut body = c.session("codex", "text");
    body["providerId"] = json!("cli-anthropic");
    let e = refused(body).await;
    assert!(e.contains("openai-responses"), "{e}");
    // The chat engines have no client for the CLIs' own provider kinds.
    let e = refused(json!({"engine": "chat", "providerId": "cli-gemini", "prompt": "hi"})).await;
    assert!(
        e.contains("provider kind 'gemini' is not supported by engine 'chat'"),
        "{e}"
    );
    let (_, list) = c.d.get("/v1/sessions").await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 0, "{list}");

    // An allowed argument reaches the CLI.
    let mut body = c.session("claude-code", "text");
    body["cliArgs"] = json!(["--max-turns=3"]);
    let (sid, run) = c.d.create(body).await;
    c.d.events(&sid, None).await.until_complete(&run).await;
    let runs = c.until_runs("claude-code", 1, false).await;
    assert!(
        runs[0].args.iter().any(|a| a == "--max-turns=3"),
        "{:?}",
        runs[0].args
    );
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
    let (first, first_run) = c.d.create(c.session("claude-code", "slow")).await;
    let mut first_sse = c.d.events(&first, None).await;
    first_sse.until_text("Partial answer").await;
    let (second, second_run) = c.d.create(c.session("claude-code", "text")).await;
    let mut sse = c.d.events(&second, None).await;
    let waiting = sse.until_n("processing", 1).await;
    let note = waiting.last().unwrap().data["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(note.contains("queued behind 1 claude-code run"), "{note}");
    // Another backend does not wait.
    let (_, evs) = c.run("gemini-cli", "text").await;
    assert_eq!(complete(&evs), ["stop"]);
    // The second run starts once the first has ended.
    assert_eq!(c.runs("claude-code").len(), 1);
    c.d.post(&format!("/v1/sessions/{first}/interrupt"), json!({}))
        .await;
    first_sse.until_complete(&first_run).await;
    let evs = sse.until_complete(&second_run).await;
    assert_eq!(complete(&evs), ["stop"], "{:?}", types(&evs));
    assert!(text_of(&evs).contains("fake claude"));
}

#[tokio::test]
async fn shutdown_leaves_no_cli_process_behind() {
    let mock = MockServer::start().await.unwrap();
    let mut c = start(&mock, "", "");
    let mut groups = Vec::new();
    for b in BACKENDS {
        let (sid, _) = c.d.create(c.session(b, "deaf")).await;
        c.d.events(&sid, None)
            .await
            .until_text("Partial answer")
            .await;
        groups.push(c.until_runs(b, 1, false).await[0].pgid);
    }
    let status = c.d.terminate();
    assert!(status.success(), "{status:?}");
    for g in groups {
        assert!(
            until_dead(|| live_in_group(g)).await.is_empty(),
            "group {g}"
        );
    }
}

#[tokio::test]
async fn a_restart_after_a_crash_ends_the_run_and_the_cli_it_left_running() {
    let mock = MockServer::start().await.unwrap();
    let mut c = start(&mock, "", "");
    let (sid, run) = c.d.create(c.session("codex", "deaf")).await;
    c.d.events(&sid, None)
        .await
        .until_text("Partial answer")
        .await;
    let pgid = c.until_runs("codex", 1, false).await[0].pgid;
    c.d.kill();
    // Nobody is left to stop it: it runs on, orphaned.
    assert!(!live_in_group(pgid).is_empty());
    c.d = Daemon::start_in(c.d.dir.clone(), &mock, c.opts.clone());
    let left = until_dead(|| live_in_group(pgid)).await;
    assert!(
        left.is_empty(),
        "{left:?} of group {pgid} alive after the restart"
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
