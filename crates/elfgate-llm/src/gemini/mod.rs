//! Gemini API (`streamGenerateContent`) client.

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

/// `POST {base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`, key as `x-goog-api-key`.
pub(crate) struct GeminiWire {
    /// The base URL up to and including the API version segment.
    base: String,
}

impl GeminiWire {
    pub(crate) fn new(base_url: &str) -> Self {
        let base = base_url.trim_end_matches('/');
        // Tolerate a base URL that already includes the version segment.
        let base = if base.ends_with("/v1beta") || base.ends_with("/v1") {
            base.to_string()
        } else {
            format!("{base}/v1beta")
        };
        GeminiWire { base }
    }
}

impl Wire for GeminiWire {
    const KIND: ProviderKind = ProviderKind::Gemini;
    type Decoder = GeminiDecoder;

    /// The model goes into the path: one path segment, escaped as such.
    fn url(&self, model: &str) -> Result<Cow<'_, str>, LlmError> {
        let model = model.strip_prefix("models/").unwrap_or(model);
        let mut url = reqwest::Url::parse(&self.base)
            .map_err(|e| LlmError::Protocol(format!("invalid base URL '{}': {e}", self.base)))?;
        url.path_segments_mut()
            .map_err(|()| LlmError::Protocol(format!("invalid base URL '{}'", self.base)))?
            .push("models")
            .push(&format!("{model}:streamGenerateContent"));
        url.set_query(Some("alt=sse"));
        Ok(Cow::Owned(url.into()))
    }

    fn body(&self, req: &LlmRequest, _model: &str) -> Value {
        build_body(req)
    }

    fn headers(
        &self,
        req: reqwest::RequestBuilder,
        _llm: &LlmRequest,
        key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        match key {
            Some(key) => req.header("x-goog-api-key", key),
            None => req,
        }
    }

    fn decoder(&self) -> GeminiDecoder {
        GeminiDecoder::new()
    }
}
