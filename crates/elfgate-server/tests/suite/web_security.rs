//! What keeps other programs and web pages from driving the daemon: a token by default, JSON
//! bodies only as JSON, foreign Host and Origin refused, CORS for configured origins.

use crate::common;

use common::{Daemon, Opts, chat};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

async fn session_count(d: &Daemon) -> usize {
    let (s, v) = d.get("/v1/sessions").await;
    assert_eq!(s, 200);
    v["sessions"].as_array().unwrap().len()
}

/// Sends `head` (request line and headers, no final blank line) and `body` on a raw socket, so
/// that the Host header is exactly what the test says; returns the status and the body.
async fn raw_request(d: &Daemon, head: &str, body: &str) -> (u16, String) {
    let addr = d.base.strip_prefix("http://").unwrap();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(common::GUARD, s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn a_token_is_generated_by_default_and_required() {
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(&mock, Opts::default());
    let token = d.token.clone().expect("a token file in the data dir");
    assert_eq!(token.len(), 64);
    assert!(
        d.token_line.contains(&token) && d.token_line.contains("token"),
        "the token is printed at start: {:?}",
        d.token_line
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.dir.join("token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "only the daemon's user can read it");
    }
    // Without it: 401, even on loopback; nothing is created.
    let r = d
        .anon
        .post(d.url("/v1/sessions"))
        .json(&chat("hi", "mock:tokens=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = d.anon.get(d.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "liveness stays open for probes");
    assert_eq!(session_count(&d).await, 0);
    let (sid, run) = d.create(chat("hi", "mock:tokens=1")).await;
    d.events(&sid, None).await.until_complete(&run).await;

    // A restart keeps the token.
    d.terminate();
    let dir = d.dir.clone();
    let again = Daemon::start_in(dir, &mock, Opts::default());
    assert_eq!(again.token.as_deref(), Some(token.as_str()));
    assert!(again.token_line.contains("from"), "{}", again.token_line);
    assert_eq!(session_count(&again).await, 1);
}

#[tokio::test]
async fn auth_none_opts_out_on_loopback_only_and_blank_tokens_are_refused() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            server_toml: "auth = \"none\"".into(),
            ..Opts::default()
        },
    );
    assert!(d.token.is_none());
    assert!(!d.dir.join("token").exists());
    assert!(d.token_line.contains("none"), "{}", d.token_line);
    let r = d.anon.get(d.url("/v1/sessions")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);

    let dir = tempfile::tempdir().unwrap();
    let err = Daemon::start_refused(
        dir.path(),
        &mock,
        Opts {
            server_toml: "auth = \"none\"".into(),
            env: vec![("ELFGATE_BIND".into(), "0.0.0.0:0".into())],
            ..Opts::default()
        },
    );
    assert!(err.contains("loopback"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let err = Daemon::start_refused(
        dir.path(),
        &mock,
        Opts {
            env: vec![
                ("ELFGATE_TOKEN".into(), "  ".into()),
                ("ELFGATE_BIND".into(), "0.0.0.0:0".into()),
            ],
            ..Opts::default()
        },
    );
    assert!(err.contains("ELFGATE_TOKEN is set but blank"), "{err}");
}

#[tokio::test]
async fn json_endpoints_take_only_json() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let body = chat("hi", "mock:tokens=1").to_string();
    for content_type in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=xyz",
    ] {
        let r = d
            .http
            .post(d.url("/v1/sessions"))
            .header("content-type", content_type)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 415, "{content_type}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(code(&v), "unsupported_media_type");
    }
    // A body with no Content-Type at all is not taken either.
    let r = d
        .http
        .post(d.url("/v1/sessions"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    assert_eq!(session_count(&d).await, 0);

    let (sid, run) = d.create(chat("hi", "mock:tokens=1")).await;
    d.events(&sid, None).await.until_complete(&run).await;
    // Answers and prompts too.
    for path in [
        format!("/v1/sessions/{sid}/messages"),
        format!("/v1/sessions/{sid}/permissions/some-request"),
        format!("/v1/sessions/{sid}/interrupt"),
    ] {
        let r = d
            .http
            .post(d.url(&path))
            .header("content-type", "text/plain")
            .body(r#"{"prompt":"x","decision":"allow"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 415, "{path}");
    }
    // An empty body needs no Content-Type (an interrupt with nothing to say).
    let r = d
        .http
        .post(d.url(&format!("/v1/sessions/{sid}/interrupt")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(msgs["messages"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn foreign_hosts_and_origins_are_refused_and_configured_origins_get_cors() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            server_toml: "allowed_origins = [\"http://console.example:8080\"]\n\
                         allowed_hosts = [\"elfgate.lan\"]\n"
                .into(),
            ..Opts::default()
        },
    );
    let token = d.token.clone().unwrap();
    let create = chat("hi", "mock:tokens=1").to_string();
    let post = |host: &str, extra: &str| {
        format!(
            "POST /v1/sessions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json{extra}"
        )
    };

    // DNS rebinding: a name that is not this machine's, even with the token.
    let (s, body) = raw_request(&d, &post("evil.example", ""), &create).await;
    assert_eq!(s, 403, "{body}");
    assert!(body.contains("allowed_hosts"), "{body}");
    let (s, _) = raw_request(&d, &post("evil.example:7420", ""), &create).await;
    assert_eq!(s, 403);
    let (s, _) = raw_request(&d, "GET /healthz HTTP/1.1\r\nHost: evil.example", "").await;
    assert_eq!(s, 403);
    // Loopback names, the bound address and configured names pass.
    let port = d.base.rsplit(':').next().unwrap().to_string();
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "elfgate.lan".to_string(),
    ] {
        let (s, body) = raw_request(&d, &post(&host, ""), &create).await;
        assert_eq!(s, 201, "{host}: {body}");
    }

    // A foreign Origin is refused even with the token; so is a page request with no Origin.
    let host = format!("127.0.0.1:{port}");
    for extra in [
        "\r\nOrigin: http://evil.example",
        "\r\nOrigin: null",
        "\r\nOrigin: http://console.example:8081",
        "\r\nSec-Fetch-Site: cross-site",
        "\r\nSec-Fetch-Site: same-site",
    ] {
        let (s, body) = raw_request(&d, &post(&host, extra), &create).await;
        assert_eq!(s, 403, "{extra}: {body}");
    }
    // The daemon's own origin passes.
    let (s, _) = raw_request(
        &d,
        &post(&host, &format!("\r\nOrigin: http://{host}")),
        &create,
    )
    .await;
    assert_eq!(s, 201);
    let before = session_count(&d).await;

    // A configured origin: preflight answered before auth, then CORS headers on the answer.
    let r = d
        .anon
        .request(reqwest::Method::OPTIONS, d.url("/v1/sessions"))
        .header("Origin", "http://console.example:8080")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    let h = r.headers();
    assert_eq!(
        h["access-control-allow-origin"],
        "http://console.example:8080"
    );
    let allowed = h["access-control-allow-headers"].to_str().unwrap();
    assert!(allowed.contains("authorization") && allowed.contains("content-type"));
    assert!(
        h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    let r = d
        .http
        .post(d.url("/v1/sessions"))
        .header("Origin", "http://console.example:8080")
        .json(&json!({"engine": "chat", "prompt": "hi", "model": "mock:tokens=1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://console.example:8080"
    );
    // The configured origin still needs the token.
    let r = d
        .anon
        .get(d.url("/v1/sessions"))
        .header("Origin", "http://console.example:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    // A preflight from elsewhere gets no CORS answer.
    let r = d
        .anon
        .request(reqwest::Method::OPTIONS, d.url("/v1/sessions"))
        .header("Origin", "http://evil.example")
        .header("Access-Control-Request-Method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    assert_eq!(session_count(&d).await, before + 1);
}
