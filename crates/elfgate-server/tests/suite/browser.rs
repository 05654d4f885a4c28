//! In headless Chromium: a page on another origin can neither create a session, nor answer a
//! permission request, nor read a stream, even with auth turned off; a configured origin can.
//!
//! Needs Chromium (`scripts/test.sh` installs Debian's package and sets
//! REQUIRE_BROWSER_TESTS=require; without it and without Chromium the test says so and passes).

use crate::common;

use common::{Daemon, GUARD, Opts, chromium};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A web server on its own port (its own origin) that answers every GET with `page`.
async fn page_server(page: Arc<Mutex<String>>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let page = page.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let html = page.lock().unwrap().clone();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{html}",
                    html.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    addr
}

/// Loads `url` in headless Chromium, lets its scripts run, and returns what the page wrote
/// after `RESULT:` (JSON).
async fn run_page(browser: &PathBuf, url: &str) -> Value {
    let profile = tempfile::tempdir().unwrap();
    let out = tokio::time::timeout(
        GUARD * 2,
        tokio::process::Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                // Virtual time stops while requests are pending, so the page's fetches finish
                // before the DOM is dumped.
                "--virtual-time-budget=20000",
                "--dump-dom",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("chromium did not finish")
    .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let start = dom
        .find("RESULT:")
        .unwrap_or_else(|| panic!("the page wrote no result: {dom}"));
    let rest = &dom[start + "RESULT:".len()..];
    let end = rest.find('<').unwrap_or(rest.len());
    // The DOM dump escapes text: undo the few escapes JSON can contain.
    let text = rest[..end]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The page's script: runs `body` (async JS that fills the object `r`) then writes r.
fn page(body: &str) -> String {
    format!(
        "<!doctype html><html><body><pre id=out>pending</pre><script>\n\
         (async () => {{ const r = {{}};\n\
         try {{ {body} }} catch (e) {{ r.uncaught = String(e); }}\n\
         document.getElementById('out').textContent = 'RESULT:' + JSON.stringify(r);\n\
         }})();\n</script></body></html>"
    )
}

fn script(mock: &MockServer, name: &str, responses: Value) {
    mock.set_script(
        name,
        serde_json::from_value(json!({ "responses": responses })).unwrap(),
    );
}

async fn sessions(d: &Daemon) -> usize {
    d.get("/v1/sessions").await.1["sessions"]
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_other_origins_cannot_drive_the_daemon() {
    let Some(browser) = chromium() else { return };
    let mock = MockServer::start().await.unwrap();
    let evil_page = Arc::new(Mutex::new(String::new()));
    let friendly_page = Arc::new(Mutex::new(String::new()));
    let evil = page_server(evil_page.clone()).await;
    let friendly = page_server(friendly_page.clone()).await;
    // Auth off: the origin checks alone must stop the page (that was the hole).
    let d = Daemon::start(
        &mock,
        Opts {
            server_toml: format!("auth = \"none\"\nallowed_origins = [\"http://{friendly}\"]\n"),
            ..Opts::default()
        },
    );
    let base = d.base.clone();

    // A tinyelf run waiting for permission to write a file.
    let project = tempfile::tempdir().unwrap();
    script(
        &mock,
        "web-perm",
        json!([
            {"toolCalls": [{"id": "w1", "name": "write_file",
                "arguments": json!({"path": "pwned.txt", "content": "x"}).to_string()}]},
            {"text": "done"}
        ]),
    );
    let (sid, run) = d
        .create(json!({
            "engine": "tinyelf", "prompt": "write", "model": "mock:script=web-perm",
            "projectPath": project.path().display().to_string(),
        }))
        .await;
    let mut sse = d.events(&sid, None).await;
    let req = loop {
        let ev = sse.next().await.unwrap();
        if ev.event == "permissionRequest" {
            break ev;
        }
    };
    let rid = req.data["requestId"].as_str().unwrap().to_string();
    let create =
        json!({"engine": "chat", "prompt": "from a page", "model": "mock:tokens=2"}).to_string();
    let allow = json!({"decision": "allow"}).to_string();

    *evil_page.lock().unwrap() = page(&format!(
        r#"
        const base = {base:?}, sid = {sid:?}, rid = {rid:?};
        const create = {create:?}, allow = {allow:?};
        // The attack as found: a simple request needs no preflight, and the page does not
        // need to read the answer.
        try {{ await fetch(base + '/v1/sessions', {{method: 'POST', mode: 'no-cors',
            headers: {{'Content-Type': 'text/plain'}}, body: create}}); r.simple = 'sent'; }}
        catch (e) {{ r.simple = 'error'; }}
        try {{ await fetch(base + '/v1/sessions/' + sid + '/permissions/' + rid, {{method: 'POST',
            mode: 'no-cors', headers: {{'Content-Type': 'text/plain'}}, body: allow}});
            r.allowSimple = 'sent'; }} catch (e) {{ r.allowSimple = 'error'; }}
        // With CORS: the preflight is refused, so the request is never sent.
        try {{ const x = await fetch(base + '/v1/sessions', {{method: 'POST',
            headers: {{'Content-Type': 'application/json'}}, body: create}});
            r.cors = x.status; }} catch (e) {{ r.cors = 'blocked'; }}
        try {{ const x = await fetch(base + '/v1/sessions/' + sid + '/permissions/' + rid,
            {{method: 'POST', headers: {{'Content-Type': 'application/json'}}, body: allow}});
            r.allowCors = x.status; }} catch (e) {{ r.allowCors = 'blocked'; }}
        // Reading: the list, and the stream (fetch and EventSource).
        try {{ const x = await fetch(base + '/v1/sessions'); r.list = await x.text(); }}
        catch (e) {{ r.list = 'blocked'; }}
        try {{ const x = await fetch(base + '/v1/sessions/' + sid + '/events');
            r.stream = (await x.text()).slice(0, 100); }} catch (e) {{ r.stream = 'blocked'; }}
        r.eventSource = await new Promise((resolve) => {{
            const es = new EventSource(base + '/v1/sessions/' + sid + '/events');
            let got = 0;
            es.onmessage = () => {{ got++; }};
            es.addEventListener('sessionCreated', () => {{ got++; }});
            es.onerror = () => {{ es.close(); resolve(got === 0 ? 'blocked' : 'read ' + got); }};
        }});
        "#
    ));
    let r = run_page(&browser, &format!("http://{evil}/")).await;
    assert_eq!(r["cors"], "blocked", "{r}");
    assert_eq!(r["allowCors"], "blocked", "{r}");
    assert_eq!(r["list"], "blocked", "{r}");
    assert_eq!(r["stream"], "blocked", "{r}");
    assert_eq!(r["eventSource"], "blocked", "{r}");
    assert_eq!(
        r["simple"], "sent",
        "the simple requests did reach the daemon: {r}"
    );
    // What the daemon did with them: nothing.
    assert_eq!(sessions(&d).await, 1, "no session was created by the page");
    assert!(!project.path().join("pwned.txt").exists());

    // A configured origin can do all of it: answer the request, create and follow a session.
    *friendly_page.lock().unwrap() = page(&format!(
        r#"
        const base = {base:?}, sid = {sid:?}, rid = {rid:?};
        const create = {create:?}, allow = {allow:?};
        const a = await fetch(base + '/v1/sessions/' + sid + '/permissions/' + rid,
            {{method: 'POST', headers: {{'Content-Type': 'application/json'}}, body: allow}});
        r.allow = a.status;
        const c = await fetch(base + '/v1/sessions', {{method: 'POST',
            headers: {{'Content-Type': 'application/json'}}, body: create}});
        r.create = c.status;
        const made = await c.json();
        const s = await fetch(base + made.eventsUrl + '?until=complete');
        r.stream = await s.text();
        "#
    ));
    let r = run_page(&browser, &format!("http://{friendly}/")).await;
    assert_eq!(r["allow"], 200, "{r}");
    assert_eq!(r["create"], 201, "{r}");
    let stream = r["stream"].as_str().unwrap();
    assert!(
        stream.contains("event: sessionCreated") && stream.contains("event: complete"),
        "{stream}"
    );
    let evs = sse.until_complete(&run).await;
    assert!(evs.iter().any(|e| e.event == "permissionResolved"));
    assert!(project.path().join("pwned.txt").exists());
    assert_eq!(sessions(&d).await, 2);
}
