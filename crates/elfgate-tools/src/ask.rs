//! ask_user: the model asks the user a question and the run stops (a YieldSignal) until the user
//! answers with the next prompt.

use crate::tool::{
    BuiltinTool, PermissionTier, ToolContext, ToolDecl, ToolError, ToolKind, ToolOutput,
};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
pub struct AskArgs {
    question: String,
}

/// ask_user: yields the run with a question for the user.
#[derive(Debug, Default)]
pub struct AskUser;

#[async_trait]
impl BuiltinTool for AskUser {
    type Args = AskArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "ask_user",
        description: "Ask the user a question when you cannot go on without their answer. The run stops; the \
user's reply arrives as the next message.",
        tier: PermissionTier::ReadOnly,
        kind: ToolKind::Read,
        works_in_project: false,
    };
    async fn run(&self, a: AskArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let q = a.question;
        if q.trim().is_empty() {
            return Err(ToolError::InvalidInput("question must not be empty".into()));
        }
        Ok(ToolOutput {
            content: format!(
                "The question was shown to the user: {q}\nTheir answer will be the next message."
            ),
            is_error: false,
            yield_run: true,
        })
    }
}
