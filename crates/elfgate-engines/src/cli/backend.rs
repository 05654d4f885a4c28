//! The three backends and what the engine asks of each: its command line, its environment and
//! files, how it is asked to stop, and the adapter that reads its stdout.

use super::adapter::{Adapter, CliProvider, Invocation};
use super::{claude_code, codex, gemini_cli};
use elfgate_core::{CliBackend, PermissionMode, ProxyDoor};
use elfgate_llm::ProviderKind;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the engine knows of each CLI's program: its command line, environment and files, how
/// it is asked to stop, and the adapter that reads its stdout.
pub(crate) trait BackendProgram: Copy {
    /// The program's own name.
    fn program(self) -> &'static str;
    /// The npm package that installs it.
    fn package(self) -> &'static str;
    /// The provider kinds whose wire format it speaks.
    fn provider_kinds(self) -> &'static [ProviderKind];
    /// Whether it speaks `kind`'s wire format.
    fn speaks(self, kind: ProviderKind) -> bool {
        self.provider_kinds().contains(&kind)
    }
    /// The daemon's door for the CLI's own wire format (None: an ACP agent, whose provider
    /// set-up is another backend's).
    fn proxy_door(self) -> Option<ProxyDoor>;
    /// That door as the CLI's provider, the daemon listening at `url`.
    fn proxy_provider(self, url: &str) -> CliProvider;
    /// `servers` (the session's MCP servers) in the CLI's own format, for a file handed to it
    /// (claude-code only; None without servers).
    fn mcp_config(
        self,
        servers: &BTreeMap<String, elfgate_core::mcp_config::McpServerConfig>,
    ) -> Option<String>;
    /// Arguments that hand the CLI the file of its MCP servers.
    fn mcp_args(self, file: &Path) -> Vec<String>;
    /// Arguments that ask the CLI's model for its long context (`useExtendedContext`); None for
    /// a CLI without such a switch.
    fn long_context_args(self) -> Option<Vec<String>>;
    /// Arguments a run through the door needs (codex: the door's provider table; its built-in
    /// web search off when the provider behind the door cannot search).
    fn proxy_args(self, door: &CliProvider, searches: bool) -> Vec<String>;
    /// How it is asked to stop before SIGTERM.
    fn polite_stop(self) -> Polite;
    /// The answer to a `PermissionAsk`, for its stdin (None: it cannot ask).
    fn permission_answer(
        self,
        request_id: &str,
        input: &Value,
        denied: Option<&str>,
    ) -> Option<Vec<u8>>;
    /// Bytes written to its stdin at start; None: stdin is /dev/null.
    fn stdin(self, inv: &Invocation<'_>) -> Option<Vec<u8>>;
    /// Its arguments (before the configured and the request's extra ones, which `args` places).
    fn args(self, inv: &Invocation<'_>, extra: &[String]) -> Vec<String>;
    /// The variables it gets for its home, its provider and the run's permission mode. `home`
    /// is its state directory.
    fn env(
        self,
        home: &Path,
        provider: Option<&CliProvider>,
        key: Option<&str>,
        mode: PermissionMode,
    ) -> BTreeMap<String, String>;
    /// Files it reads its configuration from, relative to `home`, with their content: written
    /// before each run so that nothing of the user's own configuration is read.
    fn files(self, providers: &BTreeMap<String, CliProvider>) -> Vec<(PathBuf, String)>;
    /// A fresh reader of one run's stdout.
    fn adapter(self) -> Box<dyn Adapter>;
    /// What an exit code means, when the CLI documents it.
    fn exit_meaning(self, code: i32) -> Option<&'static str>;
}

impl BackendProgram for CliBackend {
    fn program(self) -> &'static str {
        match self {
            CliBackend::Codex => "codex",
            CliBackend::ClaudeCode => "claude",
            CliBackend::GeminiCli => "gemini",
            CliBackend::Acp => "acp-agent",
        }
    }

    fn package(self) -> &'static str {
        match self {
            CliBackend::Codex => "@openai/codex",
            CliBackend::ClaudeCode => "@anthropic-ai/claude-code",
            CliBackend::GeminiCli => "@google/gemini-cli",
            CliBackend::Acp => "an ACP agent of your choice",
        }
    }

