//! Test harness: runs the real `elfgate` binary on a loopback port against an in-process
//! `elfgate-mockllm`, and talks HTTP/SSE to it like a client would.

use elfgate_mockllm::MockServer;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A safety net so that a broken daemon fails a test instead of hanging it; never used to wait
/// for something to happen.
pub const GUARD: Duration = Duration::from_secs(30);

/// Polls `probe` until it yields a value, for at most the guard time (then panics with `what`).
/// For conditions no event announces, such as a process ending or a file appearing.
pub async fn poll_until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {GUARD:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The Chromium of the browser tests: `CHROMIUM_BIN`, else the usual paths. None (the test then
/// skips, saying so) when there is none, unless REQUIRE_BROWSER_TESTS=require (scripts/test.sh
/// sets it), which makes a missing browser a failure.
pub fn chromium() -> Option<PathBuf> {
    let candidates = [
        std::env::var("CHROMIUM_BIN").unwrap_or_default(),
        "/usr/bin/chromium".into(),
        "/usr/bin/chromium-browser".into(),
        "/usr/bin/google-chrome".into(),
    ];
    let found = candidates
        .iter()
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        require_browser("Chromium is required (scripts/test.sh installs it)");
        eprintln!("browser test skipped: no Chromium found (set CHROMIUM_BIN)");
    }
    found
}

/// Fails with `why` when the browser tests are required, else returns (the caller skips).
pub fn require_browser(why: &str) {
    assert_ne!(
        std::env::var("REQUIRE_BROWSER_TESTS").as_deref(),
        Ok("require"),
        "{why}"
    );
}

/// The session and run ids of `POST /v1/sessions`'s answer; panics unless 201.
pub fn created_session((status, v): (u16, Value)) -> (String, String) {
    assert_eq!(status, 201, "create failed: {v}");
    (
        v["sessionId"].as_str().unwrap().to_string(),
        v["runId"].as_str().unwrap().to_string(),
    )
}

/// The run id of `POST /v1/sessions/{id}/messages`'s answer; panics unless 202.
pub fn accepted_run((status, v): (u16, Value)) -> String {
    assert_eq!(status, 202, "send failed: {v}");
    v["runId"].as_str().unwrap().to_string()
}

/// A running daemon.
pub struct Daemon {
    pub child: Child,
    pub base: String,
    pub dir: PathBuf,
    /// The token the daemon wants: Opts.token, or the one it generated into its data dir.
    pub token: Option<String>,
    /// A client that sends the token with every request, as the project's own clients do.
    pub http: reqwest::Client,
    /// A client that sends no credentials.
    pub anon: reqwest::Client,
    /// What the daemon printed about its token at start.
    pub token_line: String,
}

/// Options for a daemon.
#[derive(Default, Clone)]
pub struct Opts {
    pub token: Option<String>,
    /// Keys added to the `[server]` table (which the harness writes itself).
    pub server_toml: String,
    /// Tables appended to the config file.
    pub extra_toml: String,
    pub env: Vec<(String, String)>,
    /// Starts the daemon with this soft limit on open files (its hard limit unchanged).
    pub nofile_soft: Option<u64>,
    /// Writes the daemon's stderr (its log) into this file instead of the test's stderr.
    pub log_file: Option<PathBuf>,
    /// Starts the daemon with this limit on its address space in bytes (RLIMIT_AS), so that a
    /// read without bounds ends it (an allocation failure) instead of filling the machine.
    pub address_space_bytes: Option<u64>,
}

pub fn write_config(dir: &Path, mock: &MockServer, extra: &str) -> PathBuf {
    write_config_with_server(dir, mock, "", extra)
}

pub fn write_config_with_server(
    dir: &Path,
    mock: &MockServer,
    server: &str,
    extra: &str,
) -> PathBuf {
    let cfg = format!(
        r#"
[server]
bind = "127.0.0.1:0"
body_limit_bytes = 65536
keepalive_secs = 15
shutdown_grace_secs = 10
{server}

[storage]
url = "sqlite://{db}"

[providers.mock]
kind = "openai"
base_url = "{base}/v1"
default_model = "mock"
idle_timeout_secs = 30
request_timeout_secs = 10

[providers.mock-anthropic]
kind = "anthropic"
base_url = "{base}"
default_model = "mock"
idle_timeout_secs = 30
request_timeout_secs = 10

[defaults]
provider = "mock"

[engines.chat]
max_history = 100
max_retries = 2
retry_delay_ms = 5
max_retry_delay_ms = 50
{extra}
"#,
        db = dir.join("elfgate.db").display(),
        base = mock.base_url(),
    );
    let path = dir.join("elfgate.toml");
    std::fs::write(&path, cfg).unwrap();
    path
}

/// A client that sends `Authorization: Bearer TOKEN` with every request.
pub fn authenticated_client(token: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(t) = token {
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {t}").parse().unwrap(),
        );
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// The `elfgate` binary of the build running the tests: cargo builds a package's binaries
/// before its integration tests, next to their `deps/` folder (ELFGATE_BIN overrides it).
pub fn elfgate_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("ELFGATE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test executable lives in target/PROFILE/deps");
    let bin = profile_dir.join("elfgate");
    assert!(
        bin.exists(),
        "{} is missing: run the tests of elfgate-server, which build it",
        bin.display()
    );
    bin
}

impl Daemon {
    /// Starts a daemon with a fresh data directory.
    pub fn start(mock: &MockServer, opts: Opts) -> Daemon {
        let dir = tempfile::tempdir().unwrap().keep();
        Self::start_in(dir, mock, opts)
    }

    /// `elfgate serve` on `dir` with `opts`, and nothing of the test's own environment that
    /// would change it.
    fn serve_command(dir: &Path, mock: &MockServer, opts: &Opts) -> Command {
        let config = write_config_with_server(dir, mock, &opts.server_toml, &opts.extra_toml);
        let mut limits = Vec::new();
        if let Some(n) = opts.nofile_soft {
            limits.push(format!("ulimit -Sn {n}"));
        }
        if let Some(b) = opts.address_space_bytes {
            // ulimit -v counts KiB.
            limits.push(format!("ulimit -v {}", b / 1024));
        }
        let mut cmd = if limits.is_empty() {
            Command::new(elfgate_bin())
        } else {
            // `exec` keeps the pid, so `child` is the daemon itself.
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("{} && exec \"$0\" \"$@\"", limits.join(" && ")))
                .arg(elfgate_bin());
            c
        };
        cmd.arg("serve")
            .arg("--config")
            .arg(&config)
            .env("ELFGATE_LOG", "warn")
            .stdin(Stdio::null());
        // The daemon reads every ELFGATE_* variable as configuration: none of the test
        // environment's may reach it, only what the test sets.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ELFGATE_") && key != "ELFGATE_LOG" {
                cmd.env_remove(key);
            }
        }
        if let Some(t) = &opts.token {
            cmd.env("ELFGATE_TOKEN", t);
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Starts a daemon on an existing data directory (a restart).
    pub fn start_in(dir: PathBuf, mock: &MockServer, opts: Opts) -> Daemon {
        let mut cmd = Self::serve_command(&dir, mock, &opts);
        let stderr = match &opts.log_file {
            Some(path) => Stdio::from(std::fs::File::create(path).unwrap()),
            None => Stdio::inherit(),
        };
        cmd.stdout(Stdio::piped()).stderr(stderr);
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        reader.read_line(&mut line).unwrap();
        // The daemon says right after where its token comes from (one line in every mode).
        let mut token_line = String::new();
        if line.starts_with("elfgate listening on ") {
            reader.read_line(&mut token_line).unwrap();
        }
        let base = line
            .trim()
            .strip_prefix("elfgate listening on ")
            .unwrap_or_else(|| panic!("daemon did not start: {line:?}"))
            .to_string();
        // Without ELFGATE_TOKEN the daemon wrote its token into the data dir before listening
        // (unless the test turned auth off).
        let token = opts.token.or_else(|| {
            std::fs::read_to_string(dir.join("token"))
                .ok()
                .map(|t| t.trim().to_string())
        });
        Daemon {
            child,
            base,
            dir,
            token_line: token_line.trim().to_string(),
            http: authenticated_client(token.as_deref()),
            anon: reqwest::Client::new(),
            token,
        }
    }

    /// Runs `elfgate serve` on `dir` expecting it to refuse to start; returns its stderr.
    pub fn start_refused(dir: &Path, mock: &MockServer, opts: Opts) -> String {
        let mut child = Self::serve_command(dir, mock, &opts)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A daemon that starts after all would never exit: poll, and kill it past the guard.
        let deadline = std::time::Instant::now() + GUARD;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("the daemon was expected to refuse to start, and it runs");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        assert!(!status.success(), "the daemon exited with success");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn auth(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .auth(self.http.post(self.url(path)).json(&body))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .auth(self.http.put(self.url(path)).json(&body))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .auth(self.http.get(self.url(path)))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Polls this fleet node's view of the fleet (`GET /v1/cluster`) until no node holds a
    /// session's lease: the last run's end is in the log.
    pub async fn until_no_session_is_run(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (_, cluster) = self.get("/v1/cluster").await;
            if cluster["nodes"]
                .as_array()
                .is_some_and(|n| n.iter().all(|n| n["activeSessions"] == 0))
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "sessions still run: {cluster}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A GET whose answer is text (`/metrics`).
    pub async fn get_text(&self, path: &str) -> (u16, String) {
        let r = self
            .auth(self.http.get(self.url(path)))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    pub async fn delete(&self, path: &str) -> u16 {
        self.auth(self.http.delete(self.url(path)))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// POST /v1/sessions/{sid}/interrupt with `wait: true`: answers once the run has ended.
    pub async fn interrupt_and_wait(&self, sid: &str) -> (u16, Value) {
        self.post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await
    }

    /// Creates a session; panics unless 201.
    pub async fn create(&self, body: Value) -> (String, String) {
        created_session(self.post("/v1/sessions", body).await)
    }

    /// Sends a prompt; panics unless 202.
    pub async fn send(&self, session: &str, body: Value) -> String {
        accepted_run(
            self.post(&format!("/v1/sessions/{session}/messages"), body)
                .await,
        )
    }

    /// The id of the daemon's first session, once a client has created it.
    pub async fn first_session(&self) -> String {
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            let (_, v) = self.get("/v1/sessions").await;
            if let Some(id) = v["sessions"][0]["id"].as_str() {
                return id.to_string();
            }
            assert!(tokio::time::Instant::now() < deadline, "no session");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Opens the session's event stream after `after`.
    pub async fn events(&self, session: &str, last_event_id: Option<u64>) -> Sse {
        let mut rb = self
            .http
            .get(self.url(&format!("/v1/sessions/{session}/events")));
        if let Some(id) = last_event_id {
            rb = rb.header("Last-Event-ID", id.to_string());
        }
        let resp = self.auth(rb).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        Sse::new(resp)
    }

    /// Every logged event of a session, read from the start; waits for nothing.
    pub async fn all_events_until_complete_of(&self, session: &str, run: &str) -> Vec<Ev> {
        let mut sse = self.events(session, None).await;
        sse.until_complete(run).await
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the process to exit; returns its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts seqs increasing by one: no gap and no duplicate.
pub fn assert_contiguous(evs: &[Ev]) {
    for w in evs.windows(2) {
        assert_eq!(
            w[1].seq(),
            w[0].seq() + 1,
            "gap or duplicate: {:?}",
            evs.iter()
                .map(|e| (e.seq(), e.event.as_str()))
                .collect::<Vec<_>>()
        );
    }
}

/// One SSE event as a client sees it.
#[derive(Debug, Clone)]
pub struct Ev {
    pub id: Option<u64>,
    pub event: String,
    pub data: Value,
    /// The frame as received, up to and including its blank line.
    pub raw: String,
}

impl Ev {
    pub fn seq(&self) -> u64 {
        self.data["seq"].as_u64().unwrap()
    }
    pub fn run(&self) -> &str {
        self.data["runId"].as_str().unwrap_or_default()
    }
}

/// A minimal SSE client.
pub struct Sse {
    stream: futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
}

/// One SSE frame (up to its blank line) as an event; None for a comment (keep-alive).
pub fn parse_frame(frame: &str) -> Option<Ev> {
    let mut ev = Ev {
        id: None,
        event: String::new(),
        data: Value::Null,
        raw: frame.to_string(),
    };
    let mut data = String::new();
    for line in frame.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            ev.id = v.parse().ok();
        } else if let Some(v) = line.strip_prefix("event: ") {
            ev.event = v.to_string();
        } else if let Some(v) = line.strip_prefix("data: ") {
            data.push_str(v);
        }
    }
    if ev.event.is_empty() && data.is_empty() {
        return None;
    }
    ev.data = serde_json::from_str(&data).unwrap();
    Some(ev)
}

impl Sse {
    pub fn new(resp: reqwest::Response) -> Sse {
        Sse {
            stream: resp.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    /// The next event (comments skipped); None when the stream ends.
    pub async fn next(&mut self) -> Option<Ev> {
        // One deadline for the whole call, so that keep-alive comments cannot extend it.
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            if let Some(pos) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..pos + 2).collect();
                match parse_frame(&frame) {
                    Some(ev) => return Some(ev),
                    None => continue,
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .expect("no SSE event within the guard time")?;
            self.buf
                .push_str(std::str::from_utf8(&chunk.ok()?).unwrap());
        }
    }

    /// Reads to the end of the stream; Err when the body was cut off (a transport error) rather
    /// than ended by the daemon.
    pub async fn rest(&mut self) -> Result<(), String> {
        loop {
            match tokio::time::timeout(GUARD, self.stream.next())
                .await
                .expect("the stream did not end within the guard time")
            {
                None => return Ok(()),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("{e:?}")),
            }
        }
    }

    /// Reads until the `complete` event of `run` (included).
    pub async fn until_complete(&mut self, run: &str) -> Vec<Ev> {
        let mut out = Vec::new();
        while let Some(ev) = self.next().await {
            let done = ev.event == "complete" && ev.run() == run;
            out.push(ev);
            if done {
                return out;
            }
        }
        panic!("stream ended before complete of {run}: {out:?}");
    }

    /// Reads until `n` events of type `kind` were seen.
    pub async fn until_n(&mut self, kind: &str, n: usize) -> Vec<Ev> {
        let mut out = Vec::new();
        let mut seen = 0;
        while let Some(ev) = self.next().await {
            if ev.event == kind {
                seen += 1;
            }
            out.push(ev);
            if seen == n {
                return out;
            }
        }
        panic!("stream ended before {n} {kind}: {out:?}");
    }
}

pub fn types(evs: &[Ev]) -> Vec<&str> {
    evs.iter().map(|e| e.event.as_str()).collect()
}

pub fn text_of(evs: &[Ev]) -> String {
    evs.iter()
        .filter(|e| e.event == "streamDelta" && e.data["delta"]["kind"] == "text")
        .map(|e| e.data["delta"]["text"].as_str().unwrap().to_string())
        .collect()
}

pub fn chat(prompt: &str, model: &str) -> Value {
    json!({"engine": "chat", "prompt": prompt, "model": model})
}

impl Sse {
    /// Reads until the text deltas read in this call add up to at least `want` (which they must
    /// start with). Deltas that arrive together may be merged into one event, so tests wait for
    /// text, not for a number of delta events.
    pub async fn until_text(&mut self, want: &str) -> Vec<Ev> {
        let mut out = Vec::new();
        let mut acc = String::new();
        while let Some(ev) = self.next().await {
            if ev.event == "streamDelta" && ev.data["delta"]["kind"] == "text" {
                acc.push_str(ev.data["delta"]["text"].as_str().unwrap());
            }
            out.push(ev);
            if acc.len() >= want.len() {
                assert!(
                    acc.starts_with(want),
                    "text {acc:?} does not start with {want:?}"
                );
                return out;
            }
        }
        panic!("stream ended before text {want:?}: {out:?}");
    }
}

/// Allows a pending permission request; panics unless 200.
pub async fn allow(d: &Daemon, sid: &str, rid: &str) {
    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/permissions/{rid}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
}

/// A TCP relay to the daemon whose connections the test can cut, as a flaky network would.
pub struct Relay {
    pub url: String,
    conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Relay {
    pub async fn start(target: &str) -> Relay {
        let target = target.trim_start_matches("http://").to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let list = conns.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                list.lock().unwrap().push(task.abort_handle());
            }
        });
        Relay { url, conns }
    }

    /// Drops every connection open now; returns how many were accepted so far.
    pub fn cut(&self) -> usize {
        let list = self.conns.lock().unwrap();
        for c in list.iter() {
            c.abort();
        }
        list.len()
    }

    pub fn accepted(&self) -> usize {
        self.conns.lock().unwrap().len()
    }
}
