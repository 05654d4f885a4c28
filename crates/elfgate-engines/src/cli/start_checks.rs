//! The checks before a cli session starts or takes a prompt (`check_start`): the backend, its
//! program, its arguments, its provider, the variables a session may set and the channel
//! permissions a CLI can hold; each refusal a [`CliStartError`] (a 422 for the client).

use super::backend::BackendProgram;
use super::{AcpStartError, CliBackend, CliEngine, Found, ProviderRefused};
use elfgate_core::{PermissionMode, StartRequest};

/// Why the cli engine refuses a request (a 422 for the client).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CliStartError {
    /// No cliBackend.
    #[error("engine 'cli' needs cliBackend: one of {}", backend_names())]
    NoBackend,
    /// The backend's program is missing or does not run.
    #[error("cli backend '{}' is not available: {why}", backend.as_str())]
    Unavailable {
        /// The backend.
        backend: CliBackend,
        /// What the probe found.
        why: String,
    },
    /// useExtendedContext for a CLI without a long-context switch.
    #[error(
        "useExtendedContext: {} has no long-context switch (claude-code, in the cli and \
         claude-sdk engines, has one)",
        .0.as_str()
    )]
    NoLongContext(CliBackend),
    /// A cliArgs entry outside the allow list.
    #[error(
        "cliArgs: '{arg}' is not allowed for {} ({list}; see engines.cli.{}.allowed_args)",
        backend.as_str(),
        backend.as_str()
    )]
    ArgNotAllowed {
        /// The argument.
        arg: String,
        /// The backend.
        backend: CliBackend,
        /// What is allowed.
        list: String,
    },
    /// The provider cannot serve the backend.
    #[error(transparent)]
    Provider(ProviderRefused),
    /// Channel permissions the CLI could not hold.
    #[error(
        "channelPermissions (canUseTool: {}, requireConfirmation: {}) cannot be enforced on {}'s \
         own tools: the cli engine runs only without such a restriction",
        permissions.can_use_tool,
        permissions.require_confirmation,
        backend.as_str()
    )]
    ChannelPermissions {
        /// What was asked.
        permissions: elfgate_core::ChannelPermissions,
        /// The backend.
        backend: CliBackend,
    },
    /// An ACP session that cannot start.
    #[error(transparent)]
    Acp(AcpStartError),
    /// A providerEnv variable the session may not set.
    #[error("engineConfig.providerEnv.{name}: {why}")]
    ProviderEnv {
        /// The variable.
        name: String,
        /// Why not.
        why: &'static str,
    },
}

fn backend_names() -> String {
    CliBackend::ALL
        .iter()
        .map(|b| b.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a variable could redirect a CLI's traffic, weaken its TLS or load code into it: a
/// session may not set it through providerEnv, whatever the provider (an `_BASE_URL` or
/// `_API_BASE` of any provider, a proxy, a CA or TLS switch, a loader or Node option).
fn redirects(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    const EXACT: &[&str] = &[
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "NODE_OPTIONS",
        "NODE_TLS_REJECT_UNAUTHORIZED",
        "NODE_EXTRA_CA_CERTS",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "PATH",
    ];
    EXACT.contains(&n.as_str())
        || n.ends_with("_BASE_URL")
        || n.ends_with("_API_BASE")
        || n.ends_with("_API_KEY")
        || n.ends_with("_AUTH_TOKEN")
}

impl CliEngine {
    pub(super) fn start_problem(&self, req: &StartRequest<'_>) -> Result<(), CliStartError> {
        let b = Self::backend_of(req.cli_backend)?;
        if req.use_extended_context && b.long_context_args().is_none() {
            return Err(CliStartError::NoLongContext(b));
        }
        if b == CliBackend::Acp {
            return self.acp_start_problem(req).map_err(CliStartError::Acp);
        }
        if self.found.get(&b).and_then(Found::usable).is_none() {
            return Err(self.unavailable(b));
        }
        self.check_args(b, req.cli_args.unwrap_or_default())?;
        let route = self
            .config
            .route_for(b, req.provider_id)
            .map_err(CliStartError::Provider)?;
        let provider = route.as_ref().map(|r| self.cli_provider(b, r));
        if let Some(vars) = req.provider_env {
            // What the daemon sets for the CLI's provider (its base URL, key, HOME...) stays
            // the daemon's: a session that could point the CLI elsewhere would send the
            // provider's key there.
            let own: Vec<String> = PermissionMode::ALL
                .iter()
                .flat_map(|mode| b.env(&self.home(b), provider.as_ref(), Some("-"), *mode))
                .map(|(k, _)| k.to_ascii_uppercase())
                .chain(["HOME".to_string()])
                .collect();
            for (name, value) in vars {
                let why = if !self.base_env.allowed(name) {
                    Some(
                        "the daemon's ELFGATE_* variables and providers' key variables never reach a CLI",
                    )
                } else if redirects(name) {
                    Some(
                        "it could send the CLI's traffic (and its provider key) elsewhere or run code in it",
                    )
                } else if own.contains(&name.to_ascii_uppercase()) {
                    Some("the daemon sets it for the CLI's provider; a session cannot change it")
                } else if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
                    Some("not a variable name and value")
                } else {
                    None
                };
                if let Some(why) = why {
                    return Err(CliStartError::ProviderEnv {
                        name: name.clone(),
                        why,
                    });
                }
            }
        }
        // The CLI runs its own tools, and runs some (its read-only ones) without asking: neither
        // "no tools" nor "ask before every tool" can be held to, so the run is refused rather
        // than started with a restriction that would not hold.
        if let Some(c) = req.channel_permissions
            && (!c.can_use_tool || c.require_confirmation)
        {
            return Err(CliStartError::ChannelPermissions {
                permissions: c,
                backend: b,
            });
        }
        Ok(())
    }
}