    fn provider_kinds(self) -> &'static [ProviderKind] {
        match self {
            CliBackend::Codex => &[ProviderKind::OpenaiResponses],
            CliBackend::ClaudeCode => &[ProviderKind::Anthropic],
            CliBackend::GeminiCli => &[ProviderKind::Gemini],
            // An ACP agent's provider is its `provider_setup` backend's (acp.rs).
            CliBackend::Acp => &[],
        }
    }

    fn proxy_door(self) -> Option<ProxyDoor> {
        match self {
            CliBackend::Codex => Some(ProxyDoor::Responses),
            CliBackend::ClaudeCode => Some(ProxyDoor::Messages),
            CliBackend::GeminiCli => Some(ProxyDoor::Gemini),
            CliBackend::Acp => None,
        }
    }

    fn proxy_provider(self, url: &str) -> CliProvider {
        let url = url.trim_end_matches('/');
        let (kind, base_url) = match self {
            CliBackend::Codex => (ProviderKind::OpenaiResponses, format!("{url}/v1")),
            CliBackend::ClaudeCode => (ProviderKind::Anthropic, url.to_string()),
            CliBackend::GeminiCli | CliBackend::Acp => (ProviderKind::Gemini, url.to_string()),
        };
        CliProvider {
            kind,
            base_url,
            api_key_env: Some(PROXY_KEY_VAR.to_string()),
            default_model: None,
        }
    }

    fn mcp_config(
        self,
        servers: &BTreeMap<String, elfgate_core::mcp_config::McpServerConfig>,
    ) -> Option<String> {
        match self {
            CliBackend::ClaudeCode => claude_code::mcp_config(servers),
            CliBackend::Codex | CliBackend::GeminiCli | CliBackend::Acp => None,
        }
    }

    fn mcp_args(self, file: &Path) -> Vec<String> {
        match self {
            CliBackend::ClaudeCode => claude_code::mcp_args(file),
            CliBackend::Codex | CliBackend::GeminiCli | CliBackend::Acp => Vec::new(),
        }
    }

    fn long_context_args(self) -> Option<Vec<String>> {
        match self {
            // One word: `--betas` takes every word after it, a prompt placed there included.
            CliBackend::ClaudeCode => Some(vec![format!(
                "--betas={}",
                elfgate_llm::EXTENDED_CONTEXT_BETA
            )]),
            CliBackend::Codex | CliBackend::GeminiCli | CliBackend::Acp => None,
        }
    }

    fn proxy_args(self, door: &CliProvider, searches: bool) -> Vec<String> {
        match self {
            CliBackend::Codex => codex::proxy_args(PROXY_PROVIDER, door, searches),
            CliBackend::ClaudeCode | CliBackend::GeminiCli | CliBackend::Acp => Vec::new(),
        }
    }

    fn polite_stop(self) -> Polite {
        match self {
            CliBackend::ClaudeCode => Polite::Stdin(claude_code::interrupt_request()),
            CliBackend::Codex | CliBackend::GeminiCli | CliBackend::Acp => Polite::Sigint,
        }
    }

    fn permission_answer(
        self,
        request_id: &str,
        input: &Value,
        denied: Option<&str>,
    ) -> Option<Vec<u8>> {
        match self {
            CliBackend::ClaudeCode => {
                Some(claude_code::permission_answer(request_id, input, denied))
            }
            CliBackend::Codex | CliBackend::GeminiCli | CliBackend::Acp => None,
        }
    }

    fn stdin(self, inv: &Invocation<'_>) -> Option<Vec<u8>> {
        match self {
            CliBackend::ClaudeCode => Some(claude_code::user_message(inv.prompt)),
            CliBackend::Codex | CliBackend::GeminiCli | CliBackend::Acp => None,
        }
    }

    fn args(self, inv: &Invocation<'_>, extra: &[String]) -> Vec<String> {
        match self {
            CliBackend::Codex => codex::args(inv, extra),
            CliBackend::ClaudeCode => claude_code::args(inv, extra),
            CliBackend::GeminiCli => gemini_cli::args(inv, extra),
            CliBackend::Acp => extra.to_vec(),
        }
    }

    fn env(
        self,
        home: &Path,
        provider: Option<&CliProvider>,
        key: Option<&str>,
        mode: PermissionMode,
    ) -> BTreeMap<String, String> {
        match self {
            CliBackend::Codex => codex::env(home, provider, key),
            CliBackend::ClaudeCode => claude_code::env(provider, key, mode),
            CliBackend::GeminiCli => gemini_cli::env(provider, key),
            CliBackend::Acp => BTreeMap::new(),
        }
    }

    fn files(self, providers: &BTreeMap<String, CliProvider>) -> Vec<(PathBuf, String)> {
        match self {
            CliBackend::Codex => codex::files(providers),
            CliBackend::ClaudeCode => claude_code::files(),
            CliBackend::GeminiCli => gemini_cli::files(),
            CliBackend::Acp => Vec::new(),
        }
    }

    fn adapter(self) -> Box<dyn Adapter> {
        match self {
            CliBackend::Codex => Box::new(codex::CodexAdapter::default()),
            CliBackend::ClaudeCode => Box::new(claude_code::ClaudeAdapter::default()),
            CliBackend::GeminiCli => Box::new(gemini_cli::GeminiAdapter::default()),
            CliBackend::Acp => Box::new(super::acp::AcpAdapter::default()),
        }
    }

    fn exit_meaning(self, code: i32) -> Option<&'static str> {
        match self {
            CliBackend::GeminiCli => gemini_cli::exit_meaning(code),
            CliBackend::Codex | CliBackend::ClaudeCode | CliBackend::Acp => None,
        }
    }
}

/// The name of the daemon's door as a CLI's provider (codex selects providers by name).
pub(crate) const PROXY_PROVIDER: &str = "elfgate-door";
/// The variable holding a run token where a CLI reads its key from a variable of our choosing
/// (not `ELFGATE_*`: those never reach a CLI).
const PROXY_KEY_VAR: &str = "CLI_DOOR_TOKEN";

/// How a backend is asked to stop first.
#[derive(Debug, Clone)]
pub(crate) enum Polite {
    /// SIGINT to its process group.
    Sigint,
    /// These bytes on its stdin.
    Stdin(Vec<u8>),
}
