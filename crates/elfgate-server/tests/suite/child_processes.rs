//! What the commands tinyelf runs (shell calls, hooks) can see and reach, and what they leave
//! behind: a clean environment, a network of their own, no survivors, usable hook timeouts.

use crate::common;
use crate::scripted;

use common::{Daemon, GUARD, Opts, poll_until};
use elfgate_mockllm::MockServer;
use scripted::events::{result_of, until_result};
use scripted::procs::until_dead;
use scripted::{call, finish_of, script, session};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn shell_call(id: &str, command: &str) -> Value {
    call(id, "shell", json!({ "command": command }))
}

fn project() -> PathBuf {
    tempfile::tempdir().unwrap().keep()
}

/// A tinyelf session in `dir` driven by the script `name`.
fn tinyelf(name: &str, dir: &Path, permission_mode: &str, engine_config: Value) -> Value {
    session(
        "go",
        &format!("mock:script={name}"),
        dir,
        json!({"permissionMode": permission_mode, "engineConfig": engine_config}),
    )
}

/// Variable names of `env` output.
fn names(env_output: &str) -> Vec<&str> {
    env_output
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect()
}

#[tokio::test]
async fn shell_commands_and_hooks_get_a_clean_environment() {
    let mock = MockServer::start().await.unwrap();
    let token = "tok-child-env-7f3a9c";
    let key = "sk-provider-secret-51c2";
    let d = Daemon::start(
        &mock,
        Opts {
            token: Some(token.into()),
            env: [
                ("ELFTEST_PROVIDER_KEY", key),
                ("ELFTEST_PASSED", "passed"),
                ("ELFTEST_NOT_LISTED", "hidden"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            extra_toml: r#"
[providers.keyed]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "ELFTEST_PROVIDER_KEY"

[engines.tinyelf]
shell_env = { ADDED_BY_CONFIG = "yes", ELFGATE_ADDED = "no" }
shell_env_passthrough = ["ELFTEST_PASSED", "ELFTEST_PROVIDER_KEY", "ELFGATE_TOKEN"]

[[engines.tinyelf.hooks]]
event = "PreToolUse"
matcher = "shell"
command = "env > hook.env"
"#
            .into(),
            ..Opts::default()
        },
    );
    let dir = project();
    script(
        &mock,
        "env",
        json!([{"toolCalls": [shell_call("e1", "env")]}, {"text": "done"}]),
    );
    let (sid, run) = d
        .create(tinyelf(
            "env",
            &dir,
            "bypassPermissions",
            json!({"shellEnv": {"FROM_SESSION": "1", "ELFTEST_PROVIDER_KEY": "x", "ELFGATE_TOKEN": "y"}}),
        ))
        .await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    assert_eq!(finish_of(&evs), "stop");
    let shell = result_of(&evs, "e1").unwrap();
    let hook = std::fs::read_to_string(dir.join("hook.env")).unwrap();
    for (what, out) in [("shell", shell.as_str()), ("hook", hook.as_str())] {
        assert!(
            !out.contains(token),
            "{what} saw the daemon's token:\n{out}"
        );
        assert!(!out.contains(key), "{what} saw a provider key:\n{out}");
        let names = names(out);
        assert!(names.contains(&"PATH"), "{what}:\n{out}");
        assert!(names.contains(&"ADDED_BY_CONFIG"), "{what}:\n{out}");
        assert!(names.contains(&"ELFTEST_PASSED"), "{what}:\n{out}");
        assert!(!names.contains(&"ELFTEST_NOT_LISTED"), "{what}:\n{out}");
        assert!(!names.contains(&"ELFTEST_PROVIDER_KEY"), "{what}:\n{out}");
        assert!(
            !names.iter().any(|n| n.starts_with("ELFGATE_")),
            "{what}:\n{out}"
        );
    }
    // engineConfig shellEnv reaches the session's commands, not the operator's hooks.
    assert!(names(&shell).contains(&"FROM_SESSION"), "{shell}");
    assert!(!names(&hook).contains(&"FROM_SESSION"), "{hook}");
}

/// One response with two shell calls: c1 tries to allow c2's pending permission request through
/// the daemon's API (the test tells it where, before allowing c1). Returns what c1 printed and the
/// status of the test's own answer to c2's request afterwards (200: it was still pending; 409: c1
/// answered it).
async fn shell_answers_its_own_request(
    d: &Daemon,
    mock: &MockServer,
    name: &str,
    engine_config: Value,
) -> (String, u16) {
    let dir = project();
    let curl = "curl -sS -m 10 -o /dev/null -w 'http %{http_code}\\n' -X POST -H @auth \
                -H 'content-type: application/json' -d '{\"decision\":\"allow\"}' \"$(cat target)\"; \
                echo \"curl exit $?\"";
    script(
        mock,
        name,
        json!([
            {"toolCalls": [shell_call("c1", curl), shell_call("c2", "echo second")]},
            {"text": "done"}
        ]),
    );
    let (sid, run) = d
        .create(tinyelf(name, &dir, "default", engine_config))
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut requests = Vec::new();
    while requests.len() < 2 {
        let ev = sse.next().await.expect("stream ended");
        if ev.event == "permissionRequest" {
            requests.push(ev);
        }
    }
    let rid_of = |cmd: &str| {
        let r = requests
            .iter()
            .find(|r| r.data["input"]["command"] == cmd)
            .unwrap();
        r.data["requestId"].as_str().unwrap().to_string()
    };
    let (own, other) = (rid_of(curl), rid_of("echo second"));
    let other_path = format!("/v1/sessions/{sid}/permissions/{other}");
    std::fs::write(dir.join("target"), d.url(&other_path)).unwrap();
    let auth = match &d.token {
        Some(t) => format!("Authorization: Bearer {t}\n"),
        None => "X-Elfgate-Test: 1\n".to_string(),
    };
    std::fs::write(dir.join("auth"), auth).unwrap();
    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/permissions/{own}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let mut evs = Vec::new();
    let printed = until_result(&mut sse, "c1", &mut evs).await;
    let (status, _) = d.post(&other_path, json!({"decision": "allow"})).await;
    evs.extend(sse.until_complete(&run).await);
    assert_eq!(finish_of(&evs), "stop");
    assert!(result_of(&evs, "c2").unwrap().contains("second"));
    (printed, status)
}

async fn tinyelf_capabilities(d: &Daemon) -> Vec<Value> {
    let (s, v) = d.get("/v1/engines").await;
    assert_eq!(s, 200);
    v["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "tinyelf")
        .unwrap()["capabilities"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn shell_commands_cannot_reach_the_daemon_unless_on_the_host_network() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    assert!(
        tinyelf_capabilities(&d)
            .await
            .contains(&json!("shell-network-isolated"))
    );
    let (printed, status) = shell_answers_its_own_request(&d, &mock, "net-iso", json!({})).await;
    assert!(printed.contains("curl exit"), "{printed}");
    assert!(!printed.contains("curl exit 0"), "{printed}");
    assert!(!printed.contains("http 200"), "{printed}");
    assert_eq!(status, 200, "the request did not stay pending: {printed}");

    // A session may ask for the host's network.
    let (printed, status) = shell_answers_its_own_request(
        &d,
        &mock,
        "net-session-host",
        json!({"shellNetwork": "host"}),
    )
    .await;
    assert!(printed.contains("http 200"), "{printed}");
    assert_eq!(status, 409);

    // And so may the daemon's configuration.
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: "[engines.tinyelf]\nshell_network = \"host\"\n".into(),
            ..Opts::default()
        },
    );
    assert!(
        tinyelf_capabilities(&d)
            .await
            .contains(&json!("shell-network-host"))
    );
    let (printed, status) = shell_answers_its_own_request(&d, &mock, "net-host", json!({})).await;
    assert!(printed.contains("http 200"), "{printed}");
    assert_eq!(status, 409);
}

#[tokio::test]
async fn hooks_run_in_the_private_network_too() {
    let mock = MockServer::start().await.unwrap();
    // The hook reads the daemon's address from the project, where the test writes it once the
    // daemon has one; /healthz needs no token, so only the network can keep the hook out.
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: r#"
[[engines.tinyelf.hooks]]
event = "PreToolUse"
matcher = "list_dir"
command = "code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 \"$(cat daemon.url)/healthz\"); echo \"curl exit $? http $code\" > hook.net"
timeout_secs = 30
"#
            .into(),
            ..Opts::default()
        },
    );
    let dir = project();
    std::fs::write(dir.join("daemon.url"), &d.base).unwrap();
    script(
        &mock,
        "hook-net",
        json!([{"toolCalls": [call("l1", "list_dir", json!({"path": "."}))]}, {"text": "done"}]),
    );
    let (sid, run) = d
        .create(tinyelf("hook-net", &dir, "bypassPermissions", json!({})))
        .await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    assert_eq!(finish_of(&evs), "stop");
    let printed = std::fs::read_to_string(dir.join("hook.net")).unwrap();
    assert!(printed.contains("curl exit"), "{printed}");
    assert!(!printed.contains("curl exit 0"), "{printed}");
    assert!(!printed.contains("http 200"), "{printed}");
}

