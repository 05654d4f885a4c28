//! The three backends and what the engine asks of each: its command line, its environment and
//! files, how it is asked to stop, and the adapter that reads its stdout.

use super::adapter::{Adapter, CliProvider, Invocation};
use super::{claude_code, codex, gemini_cli};
use elfgate_core::PermissionMode;
use elfgate_llm::ProviderKind;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A coding CLI the engine can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// OpenAI's `codex exec --json`.
    Codex,
    /// Anthropic's `claude -p` with stream-json in and out.
    ClaudeCode,
    /// Google's `gemini -p` with stream-json out.
    GeminiCli,
}

impl Backend {
    /// Every backend, in the order GET /v1/engines lists them.
    pub const ALL: [Backend; 3] = [Backend::Codex, Backend::ClaudeCode, Backend::GeminiCli];

    /// The wire name (`cliBackend`).
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Codex => "codex",
            Backend::ClaudeCode => "claude-code",
            Backend::GeminiCli => "gemini-cli",
        }
    }

    /// The backend of a wire name.
    pub fn parse(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.as_str() == name)
    }

    /// The program's own name.
    pub(crate) fn program(self) -> &'static str {
        match self {
            Backend::Codex => "codex",
            Backend::ClaudeCode => "claude",
            Backend::GeminiCli => "gemini",
        }
    }

    /// The npm package that installs it.
    pub(crate) fn package(self) -> &'static str {
        match self {
            Backend::Codex => "@openai/codex",
            Backend::ClaudeCode => "@anthropic-ai/claude-code",
            Backend::GeminiCli => "@google/gemini-cli",
        }
    }

    /// The provider kinds whose wire format it speaks.
    pub(crate) fn provider_kinds(self) -> &'static [ProviderKind] {
        match self {
            Backend::Codex => &[ProviderKind::OpenaiResponses],
            Backend::ClaudeCode => &[ProviderKind::Anthropic],
            Backend::GeminiCli => &[ProviderKind::Gemini],
        }
    }

    pub(crate) fn speaks(self, kind: ProviderKind) -> bool {
        self.provider_kinds().contains(&kind)
    }

    /// How it is asked to stop before SIGTERM.
    pub(crate) fn polite_stop(self) -> Polite {
        match self {
            Backend::ClaudeCode => Polite::Stdin(claude_code::interrupt_request()),
            Backend::Codex | Backend::GeminiCli => Polite::Sigint,
        }
    }

    /// The answer to a `PermissionAsk`, for its stdin (None: it cannot ask).
    pub(crate) fn permission_answer(
        self,
        request_id: &str,
        input: &Value,
        denied: Option<&str>,
    ) -> Option<Vec<u8>> {
        match self {
            Backend::ClaudeCode => Some(claude_code::permission_answer(request_id, input, denied)),
            Backend::Codex | Backend::GeminiCli => None,
        }
    }

    /// Bytes written to its stdin at start; None: stdin is /dev/null.
    pub(crate) fn stdin(self, inv: &Invocation<'_>) -> Option<Vec<u8>> {
        match self {
            Backend::ClaudeCode => Some(claude_code::user_message(inv.prompt)),
            Backend::Codex | Backend::GeminiCli => None,
        }
    }

    /// Its arguments (before the configured and the request's extra ones, which `args` places).
    pub(crate) fn args(self, inv: &Invocation<'_>, extra: &[String]) -> Vec<String> {
        match self {
            Backend::Codex => codex::args(inv, extra),
            Backend::ClaudeCode => claude_code::args(inv, extra),
            Backend::GeminiCli => gemini_cli::args(inv, extra),
        }
    }

    /// The variables it gets for its home, its provider and the run's permission mode. `home`
    /// is its state directory.
    pub(crate) fn env(
        self,
        home: &Path,
        provider: Option<&CliProvider>,
        key: Option<&str>,
        mode: PermissionMode,
    ) -> BTreeMap<String, String> {
        match self {
            Backend::Codex => codex::env(home, provider, key),
            Backend::ClaudeCode => claude_code::env(provider, key, mode),
            Backend::GeminiCli => gemini_cli::env(provider, key),
        }
    }

    /// Files it reads its configuration from, relative to `home`, with their content: written
    /// before each run so that nothing of the user's own configuration is read.
    pub(crate) fn files(self, providers: &BTreeMap<String, CliProvider>) -> Vec<(PathBuf, String)> {
        match self {
            Backend::Codex => codex::files(providers),
            Backend::ClaudeCode => claude_code::files(),
            Backend::GeminiCli => gemini_cli::files(),
        }
    }

    /// A fresh reader of one run's stdout.
    pub(crate) fn adapter(self) -> Box<dyn Adapter> {
        match self {
            Backend::Codex => Box::new(codex::CodexAdapter::default()),
            Backend::ClaudeCode => Box::new(claude_code::ClaudeAdapter::default()),
            Backend::GeminiCli => Box::new(gemini_cli::GeminiAdapter::default()),
        }
    }

    /// What an exit code means, when the CLI documents it.
    pub(crate) fn exit_meaning(self, code: i32) -> Option<&'static str> {
        match self {
            Backend::GeminiCli => gemini_cli::exit_meaning(code),
            Backend::Codex | Backend::ClaudeCode => None,
        }
    }
}

/// How a backend is asked to stop first.
#[derive(Debug, Clone)]
pub(crate) enum Polite {
    /// SIGINT to its process group.
    Sigint,
    /// These bytes on its stdin.
    Stdin(Vec<u8>),
}
