//! The provider client that every wire format shares. A format ([`Wire`]) says where a request
//! goes, what its body and headers are and how its stream decodes; sending it, the timeouts and
//! turning the answer into an [`LlmStream`] are the same for all.

use crate::http::{self, Decoder};
use crate::{LlmError, LlmProvider, LlmRequest, LlmStream, ProviderConfig, ProviderKind};
use serde_json::Value;
use std::borrow::Cow;
use std::time::Duration;

/// What one wire format adds to the shared client.
pub(crate) trait Wire: Send + Sync + 'static {
    /// The format.
    const KIND: ProviderKind;
    /// Its stream decoder.
    type Decoder: Decoder;
    /// Where a request for `model` goes.
    fn url(&self, model: &str) -> Result<Cow<'_, str>, LlmError>;
    /// The request's JSON body.
    fn body(&self, req: &LlmRequest, model: &str) -> Value;
    /// Adds the format's own headers, and the API key when there is one (by default as
    /// `Authorization: Bearer`).
    fn headers(
        &self,
        req: reqwest::RequestBuilder,
        _llm: &LlmRequest,
        key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        match key {
            Some(key) => req.bearer_auth(key),
            None => req,
        }
    }
    /// A decoder for one answer.
    fn decoder(&self) -> Self::Decoder;
}

/// A provider speaking wire format `W`.
pub(crate) struct WireProvider<W> {
    cfg: ProviderConfig,
    http: reqwest::Client,
    wire: W,
}

impl<W: Wire> WireProvider<W> {
    pub(crate) fn new(wire: W, cfg: ProviderConfig, http: reqwest::Client) -> Self {
        WireProvider { cfg, http, wire }
    }
}

#[async_trait::async_trait]
impl<W: Wire> LlmProvider for WireProvider<W> {
    fn kind(&self) -> ProviderKind {
        W::KIND
    }

    fn first_token_timeout(&self) -> Duration {
        self.cfg.first_token_timeout
    }

    fn default_model(&self) -> Option<&str> {
        self.cfg.default_model.as_deref()
    }

    async fn stream(&self, req: &LlmRequest) -> Result<LlmStream, LlmError> {
        let key = self.cfg.api_key.as_deref().filter(|k| !k.is_empty());
        if let (None, Some(var)) = (key, &self.cfg.api_key_env) {
            return Err(LlmError::MissingApiKey(var.clone()));
        }
        let model = crate::resolve_model(req, self.default_model())?;
        let url = self.wire.url(model)?;
        let body = self.wire.body(req, model);
        tracing::debug!(kind = ?W::KIND, url = %url, model, "provider request");
        let builder = self
            .http
            .post(url.as_ref())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&body);
        let builder = self.wire.headers(builder, req, key);
        let resp = http::send(builder, self.cfg.request_timeout).await?;
        Ok(http::event_stream(
            resp,
            self.cfg.idle_timeout,
            self.wire.decoder(),
        ))
    }
}
