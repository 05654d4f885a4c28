//! Provider clients against a tiny local axum server serving canned SSE bodies.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test fails loudly; the helpers outside #[test] functions too"
)]

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use elfgate_llm::{
    ContentBlock, LlmError, LlmEvent, LlmFinishReason, LlmMessage, LlmProvider, LlmRequest,
    ProviderConfig, ProviderKind, RetryNotice, RetryPolicy, Role, ThinkingLevel, TokenUsage,
    ToolSpec, build_provider, stream_with_retry,
};
use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

type Captured = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

/// A safety net so that a broken provider fails a test instead of hanging it; never used to wait
/// for something to happen, nor expected to fire.
const GUARD: Duration = Duration::from_secs(30);

async fn spawn(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    format!("http://{addr}")
}

/// The tests' provider settings: a key, a default model, 10 s timeouts, no first-token deadline.
fn config(kind: ProviderKind, base_url: String) -> ProviderConfig {
    ProviderConfig {
        kind,
        base_url,
        api_key: Some("sk-test".into()),
        api_key_env: Some("TEST_API_KEY".into()),
        default_model: Some("default-model".into()),
        idle_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
        first_token_timeout: Duration::ZERO,
    }
}

fn provider(kind: ProviderKind, base_url: String) -> Arc<dyn LlmProvider> {
    build_provider(config(kind, base_url), reqwest::Client::new())
}

fn stream_body<S>(s: S) -> Response
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(s))
        .unwrap()
}

/// Serves `text` cut into small, awkwardly sized chunks.
fn chunked_sse(text: &'static str) -> Response {
    let chunks: Vec<Result<Bytes, std::io::Error>> = text
        .as_bytes()
        .chunks(7)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    stream_body(futures_util::stream::iter(chunks))
}

fn error_response(status: StatusCode, headers: &[(&str, &str)], body: &str) -> Response {
    let mut b = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::from(body.to_string())).unwrap()
}

fn user(text: &str) -> LlmMessage {
    LlmMessage {
        role: Role::User,
        blocks: vec![ContentBlock::text(text)],
    }
}

async fn collect(mut s: elfgate_llm::LlmStream) -> Vec<Result<LlmEvent, LlmError>> {
    let mut out = Vec::new();
    while let Some(item) = s.next().await {
        out.push(item);
    }
    out
}

fn oks(items: Vec<Result<LlmEvent, LlmError>>) -> Vec<LlmEvent> {
    items.into_iter().map(|r| r.unwrap()).collect()
}

const OPENAI_OK: &str = concat!(
    ": keep-alive\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\r\n\r\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Let me see\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\", world\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"list\",\"arguments\":\"{\\\"dir\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"a.txt\\\"}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"\\\":\\\".\\\"}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":42,\"completion_tokens\":17,\"total_tokens\":59}}\n\n",
    "data: [DONE]\n\n",
);

const OPENAI_SHORT: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

const ANTHROPIC_OK: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n",
    "event: ping\ndata: {\"type\":\"ping\"}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Pondering\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBsig\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"I'll read it.\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read_file\",\"input\":{}}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\": \"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"a.txt\\\"}\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":33}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

