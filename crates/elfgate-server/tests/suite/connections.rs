//! Connection handling: requests whose header never ends, floods of them, the open-file limit and
//! the cap on connections open at once.

use crate::common;

use common::{Daemon, GUARD, Opts};
use elfgate_mockllm::MockServer;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A request cut off in the middle of its header, as a slow-loris client sends it.
const HALF_HEADER: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn half_request(d: &Daemon) -> TcpStream {
    let addr = d.base.strip_prefix("http://").unwrap();
    let mut s = tokio::time::timeout(GUARD, TcpStream::connect(addr))
        .await
        .expect("connect did not complete within the guard time")
        .unwrap();
    s.write_all(HALF_HEADER).await.unwrap();
    s
}

/// Waits for the daemon to close `s`, and checks that it answered nothing.
async fn closed_by_daemon(mut s: TcpStream) {
    let mut buf = Vec::new();
    let read = tokio::time::timeout(GUARD, s.read_to_end(&mut buf))
        .await
        .expect("the daemon kept a half-sent request open");
    if let Err(e) = read {
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    }
    assert!(
        buf.is_empty(),
        "unexpected answer: {:?}",
        String::from_utf8_lossy(&buf)
    );
}

async fn healthz(d: &Daemon) -> u16 {
    d.http
        .get(d.url("/healthz"))
        .timeout(GUARD)
        .send()
        .await
        .expect("/healthz did not answer")
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_connection_that_sends_half_a_header_is_closed() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            env: env(&[("ELFGATE_SERVER__HEADER_READ_TIMEOUT_SECS", "1")]),
            ..Default::default()
        },
    );
    let s = half_request(&d).await;
    closed_by_daemon(s).await;
    assert_eq!(healthz(&d).await, 200);
}

#[tokio::test]
async fn connections_past_the_cap_are_not_refused_and_are_served_in_turn() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            env: env(&[
                ("ELFGATE_SERVER__HEADER_READ_TIMEOUT_SECS", "1"),
                ("ELFGATE_SERVER__MAX_CONNECTIONS", "4"),
            ]),
            ..Default::default()
        },
    );
    // Twice the cap: the first four hold every slot until their header times out; the others
    // wait to be accepted, then get the same treatment. None is refused or left hanging.
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(half_request(&d).await);
    }
    for s in held {
        closed_by_daemon(s).await;
    }
    assert_eq!(healthz(&d).await, 200);
}

#[tokio::test]
async fn healthz_answers_during_a_flood_of_half_sent_requests() {
    const FLOOD: usize = 2000;
    // This process holds the flood's client ends.
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert!(
        hard >= 4 * FLOOD as u64,
        "this test needs a hard open-file limit of at least {}, have {hard}",
        4 * FLOOD
    );
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();

    let mock = MockServer::start().await.unwrap();
    // A soft limit of 1024 (a common default) is below the flood; the daemon raises it to the
    // hard limit at start. The header timeout is long so that the flood stays open throughout.
    let d = Daemon::start(
        &mock,
        Opts {
            nofile_soft: Some(1024),
            env: env(&[("ELFGATE_SERVER__HEADER_READ_TIMEOUT_SECS", "600")]),
            ..Default::default()
        },
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.child.id())).unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        open_files[3], open_files[4],
        "soft open-file limit not raised to the hard one: {open_files:?}"
    );

    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        flood.push(half_request(&d).await);
    }
    // Accepted in order, /healthz is served only once every flooding connection was accepted.
    assert_eq!(healthz(&d).await, 200);
    let (status, _) = d.get("/v1/sessions").await;
    assert_eq!(status, 200);
    drop(flood);
}
