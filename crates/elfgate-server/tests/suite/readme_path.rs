//! What a new user meets on the README's path: a provider without its key, the terminal client's
//! errors and listings, figures of an interrupted run, the start-up log, the files' modes.

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::path::Path;

/// A variable no test environment sets: the provider `keyless` reads its key from it.
const UNSET_KEY_VAR: &str = "ELFGATE_TEST_NEVER_SET_API_KEY";

/// A provider pointed at the mock whose key variable is unset, and an alias onto it.
fn keyless_toml(mock: &MockServer) -> String {
    format!(
        r#"
[providers.keyless]
kind = "openai"
base_url = "{base}/v1"
api_key_env = "{UNSET_KEY_VAR}"
default_model = "mock:tokens=3"
idle_timeout_secs = 30
request_timeout_secs = 10

[providers.keyless-anthropic]
kind = "anthropic"
base_url = "{base}"
api_key_env = "{UNSET_KEY_VAR}_TOO"
default_model = "mock:tokens=3"
idle_timeout_secs = 30
request_timeout_secs = 10
"#,
        base = mock.base_url()
    )
}

fn log_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The events of a run, once it is complete.
async fn run_events(d: &Daemon, body: Value) -> Vec<Ev> {
    let (sid, run) = d.create(body).await;
    d.all_events_until_complete_of(&sid, &run).await
}

#[tokio::test]
async fn a_provider_without_its_key_is_named_at_start_and_fails_every_engine_at_once() {
    let mock = MockServer::start().await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("daemon.log");
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: keyless_toml(&mock),
            log_file: Some(log.clone()),
            ..Opts::default()
        },
    );
    // One warning at start names every provider whose key variable is unset.
    let text = log_of(&log);
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("API key variable is not set"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains(&format!("keyless ({UNSET_KEY_VAR})")),
        "{text}"
    );
    assert!(
        warnings[0].contains(&format!("keyless-anthropic ({UNSET_KEY_VAR}_TOO)")),
        "{text}"
    );
    // The mock providers have no key variable: not named.
    assert!(!warnings[0].contains("mock"), "{text}");

    let project = scripted::project();
    for body in [
        json!({"engine": "chat", "providerId": "keyless", "model": "mock:tokens=3", "prompt": "hi"}),
        json!({"engine": "st-chat", "providerId": "keyless", "model": "mock:tokens=3", "prompt": "hi"}),
        json!({"engine": "api", "providerId": "keyless", "model": "mock:tokens=3", "prompt": "hi"}),
        json!({"engine": "chat", "providerId": "keyless-anthropic", "prompt": "hi"}),
        scripted::session(
            "hi",
            "mock:tokens=3",
            &project,
            json!({"providerId": "keyless"}),
        ),
    ] {
        let evs = run_events(&d, body.clone()).await;
        let errors: Vec<&Ev> = evs.iter().filter(|e| e.event == "error").collect();
        assert_eq!(errors.len(), 1, "{body}: {evs:?}");
        assert_eq!(errors[0].data["error"]["code"], "missing_api_key", "{body}");
        let message = errors[0].data["error"]["message"].as_str().unwrap();
        assert!(message.contains(UNSET_KEY_VAR), "{body}: {message}");
        // At once: no retry.
        assert!(!evs.iter().any(|e| e.event == "retry"), "{body}: {evs:?}");
        assert_eq!(evs.last().unwrap().data["finishReason"], "error", "{body}");
    }
    // No request reached the provider.
    assert!(mock.requests().is_empty(), "{:?}", mock.requests().len());
}

