//! The one outbound HTTP client for URLs a request or a model can aim (web_fetch, webhook
//! targets, a session's `notifyUrl`): http(s) only; every address the host resolves to is
//! checked ([`is_non_public`]) unless private addresses are allowed; the request connects to the
//! checked addresses only (pinned, so that a second lookup cannot lead elsewhere); redirects are
//! never followed by the HTTP library: [`GuardedClient::get`] follows them by hand, checking each
//! hop as the first, and [`GuardedClient::post`] does not follow them at all.

use crate::address_class::is_non_public;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Why an outbound request was not sent or got no answer.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    /// The URL does not parse.
    #[error("bad URL: {0}")]
    BadUrl(String),
    /// Neither http nor https.
    #[error("only http and https URLs can be fetched, not {0}")]
    Scheme(String),
    /// A URL such as `http:///x`.
    #[error("the URL has no host")]
    NoHost,
    /// The host's lookup failed.
    #[error("cannot resolve {host}: {why}")]
    Resolve {
        /// The URL's host.
        host: String,
        /// The resolver's error.
        why: std::io::Error,
    },
    /// The lookup found nothing.
    #[error("{0} has no address")]
    NoAddress(String),
    /// One of the host's addresses is not public and private addresses are not allowed.
    #[error(
        "refusing to {verb} {host}: it resolves to the non-public address {ip} (allow it with {allow_setting})"
    )]
    NonPublic {
        /// What the request would have done ("fetch", "send to").
        verb: &'static str,
        /// The URL's host.
        host: String,
        /// The first non-public address it resolves to.
        ip: IpAddr,
        /// The setting that allows it.
        allow_setting: &'static str,
    },
    /// The HTTP client could not be built.
    #[error("{0}")]
    Client(reqwest::Error),
    /// The request was sent but failed (refused, timed out, reset).
    #[error("the request failed: {0}")]
    Send(reqwest::Error),
    /// A redirect without a `Location` header.
    #[error("redirect without a Location")]
    NoLocation,
    /// A redirect whose `Location` does not make a URL.
    #[error("bad redirect: {0}")]
    BadRedirect(String),
    /// More redirects than allowed in a row.
    #[error("too many redirects")]
    TooManyRedirects,
    /// The cancellation token fired.
    #[error("interrupted")]
    Interrupted,
}

/// Where a [`GuardedClient`] may connect, and how its refusals read.
#[derive(Debug, Clone, Copy)]
pub struct AddressPolicy {
    /// Allow loopback, private, link-local and other non-public addresses.
    pub allow_private: bool,
    /// The setting that allows non-public addresses, named in a refusal.
    pub allow_setting: &'static str,
    /// What a request does, in a refusal ("refusing to {verb} {host}").
    pub verb: &'static str,
}

/// An HTTP client that connects to checked addresses only (see the module's comment).
#[derive(Debug, Clone)]
pub struct GuardedClient {
    policy: AddressPolicy,
    timeout: Duration,
    user_agent: &'static str,
    /// Whether an address is refused; `is_non_public` unless private addresses are allowed.
    refuses: fn(IpAddr) -> bool,
}

impl GuardedClient {
    /// A client under `policy`, each request limited to `timeout`, sending `user_agent`.
    pub fn new(policy: AddressPolicy, timeout: Duration, user_agent: &'static str) -> Self {
        let refuses = if policy.allow_private {
            (|_| false) as fn(IpAddr) -> bool
        } else {
            is_non_public
        };
        GuardedClient {
            policy,
            timeout,
            user_agent,
            refuses,
        }
    }

    /// The addresses of `url`'s host, each checked: refused when one is not allowed.
    pub async fn checked_addresses(
        &self,
        url: &reqwest::Url,
    ) -> Result<Vec<SocketAddr>, OutboundError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(OutboundError::Scheme(url.scheme().to_string()));
        }
        let host = url.host_str().ok_or(OutboundError::NoHost)?.to_string();
        let port = url.port_or_known_default().unwrap_or(80);
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
            .await
            .map_err(|why| OutboundError::Resolve {
                host: host.clone(),
                why,
            })?
            .collect();
        if addrs.is_empty() {
            return Err(OutboundError::NoAddress(host));
        }
        if let Some(refused) = addrs.iter().find(|a| (self.refuses)(a.ip())) {
            return Err(OutboundError::NonPublic {
                verb: self.policy.verb,
                host,
                ip: refused.ip(),
                allow_setting: self.policy.allow_setting,
            });
        }
        Ok(addrs)
    }

    /// A client for `url` alone: its host pinned to its checked addresses, redirects not
    /// followed.
    async fn pinned_to(&self, url: &reqwest::Url) -> Result<reqwest::Client, OutboundError> {
        let addrs = self.checked_addresses(url).await?;
        let host = url.host_str().unwrap_or_default();
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.timeout)
            .user_agent(self.user_agent)
            .resolve_to_addrs(host, &addrs)
            .build()
            .map_err(OutboundError::Client)
    }

    /// A GET of `url`, following up to `max_redirects` redirects, each target checked as the
    /// first; the answer is the first that is not a redirect (any status).
    pub async fn get(
        &self,
        url: &str,
        max_redirects: usize,
        cancel: &CancellationToken,
    ) -> Result<reqwest::Response, OutboundError> {
        let mut url = parse(url)?;
        for _ in 0..=max_redirects {
            let client = self.pinned_to(&url).await?;
            let resp = tokio::select! {
                _ = cancel.cancelled() => return Err(OutboundError::Interrupted),
                r = traced(client.get(url.clone())).send() => r.map_err(OutboundError::Send)?,
            };
            if !resp.status().is_redirection() {
                return Ok(resp);
            }
            let location = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or(OutboundError::NoLocation)?;
            url = url
                .join(location)
                .map_err(|e| OutboundError::BadRedirect(e.to_string()))?;
        }
        Err(OutboundError::TooManyRedirects)
    }

    /// A POST to `url`, its headers and body set by `build`; a redirect is an answer like any
    /// other (not followed).
    pub async fn post(
        &self,
        url: &str,
        build: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, OutboundError> {
        let url = parse(url)?;
        let client = self.pinned_to(&url).await?;
        traced(build(client.post(url)))
            .send()
            .await
            .map_err(OutboundError::Send)
    }
}

/// `req` with the W3C trace headers of the current span, when runs are traced: a target that
/// was allowed sees the call as a child of the tool call (or run) that made it.
fn traced(mut req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    for (name, value) in elfgate_core::telemetry::outgoing_headers() {
        req = req.header(name, value);
    }
    req
}

fn parse(url: &str) -> Result<reqwest::Url, OutboundError> {
    reqwest::Url::parse(url).map_err(|e| OutboundError::BadUrl(e.to_string()))
}

#[cfg(test)]
#[path = "outbound_tests.rs"]
mod tests;
