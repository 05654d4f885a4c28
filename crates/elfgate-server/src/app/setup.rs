//! What the daemon is built from besides its store: the bearer token, the providers, the data
//! directory, and the tinyelf and MCP settings only the running daemon knows.

use super::StartError;
use crate::config::{AuthMode, Config};
use crate::token_file::{self, TokenSource};
use elfgate_engines::{ProviderRegistry, TinyElfConfig};
use elfgate_llm::{ProviderConfig, build_provider};
use elfgate_tools::process::{ChildEnv, ChildSetup, Isolation, Network};
use elfgate_tools::sandbox::Sandbox;
use std::time::Duration;

/// Settles the bearer token: ELFGATE_TOKEN, else (unless `[server] auth = "none"`) the token file
/// in the data directory, created at first start.
pub(super) fn settle_token(
    config: &mut Config,
    data_dir: Option<&std::path::Path>,
) -> Result<Option<TokenSource>, StartError> {
    if config.token.is_some() {
        if config.server.auth == AuthMode::None {
            tracing::warn!("server.auth = \"none\" is ignored: ELFGATE_TOKEN is set");
        }
        return Ok(Some(TokenSource::Environment));
    }
    if config.server.auth == AuthMode::None {
        tracing::warn!(
            "server.auth = \"none\": any program of any user on this machine can drive the \
             daemon (and every tool it runs); use it only on a single-user machine"
        );
        return Ok(None);
    }
    let (token, source) = match data_dir {
        Some(dir) => token_file::load_or_create(dir)?,
        None => (token_file::generate()?, TokenSource::Ephemeral),
    };
    config.token = Some(token);
    Ok(Some(source))
}

pub(super) fn providers(config: &Config) -> Result<ProviderRegistry, StartError> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .build()?;
    let mut registry = ProviderRegistry::new();
    let mut keyless = Vec::new();
    for (name, p) in &config.providers {
        let api_key = p
            .api_key_env
            .as_deref()
            .and_then(|var| std::env::var(var).ok())
            .filter(|k| !k.is_empty());
        if let (None, Some(var)) = (&api_key, p.api_key_env.as_deref().filter(|v| !v.is_empty())) {
            keyless.push(format!("{name} ({var})"));
        }
        registry.insert(
            name.clone(),
            build_provider(
                ProviderConfig {
                    kind: p.kind,
                    base_url: p.base_url.trim_end_matches('/').to_string(),
                    api_key,
                    api_key_env: p.api_key_env.clone().filter(|v| !v.is_empty()),
                    default_model: p.default_model.clone(),
                    idle_timeout: Duration::from_secs(p.idle_timeout_secs.max(1)),
                    request_timeout: Duration::from_secs(p.request_timeout_secs.max(1)),
                    first_token_timeout: Duration::from_secs(
                        p.first_token_timeout_secs
                            .unwrap_or(p.request_timeout_secs.max(1) + p.idle_timeout_secs.max(1)),
                    ),
                },
                http.clone(),
            ),
        );
    }
    for (name, p) in &config.providers {
        registry.set_limits(
            name.clone(),
            elfgate_engines::ContextLimits {
                provider: elfgate_engines::ModelLimits {
                    context_window_tokens: p.context_window_tokens,
                    reserve_output_tokens: p.reserve_output_tokens,
                    extended_context_window_tokens: p.extended_context_window_tokens,
                    input_usd_per_mtok: p.input_usd_per_mtok,
                    output_usd_per_mtok: p.output_usd_per_mtok,
                    cache_read_usd_per_mtok: p.cache_read_usd_per_mtok,
                    cache_write_usd_per_mtok: p.cache_write_usd_per_mtok,
                },
                models: p.models.clone(),
            },
        );
    }
    // One line for all of them: a new user without keys sees which providers cannot work
    // before a run fails on one (each such run fails at once with missing_api_key).
    if !keyless.is_empty() {
        tracing::warn!(
            providers = %keyless.join(", "),
            "providers whose API key variable is not set: runs on them fail with missing_api_key \
             until it is set and the daemon restarted"
        );
    }
    registry.set_default(config.defaults.provider.clone());
    Ok(registry)
}

/// The daemon's data directory (a deny zone for tools, and where the token file is): `[storage]
/// data_dir`, else the SQLite database's directory, else `data` with PostgreSQL; None for an
/// in-memory SQLite database.
pub fn data_dir(storage: &crate::config::StorageConfig) -> Option<std::path::PathBuf> {
    let absolute = |p: &std::path::Path| -> Option<std::path::PathBuf> {
        if p.is_absolute() {
            Some(p.to_path_buf())
        } else {
            Some(std::env::current_dir().ok()?.join(p))
        }
    };
    if let Some(dir) = &storage.data_dir {
        return absolute(dir);
    }
    if storage.is_postgres() {
        return absolute(std::path::Path::new("data"));
    }
    let url = &storage.url;
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = path.split('?').next().unwrap_or(path);
    if path.is_empty() || path.starts_with(':') {
        return None;
    }
    let p = std::path::Path::new(path);
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(p)
    };
    p.parent().map(std::path::Path::to_path_buf)
}

/// `[engines.tinyelf]` with what only the running daemon knows: the variables holding provider
/// keys (never given to children) and whether this host can isolate a child's network.
pub(super) async fn tinyelf_config(config: &Config) -> TinyElfConfig {
    let mut c = config.engines.tinyelf.clone();
    c.web_search = config.tools.web_search.clone();
    // The providers' keys and the search backend's never reach a command.
    c.secret_env = config
        .providers
        .values()
        .filter_map(|p| p.api_key_env.clone())
        .chain(
            config
                .tools
                .web_search
                .as_ref()
                .and_then(|w| w.api_key_env.clone()),
        )
        .collect();
    let probe = Isolation::probe().await;
    match (&probe, c.shell_network) {
        (Ok(iso), Network::Isolated) => tracing::info!(
            isolation = %iso,
            "shell commands and hooks run in a network namespace of their own: the daemon's API \
             and every other network are out of their reach"
        ),
        (Err(why), Network::Isolated) => tracing::warn!(
            reason = %why,
            "cannot give shell commands and hooks a network of their own: they run in the \
             host's network and can reach the daemon's API (engines.tinyelf.shell_network = \
             \"isolated\" falls back to host)"
        ),
        (_, Network::Host) => tracing::info!(
            "engines.tinyelf.shell_network = \"host\": shell commands and hooks share the \
             host's network and can reach the daemon's API"
        ),
    }
    c.isolation = probe.ok();
    // Confined processes never see the data directory nor the configured deny paths (the
    // sandbox adds the credentials under the daemon's home).
    let deny = data_dir(&config.storage)
        .into_iter()
        .chain(c.deny_paths.iter().map(std::path::PathBuf::from))
        .collect();
    let sandbox = Sandbox::detect(&config.sandbox, deny).await;
    sandbox.log_at_start();
    c.sandbox = Some(std::sync::Arc::new(sandbox));
    c
}

/// The environment MCP stdio servers start from: the clean child environment (allow-listed
/// variables only; never the daemon's ELFGATE_* variables nor the providers' key variables), to
/// which each server's `env` is added; in the daemon's network and its sandbox.
pub(super) fn mcp_child(tinyelf: &TinyElfConfig) -> ChildSetup {
    ChildSetup {
        env: ChildEnv::from_daemon(&Default::default(), &[], &tinyelf.secret_env),
        isolation: None,
        sandbox: tinyelf.sandbox.clone(),
    }
}
