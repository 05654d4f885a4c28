//! Guardian: an optional LLM review of each tool call. It fails closed: an error, a timeout or an
//! answer that is neither SAFE nor UNSAFE blocks the call.

use elfgate_core::Role;
use elfgate_llm::{ContentBlock, LlmEvent, LlmMessage, LlmProvider, LlmRequest};
use futures_util::StreamExt;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the guardian says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardianVerdict {
    /// Safe to run.
    Allow,
    /// Blocked, with a reason for the model.
    Block(String),
}

/// The reviewer.
#[derive(Clone)]
pub struct Guardian {
    provider: Arc<dyn LlmProvider>,
    model: String,
    timeout: Duration,
}

impl std::fmt::Debug for Guardian {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guardian")
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .finish()
    }
}

const SYSTEM: &str = "You are a security reviewer for an AI coding agent. You are shown one tool call \
the agent wants to make inside a project directory. Answer with exactly one line: `SAFE` if the call is \
harmless, or `UNSAFE: <reason>` if it could destroy data, leak secrets, reach outside the project, or \
otherwise harm the user.";

/// Reads a verdict out of the reviewer's text.
pub fn parse_verdict(text: &str) -> GuardianVerdict {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    if upper.starts_with("UNSAFE") {
        let reason = t[6..].trim_start_matches([':', ' ', '-']).trim();
        return GuardianVerdict::Block(if reason.is_empty() {
            "the guardian judged the call unsafe".to_string()
        } else {
            format!("the guardian judged the call unsafe: {reason}")
        });
    }
    if upper == "SAFE"
        || upper.starts_with("SAFE\n")
        || upper.starts_with("SAFE.")
        || upper.starts_with("SAFE ")
    {
        return GuardianVerdict::Allow;
    }
    GuardianVerdict::Block(format!(
        "the guardian gave an unclear answer, so the call is blocked: {}",
        t.chars().take(200).collect::<String>()
    ))
}

impl Guardian {
    /// A guardian asking `model` of `provider`, giving up after `timeout`.
    pub fn new(provider: Arc<dyn LlmProvider>, model: String, timeout: Duration) -> Self {
        Guardian {
            provider,
            model,
            timeout,
        }
    }

    /// Reviews one call.
    pub async fn review(
        &self,
        tool: &str,
        input: &Value,
        project: &str,
        channel: &elfgate_core::ChannelOrigin,
        cancel: &CancellationToken,
    ) -> GuardianVerdict {
        let mut about = format!("Project directory: {project}\n");
        // Who asked, when a chat channel did: a call that fits a project's owner may not fit
        // an anonymous sender of a public channel.
        for (name, value) in channel.fields() {
            if let Some(v) = value {
                about.push_str(&format!("{name}: {v}\n"));
            }
        }
        let req = LlmRequest {
            model: self.model.clone(),
            system: Some(SYSTEM.to_string()),
            messages: vec![LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::Text {
                    text: format!("{about}Tool: {tool}\nInput: {input}"),
                }],
            }],
            temperature: Some(0.0),
            max_tokens: Some(200),
            ..Default::default()
        };
        let work = async {
            let mut stream = self
                .provider
                .stream(&req)
                .await
                .map_err(|e| e.to_string())?;
            let mut text = String::new();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(LlmEvent::TextDelta(t)) => text.push_str(&t),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok::<_, String>(text)
        };
        let result = tokio::select! {
            _ = cancel.cancelled() => return GuardianVerdict::Block("interrupted".into()),
            r = tokio::time::timeout(self.timeout, work) => r,
        };
        match result {
            Err(_) => GuardianVerdict::Block(format!(
                "the guardian did not answer within {:.1}s, so the call is blocked",
                self.timeout.as_secs_f64()
            )),
            Ok(Err(e)) => {
                GuardianVerdict::Block(format!("the guardian failed ({e}), so the call is blocked"))
            }
            Ok(Ok(text)) => parse_verdict(&text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_fail_closed() {
        assert_eq!(parse_verdict(" SAFE "), GuardianVerdict::Allow);
        assert_eq!(parse_verdict("safe."), GuardianVerdict::Allow);
        assert!(
            matches!(parse_verdict("UNSAFE: wipes disk"), GuardianVerdict::Block(r) if r.contains("wipes disk"))
        );
        assert!(
            matches!(parse_verdict("maybe?"), GuardianVerdict::Block(r) if r.contains("unclear"))
        );
        assert!(matches!(parse_verdict(""), GuardianVerdict::Block(_)));
        assert!(matches!(
            parse_verdict("SAFETY FIRST"),
            GuardianVerdict::Block(_)
        ));
    }
}