#[tokio::test]
async fn the_gateway_doors_answer_503_missing_api_key_in_their_own_shapes() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: keyless_toml(&mock),
            ..Opts::default()
        },
    );
    for stream in [false, true] {
        let resp = d
            .http
            .post(d.url("/v1/chat/completions"))
            .json(&json!({"model": "keyless/mock:tokens=3", "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 503, "stream {stream}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "missing_api_key", "{body}");
        assert_eq!(body["error"]["type"], "server_error", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(UNSET_KEY_VAR),
            "{body}"
        );

        let resp = d
            .http
            .post(d.url("/v1/messages"))
            .json(
                &json!({"model": "keyless-anthropic/mock:tokens=3", "max_tokens": 50,
                "stream": stream, "messages": [{"role": "user", "content": "hi"}]}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 503, "stream {stream}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], "api_error", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("{UNSET_KEY_VAR}_TOO")),
            "{body}"
        );
    }
    assert!(mock.requests().is_empty(), "{}", mock.requests().len());
}

#[tokio::test]
async fn an_interrupted_run_counts_the_tokens_it_streamed_in_every_engine() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let project = scripted::project();
    let model = "mock:tokens=400,delay_ms=20";
    for body in [
        json!({"engine": "chat", "model": model, "prompt": "a long story"}),
        json!({"engine": "st-chat", "model": model, "prompt": "a long story"}),
        json!({"engine": "api", "model": model, "prompt": "a long story"}),
        scripted::session("a long story", model, &project, json!({})),
    ] {
        let (sid, run) = d.create(body.clone()).await;
        let mut sse = d.events(&sid, None).await;
        let shown = sse.until_n("streamDelta", 20).await;
        let (status, v) = d
            .post(
                &format!("/v1/sessions/{sid}/interrupt"),
                json!({"wait": true}),
            )
            .await;
        assert_eq!(status, 200, "{body}: {v}");
        let evs = d.all_events_until_complete_of(&sid, &run).await;
        assert_eq!(
            evs.last().unwrap().data["finishReason"],
            "interrupted",
            "{body}"
        );
        let streamed: String = evs
            .iter()
            .filter(|e| e.event == "streamDelta")
            .map(|e| e.data["delta"]["text"].as_str().unwrap_or_default())
            .collect();
        assert!(shown.len() >= 20 && !streamed.is_empty(), "{body}");
        let result = evs.iter().find(|e| e.event == "result").expect("a result");
        let stats = &result.data["stats"];
        let out = stats["outputTokens"].as_u64().unwrap();
        // The mock reports its usage last: what was streamed is counted, about four bytes a
        // token, and marked as an estimate.
        assert_eq!(
            out,
            (streamed.len() as u64).div_ceil(4),
            "{body}: {stats} for {streamed:?}"
        );
        assert_eq!(stats["outputTokensEstimated"], true, "{body}: {stats}");
        // The prompt was read too: with no figure from the provider, its size counts.
        let input = stats["inputTokens"].as_u64().unwrap();
        assert!(input > 0, "{body}: {stats}");
        assert_eq!(stats["inputTokensEstimated"], true, "{body}: {stats}");
        let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
        assert_eq!(r["outputTokens"].as_u64(), Some(out), "{body}: {r}");
        assert_eq!(r["inputTokens"].as_u64(), Some(input), "{body}: {r}");
    }
    // An Anthropic-kind provider reports the prompt's figures first: those count, unmarked.
    let (sid, run) = d
        .create(
            json!({"engine": "chat", "providerId": "mock-anthropic", "model": model,
                       "prompt": "a long story"}),
        )
        .await;
    d.events(&sid, None).await.until_n("streamDelta", 20).await;
    d.post(
        &format!("/v1/sessions/{sid}/interrupt"),
        json!({"wait": true}),
    )
    .await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    let stats = &evs.iter().find(|e| e.event == "result").unwrap().data["stats"];
    assert!(stats["inputTokens"].as_u64().unwrap() > 0, "{stats}");
    assert!(stats.get("inputTokensEstimated").is_none(), "{stats}");
    assert_eq!(stats["outputTokensEstimated"], true, "{stats}");
    // A run that ends normally has the provider's figures, not marked.
    let evs = run_events(
        &d,
        json!({"engine": "chat", "model": "mock:tokens=4", "prompt": "short"}),
    )
    .await;
    let result = evs.iter().find(|e| e.event == "result").unwrap();
    assert_eq!(result.data["stats"]["outputTokens"], 4, "{}", result.data);
    assert!(
        result.data["stats"].get("outputTokensEstimated").is_none(),
        "{}",
        result.data
    );
}

/// `elfgate ARGS` with `stdin`, in directory `cwd`, with none of the test environment's
/// ELFGATE_* variables; (status, stdout, stderr).
async fn client(cwd: &Path, args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_elfgate"));
    cmd.args(args).current_dir(cwd);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ELFGATE_") {
            cmd.env_remove(key);
        }
    }
    let out = super::terminal_client::run_with_stdin(cmd, stdin).await;
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_terminal_clients_errors_go_to_stderr_and_say_what_is_wrong() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let token = d.token.clone().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let cwd = elsewhere.path();
    let (code, stdout, stderr) = client(
        cwd,
        &[
            "chat",
            "--json",
            "--engine",
            "no-such-engine",
            "--url",
            &d.base,
            "--token",
            &token,
        ],
        "hi\n",
    )
    .await;
    // stdout holds events only (none here): `--json | jq` is not broken by the error.
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stdout.trim().is_empty(), "{stdout:?}");
    assert!(stderr.contains("422"), "{stderr}");

    // Outside the daemon's directory, with no token given: it says it found no token file, and
    // where it looked.
    let (code, _, stderr) = client(cwd, &["sessions", "--url", &d.base], "").await;
    assert_eq!(code, Some(3), "{stderr}");
    let looked = cwd.join("data").join("token");
    assert!(stderr.contains("no token file at"), "{stderr}");
    assert!(stderr.contains(&looked.display().to_string()), "{stderr}");

    // A port nothing listens on: the cause is named.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let (code, _, stderr) = client(cwd, &["sessions", "--url", &url, "--token", "x"], "").await;
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("could not connect to {url}: connection refused")),
        "{stderr}"
    );
}

