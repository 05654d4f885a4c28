//! The terminal client (`elfgate chat`, `sessions`, `show`, `interrupt`) against a real daemon:
//! piped prompts, `--json`, the session commands, and a person at a terminal, driven in tmux.

use crate::common;

use common::{Daemon, GUARD, Opts, Relay};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// `elfgate ARGS` pointed at `d` explicitly, with none of the test environment's ELFGATE_*
/// variables.
fn client(d: &Daemon, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_elfgate"));
    cmd.args(args).arg("--url").arg(&d.base);
    if let Some(t) = &d.token {
        cmd.arg("--token").arg(t);
    }
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ELFGATE_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Runs `cmd` with `stdin` piped in; fails the test if it does not end within the guard time.
pub(crate) async fn run_with_stdin(mut cmd: Command, stdin: &str) -> Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let waiter = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
    tokio::time::timeout(GUARD, waiter)
        .await
        .expect("the client did not exit")
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn script(mock: &MockServer, name: &str, responses: Value) {
    mock.set_script(
        name,
        serde_json::from_value(json!({ "responses": responses })).unwrap(),
    );
}

async fn only_session(d: &Daemon) -> String {
    let (s, v) = d.get("/v1/sessions").await;
    assert_eq!(s, 200);
    let list = v["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    list[0]["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn piped_prompts_run_in_turn_and_exit_0() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let out = run_with_stdin(
        client(&d, &["chat", "--model", "mock/mock:echo=1"]),
        "first question\n\nsecond question\n",
    )
    .await;
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = text.find("You said: first question").expect(&text);
    let second = text.find("You said: second question").expect(&text);
    assert!(first < second, "{text}");
    // Not a terminal: no colours, no spinner.
    assert!(!text.contains('\x1b'), "{text:?}");
    // One session, two runs, both complete.
    let sid = only_session(&d).await;
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(msgs["messages"].as_array().unwrap().len(), 4, "{msgs}");
}

#[tokio::test]
async fn json_prints_one_event_per_line_ending_with_complete() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let out = run_with_stdin(
        client(&d, &["chat", "--json", "--model", "mock:tokens=5"]),
        "hello\n",
    )
    .await;
    assert_eq!(out.status.code(), Some(0));
    let events: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.last(), Some(&"complete"), "{types:?}");
    assert_eq!(events.last().unwrap()["finishReason"], "stop");
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "streamDelta")
        .map(|e| e["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "tok0 tok1 tok2 tok3 tok4 ");
    assert!(types.contains(&"result"), "{types:?}");
}

#[tokio::test]
async fn a_failed_run_exits_1_and_usage_and_reach_errors_have_their_codes() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let out = run_with_stdin(client(&d, &["chat", "--model", "mock:fail=400"]), "hi\n").await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));

    let out = run_with_stdin(client(&d, &["show"]), "").await;
    assert_eq!(out.status.code(), Some(2));
    let out = run_with_stdin(client(&d, &["chat", "--bogus"]), "").await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unexpected argument '--bogus'"), "{err}");
    assert!(err.contains("Usage: elfgate chat"), "{err}");

    // Help lists every subcommand and exits 0; a completion script knows the client's flags.
    let mut help = Command::new(env!("CARGO_BIN_EXE_elfgate"));
    help.arg("--help");
    let out = run_with_stdin(help, "").await;
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    for sub in [
        "serve",
        "migrate",
        "config",
        "chat",
        "sessions",
        "show",
        "interrupt",
    ] {
        assert!(
            text.contains(&format!("  {sub} ")),
            "{sub} missing from: {text}"
        );
    }
    let mut completions = Command::new(env!("CARGO_BIN_EXE_elfgate"));
    completions.args(["completions", "bash"]);
    let out = run_with_stdin(completions, "").await;
    assert_eq!(out.status.code(), Some(0));
    let script = stdout(&out);
    assert!(
        script.contains("--permission-mode") && script.contains("complete -F"),
        "{script}"
    );

    let mut wrong = Command::new(env!("CARGO_BIN_EXE_elfgate"));
    wrong.args(["sessions", "--url", &d.base, "--token", "not-the-token"]);
    let out = run_with_stdin(wrong, "").await;
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused the token"));

    // A port nothing listens on.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let mut gone = Command::new(env!("CARGO_BIN_EXE_elfgate"));
    gone.args(["sessions", "--url", &url, "--token", "x"]);
    let out = run_with_stdin(gone, "").await;
    assert_eq!(out.status.code(), Some(3));
}

