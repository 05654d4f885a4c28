//! OpenAI Responses API client.

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

/// `POST {base_url}/responses`, key as `Authorization: Bearer`.
pub(crate) struct ResponsesWire {
    url: String,
}

impl ResponsesWire {
    pub(crate) fn new(base_url: &str) -> Self {
        let url = format!("{}/responses", base_url.trim_end_matches('/'));
        ResponsesWire { url }
    }
}

impl Wire for ResponsesWire {
    const KIND: ProviderKind = ProviderKind::OpenaiResponses;
    type Decoder = ResponsesDecoder;

    fn url(&self, _model: &str) -> Result<Cow<'_, str>, LlmError> {
        Ok(Cow::Borrowed(&self.url))
    }

    fn body(&self, req: &LlmRequest, model: &str) -> Value {
        build_body(req, model)
    }

    fn decoder(&self) -> ResponsesDecoder {
        ResponsesDecoder::default()
    }
}
