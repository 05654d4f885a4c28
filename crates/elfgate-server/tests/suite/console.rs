//! The web console (docs/console.md): its static routes and headers, and the page itself driven
//! in headless Chromium by playwright-core against the real daemon and the mock provider.
//!
//! Each browser scenario is a node script in `tests/console/` that drives the page like a person
//! would and prints what it saw as JSON; the assertions are here, next to checks of what the
//! daemon stored. The scripts save screenshots into `target/console-screenshots/`.
//!
//! Needs Chromium and playwright-core (`scripts/install-browser-driver.sh`, which
//! `scripts/install-test-deps.sh` runs); without them the browser scenarios say so and pass,
//! unless REQUIRE_BROWSER_TESTS=require (set by `scripts/test.sh`).

use crate::common;

use common::{Daemon, GUARD, Opts, Relay, chromium, require_browser};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What runs the scenarios: node, playwright-core and Chromium; None (skip) when one is missing.
pub(crate) struct Driver {
    chromium: PathBuf,
    dir: PathBuf,
}

pub(crate) fn driver() -> Option<Driver> {
    let chromium = chromium()?;
    let dir = repo().join("tools/browser");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node
        || !dir
            .join("node_modules/playwright-core/package.json")
            .exists()
    {
        require_browser(
            "node and playwright-core are required (scripts/install-browser-driver.sh)",
        );
        eprintln!(
            "console browser test skipped: run scripts/install-browser-driver.sh (needs node)"
        );
        return None;
    }
    Some(Driver { chromium, dir })
}

/// One browser at a time: the scenarios wait on what they see, and two Chromiums on two cores
/// only make each other slower.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs `tests/console/NAME.mjs` against `d` and returns what it reported.
pub(crate) async fn scenario(
    driver: &Driver,
    d: &Daemon,
    name: &str,
    env: &[(&str, String)],
) -> Value {
    let _one = ONE_BROWSER.lock().await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/console/{name}.mjs"));
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(&script)
        .env("BASE", &d.base)
        .env("TOKEN", d.token.clone().unwrap_or_default())
        .env("CHROMIUM", &driver.chromium)
        .env("BROWSER_DRIVER_DIR", &driver.dir)
        .env("SCREENSHOT_DIR", repo().join("target/console-screenshots"))
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // Every wait inside is a condition on the page with its own 30 s net; this one only keeps a
    // stuck browser from hanging the test.
    let out = tokio::time::timeout(GUARD * 4, cmd.output())
        .await
        .expect("the scenario did not finish")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT:"))
        .unwrap_or_else(|| panic!("{name} reported nothing\nstdout: {stdout}\nstderr: {stderr}"));
    let r: Value = serde_json::from_str(line).unwrap();
    assert!(
        r.get("error").is_none(),
        "{name} failed: {r:#}\nstderr: {stderr}"
    );
    assert_eq!(r["pageErrors"], json!([]), "{name}: the page threw");
    r
}

/// `name` run against a new daemon and mock provider, with the mock model `model`; None when the
/// browser tests are skipped.
async fn chat_scenario(name: &str, model: &str) -> Option<(MockServer, Daemon, Value)> {
    let driver = driver()?;
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let r = scenario(&driver, &d, name, &[("MODEL", model.into())]).await;
    Some((mock, d, r))
}

/// `tok0 tok1 … tok{n-1}`: what the mock streams for `tokens=n`, as the page shows it.
fn tokens(n: usize) -> String {
    (0..n).map(|i| format!("tok{i} ")).collect::<String>()
}

fn texts(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

async fn assistant_text(d: &Daemon, sid: &str) -> String {
    let (_, v) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["blocks"].as_array().unwrap().clone())
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().unwrap().to_string())
        .collect()
}

async fn runs_of(d: &Daemon, sid: &str) -> Vec<Value> {
    let (_, v) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let mut ids: Vec<String> = Vec::new();
    for m in v["messages"].as_array().unwrap() {
        if let Some(r) = m["runId"].as_str()
            && !ids.iter().any(|x| x == r)
        {
            ids.push(r.to_string());
        }
    }
    let mut runs = Vec::new();
    for r in ids {
        runs.push(d.get(&format!("/v1/sessions/{sid}/runs/{r}")).await.1);
    }
    runs
}