#[tokio::test]
async fn without_a_token_argument_the_client_reads_the_daemons_token_file() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    assert!(d.token.is_some(), "the daemon generated no token");
    let (sid, run) = d
        .create(
            json!({"engine": "chat", "prompt": "find me by my token", "model": "mock:tokens=1"}),
        )
        .await;
    d.events(&sid, None).await.until_complete(&run).await;
    // What a user on this machine has: the daemon's configuration (here its database URL) and
    // no token anywhere but the file the daemon wrote beside the database.
    // With the daemon's address as --url, or in ELFGATE_URL, the client's own variable, which
    // is not a key of the daemon's configuration: either way the token file is found.
    for url_in_env in [false, true] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_elfgate"));
        cmd.arg("sessions");
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ELFGATE_") {
                cmd.env_remove(key);
            }
        }
        if url_in_env {
            cmd.env("ELFGATE_URL", &d.base);
        } else {
            cmd.args(["--url", &d.base]);
        }
        cmd.env(
            "ELFGATE_DATABASE_URL",
            format!("sqlite://{}", d.dir.join("elfgate.db").display()),
        );
        let out = run_with_stdin(cmd, "").await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "ELFGATE_URL {url_in_env}: {}{}",
            stdout(&out),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout(&out).contains(&sid), "{}", stdout(&out));
    }
}

#[tokio::test]
async fn sessions_show_and_interrupt() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d
        .create(json!({"engine": "chat", "prompt": "count slowly", "model": "mock:tokens=500,delay_ms=50"}))
        .await;
    let mut sse = d.events(&sid, None).await;
    sse.until_n("streamDelta", 1).await;

    let out = run_with_stdin(client(&d, &["sessions"]), "").await;
    assert_eq!(out.status.code(), Some(0));
    let line = stdout(&out);
    assert!(line.contains(&sid) && line.contains("running"), "{line}");
    // An untitled session is named by its first prompt.
    assert!(line.contains("count slowly"), "{line}");

    let out = run_with_stdin(client(&d, &["interrupt", &sid]), "").await;
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains(&format!("run {run} interrupted")),
        "{}",
        stdout(&out)
    );
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["status"], "interrupted", "{r}");

    let out = run_with_stdin(client(&d, &["show", &sid]), "").await;
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.contains("[user]\ncount slowly"), "{text}");
    assert!(text.contains("[assistant]\ntok0 "), "{text}");

    let out = run_with_stdin(client(&d, &["show", &sid, "--json"]), "").await;
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["session"]["id"], sid.as_str());
    assert_eq!(v["messages"].as_array().unwrap().len(), 2);

    let out = run_with_stdin(client(&d, &["interrupt", &sid]), "").await;
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("nothing was running"));
    let out = run_with_stdin(
        client(&d, &["show", "0190a0a0-0000-7000-8000-000000000000"]),
        "",
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
}

/// A tmux server of the test's own (its own socket), with `elfgate chat` in one pane.
struct Tmux {
    socket: String,
    _conf: tempfile::TempDir,
}

impl Tmux {
    /// Starts `elfgate ARGS` in a 200x50 pane. The pane stays after the client exits, so that
    /// its last output can still be read.
    fn start(d: &Daemon, args: &[&str], name: &str) -> Tmux {
        Self::start_in_shell(d, args, name, false)
    }

