//! `[cluster]`: this daemon as one node of a fleet, its lease and drain, and the fleet's secret.
//! The NATS connection's keys are checked in `nats_access`.

use super::{Config, ConfigError, StorageConfig, nats_access};
use serde::Deserialize;

/// The shortest lease a node may hold, in seconds.
pub const MIN_LEASE_SECS: u64 = 2;

/// `[cluster]`: this daemon is one node of a fleet that shares a PostgreSQL store and a NATS bus.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The NATS server (nats://host:port).
    pub nats_url: String,
    /// This node's id; by default derived from the host name and the bound port.
    #[serde(default)]
    pub node_id: Option<String>,
    /// Seconds a node's ownership of a session lasts without a heartbeat.
    #[serde(default = "default_lease_secs")]
    pub lease_secs: u64,
    /// Seconds between a node's heartbeats.
    #[serde(default = "default_heartbeat_secs")]
    pub heartbeat_secs: u64,
    /// Seconds a stopping node (SIGTERM) lets its active runs finish before it interrupts the
    /// rest with finish reason `node_shutdown`.
    #[serde(default = "default_drain_secs")]
    pub drain_secs: u64,
    /// Where other nodes and operators reach this node (`GET /v1/cluster`); by default
    /// `http://` and `server.bind`, which says nothing when bound to every interface.
    #[serde(default)]
    pub address: Option<String>,
    /// The user this node connects to NATS as (with `nats_password_env`).
    #[serde(default)]
    pub nats_user: Option<String>,
    /// The variable holding the NATS user's password.
    #[serde(default)]
    pub nats_password_env: Option<String>,
    /// The variable holding the NATS server's token (`--auth`).
    #[serde(default)]
    pub nats_token_env: Option<String>,
    /// A NATS credentials file (`.creds`: a user JWT and its NKey seed).
    #[serde(default)]
    pub nats_creds_file: Option<std::path::PathBuf>,
    /// A file holding the NKey seed (`SU…`) this node authenticates with.
    #[serde(default)]
    pub nats_nkey_file: Option<std::path::PathBuf>,
    /// The CA (PEM) the NATS server's certificate must chain to; set, the connection is TLS.
    #[serde(default)]
    pub nats_tls_ca: Option<std::path::PathBuf>,
    /// This node's client certificate (PEM) for NATS servers that verify clients.
    #[serde(default)]
    pub nats_tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[serde(default)]
    pub nats_tls_key: Option<std::path::PathBuf>,
    /// The name of the environment variable holding the fleet's secret, which signs every
    /// message a node puts on NATS (docs/security.md, "A fleet"); required.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Or the file holding it (readable by the daemon's user alone).
    #[serde(default)]
    pub secret_file: Option<std::path::PathBuf>,
    /// The secret itself, read from `secret_env` at load.
    #[serde(skip)]
    pub secret: FleetSecret,
}

/// The fleet's secret, from the variable `secret_env` names or the file `secret_file`: exactly
/// one is required, and the secret must be long enough that it cannot be guessed (a blank or
/// short one is a mistake, refused rather than signed with). A file must be readable by the
/// daemon's user alone, as the token file is.
pub(super) fn read_fleet_secret(cluster: &ClusterConfig) -> Result<FleetSecret, ConfigError> {
    let min = crate::fleet::signing::MIN_SECRET_BYTES;
    let (value, from) = match (&cluster.secret_env, &cluster.secret_file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::Invalid(
                "cluster.secret_env and cluster.secret_file: give one of them, not both".into(),
            ));
        }
        (None, None) => {
            return Err(ConfigError::Invalid(format!(
                "cluster.secret_env (or cluster.secret_file) is required: the fleet's secret \
                 (at least {min} bytes, the same on every node), which signs every message on \
                 the bus"
            )));
        }
        (Some(name), None) => match std::env::var(name) {
            Ok(v) => (v, format!("cluster.secret_env: the variable {name}")),
            Err(_) => {
                return Err(ConfigError::Invalid(format!(
                    "cluster.secret_env: the variable {name} is not set (or not UTF-8)"
                )));
            }
        },
        (None, Some(path)) => {
            let shown = path.display();
            let meta = std::fs::metadata(path)
                .map_err(|e| ConfigError::Invalid(format!("cluster.secret_file '{shown}': {e}")))?;
            if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o077 != 0 {
                return Err(ConfigError::Invalid(format!(
                    "cluster.secret_file '{shown}' is readable by other users: chmod 600 it"
                )));
            }
            let v = std::fs::read_to_string(path)
                .map_err(|e| ConfigError::Invalid(format!("cluster.secret_file '{shown}': {e}")))?;
            (v, format!("cluster.secret_file '{shown}'"))
        }
    };
    if value.trim().len() < min {
        return Err(ConfigError::Invalid(format!(
            "{from} holds fewer than {min} bytes (blank or short): set a long random secret, \
             e.g. `openssl rand -hex 32`"
        )));
    }
    Ok(FleetSecret(value.trim().to_string()))
}

