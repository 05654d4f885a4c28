//! Session tools: list the daemon's sessions and read another session's messages (read-only).

use crate::tool::{
    BuiltinTool, PermissionTier, ToolContext, ToolDecl, ToolError, ToolKind, ToolOutput,
};
use async_trait::async_trait;
use elfgate_core::{Access, ContentBlock, Principal, PrincipalRole, SessionId};
use elfgate_store::{SessionReads, SessionsSeen};
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
pub struct ListSessionsArgs {
    #[schemars(range(min = 1, max = 200))]
    limit: Option<u64>,
}

/// list_sessions: the sessions of this daemon, newest first.
#[derive(Debug, Default)]
pub struct ListSessions;

#[async_trait]
impl BuiltinTool for ListSessions {
    type Args = ListSessionsArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "list_sessions",
        description: "List the user's sessions, newest first: id, engine, title, project path.",
        tier: PermissionTier::ReadOnly,
        kind: ToolKind::Read,
        works_in_project: false,
    };
    async fn run(&self, a: ListSessionsArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let limit = a.limit.unwrap_or(50).clamp(1, 200) as u32;
        let store = ctx
            .store
            .as_ref()
            .ok_or_else(|| ToolError::Failed("no session store available".into()))?;
        let reader = reader(store.as_ref(), ctx).await?;
        let seen = SessionsSeen::By {
            user: &reader.user,
            team: &reader.team,
        };
        let page = store
            .list_sessions(seen, limit, None)
            .await
            .map_err(|e| ToolError::Failed(e.report()))?;
        let lines: Vec<String> = page
            .sessions
            .iter()
            .map(|s| {
                format!(
                    "{} engine={} title={} project={}{}",
                    s.id,
                    s.engine,
                    s.title.as_deref().unwrap_or("-"),
                    s.project_path.as_deref().unwrap_or("-"),
                    if s.id == ctx.session_id {
                        " (this session)"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        Ok(ToolOutput::ok(if lines.is_empty() {
            "no sessions".to_string()
        } else {
            lines.join("\n")
        }))
    }
}

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
pub struct ReadSessionArgs {
    #[serde(alias = "sessionId")]
    session_id: String,
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u64>,
}

/// read_session_messages: the stored messages of a session, as text.
#[derive(Debug, Default)]
pub struct ReadSessionMessages;

#[async_trait]
impl BuiltinTool for ReadSessionMessages {
    type Args = ReadSessionArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "read_session_messages",
        description: "Read the stored messages of a session (read-only), oldest first.",
        tier: PermissionTier::ReadOnly,
        kind: ToolKind::Read,
        works_in_project: false,
    };
    async fn run(&self, a: ReadSessionArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let id: SessionId = a.session_id.parse().map_err(|_| {
            ToolError::InvalidInput(format!("'{}' is not a session id", a.session_id))
        })?;
        let limit = a.limit.unwrap_or(100).clamp(1, 500) as u32;
        let store = ctx
            .store
            .as_ref()
            .ok_or_else(|| ToolError::Failed("no session store available".into()))?;
        let reader = reader(store.as_ref(), ctx).await?;
        let target = store
            .get_session(id)
            .await
            .map_err(|e| ToolError::Failed(e.report()))?;
        // Another user's session reads as a missing one, as the API answers it.
        if target.is_none_or(|t| reader.access(&t.ownership, Access::Read).is_err()) {
            return Ok(ToolOutput::error(format!("unknown session {id}")));
        }
        let msgs = store
            .list_messages(id, limit)
            .await
            .map_err(|e| ToolError::Failed(e.report()))?;
        let mut out = String::new();
        for m in msgs {
            out.push_str(&format!("[{}]", m.role.as_str()));
            for b in &m.blocks {
                match b {
                    ContentBlock::Text { text } => out.push_str(&format!(" {text}")),
                    ContentBlock::Thinking { .. } => {}
                    ContentBlock::ToolUse { name, input, .. } => {
                        out.push_str(&format!(" <tool_use {name} {input}>"));
                    }
                    ContentBlock::ToolResult { content, .. } => {
                        let c: String = content.chars().take(2000).collect();
                        out.push_str(&format!(" <tool_result {c}>"));
                    }
                    ContentBlock::Image { .. } => out.push_str(" <image>"),
                    ContentBlock::Document { media_type, .. } => {
                        out.push_str(&format!(" <document {media_type}>"));
                    }
                    ContentBlock::ProviderBlock { block, .. } => {
                        out.push_str(&format!(" <{}>", elfgate_core::provider_block_label(block)));
                    }
                }
            }
            out.push('\n');
        }
        Ok(ToolOutput::ok(if out.is_empty() {
            "no messages".to_string()
        } else {
            out
        }))
    }
}

/// Whom a session tool reads for: the calling session's owner, as a member of its team, whoever
/// prompted the run (an agent sees what its session's owner's team shares, never more). A
/// session that is not stored has no owner to read for: refused.
async fn reader(store: &dyn SessionReads, ctx: &ToolContext) -> Result<Principal, ToolError> {
    let own = store
        .get_session(ctx.session_id)
        .await
        .map_err(|e| ToolError::Failed(e.report()))?
        .ok_or_else(|| ToolError::Failed("this session is not stored".into()))?;
    Ok(Principal {
        user: own.ownership.owner,
        team: own.ownership.team,
        role: PrincipalRole::Member,
        key_id: None,
        scopes: Default::default(),
    })
}
