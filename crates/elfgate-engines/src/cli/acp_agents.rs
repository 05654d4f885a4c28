//! The configured ACP agents (`[engines.cli.acp.agents]`): each one's program found at start,
//! the agent a session names checked, and the acp backend as GET /v1/engines lists it.

use super::CliEngine;
use super::settings::AcpAgentConfig;
use elfgate_core::CliBackend;
use std::path::{Path, PathBuf};

/// Why an ACP session cannot start (a 422).
#[derive(Debug, Clone, thiserror::Error)]
pub enum AcpStartError {
    /// No agent named.
    #[error(
        "acpAgent: cliBackend 'acp' needs the name of a configured agent ({})",
        configured(.0)
    )]
    NoAgent(Vec<String>),
    /// An agent that is not configured.
    #[error("acpAgent: no agent '{name}' is configured ({})", configured(.known))]
    UnknownAgent {
        /// The name given.
        name: String,
        /// The configured ones.
        known: Vec<String>,
    },
    /// The agent's program cannot be found.
    #[error("acpAgent: agent '{name}' is not available: {why}")]
    Unavailable {
        /// The agent.
        name: String,
        /// Why.
        why: String,
    },
    /// cliArgs on an ACP session.
    #[error(
        "cliArgs: an ACP agent's arguments are its configuration's (engines.cli.acp.agents.NAME.args)"
    )]
    CliArgs,
    /// A provider for an agent that sets its provider up itself.
    #[error(
        "providerId: agent '{0}' has no provider_setup in engines.cli.acp.agents: it picks its \
         provider itself"
    )]
    NoProviderSetup(String),
    /// The provider cannot serve the agent's provider set-up.
    #[error(transparent)]
    Provider(super::ProviderRefused),
}

fn configured(names: &[String]) -> String {
    if names.is_empty() {
        "none is configured under [engines.cli.acp.agents]".to_string()
    } else {
        format!("configured: {}", names.join(", "))
    }
}

/// A configured agent's program: found once at start.
pub(crate) type AgentPrograms = std::collections::BTreeMap<String, Result<PathBuf, String>>;

/// Finds each configured agent's program (a path, or a name in the project's CLI folder or PATH).
pub(crate) fn find_agents(
    agents: &std::collections::BTreeMap<String, AcpAgentConfig>,
) -> AgentPrograms {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let path = std::env::var("PATH").ok();
    agents
        .iter()
        .map(|(name, a)| {
            let found = super::availability::resolve(
                CliBackend::Acp,
                Some(&a.command),
                &cwd,
                path.as_deref(),
            )
            .map_err(|e| e.to_string());
            match &found {
                Ok(p) => {
                    tracing::info!(agent = %name, program = %p.display(), "ACP agent available");
                }
                Err(why) => tracing::info!(agent = %name, %why, "ACP agent not available"),
            }
            (name.clone(), found)
        })
        .collect()
}

impl CliEngine {
    /// The agent a request names, checked: configured and its program found.
    pub(crate) fn acp_agent(
        &self,
        name: Option<&str>,
    ) -> Result<(&AcpAgentConfig, &Path), AcpStartError> {
        let known = || self.config.acp.agents.keys().cloned().collect::<Vec<_>>();
        let name = name.ok_or_else(|| AcpStartError::NoAgent(known()))?;
        let agent =
            self.config
                .acp
                .agents
                .get(name)
                .ok_or_else(|| AcpStartError::UnknownAgent {
                    name: name.to_string(),
                    known: known(),
                })?;
        match self.acp_programs.get(name) {
            Some(Ok(p)) => Ok((agent, p.as_path())),
            Some(Err(why)) => Err(AcpStartError::Unavailable {
                name: name.to_string(),
                why: why.clone(),
            }),
            None => Err(AcpStartError::Unavailable {
                name: name.to_string(),
                why: "it was not looked for".to_string(),
            }),
        }
    }

    /// The acp backend as GET /v1/engines lists it: available when one of its agents is, with
    /// the agents that are, and why the others are not.
    pub(crate) fn acp_backend_info(&self) -> elfgate_core::BackendInfo {
        let usable: Vec<String> = self
            .acp_programs
            .iter()
            .filter(|(_, p)| p.is_ok())
            .map(|(n, _)| n.clone())
            .collect();
        let unusable: Vec<String> = self
            .acp_programs
            .iter()
            .filter_map(|(n, p)| p.as_ref().err().map(|why| format!("{n}: {why}")))
            .collect();
        let reason = if self.acp_programs.is_empty() {
            Some("no agent is configured under [engines.cli.acp.agents]".to_string())
        } else if unusable.is_empty() {
            None
        } else {
            Some(unusable.join("; "))
        };
        elfgate_core::BackendInfo {
            name: CliBackend::Acp,
            available: !usable.is_empty(),
            binary: None,
            version: None,
            reason,
            max_concurrent: self.limits.max(CliBackend::Acp),
            agents: Some(usable),
        }
    }

    /// Refuses what an ACP session cannot have.
    pub(crate) fn acp_start_problem(
        &self,
        req: &elfgate_core::StartRequest<'_>,
    ) -> Result<(), AcpStartError> {
        let (agent, _) = self.acp_agent(req.acp_agent)?;
        if req.cli_args.is_some_and(|a| !a.is_empty()) {
            return Err(AcpStartError::CliArgs);
        }
        match agent.provider_setup {
            None if req.provider_id.is_some() => Err(AcpStartError::NoProviderSetup(
                req.acp_agent.unwrap_or_default().to_string(),
            )),
            None => Ok(()),
            Some(b) => self
                .config
                .route_for(b, req.provider_id.or(agent.provider.as_deref()))
                .map(|_| ())
                .map_err(AcpStartError::Provider),
        }
    }
}
