//! ask_user: the model asks the user a question and the run stops (a YieldSignal) until the user
//! answers with the next prompt.

use crate::schema::schema_of;
use crate::tool::{PermissionTier, Tool, ToolContext, ToolError, ToolKind, ToolOutput, parse_args};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize, JsonSchema)]
pub(crate) struct AskArgs {
    question: String,
}

/// ask_user: yields the run with a question for the user.
#[derive(Debug, Default)]
pub struct AskUser;

#[async_trait]
impl Tool for AskUser {
    fn name(&self) -> &str {
        "ask_user"
    }
    fn description(&self) -> &str {
        "Ask the user a question when you cannot go on without their answer. The run stops; the \
user's reply arrives as the next message."
    }
    fn schema(&self) -> Value {
        schema_of::<AskArgs>()
    }
    fn tier(&self) -> PermissionTier {
        PermissionTier::ReadOnly
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }
    async fn execute(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: AskArgs = parse_args(input)?;
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