#[tokio::test]
async fn static_files_are_public_and_locked_down() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let page = d.anon.get(d.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let h = page.headers().clone();
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    assert_eq!(h["content-security-policy"], CSP);
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["referrer-policy"], "no-referrer");
    assert_eq!(h["cache-control"], "no-cache");
    let html = page.text().await.unwrap();
    // No inline script or handler: every script comes from a file of the daemon.
    assert!(
        !html.contains("<script>") && !html.contains(" on"),
        "{html}"
    );
    let mut assets: Vec<String> = html
        .split('"')
        .filter(|s| s.starts_with("/console/"))
        .map(str::to_string)
        .collect();
    assert!(assets.iter().any(|a| a.ends_with("/app.js")), "{html}");
    // The modules app.js imports, by their relative names.
    let base = assets[0].rsplit_once('/').unwrap().0.to_string();
    for module in [
        "api.js",
        "auth.js",
        "dom.js",
        "markdown.js",
        "session.js",
        "sessions.js",
        "sse.js",
        "start.js",
        "transcript.js",
    ] {
        assets.push(format!("{base}/{module}"));
    }
    for path in &assets {
        let r = d.anon.get(d.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers().clone();
        let want = match path.rsplit_once('.').unwrap().1 {
            "js" => "text/javascript; charset=utf-8",
            "css" => "text/css; charset=utf-8",
            "svg" => "image/svg+xml",
            other => panic!("unexpected asset type {other}"),
        };
        assert_eq!(h["content-type"], want, "{path}");
        assert_eq!(h["content-security-policy"], CSP, "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(
            h["cache-control"], "public, max-age=31536000, immutable",
            "{path}"
        );
        let body = r.text().await.unwrap();
        // The sanitizing rule, at the source: text reaches the page only as text nodes.
        for banned in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ] {
            assert!(!body.contains(banned), "{path} uses {banned}");
        }
    }
    // Another build's files, or none: 404, with the same headers.
    let r = d
        .anon
        .get(d.url("/console/0000000000000000/app.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["content-security-policy"], CSP);
    for path in [format!("{base}/secrets.txt"), "/console/%FF/app.js".into()] {
        let r = d.anon.get(d.url(&path)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
        assert_eq!(r.headers()["content-security-policy"], CSP, "{path}");
        assert_eq!(r.headers()["cache-control"], "no-cache", "{path}");
    }

    // The API around it is as guarded as before.
    let r = d.anon.get(d.url("/v1/sessions")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = d
        .http
        .post(d.url("/v1/sessions"))
        .header("content-type", "text/plain")
        .body(r#"{"engine":"chat","prompt":"hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let r = d
        .anon
        .get(d.url("/"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // A page whose DNS name was rebound to the daemon does not get the console either.
    let addr = d.base.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_answer_streams_in_token_by_token() {
    let Some((_mock, d, r)) =
        chat_scenario("stream", "mock:tokens=30,think=3,delay_ms=60,fail=503x1").await
    else {
        return;
    };
    let want = tokens(30);
    let steps = texts(&r["steps"]);
    // The answer grew in the page several times before it was complete, each time by what
    // followed, never by anything else.
    assert!(steps.len() >= 3, "{steps:?}");
    for s in &steps {
        assert!(want.starts_with(s.as_str()), "{s:?} is not a prefix");
    }
    assert!(steps.windows(2).all(|w| w[0].len() < w[1].len()));
    assert!(steps[0].len() < want.len());
    assert_eq!(r["final"], want.trim_end());
    assert_eq!(r["finish"], "stop");
    // The upstream's first refusal was retried, and the page said so.
    let retries = texts(&r["retries"]);
    assert_eq!(retries.len(), 1, "{r}");
    assert!(retries[0].starts_with("Retrying (1/2)"), "{retries:?}");
    assert!(r["stats"].as_str().unwrap().contains("33 out"), "{r}");
    // The thinking is there, folded.
    assert_eq!(
        r["thinking"],
        json!([{"open": false, "text": "think0 think1 think2 "}])
    );
    let sid = r["sessionId"].as_str().unwrap();
    assert_eq!(assistant_text(&d, sid).await, want);
    let (_, s) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s["engine"], "chat");
    assert_eq!(s["providerId"], "mock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_cards_and_permission_prompts_allow_then_deny() {
    let Some(driver) = driver() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let project = tempfile::tempdir().unwrap();
    let call = |id: &str, name: &str, args: Value| json!({"id": id, "name": name, "arguments": args.to_string()});
    mock.set_script(
        "console-tools",
        serde_json::from_value(json!({"responses": [
            {"text": "Writing it.", "toolCalls": [call("w1", "write_file",
                json!({"path": "notes.txt", "content": "from the console"}))]},
            {"text": "Written."},
            {"toolCalls": [call("s1", "shell", json!({"command": "touch ran.txt"}))]},
            {"text": "Not allowed, then."},
        ]}))
        .unwrap(),
    );
    let r = scenario(
        &driver,
        &d,
        "permissions",
        &[
            ("MODEL", "mock:script=console-tools".into()),
            ("PROJECT", project.path().display().to_string()),
        ],
    )
    .await;
    assert!(r["asked"].as_str().unwrap().contains("write_file"), "{r}");
    assert!(
        r["asked"].as_str().unwrap().contains("from the console"),
        "{r}"
    );
    let cards = r["cards"].as_array().unwrap();
    assert_eq!(cards.len(), 2, "{r:#}");
    assert_eq!(cards[0]["id"], "w1");
    assert_eq!(cards[0]["name"], "write_file");
    assert_eq!(cards[0]["status"], "success");
    assert!(cards[0]["input"].as_str().unwrap().contains("notes.txt"));
    assert!(!cards[0]["output"].as_str().unwrap().is_empty());
    assert_eq!(cards[1]["id"], "s1");
    assert_eq!(cards[1]["name"], "shell");
    assert_eq!(cards[1]["status"], "denied");
    let decisions: Vec<&str> = r["permissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["decision"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["allow", "deny"]);
    assert_eq!(r["finishes"], json!(["stop", "stop"]));

    // What the daemon did and stored.
    assert_eq!(
        std::fs::read_to_string(project.path().join("notes.txt")).unwrap(),
        "from the console"
    );
    assert!(!project.path().join("ran.txt").exists());
    let sid = r["sessionId"].as_str().unwrap();
    let (_, v) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let results: Vec<(String, bool)> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["blocks"].as_array().unwrap().clone())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            (
                b["tool_use_id"].as_str().unwrap().to_string(),
                b["is_error"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [("w1".to_string(), false), ("s1".to_string(), true)]
    );
    assert_eq!(
        assistant_text(&d, sid).await,
        "Writing it.Written.Not allowed, then."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_interrupts_a_slow_stream() {
    let Some((_mock, d, r)) = chat_scenario("stop", "mock:tokens=2000,delay_ms=50").await else {
        return;
    };
    assert_eq!(r["status"], "interrupted");
    assert_eq!(r["badge"], "interrupted");
    assert_eq!(r["stopDisabled"], true);
    assert_eq!(
        r["narrowOverflow"], 0,
        "the page is wider than a narrow window"
    );
    let sid = r["sessionId"].as_str().unwrap();
    let runs = runs_of(&d, sid).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["status"], "interrupted", "{runs:?}");
    // The page shows the partial answer the daemon kept, which is far from the whole.
    let kept = assistant_text(&d, sid).await;
    assert!(kept.starts_with("tok0 tok1 tok2 tok3 tok4 "), "{kept}");
    assert!(kept.len() < tokens(2000).len());
    assert_eq!(r["shown"], kept.trim_end());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_mid_stream_goes_on_without_loss_or_repeat() {
    let Some((_mock, d, r)) = chat_scenario("reload", "mock:tokens=60,delay_ms=100").await else {
        return;
    };
    let want = tokens(60);
    let before = r["beforeReload"].as_str().unwrap();
    assert!(before.contains("tok9 ") && want.starts_with(before), "{r}");
    assert_eq!(r["askedForToken"], false);
    // After the reload the text starts with what was there before it, and every later text
    // is a longer prefix of the answer: nothing lost, nothing twice.
    let after = texts(&r["after"]);
    assert!(!after.is_empty(), "{r}");
    assert!(after[0].starts_with(before), "{after:?} after {before:?}");
    for s in &after {
        assert!(
            want.starts_with(s.as_str()),
            "{s:?} is not a prefix of the answer"
        );
    }
    assert_eq!(r["final"], want.trim_end());
    // The page came back with the seq it had seen, and only once from nothing.
    let events = r["events"].as_array().unwrap();
    assert!(!events.is_empty());
    let seq: u64 = events[0]["lastEventId"]
        .as_str()
        .unwrap_or_else(|| panic!("no Last-Event-ID after the reload: {r}"))
        .parse()
        .unwrap();
    assert!(seq >= 10, "{seq}");
    let sid = r["sessionId"].as_str().unwrap();
    assert_eq!(assistant_text(&d, sid).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_resumes_without_loss_or_repeat() {
    let Some(driver) = driver() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    // The page talks to the daemon through a relay whose connections are cut mid-stream.
    let relay = Relay::start(&d.base).await;
    let env = [
        ("BASE", relay.url.clone()),
        ("MODEL", "mock:tokens=60,delay_ms=100".into()),
    ];
    let page = scenario(&driver, &d, "drop", &env);
    let cut = async {
        let sid = d.first_session().await;
        let mut sse = d.events(&sid, None).await;
        sse.until_text(&tokens(6)).await;
        relay.cut()
    };
    let (r, before) = tokio::join!(page, cut);
    assert!(relay.accepted() > before, "the page did not reconnect");
    let want = tokens(60);
    for s in texts(&r["steps"]) {
        assert!(
            want.starts_with(s.as_str()),
            "{s:?} is not a prefix of the answer"
        );
    }
    assert_eq!(r["final"], want.trim_end());
    // Opened from the start, then again from the last event the page had.
    let events = r["events"].as_array().unwrap();
    assert!(events.len() >= 2, "{r}");
    assert_eq!(events[0]["lastEventId"], Value::Null);
    let resumed: u64 = events[1]["lastEventId"].as_str().unwrap().parse().unwrap();
    assert!(resumed >= 4, "{r}");
    let sid = r["sessionId"].as_str().unwrap();
    assert_eq!(assistant_text(&d, sid).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_asks_for_the_token_only_when_the_daemon_wants_one() {
    let Some(driver) = driver() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    d.create(
        json!({"engine": "chat", "prompt": "made before", "model": "mock:tokens=2",
        "title": "made before the page"}),
    )
    .await;
    let r = scenario(&driver, &d, "auth", &[]).await;
    assert_eq!(r["listBeforeToken"], 0, "nothing is shown before the token");
    assert_eq!(r["stillAsking"], true);
    assert_eq!(r["sessions"], json!(["made before the page"]));
    assert_eq!(r["answer"], "tok0 tok1 tok2");
    assert_eq!(r["askedAfterReload"], false);
    assert_eq!(r["askedAgain"], true);
    let sid = r["sessionId"].as_str().unwrap();
    assert_eq!(assistant_text(&d, sid).await, tokens(3));

    let open = Daemon::start(
        &mock,
        Opts {
            server_toml: "auth = \"none\"\n".into(),
            ..Opts::default()
        },
    );
    // A page and a bit of sessions; the newest has no title.
    for i in 0..51 {
        open.create(
            json!({"engine": "chat", "prompt": "hi", "model": "mock:tokens=1",
            "title": format!("session {i}")}),
        )
        .await;
    }
    open.create(json!({"engine": "chat", "prompt": "no token here", "model": "mock:tokens=2"}))
        .await;
    let r = scenario(&driver, &open, "auth", &[("AUTH_OFF", "1".into())]).await;
    assert_eq!(r["asked"], false);
    // Newest first, 50 a page; an untitled session is listed by its first prompt.
    let first = texts(&r["firstPage"]);
    assert_eq!(first.len(), 50);
    assert_eq!(first[0], "no token here");
    assert_eq!(first[1], "session 50");
    let all = texts(&r["all"]);
    assert_eq!(all.len(), 52);
    assert_eq!(all[51], "session 0");
    assert_eq!(r["moreShown"], false);
    assert_eq!(r["found"], json!(["session 7"]));
    assert_eq!(r["foundByPrompt"], json!(["no token here"]));
    assert_eq!(r["backendForChat"], false);
    assert_eq!(r["backendForCli"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_from_titles_prompts_and_answers_is_shown_as_text() {
    let Some(driver) = driver() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let payload = |who: &str| {
        format!(
            "{who} <script>window.xssRan='{who}-script'</script> \
             <img src=x onerror=\"window.xssRan='{who}-img';fetch('/xss-marker-{who}')\">"
        )
    };
    let answer = format!(
        "{} [click me](javascript:window.xssRan='link') ![pic](https://example.com/xss-marker.png) **bold** [docs](https://example.com/docs)",
        payload("answer")
    );
    mock.set_script(
        "console-xss",
        serde_json::from_value(json!({"responses": [{"text": answer}]})).unwrap(),
    );
    let (sid, run) = d
        .create(json!({"engine": "chat", "model": "mock:script=console-xss",
            "title": payload("title"), "prompt": payload("prompt")}))
        .await;
    d.all_events_until_complete_of(&sid, &run).await;
    let r = scenario(&driver, &d, "xss", &[("SESSION", sid.clone())]).await;
    assert_eq!(r["ran"], Value::Null, "a payload ran: {r:#}");
    assert_eq!(r["markers"], json!([]), "a payload made a request: {r:#}");
    assert_eq!(r["images"], 0);
    assert_eq!(r["scripts"], 0);
    assert_eq!(r["handlers"], json!([]));
    // Nothing was even tried: the CSP had nothing to block.
    assert_eq!(r["cspViolations"], json!([]));
    // The markup is on the page, as text.
    assert_eq!(r["listed"], payload("title"));
    assert_eq!(r["title"], payload("title"));
    assert_eq!(r["prompt"], payload("prompt"));
    let shown = r["answer"].as_str().unwrap();
    assert!(shown.contains(&payload("answer")), "{shown}");
    assert!(
        shown.contains("[click me](javascript:window.xssRan='link')"),
        "{shown}"
    );
    assert!(shown.contains("![pic](https://example.com/xss-marker.png)"));
    assert!(
        shown.contains("bold") && !shown.contains("**bold**"),
        "{shown}"
    );
    // Links only to http(s) URLs.
    assert_eq!(r["links"], json!(["https://example.com/docs"]), "{r}");
}
