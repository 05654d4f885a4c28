//! The three backends and what the engine asks of each: its command line, its environment and
//! files, how it is asked to stop, and the adapter that reads its stdout.

use super::settings::CliProvider;
use super::{claude_code, codex, gemini_cli};
use elfgate_core::{DeltaKind, PermissionMode};
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
    pub(crate) fn provider_kinds(self) -> &'static [&'static str] {
        match self {
            Backend::Codex => &["openai-responses"],
            Backend::ClaudeCode => &["anthropic"],
            Backend::GeminiCli => &["gemini"],
        }
    }

    pub(crate) fn speaks(self, kind: &str) -> bool {
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

/// What one run asks the CLI to do.
#[derive(Debug, Clone)]
pub(crate) struct Invocation<'a> {
    /// The user's prompt.
    pub prompt: &'a str,
    /// The model, if the session or its provider names one.
    pub model: Option<&'a str>,
    /// The CLI's own session id to resume, from the session's earlier run.
    pub resume: Option<&'a str>,
    /// The session's permission mode.
    pub permission_mode: PermissionMode,
    /// The provider's name, where the CLI selects it by name (codex).
    pub provider_name: Option<&'a str>,
}

/// What an adapter read in one line of the CLI's stdout.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AdapterEvent {
    /// A piece of answer or reasoning text.
    Delta(DeltaKind, String),
    /// A tool call starts.
    ToolStart {
        id: String,
        name: String,
        input: Value,
    },
    /// A tool call ended.
    ToolEnd {
        id: String,
        content: String,
        is_error: bool,
    },
    /// The CLI's own session (thread) id.
    SessionId(String),
    /// Token figures so far (replace the earlier ones).
    Usage(TokenCounts),
    /// Model turns so far.
    Turns(u32),
    /// Something worth telling the client that does not end the run (a retry, a warning).
    Notice(String),
    /// The CLI reports that the run failed.
    Failed(String),
    /// The CLI reports the run's end (successful unless `Failed` came).
    Finished,
    /// The CLI asks whether it may run a tool, and waits for the answer on its stdin.
    PermissionAsk {
        request_id: String,
        tool_name: String,
        input: Value,
    },
}

/// Reads one run's stdout, line by line. A line it does not know gives no event.
pub(crate) trait Adapter: Send {
    /// The events of one JSON line.
    fn on_line(&mut self, line: &Value) -> Vec<AdapterEvent>;
}

/// A string field of a JSON object.
pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A number field of a JSON object (0 when absent).
pub(crate) fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// A CLI's token figures, in Elfgate's terms: `input` counts every prompt token, those read from
/// or written to the provider's prompt cache included (each CLI reports them its own way).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCounts {
    /// Prompt tokens, cached ones included.
    pub input: u64,
    /// Generated tokens.
    pub output: u64,
    /// Prompt tokens read from the provider's cache.
    pub cache_read: u64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write: u64,
}
