use super::*;
use futures_util::FutureExt;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A listener on `ip` and its port.
async fn bind(ip: Ipv4Addr) -> (TcpListener, u16) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// Answers every request `listener` gets with `answer(its port)` (a whole HTTP response); the
/// number of requests read.
fn serve(listener: TcpListener, answer: fn(u16) -> String) -> Arc<AtomicUsize> {
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = requests.clone();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                seen.fetch_add(1, Ordering::SeqCst);
                let _ = conn.write_all(answer(port).as_bytes()).await;
            });
        }
    });
    requests
}

fn ok(_: u16) -> String {
    "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello".to_string()
}

fn redirect_to_second_loopback(port: u16) -> String {
    format!(
        "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.2:{port}/next\r\ncontent-length: 0\r\n\
         connection: close\r\n\r\n"
    )
}

fn redirect_to_self(_: u16) -> String {
    "HTTP/1.1 302 Found\r\nlocation: /again\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        .to_string()
}

/// A GET of 127.0.0.1:`port` following up to `max_redirects` redirects.
async fn get_local(
    client: &GuardedClient,
    port: u16,
    max_redirects: usize,
) -> Result<reqwest::Response, OutboundError> {
    let url = format!("http://127.0.0.1:{port}/");
    client
        .get(&url, max_redirects, &CancellationToken::new())
        .await
}

fn policy(allow_private: bool) -> AddressPolicy {
    AddressPolicy {
        allow_private,
        allow_setting: "test.allow_private",
        verb: "fetch",
    }
}

fn client(allow_private: bool) -> GuardedClient {
    GuardedClient::new(
        policy(allow_private),
        Duration::from_secs(10),
        "elfgate-test",
    )
}

#[tokio::test]
async fn a_loopback_target_is_refused_before_connecting() {
    let (listener, port) = bind(Ipv4Addr::LOCALHOST).await;
    let e = get_local(&client(false), port, 5).await.unwrap_err();
    assert!(
        matches!(e, OutboundError::NonPublic { ip, .. } if ip == IpAddr::V4(Ipv4Addr::LOCALHOST)),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "refusing to fetch 127.0.0.1: it resolves to the non-public address 127.0.0.1 (allow it \
         with test.allow_private)"
    );
    // Nothing connected: the refusal came before any connection.
    assert!(listener.accept().now_or_never().is_none());
}

#[tokio::test]
async fn a_host_name_is_judged_by_the_addresses_it_resolves_to() {
    let e = client(false)
        .post("http://localhost:9/hook", |r| r)
        .await
        .unwrap_err();
    assert!(
        matches!(e, OutboundError::NonPublic { ref host, .. } if host == "localhost"),
        "{e}"
    );
}

#[tokio::test]
async fn only_http_and_https_are_fetched() {
    for url in [
        "file:///etc/passwd",
        "ftp://example.com/x",
        "gopher://8.8.8.8/",
    ] {
        let e = client(true)
            .get(url, 5, &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(e, OutboundError::Scheme(_)), "{url}: {e}");
    }
    let e = client(true)
        .get("not a url", 5, &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(e, OutboundError::BadUrl(_)), "{e}");
}

#[tokio::test]
async fn an_allowed_private_target_is_reached() {
    let (listener, port) = bind(Ipv4Addr::LOCALHOST).await;
    let requests = serve(listener, ok);
    let resp = get_local(&client(true), port, 5).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "hello");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_redirect_to_a_refused_address_is_refused() {
    // 127.0.0.1 stands for a public address here, 127.0.0.2 for a private one.
    let (listener, port) = bind(Ipv4Addr::LOCALHOST).await;
    let requests = serve(listener, redirect_to_second_loopback);
    let mut guarded = client(false);
    guarded.refuses = |ip| ip == IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let e = get_local(&guarded, port, 5).await.unwrap_err();
    assert!(
        matches!(e, OutboundError::NonPublic { ip, .. } if ip == IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
        "{e}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn redirects_are_followed_only_so_far() {
    let (listener, port) = bind(Ipv4Addr::LOCALHOST).await;
    let requests = serve(listener, redirect_to_self);
    let e = get_local(&client(true), port, 2).await.unwrap_err();
    assert!(matches!(e, OutboundError::TooManyRedirects), "{e}");
    assert_eq!(requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_post_does_not_follow_a_redirect() {
    let (listener, port) = bind(Ipv4Addr::LOCALHOST).await;
    let requests = serve(listener, redirect_to_self);
    let resp = client(true)
        .post(&format!("http://127.0.0.1:{port}/hook"), |r| r.body("{}"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 302);
    assert_eq!(requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_cancelled_get_is_interrupted() {
    let cancel = CancellationToken::new();
    cancel.cancel();
    // A listener that never answers: only the cancellation ends the request.
    let (_listener, port) = bind(Ipv4Addr::LOCALHOST).await;
    let e = client(true)
        .get(&format!("http://127.0.0.1:{port}/"), 5, &cancel)
        .await
        .unwrap_err();
    assert!(matches!(e, OutboundError::Interrupted), "{e}");
}