#[tokio::test]
async fn openai_text_tool_calls_and_usage() {
    let captured: Captured = Arc::default();
    let cap = captured.clone();
    let router = Router::new().route(
        "/v1/chat/completions",
        post(move |headers: HeaderMap, body: axum::Json<Value>| {
            let cap = cap.clone();
            async move {
                cap.lock().unwrap().push((headers, body.0));
                chunked_sse(OPENAI_OK)
            }
        }),
    );
    let base = spawn(router).await;
    let p = provider(ProviderKind::Openai, format!("{base}/v1/"));
    assert_eq!(p.kind(), ProviderKind::Openai);
    let req = LlmRequest {
        messages: vec![user("hi")],
        thinking: ThinkingLevel::High,
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            input_schema: json!({"type": "object"}),
        }],
        ..Default::default()
    };
    let events = oks(collect(p.stream(&req).await.unwrap()).await);
    assert_eq!(
        events,
        vec![
            LlmEvent::ThinkingDelta("Let me see".into()),
            LlmEvent::TextDelta("Hello".into()),
            LlmEvent::TextDelta(", world".into()),
            LlmEvent::ToolCall {
                id: "call_a".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"a.txt"}"#.into(),
            },
            LlmEvent::ToolCall {
                id: "call_b".into(),
                name: "list".into(),
                arguments: r#"{"dir":"."}"#.into(),
            },
            LlmEvent::Finish(LlmFinishReason::ToolCalls),
            LlmEvent::Usage(TokenUsage {
                input_tokens: 42,
                output_tokens: 17,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            }),
        ]
    );
    let captured = captured.lock().unwrap();
    let (headers, body) = &captured[0];
    assert_eq!(headers["authorization"], "Bearer sk-test");
    assert_eq!(body["model"], "default-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["reasoning_effort"], "high");
    assert_eq!(body["tools"][0]["function"]["name"], "read_file");
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
}

#[tokio::test]
async fn anthropic_thinking_text_tool_use_and_usage() {
    let captured: Captured = Arc::default();
    let cap = captured.clone();
    let router = Router::new().route(
        "/v1/messages",
        post(move |headers: HeaderMap, body: axum::Json<Value>| {
            let cap = cap.clone();
            async move {
                cap.lock().unwrap().push((headers, body.0));
                chunked_sse(ANTHROPIC_OK)
            }
        }),
    );
    let base = spawn(router).await;
    let p = provider(ProviderKind::Anthropic, base);
    let req = LlmRequest {
        model: "claude-test".into(),
        system: Some("You are terse.".into()),
        messages: vec![user("read a.txt")],
        thinking: ThinkingLevel::Low,
        temperature: Some(0.7),
        ..Default::default()
    };
    let events = oks(collect(p.stream(&req).await.unwrap()).await);
    assert_eq!(
        events,
        vec![
            // The prompt's figures as soon as message_start gives them.
            LlmEvent::Usage(TokenUsage {
                input_tokens: 25,
                output_tokens: 0,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            }),
            LlmEvent::ThinkingDelta("Pondering".into()),
            LlmEvent::ThinkingSignature("EqQBsig".into()),
            LlmEvent::TextDelta("I'll read it.".into()),
            LlmEvent::ToolCall {
                id: "toolu_1".into(),
                name: "read_file".into(),
                arguments: r#"{"path": "a.txt"}"#.into(),
            },
            LlmEvent::Finish(LlmFinishReason::ToolCalls),
            LlmEvent::Usage(TokenUsage {
                input_tokens: 25,
                output_tokens: 33,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            }),
        ]
    );
    let captured = captured.lock().unwrap();
    let (headers, body) = &captured[0];
    assert_eq!(headers["x-api-key"], "sk-test");
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["system"], "You are terse.");
    assert_eq!(body["max_tokens"], 8192);
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );
    assert!(body.get("temperature").is_none());
}

#[tokio::test]
async fn dropped_stream_yields_transport_error() {
    // The body is aborted only after the client has seen the first event.
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let router = Router::new()
        .route(
            "/clean-eof/chat/completions",
            post(|| async {
                chunked_sse(
                    "data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\ndata: {\"cho",
                )
            }),
        )
        .route(
            "/abort/chat/completions",
            post(move || {
                let g = g.clone();
                async move {
                    let first = futures_util::stream::iter(vec![Ok(Bytes::from_static(
                        b"data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n",
                    ))]);
                    let abort = futures_util::stream::once(async move {
                        g.notified().await;
                        Err(std::io::Error::other("boom"))
                    });
                    stream_body(first.chain(abort))
                }
            }),
        );
    let base = spawn(router).await;
    for path in ["abort", "clean-eof"] {
        let p = provider(ProviderKind::Openai, format!("{base}/{path}"));
        let mut s = p.stream(&LlmRequest::default()).await.unwrap();
        assert_eq!(s.next().await, Some(Ok(LlmEvent::TextDelta("par".into()))));
        if path == "abort" {
            gate.notify_one();
        }
        let rest = collect(s).await;
        assert!(
            matches!(&rest[..], [Err(LlmError::Transport(_))]),
            "{path}: {rest:?}"
        );
    }
}

