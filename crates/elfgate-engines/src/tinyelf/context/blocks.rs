//! The system prompt's declared blocks and the one order they are assembled in. The blocks before
//! [`BlockKind::ProjectContext`] form the stable prefix: they depend only on the daemon's
//! configuration and the session, never on the turn, so the prefix is byte-identical from call to
//! call and the provider can cache it.

/// What a block holds; the variants are in prompt order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum BlockKind {
    /// Who the agent is: the session's system prompt, or the built-in one.
    Identity,
    /// How to use tools, the same for every session.
    ToolGuidance,
    /// The skills the model can load (names and descriptions).
    Skills,
    /// The project's own instructions (AGENTS.md, ELFGATE.md).
    ProjectContext,
    /// What changes from run to run: the date, the working directory.
    DynamicTail,
}

impl BlockKind {
    /// Whether the block belongs to the stable prefix.
    pub(crate) fn is_stable(self) -> bool {
        self < BlockKind::ProjectContext
    }
}

/// One block of the system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    pub kind: BlockKind,
    pub text: String,
}

/// The assembled system prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SystemPrompt {
    /// The whole text.
    pub text: String,
    /// Bytes at its start that are the stable prefix.
    pub prefix_len: usize,
}

impl SystemPrompt {
    /// A prompt that is stable as a whole (a sub-agent's: the same for all its calls).
    pub(crate) fn whole(text: String) -> Self {
        SystemPrompt {
            prefix_len: text.len(),
            text,
        }
    }
}

/// Separates two blocks.
const SEPARATOR: &str = "\n\n";

/// Joins the blocks in [`BlockKind`] order (blocks of one kind keep the order they were given in),
/// leaving empty ones out. The separator after the last stable block belongs to the variable part,
/// so a prefix without anything after it is the same bytes as one with a tail.
pub(crate) fn assemble(mut blocks: Vec<Block>) -> SystemPrompt {
    blocks.retain(|b| !b.text.trim().is_empty());
    blocks.sort_by_key(|b| b.kind);
    let mut out = SystemPrompt::default();
    for b in &blocks {
        if !out.text.is_empty() {
            out.text.push_str(SEPARATOR);
        }
        out.text.push_str(b.text.trim_end());
        if b.kind.is_stable() {
            out.prefix_len = out.text.len();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(kind: BlockKind, text: &str) -> Block {
        Block {
            kind,
            text: text.into(),
        }
    }

    #[test]
    fn fixed_order_and_prefix() {
        let p = assemble(vec![
            block(BlockKind::DynamicTail, "date"),
            block(BlockKind::ProjectContext, "agents"),
            block(BlockKind::Skills, "skills\n"),
            block(BlockKind::ToolGuidance, ""),
            block(BlockKind::Identity, "me"),
        ]);
        assert_eq!(p.text, "me\n\nskills\n\nagents\n\ndate");
        assert_eq!(&p.text[..p.prefix_len], "me\n\nskills");
        // The prefix does not depend on what follows it.
        let q = assemble(vec![
            block(BlockKind::Identity, "me"),
            block(BlockKind::Skills, "skills\n"),
            block(BlockKind::DynamicTail, "another date"),
        ]);
        assert_eq!(&q.text[..q.prefix_len], &p.text[..p.prefix_len]);
    }
}
