//! OpenAI-compatible Chat Completions client.

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

/// `POST {base_url}/chat/completions`, key as `Authorization: Bearer`.
pub(crate) struct OpenAiWire {
    url: String,
}

impl OpenAiWire {
    pub(crate) fn new(base_url: &str) -> Self {
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        OpenAiWire { url }
    }
}

impl Wire for OpenAiWire {
    const KIND: ProviderKind = ProviderKind::Openai;
    type Decoder = OpenAiDecoder;

    fn url(&self, _model: &str) -> Result<Cow<'_, str>, LlmError> {
        Ok(Cow::Borrowed(&self.url))
    }

    fn body(&self, req: &LlmRequest, model: &str) -> Value {
        build_body(req, model)
    }

    fn decoder(&self) -> OpenAiDecoder {
        OpenAiDecoder::default()
    }
}
