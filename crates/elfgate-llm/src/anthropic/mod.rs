//! Anthropic Messages client.

mod request;
mod stream;
#[cfg(test)]
mod tests;

pub(crate) use request::*;
pub(crate) use stream::*;

use crate::client::Wire;
use crate::{LlmError, LlmRequest, ProviderKind};
use serde_json::Value;
use std::borrow::Cow;

/// The API version header value.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `POST {base_url}/v1/messages`, key as `x-api-key`.
pub(crate) struct AnthropicWire {
    url: String,
}

impl AnthropicWire {
    pub(crate) fn new(base_url: &str) -> Self {
        let base = base_url.trim_end_matches('/');
        // Tolerate a base URL that already includes the version segment.
        let url = if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        };
        AnthropicWire { url }
    }
}

/// The beta that opens a model's 1M-token context window (Claude Sonnet 4 and later).
pub const EXTENDED_CONTEXT_BETA: &str = "context-1m-2025-08-07";

impl Wire for AnthropicWire {
    const KIND: ProviderKind = ProviderKind::Anthropic;
    type Decoder = AnthropicDecoder;

    fn url(&self, _model: &str) -> Result<Cow<'_, str>, LlmError> {
        Ok(Cow::Borrowed(&self.url))
    }

    fn body(&self, req: &LlmRequest, model: &str) -> Value {
        build_body(req, model)
    }

    fn headers(
        &self,
        req: reqwest::RequestBuilder,
        llm: &LlmRequest,
        key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let req = req.header("anthropic-version", ANTHROPIC_VERSION);
        let req = if llm.extended_context {
            req.header("anthropic-beta", EXTENDED_CONTEXT_BETA)
        } else {
            req
        };
        match key {
            Some(key) => req.header("x-api-key", key),
            None => req,
        }
    }

    fn decoder(&self) -> AnthropicDecoder {
        AnthropicDecoder::default()
    }
}
