//! web_fetch: fetches a URL and returns readable text; refuses loopback and private addresses
//! unless allowed; size and time limits; redirects are followed by hand and checked each time
//! (the guarded client of [`crate::outbound`]).

use crate::outbound::{AddressPolicy, GuardedClient, OutboundError};
use crate::tool::{
    BuiltinTool, PermissionTier, ToolContext, ToolDecl, ToolError, ToolKind, ToolOutput,
};
use async_trait::async_trait;
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use std::time::Duration;

/// web_fetch settings.
#[derive(Debug, Clone)]
pub struct WebFetch {
    /// Allow loopback, private, link-local and other non-public addresses.
    pub allow_private: bool,
    /// Most body bytes read.
    pub max_bytes: usize,
    /// Time limit for the whole fetch.
    pub timeout: Duration,
}

impl Default for WebFetch {
    fn default() -> Self {
        WebFetch {
            allow_private: false,
            max_bytes: 2 * 1024 * 1024,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Crude HTML to text: drops scripts, styles and tags, decodes common entities, collapses blank lines.
pub fn html_to_text(html: &str) -> String {
    let mut s = html.to_string();
    for tag in ["script", "style", "noscript", "head"] {
        if let Ok(re) = regex::Regex::new(&format!(r"(?is)<{tag}\b.*?</{tag}\s*>")) {
            s = re.replace_all(&s, " ").into_owned();
        }
    }
    if let Ok(re) = regex::Regex::new(r"(?i)<(br|/p|/div|/li|/h[1-6]|/tr)\b[^>]*>") {
        s = re.replace_all(&s, "\n").into_owned();
    }
    if let Ok(re) = regex::Regex::new(r"(?s)<[^>]*>") {
        s = re.replace_all(&s, "").into_owned();
    }
    let s = s
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    let mut out = String::new();
    let mut blank = false;
    for line in s.lines() {
        let t = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if t.is_empty() {
            if !blank && !out.is_empty() {
                out.push('\n');
            }
            blank = true;
        } else {
            out.push_str(&t);
            out.push('\n');
            blank = false;
        }
    }
    out
}

/// Why a fetch gave no page; the tool's error output says it to the model.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("fetch failed: {0}")]
    Send(reqwest::Error),
    #[error("{0}")]
    Outbound(OutboundError),
    #[error("reading the body failed: {0}")]
    Body(reqwest::Error),
    #[error("HTTP {status}\n{text}")]
    Status {
        status: reqwest::StatusCode,
        text: String,
    },
    #[error("interrupted")]
    Interrupted,
}

impl From<OutboundError> for FetchError {
    fn from(e: OutboundError) -> Self {
        match e {
            OutboundError::Send(e) => FetchError::Send(e),
            OutboundError::Interrupted => FetchError::Interrupted,
            other => FetchError::Outbound(other),
        }
    }
}

/// Redirects followed in a row, each target checked as the first.
const MAX_REDIRECTS: usize = 5;

impl WebFetch {
    fn client(&self) -> GuardedClient {
        GuardedClient::new(
            AddressPolicy {
                allow_private: self.allow_private,
                allow_setting: "engines.tinyelf.web_fetch_allow_private",
                verb: "fetch",
            },
            self.timeout,
            "elfgate-web-fetch",
        )
    }

    async fn fetch(
        &self,
        url: &str,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<String, FetchError> {
        let resp = self.client().get(url, MAX_REDIRECTS, cancel).await?;
        let status = resp.status();
        let is_html = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.contains("html"));
        let mut body = Vec::new();
        let mut cut = false;
        let mut stream = resp.bytes_stream();
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => return Err(FetchError::Interrupted),
                n = stream.next() => n,
            };
            let Some(chunk) = next else { break };
            let chunk = chunk.map_err(FetchError::Body)?;
            let room = self.max_bytes.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if chunk.len() > room {
                cut = true;
                break;
            }
        }
        let text = String::from_utf8_lossy(&body);
        let mut text = if is_html {
            html_to_text(&text)
        } else {
            text.into_owned()
        };
        if cut {
            text.push_str(&format!("\n[... body cut at {} bytes ...]", self.max_bytes));
        }
        if !status.is_success() {
            return Err(FetchError::Status { status, text });
        }
        Ok(text)
    }
}

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
pub struct WebArgs {
    url: String,
}

#[async_trait]
impl BuiltinTool for WebFetch {
    type Args = WebArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "web_fetch",
        description: "Fetch an http(s) URL and return its readable text.",
        tier: PermissionTier::ConfirmOnce,
        kind: ToolKind::Network,
        works_in_project: false,
    };
    async fn run(&self, a: WebArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        match self.fetch(&a.url, &ctx.cancel).await {
            Ok(t) => Ok(ToolOutput::ok(t)),
            Err(e) if ctx.cancel.is_cancelled() => {
                tracing::debug!(error = %e, "web_fetch interrupted");
                Err(ToolError::Interrupted)
            }
            Err(e) => Ok(ToolOutput::error(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loopback_is_refused_unless_allowed() {
        let w = WebFetch::default();
        let cancel = tokio_util::sync::CancellationToken::new();
        let e = w
            .fetch("http://127.0.0.1:9/x", &cancel)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("non-public"), "{e}");
        let e = w
            .fetch("file:///etc/passwd", &cancel)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("only http"), "{e}");
    }

    #[test]
    fn html_becomes_text() {
        let t = html_to_text(
            "<html><head><title>x</title></head><body><script>var a;</script><p>Hello &amp; bye</p><p>two</p></body></html>",
        );
        assert_eq!(t, "Hello & bye\ntwo\n");
    }
}