#[tokio::test]
async fn sessions_lists_the_provider_in_columns_that_stay_in_line() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    for model in [
        "mock:tokens=1",
        "mock:tokens=1,delay_ms=1,id=a-much-longer-model-name",
    ] {
        run_events(
            &d,
            json!({"engine": "chat", "providerId": "mock", "model": model, "prompt": "hi"}),
        )
        .await;
    }
    let token = d.token.clone().unwrap();
    let (code, stdout, stderr) = client(
        &d.dir,
        &["sessions", "--url", &d.base, "--token", &token],
        "",
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].contains("PROVIDER"), "{stdout}");
    // The updated-at column starts at the same place on every row.
    let year = |l: &str| l.find(" 20").map(|i| i + 1);
    assert_eq!(year(lines[1]), year(lines[2]), "{stdout}");
    assert_eq!(lines[0].find("UPDATED"), year(lines[1]), "{stdout}");
    assert!(lines[1].contains(" mock "), "{stdout}");
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn the_start_up_log_is_plain_and_quiet_and_the_database_is_owner_only() {
    let mock = MockServer::start().await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("daemon.log");
    let mut d = Daemon::start(
        &mock,
        Opts {
            log_file: Some(log.clone()),
            ..Opts::default()
        },
    );
    let evs = run_events(&d, common::chat("hi", "mock:tokens=3")).await;
    assert_eq!(evs.last().unwrap().data["finishReason"], "stop");
    let text = log_of(&log);
    assert!(
        text.contains("elfgate_"),
        "the log holds the daemon's lines: {text}"
    );
    // stderr is a file here: no colour codes.
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a log file: {text:?}"
    );
    // The default connection cap fits whatever the open-file limit: nothing to warn about.
    assert!(!text.contains("max_connections"), "{text}");
    let db = d.dir.join("elfgate.db");
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let f = Path::new(&format!("{}{suffix}", db.display())).to_path_buf();
        assert_eq!(mode_of(&f), 0o600, "{} is not owner-only", f.display());
    }
    d.terminate();

    // A database others could read (an older daemon's, or a copy) is made private again.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let log2 = tmp.path().join("again.log");
    let again = Daemon::start_in(
        d.dir.clone(),
        &mock,
        Opts {
            log_file: Some(log2.clone()),
            ..Opts::default()
        },
    );
    assert_eq!(mode_of(&db), 0o600);
    assert!(
        log_of(&log2).contains("made owner-only"),
        "{}",
        log_of(&log2)
    );
    drop(again);

    // A cap the operator set that does not fit is lowered, and said so.
    let log3 = tmp.path().join("capped.log");
    let _capped = Daemon::start(
        &mock,
        Opts {
            server_toml: "max_connections = 1000000000".into(),
            log_file: Some(log3.clone()),
            ..Opts::default()
        },
    );
    assert!(
        log_of(&log3).contains("server.max_connections does not fit"),
        "{}",
        log_of(&log3)
    );
}
