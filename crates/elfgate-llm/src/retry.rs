//! Retrying a streaming call until its first event arrives.

use crate::policy::random_unit;
use crate::{LlmError, LlmProvider, LlmRequest, LlmStream, RetryPolicy};
use futures_util::StreamExt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

/// A first attempt already under way in its own task (see [`spawn_first_attempt`]); dropping it
/// aborts the task, which closes the upstream connection.
pub struct FirstAttempt {
    task: AbortOnDropHandle<Result<LlmStream, LlmError>>,
    /// When it began: the call's first-token deadline counts from here.
    started: Instant,
}

impl std::fmt::Debug for FirstAttempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FirstAttempt")
    }
}

impl Future for FirstAttempt {
    type Output = Result<LlmStream, LlmError>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        Pin::new(&mut self.task)
            .poll(cx)
            .map(|joined| match joined {
                Ok(result) => result,
                Err(e) => Err(LlmError::Transport(format!(
                    "the upstream call failed: {e}"
                ))),
            })
    }
}

/// Starts the first attempt of a call in its own task — opening the stream and waiting for its
/// first event — so that it makes progress before anyone awaits it. Hand it to
/// [`stream_with_retry_from`]; it reports nothing by itself.
pub fn spawn_first_attempt(provider: Arc<dyn LlmProvider>, req: Arc<LlmRequest>) -> FirstAttempt {
    FirstAttempt {
        started: Instant::now(),
        task: AbortOnDropHandle::new(tokio::spawn(
            async move { first_event(provider.as_ref(), &req).await }.in_current_span(),
        )),
    }
}

/// Reported before each retry.
#[derive(Clone, Debug)]
pub struct RetryNotice {
    /// The 1-based retry number.
    pub attempt: u32,
    /// The most retries that will be made (= `max_retries`).
    pub max_attempts: u32,
    /// How long we wait before the retry.
    pub delay: Duration,
    /// Why the previous attempt failed.
    pub reason: String,
}

/// Calls provider.stream and waits for the FIRST event. If the call or the first event fails with a retryable error
/// (before any token was produced), calls on_retry(notice), sleeps ([`RetryPolicy::delay`]: the policy's schedule, or
/// the Retry-After value if larger; the sleep is abandoned with LlmError::Cancelled if `cancel` fires) and tries
/// again, up to max_retries retries. A Retry-After longer than the policy's max_delay ends the call with that error.
/// Returns a stream that yields the already-received first event first, then the rest.
/// Never retries after the first event was received. Checks `cancel` before each attempt.
///
/// Waiting for the response and the first event is also abandoned with
/// [`LlmError::Cancelled`] when `cancel` fires.
///
/// The provider's [`LlmProvider::first_token_timeout`] bounds the whole of it — every attempt and
/// every delay — from the start of the first attempt: when it passes, the attempt going on is
/// dropped (closing its connection) and the call fails with [`LlmError::FirstTokenTimeout`],
/// whatever retries are left. Without it, an upstream that stalls before its first token would
/// cost one idle timeout per attempt.
pub async fn stream_with_retry(
    provider: &dyn LlmProvider,
    req: &LlmRequest,
    policy: &RetryPolicy,
    cancel: &CancellationToken,
    on_retry: &mut (dyn FnMut(RetryNotice) + Send),
) -> Result<LlmStream, LlmError> {
    stream_with_retry_from(provider, req, policy, cancel, on_retry, None, 0).await
}

/// [`stream_with_retry`] whose first attempt, when given, is one already under way (made with the
/// same request); its failure is retried like any other, and the deadline counts from its start.
/// `done` is how many retries the caller already made of this call by its own rules: they count
/// against `max_retries`, and the numbering and the schedule go on from there.
pub async fn stream_with_retry_from(
    provider: &dyn LlmProvider,
    req: &LlmRequest,
    policy: &RetryPolicy,
    cancel: &CancellationToken,
    on_retry: &mut (dyn FnMut(RetryNotice) + Send),
    first: Option<FirstAttempt>,
    done: u32,
) -> Result<LlmStream, LlmError> {
    let limit = provider.first_token_timeout();
    let started = first.as_ref().map_or_else(Instant::now, |f| f.started);
    let attempts = attempts(provider, req, policy, cancel, on_retry, first, done);
    if limit.is_zero() {
        return attempts.await;
    }
    match tokio::time::timeout_at(started + limit, attempts).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(?limit, "LLM call gave no first event before its deadline");
            Err(LlmError::FirstTokenTimeout(limit))
        }
    }
}

/// The attempts of [`stream_with_retry_from`], without its deadline.
async fn attempts(
    provider: &dyn LlmProvider,
    req: &LlmRequest,
    policy: &RetryPolicy,
    cancel: &CancellationToken,
    on_retry: &mut (dyn FnMut(RetryNotice) + Send),
    mut first: Option<FirstAttempt>,
    done: u32,
) -> Result<LlmStream, LlmError> {
    let mut attempt = done;
    loop {
        if cancel.is_cancelled() {
            return Err(LlmError::Cancelled);
        }
        let under_way = first.take();
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            r = async {
                match under_way {
                    Some(f) => f.await,
                    None => first_event(provider, req).await,
                }
            } => r,
        };
        let err = match result {
            Ok(stream) => return Ok(stream),
            Err(e) => e,
        };
        if !err.is_retryable() || attempt >= policy.max_retries {
            return Err(err);
        }
        attempt += 1;
        let Some(delay) = policy.delay(attempt, err.retry_after(), &mut random_unit) else {
            tracing::warn!(retry_after = ?err.retry_after(), max_delay = ?policy.max_delay, error = %err,
                "not retrying: the server asks for a longer wait than the longest retry delay");
            return Err(err);
        };
        tracing::warn!(attempt, max = policy.max_retries, ?delay, error = %err, "retrying LLM call");
        on_retry(RetryNotice {
            attempt,
            max_attempts: policy.max_retries,
            delay,
            reason: err.to_string(),
        });
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// One attempt: opens the stream and waits for its first item.
async fn first_event(provider: &dyn LlmProvider, req: &LlmRequest) -> Result<LlmStream, LlmError> {
    let mut stream = provider.stream(req).await?;
    match stream.next().await {
        Some(Ok(first)) => Ok(Box::pin(
            futures_util::stream::iter(std::iter::once(Ok(first))).chain(stream),
        )),
        Some(Err(e)) => Err(e),
        None => Ok(stream),
    }
}
