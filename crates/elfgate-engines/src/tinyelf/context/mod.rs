//! What the model is given besides the conversation: the system prompt, assembled from declared
//! blocks (see [`blocks`]). See docs/context.md.

pub(crate) mod blocks;
pub(crate) mod compaction;
pub(crate) mod fit;
mod project;
pub(crate) mod router;
pub(crate) mod skill_tools;
pub mod skills;

use blocks::{Block, BlockKind, SystemPrompt, assemble};
use elfgate_tools::ExecutionFirewall;
use std::path::Path;

/// The built-in identity; the session's system prompt replaces it.
pub(crate) const DEFAULT_IDENTITY: &str = "You are TinyElf, a careful software agent. You work \
inside the project directory with the tools you are given: read before you change, keep changes \
small, and answer with a short summary when the task is done.";

/// How to use tools, the same for every session (it names no tool: the tool set may change
/// between iterations, and the prefix must not).
const TOOL_GUIDANCE: &str = "Tools: call them with JSON arguments that match their schemas. Paths \
are relative to the project directory. Calls in one answer run at the same time, so make calls \
that depend on each other in separate answers. A refused or failed call comes back as an error \
result saying why; adjust and go on rather than repeating it unchanged.";

/// The dynamic tail's line for a session without a project.
const NO_PROJECT: &str = "Project directory: none. This session has no project, so the file and \
shell tools refuse every call; answer with what the other tools and you know.";

/// What a run's system prompt is built from.
pub(crate) struct PromptParts<'a> {
    /// The session's system prompt (empty or None: the built-in identity).
    pub identity: Option<&'a str>,
    /// The skills catalogue block, if any skill is available.
    pub skills: Option<String>,
    /// The project directory (None: the session has none, and no file or shell tool runs).
    pub project: Option<&'a Path>,
    /// Cap on the project context block.
    pub project_context_max_bytes: usize,
    /// Today's date (UTC), for the dynamic tail.
    pub date: String,
    /// The notes of the skills the router activated for this turn (dynamic tail).
    pub active_skills: Vec<String>,
}

/// Introduces the active skills in the dynamic tail.
const ACTIVE_SKILLS: &str = "Active skills: the skill router chose these for this request from \
their triggers; follow their instructions (they are loaded, load_skill is not needed for them).";

/// Builds a run's system prompt; also returns notes about project files cut or refused (the
/// caller reports them as `processing` events).
pub(crate) async fn system_prompt(
    firewall: &ExecutionFirewall,
    parts: PromptParts<'_>,
) -> (SystemPrompt, Vec<String>) {
    let identity = parts
        .identity
        .filter(|s| !s.trim().is_empty())
        .unwrap_or(DEFAULT_IDENTITY);
    let mut blocks = vec![
        Block {
            kind: BlockKind::Identity,
            text: identity.to_string(),
        },
        Block {
            kind: BlockKind::ToolGuidance,
            text: TOOL_GUIDANCE.to_string(),
        },
    ];
    if let Some(skills) = parts.skills {
        blocks.push(Block {
            kind: BlockKind::Skills,
            text: skills,
        });
    }
    let (context, notes) = match parts.project {
        Some(dir) => project::project_context(firewall, dir, parts.project_context_max_bytes).await,
        None => (None, Vec::new()),
    };
    if let Some(text) = context {
        blocks.push(Block {
            kind: BlockKind::ProjectContext,
            text,
        });
    }
    let mut tail = match parts.project {
        Some(dir) => format!("Date: {}\nProject directory: {}", parts.date, dir.display()),
        None => format!("Date: {}\n{NO_PROJECT}", parts.date),
    };
    if !parts.active_skills.is_empty() {
        tail.push_str("\n\n");
        tail.push_str(ACTIVE_SKILLS);
        for note in &parts.active_skills {
            tail.push_str("\n\n");
            tail.push_str(note);
        }
    }
    blocks.push(Block {
        kind: BlockKind::DynamicTail,
        text: tail,
    });
    (assemble(blocks), notes)
}