#[tokio::test]
async fn anthropic_missing_message_stop_is_an_error() {
    let router = Router::new().route(
        "/v1/messages",
        post(|| async {
            chunked_sse(
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n",
            )
        }),
    );
    let base = spawn(router).await;
    let p = provider(ProviderKind::Anthropic, base);
    let items = collect(p.stream(&LlmRequest::default()).await.unwrap()).await;
    assert!(
        matches!(
            &items[..],
            [
                Ok(LlmEvent::Usage(TokenUsage {
                    input_tokens: 1,
                    output_tokens: 0,
                    ..
                })),
                Err(LlmError::Transport(_))
            ]
        ),
        "{items:?}"
    );
}

#[tokio::test]
async fn mid_stream_error_event_is_upstream_error() {
    let router = Router::new().route(
        "/v1/messages",
        post(|| async {
            chunked_sse(concat!(
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n",
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
            ))
        }),
    );
    let base = spawn(router).await;
    let p = provider(ProviderKind::Anthropic, base);
    let items = collect(p.stream(&LlmRequest::default()).await.unwrap()).await;
    assert_eq!(items.len(), 2);
    match &items[1] {
        Err(e @ LlmError::Upstream(m)) => {
            assert!(m.contains("Overloaded"));
            assert!(e.is_retryable());
            assert_eq!(e.code().as_str(), "upstream_error");
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn retry_router(path: &str, failures: usize, fail: fn() -> Response) -> (Router, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let router = Router::new().route(
        path,
        post(move || {
            let c = c.clone();
            async move {
                if c.fetch_add(1, Ordering::SeqCst) < failures {
                    fail()
                } else {
                    chunked_sse(OPENAI_SHORT)
                }
            }
        }),
    );
    (router, calls)
}

fn fast_policy() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(20),
        ..RetryPolicy::default()
    }
}

#[tokio::test]
async fn retries_500_twice_then_succeeds() {
    let (router, calls) = retry_router("/chat/completions", 2, || {
        error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &[],
            r#"{"error":{"message":"kaboom","type":"server_error"}}"#,
        )
    });
    let base = spawn(router).await;
    let p = provider(ProviderKind::Openai, base);
    let mut notices: Vec<RetryNotice> = Vec::new();
    let stream = stream_with_retry(
        p.as_ref(),
        &LlmRequest::default(),
        &fast_policy(),
        &CancellationToken::new(),
        &mut |n| notices.push(n),
    )
    .await
    .unwrap();
    let events = oks(collect(stream).await);
    assert_eq!(
        events,
        vec![
            LlmEvent::TextDelta("ok".into()),
            LlmEvent::Finish(LlmFinishReason::Stop)
        ]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(notices.len(), 2);
    assert_eq!(notices[0].attempt, 1);
    assert_eq!(notices[1].attempt, 2);
    assert!(notices.iter().all(|n| n.max_attempts == 3));
    assert_eq!(notices[0].delay, Duration::from_millis(1));
    assert_eq!(notices[1].delay, Duration::from_millis(2));
    assert!(notices[0].reason.contains("500"), "{}", notices[0].reason);
    assert!(
        notices[0].reason.contains("kaboom"),
        "{}",
        notices[0].reason
    );
}

#[tokio::test]
async fn gives_up_after_max_retries() {
    let (router, calls) = retry_router("/chat/completions", usize::MAX, || {
        error_response(StatusCode::SERVICE_UNAVAILABLE, &[], "down")
    });
    let base = spawn(router).await;
    let p = provider(ProviderKind::Openai, base);
    let mut count = 0;
    let Err(err) = stream_with_retry(
        p.as_ref(),
        &LlmRequest::default(),
        &fast_policy(),
        &CancellationToken::new(),
        &mut |_| count += 1,
    )
    .await
    else {
        panic!("expected an error");
    };
    assert!(matches!(err, LlmError::Status { status: 503, ref message, .. } if message == "down"));
    assert_eq!(count, 3);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn non_retryable_status_is_returned_at_once() {
    let (router, calls) = retry_router("/v1/messages", usize::MAX, || {
        error_response(
            StatusCode::UNAUTHORIZED,
            &[],
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        )
    });
    let base = spawn(router).await;
    let p = provider(ProviderKind::Anthropic, base);
    let mut count = 0;
    let Err(err) = stream_with_retry(
        p.as_ref(),
        &LlmRequest::default(),
        &fast_policy(),
        &CancellationToken::new(),
        &mut |_| count += 1,
    )
    .await
    else {
        panic!("expected an error");
    };
    match err {
        LlmError::Status {
            status, message, ..
        } => {
            assert_eq!(status, 401);
            assert!(message.contains("invalid x-api-key"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(count, 0);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let (router, _) = retry_router("/chat/completions", 1, || {
        error_response(StatusCode::TOO_MANY_REQUESTS, &[("retry-after", "1")], "{}")
    });
    let base = spawn(router).await;
    let p = provider(ProviderKind::Openai, base);
    let mut notices = Vec::new();
    let policy = RetryPolicy {
        max_retries: 2,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_secs(30),
        ..RetryPolicy::default()
    };
    let stream = stream_with_retry(
        p.as_ref(),
        &LlmRequest::default(),
        &policy,
        &CancellationToken::new(),
        &mut |n| notices.push(n),
    )
    .await
    .unwrap();
    assert_eq!(oks(collect(stream).await).len(), 2);
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].delay, Duration::from_secs(1));

    // retry-after-ms takes precedence; the delay is capped at max_delay.
    let (router, _) = retry_router("/chat/completions", 1, || {
        error_response(
            StatusCode::TOO_MANY_REQUESTS,
            &[("retry-after-ms", "5"), ("retry-after", "1")],
            "{}",
        )
    });
    let base = spawn(router).await;
    let p = provider(ProviderKind::Openai, base);
    let mut notices = Vec::new();
    let stream = stream_with_retry(
        p.as_ref(),
        &LlmRequest::default(),
        &policy,
        &CancellationToken::new(),
        &mut |n| notices.push(n),
    )
    .await
    .unwrap();
    assert_eq!(oks(collect(stream).await).len(), 2);
    assert_eq!(notices[0].delay, Duration::from_millis(5));
}

/// A server that asks for a longer wait than the policy allows is not retried early: the call
/// fails at once with its error.
#[tokio::test]
async fn a_retry_after_past_the_longest_delay_ends_the_call() {
    let (router, calls) = retry_router("/chat/completions", usize::MAX, || {
        error_response(
            StatusCode::TOO_MANY_REQUESTS,
            &[("retry-after", "120")],
            "{}",
        )
    });
    let base = spawn(router).await;
    let p = provider(ProviderKind::Openai, base);
    let (err, retries) = call_failing(p.as_ref(), &fast_policy()).await;
    assert!(
        matches!(err, LlmError::Status { status: 429, .. }),
        "{err:?}"
    );
    assert_eq!(retries, 0);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn retry_sleep_is_cancellable() {
    let (router, calls) = retry_router("/chat/completions", usize::MAX, || {
        error_response(
            StatusCode::TOO_MANY_REQUESTS,
            &[("retry-after", "600")],
            "{}",
        )
    });
    let base = spawn(router).await;
    let p = provider(ProviderKind::Openai, base);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let policy = RetryPolicy {
        max_retries: 5,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_secs(600),
        ..RetryPolicy::default()
    };
    let mut delays = Vec::new();
    let result = tokio::time::timeout(
        GUARD,
        stream_with_retry(
            p.as_ref(),
            &LlmRequest::default(),
            &policy,
            &cancel,
            &mut |n| {
                delays.push(n.delay);
                c.cancel();
            },
        ),
    )
    .await
    .expect("cancellation must end the wait");
    assert!(matches!(result, Err(LlmError::Cancelled)));
    assert_eq!(delays, vec![Duration::from_secs(600)]);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Already cancelled: no attempt at all.
    let mut n = 0;
    let result = stream_with_retry(
        p.as_ref(),
        &LlmRequest::default(),
        &policy,
        &cancel,
        &mut |_| n += 1,
    )
    .await;
    assert!(matches!(result, Err(LlmError::Cancelled)));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn idle_timeout_on_stalled_body() {
    let router = Router::new().route(
        "/chat/completions",
        post(|| async {
            let first = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(
                Bytes::from_static(b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"),
            )]);
            stream_body(first.chain(futures_util::stream::pending()))
        }),
    );
    let base = spawn(router).await;
    let p = build_provider(
        ProviderConfig {
            idle_timeout: Duration::from_millis(200),
            ..config(ProviderKind::Openai, base)
        },
        reqwest::Client::new(),
    );
    let items = collect(p.stream(&LlmRequest::default()).await.unwrap()).await;
    assert_eq!(
        items,
        vec![
            Ok(LlmEvent::TextDelta("hi".into())),
            Err(LlmError::IdleTimeout(Duration::from_millis(200)))
        ]
    );
}

#[tokio::test]
async fn pings_alone_do_not_keep_a_stream_alive() {
    // After one token the server only sends Anthropic pings and SSE comments, forever.
    let router = Router::new().route(
        "/v1/messages",
        post(|| async {
            let head = futures_util::stream::iter(vec![
                Ok::<_, std::io::Error>(Bytes::from_static(
                    b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n",
                )),
                Ok(Bytes::from_static(
                    b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
                )),
                Ok(Bytes::from_static(
                    b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
                )),
            ]);
            let pings = futures_util::stream::unfold((), |()| async {
                tokio::task::yield_now().await;
                Some((
                    Ok::<_, std::io::Error>(Bytes::from_static(
                        b"event: ping\ndata: {\"type\":\"ping\"}\n\n: keep-alive\n\n",
                    )),
                    (),
                ))
            })
            .then(|b| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                b
            });
            stream_body(head.chain(pings))
        }),
    );
    let base = spawn(router).await;
    let p = build_provider(
        ProviderConfig {
            idle_timeout: Duration::from_millis(300),
            ..config(ProviderKind::Anthropic, base)
        },
        reqwest::Client::new(),
    );
    let items = collect(p.stream(&LlmRequest::default()).await.unwrap()).await;
    assert_eq!(
        items,
        vec![
            Ok(LlmEvent::Usage(TokenUsage {
                input_tokens: 1,
                output_tokens: 0,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            })),
            Ok(LlmEvent::TextDelta("hi".into())),
            Err(LlmError::IdleTimeout(Duration::from_millis(300)))
        ]
    );
}

struct DropSignal(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

#[tokio::test]
async fn dropping_the_stream_closes_the_upstream() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let router = Router::new().route(
        "/chat/completions",
        post(move || {
            let guard = DropSignal(tx.lock().unwrap().take());
            async move {
                // Endless keep-alives plus text; the guard lives as long as the body.
                let body = futures_util::stream::unfold(guard, |g| async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Some((
                        Ok::<_, std::io::Error>(Bytes::from_static(
                            b": ping\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n",
                        )),
                        g,
                    ))
                });
                stream_body(body)
            }
        }),
    );
    let base = spawn(router).await;
    let p = provider(ProviderKind::Openai, base);
    let mut s = p.stream(&LlmRequest::default()).await.unwrap();
    assert_eq!(s.next().await, Some(Ok(LlmEvent::TextDelta("x".into()))));
    drop(s);
    tokio::time::timeout(GUARD, rx)
        .await
        .expect("server body must be dropped once the client stream is dropped")
        .unwrap();
}

#[tokio::test]
async fn missing_model_is_an_error() {
    let p = build_provider(
        ProviderConfig {
            default_model: None,
            ..config(ProviderKind::Anthropic, "http://127.0.0.1:9".into())
        },
        reqwest::Client::new(),
    );
    assert_eq!(p.default_model(), None);
    assert!(matches!(
        p.stream(&LlmRequest::default()).await,
        Err(LlmError::Protocol(_))
    ));
}

#[tokio::test]
async fn a_key_variable_left_unset_fails_the_call_before_any_request() {
    // A listener that counts connections: the call must not make one.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    for kind in [
        ProviderKind::Openai,
        ProviderKind::Anthropic,
        ProviderKind::OpenaiResponses,
        ProviderKind::Gemini,
    ] {
        let p = build_provider(
            ProviderConfig {
                api_key: None,
                ..config(kind, base.clone())
            },
            reqwest::Client::new(),
        );
        match p.stream(&LlmRequest::default()).await {
            Err(LlmError::MissingApiKey(var)) => assert_eq!(var, "TEST_API_KEY"),
            Err(e) => panic!("{kind:?}: {e}"),
            Ok(_) => panic!("{kind:?}: a stream without a key"),
        }
    }
    let accepted = tokio::time::timeout(Duration::ZERO, listener.accept()).await;
    assert!(accepted.is_err(), "a request was sent");
}

fn with_deadline(base: String, idle: Duration, first_token: Duration) -> Arc<dyn LlmProvider> {
    build_provider(
        ProviderConfig {
            idle_timeout: idle,
            first_token_timeout: first_token,
            ..config(ProviderKind::Openai, base)
        },
        reqwest::Client::new(),
    )
}

/// Calls `p` with retries left; the error it ends with and how many retries it announced.
async fn call_failing(p: &dyn LlmProvider, policy: &RetryPolicy) -> (LlmError, usize) {
    let mut retries = 0;
    let result = stream_with_retry(
        p,
        &LlmRequest::default(),
        policy,
        &CancellationToken::new(),
        &mut |_| retries += 1,
    )
    .await;
    match result {
        Err(e) => (e, retries),
        Ok(_) => panic!("expected an error"),
    }
}

#[tokio::test]
async fn a_stall_before_the_first_event_ends_at_the_deadline_without_retries() {
    // Headers, then nothing: each attempt would wait a whole idle timeout.
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let router = Router::new().route(
        "/chat/completions",
        post(move || {
            c.fetch_add(1, Ordering::SeqCst);
            async { stream_body(futures_util::stream::pending()) }
        }),
    );
    let p = with_deadline(
        spawn(router).await,
        Duration::from_secs(60),
        Duration::from_millis(200),
    );
    let (err, retries) = call_failing(p.as_ref(), &fast_policy()).await;
    assert_eq!(err, LlmError::FirstTokenTimeout(Duration::from_millis(200)));
    assert_eq!(err.code().as_str(), "first_token_timeout");
    assert_eq!(retries, 0);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_deadline_also_covers_the_waits_between_attempts() {
    let (router, calls) = retry_router("/chat/completions", usize::MAX, || {
        error_response(StatusCode::SERVICE_UNAVAILABLE, &[], "down")
    });
    let p = with_deadline(
        spawn(router).await,
        Duration::from_secs(60),
        Duration::from_millis(200),
    );
    let slow = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_secs(60),
        max_delay: Duration::from_secs(60),
        ..RetryPolicy::default()
    };
    let (err, retries) = call_failing(p.as_ref(), &slow).await;
    assert_eq!(err, LlmError::FirstTokenTimeout(Duration::from_millis(200)));
    assert_eq!((retries, calls.load(Ordering::SeqCst)), (1, 1));
}