/// Fields of /proc/PID/stat after the command name: state, ppid, ...
fn stat_of(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Live (not zombie) processes whose command line is exactly `argv`.
fn live_with_cmdline(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|pid| stat_of(*pid).is_some_and(|f| f[0] != "Z" && f[0] != "X"))
        .collect()
}

/// Kills the `sleep ARG` processes left when the test fails half-way (they would sleep for weeks).
struct KillSleeps(Vec<String>);

impl Drop for KillSleeps {
    fn drop(&mut self) {
        for arg in &self.0 {
            for pid in live_with_cmdline(&["sleep", arg]) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    while pid > 1 {
        if pid == ancestor {
            return true;
        }
        match stat_of(pid).and_then(|f| f[1].parse().ok()) {
            Some(parent) => pid = parent,
            None => return false,
        }
    }
    false
}

#[tokio::test]
async fn processes_that_escape_a_shell_call_do_not_survive_it() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let daemon = d.child.id();
    // Unique on this machine while the daemon lives: its pid is in the number.
    let n = (4_000_000 + daemon).to_string();
    let quiet = (5_000_000 + daemon).to_string();
    let _cleanup = KillSleeps(vec![n.clone(), quiet.clone()]);
    let dir = project();
    // The first escapee keeps the call's stdout open; the second one holds no pipe.
    let command = format!(
        "nohup setsid sleep {n} & disown; nohup setsid sleep {quiet} >/dev/null 2>&1 & disown; \
         for i in $(seq 1 600); do [ -e release ] && break; sleep 0.05; done; echo released"
    );
    script(
        &mock,
        "escape",
        json!([{"toolCalls": [shell_call("x1", &command)]}, {"text": "done"}]),
    );
    let (sid, run) = d
        .create(tinyelf("escape", &dir, "bypassPermissions", json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let escapees = || -> Vec<u32> {
        [n.as_str(), quiet.as_str()]
            .iter()
            .flat_map(|arg| live_with_cmdline(&["sleep", arg]))
            .collect()
    };
    let found = poll_until("the escapees' start", || {
        let found = escapees();
        (found.len() == 2).then_some(found)
    })
    .await;
    for pid in &found {
        assert!(descends_from(*pid, daemon), "{pid} is not under the daemon");
    }
    std::fs::write(dir.join("release"), "").unwrap();
    let printed = until_result(&mut sse, "x1", &mut Vec::new()).await;
    assert!(printed.contains("released"), "{printed}");
    let evs = sse.until_complete(&run).await;
    assert_eq!(finish_of(&evs), "stop");
    // Killed and reaped before the call returned; polled (bounded) all the same, as SIGKILL is
    // delivered asynchronously.
    let left = until_dead(escapees).await;
    assert!(left.is_empty(), "escapees still alive: {left:?}");
}

/// Runs `elfgate ARGS --config FILE` and waits (bounded) for it to exit; returns its exit status
/// and stderr, or None if it was still running (it is killed then).
fn elfgate_exits(args: &[&str], config: &Path) -> Option<(std::process::ExitStatus, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_elfgate"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("ELFGATE_TOKEN")
        .env_remove("ELFGATE_BIND")
        .env_remove("ELFGATE_DATABASE_URL")
        .env("ELFGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + GUARD;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return Some((status, err));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[tokio::test]
async fn a_hook_timeout_that_is_not_a_number_of_seconds_is_refused_at_load() {
    let mock = MockServer::start().await.unwrap();
    for bad in ["inf", "nan", "-inf"] {
        let dir = project();
        let config = common::write_config(
            &dir,
            &mock,
            &format!(
                "[[engines.tinyelf.hooks]]\nevent = \"PreToolUse\"\ncommand = \"true\"\n\
                 timeout_secs = 5\n\n[[engines.tinyelf.hooks]]\nevent = \"PostToolUse\"\n\
                 command = \"true\"\ntimeout_secs = {bad}\n"
            ),
        );
        for args in [&["serve"][..], &["config", "check"][..]] {
            let (status, err) = elfgate_exits(args, &config)
                .unwrap_or_else(|| panic!("elfgate {args:?} accepted timeout_secs = {bad}"));
            assert!(!status.success(), "{args:?} {bad}");
            assert!(
                err.contains("engines.tinyelf.hooks[1].timeout_secs"),
                "{args:?} {bad}: {err}"
            );
        }
    }
}
