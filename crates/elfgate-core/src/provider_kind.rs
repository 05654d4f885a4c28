//! The wire protocols a model provider speaks, by the names the configuration and stored
//! messages use. Defined here, below the LLM clients, so that a stored message can say which
//! kind wrote one of its blocks.

use serde::{Deserialize, Serialize};

/// Which wire protocol a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum ProviderKind {
    /// OpenAI-compatible Chat Completions (`/chat/completions`).
    #[serde(rename = "openai")]
    Openai,
    /// Anthropic Messages (`/v1/messages`).
    #[serde(rename = "anthropic")]
    Anthropic,
    /// The OpenAI Responses API (`/responses`).
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
    /// The Gemini API (`/v1beta/models/{model}:streamGenerateContent`).
    #[serde(rename = "gemini")]
    Gemini,
}

impl ProviderKind {
    /// The name used in the configuration (`kind = "…"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenaiResponses => "openai-responses",
            ProviderKind::Gemini => "gemini",
        }
    }

    /// Whether the daemon can ask this kind's API to search the web itself: the Responses API
    /// (its `web_search` tool), Gemini (Google Search grounding), whose answers carry the results
    /// as text, and Anthropic (its server-side `web_search` tool, whose blocks are stored and sent
    /// back as they came). Chat Completions has search only on its search models.
    pub fn searches_natively(self) -> bool {
        matches!(
            self,
            ProviderKind::OpenaiResponses | ProviderKind::Gemini | ProviderKind::Anthropic
        )
    }

    /// What is sent in place of a document this kind cannot take (one stored in the history
    /// before the session moved to this provider): a note, so that the model knows a file was
    /// there and nothing is left out unsaid.
    pub fn document_note(self, name: Option<&str>, media_type: &str) -> String {
        format!(
            "[attachment {}({media_type}) not sent: this provider ({}) cannot take this file]",
            name.map(|n| format!("{n} ")).unwrap_or_default(),
            self.as_str()
        )
    }

    /// Whether this kind's API takes a document of `media_type`, inline (`by_url` false) or by
    /// URL; Err says what it takes instead. Images and text are not documents (every kind takes
    /// images; text is sent inline as text).
    pub fn takes_document(self, media_type: &str, by_url: bool) -> Result<(), &'static str> {
        let m = media_type.to_ascii_lowercase();
        let (ok, takes) = match self {
            // Anthropic's base64 and URL document sources are for PDFs (plain text goes as an
            // attachment's `text`, inline).
            ProviderKind::Anthropic => (
                m == "application/pdf",
                "application/pdf, inline or by URL (send text as the attachment's text)",
            ),
            // Chat Completions' file parts: PDF, inline only (a URL needs the Files API).
            ProviderKind::Openai => (
                m == "application/pdf" && !by_url,
                "application/pdf, inline (base64) only",
            ),
            // The Responses API's input_file: PDF, inline or by URL.
            ProviderKind::OpenaiResponses => {
                (m == "application/pdf", "application/pdf, inline or by URL")
            }
            // Gemini's inlineData / fileData: documents, audio and video.
            ProviderKind::Gemini => (
                m == "application/pdf"
                    || m.starts_with("audio/")
                    || m.starts_with("video/")
                    || m.starts_with("text/"),
                "application/pdf, text/*, audio/* or video/*, inline or by URL",
            ),
        };
        if ok { Ok(()) } else { Err(takes) }
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::ProviderKind;
    use crate::model::ContentBlock;
    use serde_json::json;

    /// A message stored while the kind was a plain string loads with its kind typed, and is
    /// written back in the very same form.
    #[test]
    fn a_stored_provider_block_loads_and_is_written_back_unchanged() {
        let stored = json!({
            "type": "provider_block",
            "provider_kind": "anthropic",
            "block": {"type": "server_tool_use", "id": "srvtoolu_1", "input": {"query": "rust"}},
        });
        let block: ContentBlock = serde_json::from_value(stored.clone()).unwrap();
        let ContentBlock::ProviderBlock { provider_kind, .. } = &block else {
            panic!("not a provider block: {block:?}");
        };
        assert_eq!(*provider_kind, ProviderKind::Anthropic);
        assert_eq!(serde_json::to_value(&block).unwrap(), stored);
    }

    #[test]
    fn each_kind_is_written_by_its_configuration_name() {
        for kind in [
            ProviderKind::Openai,
            ProviderKind::Anthropic,
            ProviderKind::OpenaiResponses,
            ProviderKind::Gemini,
        ] {
            let written = serde_json::to_value(kind).unwrap();
            assert_eq!(written, json!(kind.as_str()));
            assert_eq!(
                serde_json::from_value::<ProviderKind>(written).unwrap(),
                kind
            );
        }
    }

    #[test]
    fn an_unknown_kind_is_refused() {
        assert!(serde_json::from_value::<ProviderKind>(json!("mistral")).is_err());
    }
}
