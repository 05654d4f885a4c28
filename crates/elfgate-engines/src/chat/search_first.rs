//! Search orchestration of the chat engines (engineConfig `searchOrchestration`): the prompt is
//! searched for before the model is called, and the results go into the request.

use super::ChatEngine;
use elfgate_core::{ContentBlock, EngineSessionContext, EventPayload};
use elfgate_llm::LlmRequest;

/// Whether this run searches the web before answering (engineConfig searchOrchestration).
pub(super) fn searches(ctx: &EngineSessionContext) -> bool {
    ctx.engine_config.search_orchestration == Some(true)
}

/// Most characters of a prompt sent to the search backend as its query.
const SEARCH_QUERY_MAX_CHARS: usize = 400;

impl ChatEngine {
    /// Search orchestration: the prompt (its first 400 characters) is searched for before the
    /// call, and the results are added to the request's last user turn, not to the stored
    /// prompt. A `processing` event says what was searched and what came back; a search that
    /// fails leaves the request as it was and says why (the answer comes without results).
    pub(super) async fn search_first(&self, ctx: &EngineSessionContext, req: &mut LlmRequest) {
        let query: String = ctx.prompt.chars().take(SEARCH_QUERY_MAX_CHARS).collect();
        let note = |message: String| ctx.events.emit(EventPayload::Processing { message });
        let Some(search) = &self.search else {
            // The API refuses searchOrchestration without a backend; a session stored before
            // the backend was removed from the configuration lands here.
            note(
                "searchOrchestration: no search backend is configured ([tools.web_search]); \
                  answering without a search"
                    .to_string(),
            )
            .await;
            return;
        };
        let found = tokio::select! {
            _ = ctx.cancel.cancelled() => return,
            r = search.search_rendered(&query) => r,
        };
        match found {
            Ok((n, results)) => {
                note(format!("searched the web for the prompt: {n} results")).await;
                if let Some(last) = req.messages.last_mut() {
                    last.blocks.push(ContentBlock::text(format!(
                        "[Web search results for this prompt, fetched before answering]\n{results}"
                    )));
                }
            }
            Err(why) => {
                note(format!(
                    "searchOrchestration: the search failed ({why}); answering without results"
                ))
                .await;
            }
        }
    }
}