/// The fleet's shared secret; never printed.
#[derive(Clone, Default)]
pub struct FleetSecret(pub String);

impl std::fmt::Debug for FleetSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetSecret(…)")
    }
}

fn default_drain_secs() -> u64 {
    30
}

/// The longest drain a node may be given.
pub const MAX_DRAIN_SECS: u64 = 3600;

fn default_lease_secs() -> u64 {
    5
}

fn default_heartbeat_secs() -> u64 {
    1
}

impl ClusterConfig {
    /// `[cluster]` fits the store and its keys fit together.
    pub(super) fn check(&self, storage: &StorageConfig) -> Result<(), ConfigError> {
        if storage.is_sqlite() {
            return Err(ConfigError::Invalid(
                "[cluster] needs storage.url = \"postgres://…\": a SQLite database cannot be \
                 shared by several nodes (remove [cluster] to run a single node on SQLite)"
                    .into(),
            ));
        }
        nats_access::check(self)?;
        if let Some(id) = &self.node_id
            && (id.is_empty()
                || id.len() > 64
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Err(ConfigError::Invalid(format!(
                "cluster.node_id '{id}' must be 1 to 64 letters, digits, '-' or '_' (it names \
                 the node's NATS subjects)"
            )));
        }
        if let Some(address) = &self.address
            && !(address.starts_with("http://") || address.starts_with("https://"))
        {
            return Err(ConfigError::Invalid(format!(
                "cluster.address '{address}' must be a URL starting with http:// or https://"
            )));
        }
        if self.drain_secs > MAX_DRAIN_SECS {
            return Err(ConfigError::Invalid(format!(
                "cluster.drain_secs must be at most {MAX_DRAIN_SECS}"
            )));
        }
        if self.heartbeat_secs == 0 {
            return Err(ConfigError::Invalid(
                "cluster.heartbeat_secs must be positive".into(),
            ));
        }
        if self.lease_secs < MIN_LEASE_SECS || self.lease_secs < 2 * self.heartbeat_secs {
            return Err(ConfigError::Invalid(format!(
                "cluster.lease_secs ({}) must be at least {MIN_LEASE_SECS} and at least twice \
                 cluster.heartbeat_secs ({}): a lease must outlive a missed heartbeat",
                self.lease_secs, self.heartbeat_secs
            )));
        }
        Ok(())
    }
}

impl Config {
    /// This daemon as a node of the fleet (`[cluster]`), None for a single node. The node id is
    /// `cluster.node_id`, else the host name and the bound port (`HOST-PORT`); with port 0 (a
    /// port the system picks) it must be given.
    pub fn fleet_member(&self) -> Result<Option<elfgate_store::FleetMember>, ConfigError> {
        let Some(cluster) = &self.cluster else {
            return Ok(None);
        };
        let bind = self.bind_addr()?;
        let node_id = match &cluster.node_id {
            Some(id) => id.clone(),
            None if bind.port() == 0 => {
                return Err(ConfigError::Invalid(
                    "cluster.node_id is required when server.bind's port is 0 (the default id is \
                     the host name and the port)"
                        .into(),
                ));
            }
            None => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| {
                        h.trim()
                            .chars()
                            .map(|c| {
                                if c.is_ascii_alphanumeric() || c == '-' {
                                    c
                                } else {
                                    '_'
                                }
                            })
                            .collect::<String>()
                    })
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| "node".into());
                format!("{host}-{}", bind.port())
            }
        };
        Ok(Some(elfgate_store::FleetMember {
            node_id,
            address: cluster
                .address
                .clone()
                .unwrap_or_else(|| format!("http://{bind}")),
            version: env!("CARGO_PKG_VERSION").into(),
            lease: std::time::Duration::from_secs(cluster.lease_secs),
            heartbeat: std::time::Duration::from_secs(cluster.heartbeat_secs),
        }))
    }
}