    /// [`Tmux::start`] with a shell around the client that prints `after the client (STATUS)` once
    /// it has exited, as a shell's prompt would follow it, and exits with its status.
    fn start_in_shell(d: &Daemon, args: &[&str], name: &str, shell: bool) -> Tmux {
        let conf = tempfile::tempdir().unwrap();
        let conf_file = conf.path().join("tmux.conf");
        std::fs::write(&conf_file, "set -g remain-on-exit on\n").unwrap();
        let socket = format!("elfgate-test-{}-{name}", std::process::id());
        let mut line = format!(
            "exec env -u ELFGATE_TOKEN -u ELFGATE_URL '{}'",
            env!("CARGO_BIN_EXE_elfgate")
        );
        for a in
            args.iter()
                .copied()
                .chain(["--url", &d.base, "--token", d.token.as_deref().unwrap()])
        {
            line.push_str(&format!(" '{a}'"));
        }
        if shell {
            line = format!(
                "{}; s=$?; printf 'after the client (%s)\\n' \"$s\"; exit \"$s\"",
                line.trim_start_matches("exec ")
            );
        }
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f"])
            .arg(&conf_file)
            .args(["new-session", "-d", "-x", "200", "-y", "50", "-s", "t"])
            .arg(line)
            .status()
            .unwrap();
        assert!(status.success());
        Tmux {
            socket,
            _conf: conf,
        }
    }

    fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "t"])
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Types `text` and Enter.
    fn type_line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    fn capture(&self) -> String {
        let out = Command::new("tmux")
            .args([
                "-L",
                &self.socket,
                "capture-pane",
                "-p",
                "-J",
                "-t",
                "t",
                "-S",
                "-200",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the pane shows what `pred` looks for (the guard time at most).
    async fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            let screen = self.capture();
            if pred(&screen) {
                return screen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {GUARD:?}; the pane shows:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Tmux {
    /// One of the pane's `#{...}` values.
    fn pane(&self, format: &str) -> String {
        let out = Command::new("tmux")
            .args([
                "-L",
                &self.socket,
                "display-message",
                "-p",
                "-t",
                "t",
                format,
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until the client has exited (the guard time at most) and returns its exit status.
    ///
    /// The status is read from the kernel (`/proc/PID/stat`) while the process is a zombie, and
    /// from tmux once tmux has reaped it: under load, tmux was seen to leave its pane's exited
    /// process unreaped for more than the guard time, the pane still showing the prompt, so that
    /// tmux alone cannot tell whether the client has exited.
    async fn wait_exit(&self) -> i32 {
        let pid = self.pane("#{pane_pid}");
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            if let Some(status) = zombie_exit_status(&pid) {
                return status;
            }
            if self.pane("#{pane_dead}") == "1"
                && let Ok(status) = self.pane("#{pane_dead_status}").parse()
            {
                return status;
            }
            if tokio::time::Instant::now() >= deadline {
                let threads: String = std::fs::read_dir(format!("/proc/{pid}/task"))
                    .map(|dir| {
                        dir.flatten()
                            .map(|t| {
                                let read = |f: &str| {
                                    std::fs::read_to_string(t.path().join(f)).unwrap_or_default()
                                };
                                format!("{} waits in {}\n", read("comm").trim(), read("wchan"))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                panic!(
                    "the client (pid {pid}) did not exit within {GUARD:?}; its threads:\n{threads}\
                     the pane shows:\n{}",
                    self.capture()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The exit status of process `pid` if it has exited and is not reaped yet: `/proc/PID/stat`
/// shows state `Z` and, as its 52nd field, the status in waitpid's form.
fn zombie_exit_status(pid: &str) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    if fields.first() != Some(&"Z") {
        return None;
    }
    let wait_status: i32 = fields.get(49)?.trim().parse().ok()?;
    Some((wait_status >> 8) & 0xff)
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

fn project() -> PathBuf {
    tempfile::tempdir().unwrap().keep()
}

#[tokio::test]
async fn in_tmux_a_streamed_answer_appears() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let t = Tmux::start_in_shell(&d, &["chat", "--model", "mock:echo=1"], "answer", true);
    t.wait_for("the prompt", |s| s.contains("> ")).await;
    t.type_line("hello from tmux");
    t.wait_for("the answer", |s| s.contains("You said: hello from tmux"))
        .await;
    t.wait_for("the next prompt", |s| s.trim_end().ends_with('>'))
        .await;
    // Ctrl-D at the prompt ends the client, and ends the prompt's line: what follows (a shell's
    // prompt) starts on a line of its own, not after "> ".
    t.keys(&["C-d"]);
    assert_eq!(t.wait_exit().await, 0, "{}", t.capture());
    let screen = t.capture();
    assert!(
        screen.lines().any(|l| l == "after the client (0)"),
        "what follows the client does not start its own line:\n{screen}"
    );
}

#[tokio::test]
async fn in_tmux_a_permission_prompt_answered_y_lets_the_tool_run() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "term-perm",
        json!([
            {"toolCalls": [{"id": "w1", "name": "write_file",
                "arguments": json!({"path": "note.txt", "content": "hi"}).to_string()}]},
            {"text": "the note is written"}
        ]),
    );
    let project_arg = dir.display().to_string();
    let t = Tmux::start(
        &d,
        &[
            "chat",
            "--engine",
            "tinyelf",
            "--model",
            "mock:script=term-perm",
            "--project",
            &project_arg,
        ],
        "perm",
    );
    t.wait_for("the prompt", |s| s.contains("> ")).await;
    t.type_line("write a note");
    t.wait_for("the permission question", |s| {
        s.contains("allow write_file") && s.contains("[y]es once")
    })
    .await;
    assert!(!dir.join("note.txt").exists());
    t.type_line("y");
    let screen = t
        .wait_for("the answer after the tool", |s| {
            s.contains("the note is written")
        })
        .await;
    assert!(screen.contains("write_file: success"), "{screen}");
    assert_eq!(std::fs::read_to_string(dir.join("note.txt")).unwrap(), "hi");
    t.wait_for("the next prompt", |s| s.trim_end().ends_with('>'))
        .await;
    t.keys(&["C-d"]);
    assert_eq!(t.wait_exit().await, 0, "{}", t.capture());
}

#[tokio::test]
async fn in_tmux_ctrl_c_interrupts_the_run() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let t = Tmux::start(
        &d,
        &["chat", "--model", "mock:tokens=500,delay_ms=50"],
        "ctrlc",
    );
    t.wait_for("the prompt", |s| s.contains("> ")).await;
    t.type_line("count slowly");
    t.wait_for("the stream", |s| s.contains("tok3 ")).await;
    let sid = only_session(&d).await;
    t.keys(&["C-c"]);
    let screen = t
        .wait_for("the interrupted run", |s| s.contains("[interrupted]"))
        .await;
    assert!(!screen.contains("tok499"), "{screen}");
    // The daemon agrees: the run ended interrupted.
    let mut sse = d.events(&sid, None).await;
    let evs = sse.until_n("complete", 1).await;
    let complete = evs.last().unwrap();
    assert_eq!(complete.data["finishReason"], "interrupted");
    let (_, r) = d
        .get(&format!("/v1/sessions/{sid}/runs/{}", complete.run()))
        .await;
    assert_eq!(r["status"], "interrupted", "{r}");
    // Ctrl-C at the prompt ends the client, with 130.
    t.wait_for("the next prompt", |s| s.trim_end().ends_with('>'))
        .await;
    t.keys(&["C-c"]);
    assert_eq!(t.wait_exit().await, 130, "{}", t.capture());
}

#[tokio::test]
async fn a_dropped_stream_resumes_without_losing_or_repeating_events() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let relay = Relay::start(&d.base).await;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_elfgate"));
    cmd.args(["chat", "--json", "--model", "mock:tokens=60,delay_ms=50"])
        .args(["--url", &relay.url, "--token", d.token.as_deref().unwrap()]);
    let client = tokio::spawn(run_with_stdin(cmd, "go\n"));
    // Cut the client's connections once the answer is streaming.
    let sid = d.first_session().await;
    let mut sse = d.events(&sid, None).await;
    sse.until_n("streamDelta", 1).await;
    let before = relay.cut();
    let out = client.await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(relay.accepted() > before, "the client did not reconnect");
    let events: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "streamDelta")
        .map(|e| e["delta"]["text"].as_str().unwrap())
        .collect();
    let want: String = (0..60).map(|i| format!("tok{i} ")).collect();
    assert_eq!(text, want);
    assert_eq!(events.last().unwrap()["type"], "complete");
}
