//! The sandbox: every process the daemon starts for an agent (shell commands, hooks, ACP agents'
//! terminals, MCP stdio servers, the supervised CLIs) runs confined by the operating system,
//! with bubblewrap, or Landlock where bubblewrap cannot run: it writes only in its project (plus
//! a private /tmp and, for a CLI, its home), sees none of the deny zones and no other project
//! under the projects root, and has a network of its own unless its session shares the host's.
//! [`Sandbox::detect`] finds at start
//! whether this host can do it; [`Confinement::launch`] makes one process's command line, or
//! refuses it when it cannot be confined and the mode requires it.

mod bwrap;
mod config;
mod detect;
mod landlock;
#[cfg(test)]
mod tests;

pub use bwrap::status_inside;
pub use config::{MechanismChoice, SandboxConfig, SandboxConfigError, SandboxMode};
pub use landlock::{CallTmp, LAUNCHER_ARG, launcher_main};

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How this host confines a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mechanism {
    /// bubblewrap (`bwrap`): mount, pid, IPC and (unless shared) network namespaces.
    Bubblewrap {
        /// The program.
        program: PathBuf,
        /// What `bwrap --version` said.
        version: String,
    },
    /// Landlock (no namespaces): the daemon's own program, started as a launcher, restricts
    /// itself and executes the command.
    Landlock {
        /// The kernel's Landlock ABI.
        abi: i32,
        /// The daemon's own program.
        launcher: PathBuf,
    },
}

impl Mechanism {
    /// The name the API shows.
    pub fn name(&self) -> &'static str {
        match self {
            Mechanism::Bubblewrap { .. } => "bubblewrap",
            Mechanism::Landlock { .. } => "landlock",
        }
    }
}

/// The daemon's sandbox: its mode, the mechanism found at start (or why none was), and what every
/// confined process is kept from.
#[derive(Debug, Clone)]
pub struct Sandbox {
    mode: SandboxMode,
    mechanism: Result<Mechanism, String>,
    deny: Vec<PathBuf>,
    projects_root: Option<PathBuf>,
    writable: Vec<PathBuf>,
    hook_writable: Vec<PathBuf>,
}

/// The deny zones confined processes never see besides the data directory, relative to the
/// daemon's home: the user's keys and the credentials of the usual cloud and container tools.
pub const HOME_DENY_ZONES: &[&str] = &[
    ".ssh",
    ".aws",
    ".config/gcloud",
    ".netrc",
    ".docker",
    ".kube",
    ".gnupg",
];

/// A process that cannot be confined where the mode requires it.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "not run: it cannot be confined ({reason}), and sandbox.mode = \"required\" runs nothing unconfined"
)]
pub struct Unconfinable {
    /// Why no mechanism confines it.
    pub reason: String,
}

impl Sandbox {
    /// The sandbox of `config` with `mechanism` (or why none), hiding `deny`.
    pub fn new(
        config: &SandboxConfig,
        mechanism: Result<Mechanism, String>,
        deny: Vec<PathBuf>,
    ) -> Sandbox {
        let mode = config.mode.unwrap_or(if mechanism.is_ok() {
            SandboxMode::Required
        } else {
            SandboxMode::BestEffort
        });
        let mut deny = deny;
        deny.extend(config.extra_deny_paths.iter().cloned());
        Sandbox {
            mode,
            mechanism,
            deny,
            projects_root: config.projects_root.clone(),
            writable: config.writable_paths.clone(),
            hook_writable: config.hook_writable_paths.clone(),
        }
    }

    /// Finds the mechanism of `config` on this host (nothing is looked for when the mode is off)
    /// and makes the sandbox hiding `deny` (the data directory, the configured deny paths) and
    /// [`HOME_DENY_ZONES`] of the daemon's home.
    pub async fn detect(config: &SandboxConfig, mut deny: Vec<PathBuf>) -> Sandbox {
        if let Some(home) = std::env::var_os("HOME") {
            deny.extend(HOME_DENY_ZONES.iter().map(|z| Path::new(&home).join(z)));
        }
        let mechanism = match (config.mode, config.mechanism) {
            (Some(SandboxMode::Off), _) => Err("sandbox.mode = \"off\"".to_string()),
            (_, MechanismChoice::Bwrap) => detect::bubblewrap(&config.bwrap).await,
            (_, MechanismChoice::Landlock) => detect::landlock().await,
            (_, MechanismChoice::Auto) => match detect::bubblewrap(&config.bwrap).await {
                Ok(m) => Ok(m),
                Err(no_bwrap) => detect::landlock()
                    .await
                    .map_err(|no_landlock| format!("{no_bwrap}; Landlock: {no_landlock}")),
            },
        };
        Sandbox::new(config, mechanism, deny)
    }

    /// Its mode.
    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    /// The mechanism in effect, or why there is none.
    pub fn mechanism(&self) -> Result<&Mechanism, &str> {
        self.mechanism.as_ref().map_err(String::as_str)
    }

    /// The directories the operator's hooks may write besides their project.
    pub fn hook_writable_paths(&self) -> &[PathBuf] {
        &self.hook_writable
    }

    /// The paths confined processes never see (besides other projects under the projects root).
    pub fn deny_zones(&self) -> &[PathBuf] {
        &self.deny
    }

    /// What `GET /v1/engines` and a run's `init` say of it: `mode`, `mechanism` (`bubblewrap`,
    /// `landlock`, or `none` with the `reason`).
    pub fn facts(&self) -> serde_json::Value {
        let confines = self.mode != SandboxMode::Off;
        match (&self.mechanism, confines) {
            (Ok(m), true) => serde_json::json!({"mode": self.mode.as_str(), "mechanism": m.name()}),
            (Err(why), _) => serde_json::json!({
                "mode": self.mode.as_str(),
                "mechanism": "none",
                "reason": why,
            }),
            (Ok(_), false) => serde_json::json!({"mode": "off", "mechanism": "none"}),
        }
    }

    /// [`Self::facts`] of `sandbox`; without one nothing is confined (`off`).
    pub fn facts_of(sandbox: Option<&Arc<Sandbox>>) -> serde_json::Value {
        match sandbox {
            Some(s) => s.facts(),
            None => serde_json::json!({"mode": "off", "mechanism": "none"}),
        }
    }

    /// Says at start which mechanism is in effect; loudly when nothing is confined.
    pub fn log_at_start(&self) {
        match (self.mode, &self.mechanism) {
            (SandboxMode::Off, _) => tracing::warn!(
                "SANDBOX OFF (sandbox.mode = \"off\"): shell commands, hooks, ACP terminals, MCP \
                 servers and CLIs run unconfined: they can read every file of the daemon's user \
                 (keys, the database of every session) and write anywhere it can"
            ),
            (mode, Ok(m)) => tracing::info!(
                mode = mode.as_str(),
                mechanism = %m.name(),
                deny_zones = self.deny.len(),
                "commands started for agents run confined: they write only in their project, \
                 see no deny zone and no other project"
            ),
            (SandboxMode::Required, Err(why)) => tracing::error!(
                reason = %why,
                "no sandbox mechanism on this host and sandbox.mode = \"required\": every \
                 command, hook, MCP server and CLI of an agent will be refused"
            ),
            (SandboxMode::BestEffort, Err(why)) => tracing::warn!(
                reason = %why,
                "no sandbox mechanism on this host (sandbox.mode = \"best_effort\"): commands \
                 started for agents run unconfined"
            ),
        }
    }

    /// The profile of a process working in `project` (None: nothing writable but its /tmp).
    pub fn confine(self: &Arc<Self>, project: Option<&Path>) -> Confinement {
        Confinement {
            sandbox: self.clone(),
            project: project.map(Path::to_path_buf),
            writable: Vec::new(),
            readable: Vec::new(),
        }
    }
}

/// One process's profile.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// The daemon's sandbox.
    pub sandbox: Arc<Sandbox>,
    /// Its project: writable, and the one shown under the projects root.
    pub project: Option<PathBuf>,
    /// Other writable directories (a CLI's home).
    pub writable: Vec<PathBuf>,
    /// Paths shown read-only even under the private /tmp or a hidden zone (an MCP server's
    /// script).
    pub readable: Vec<PathBuf>,
}

/// How a process is started.
#[derive(Debug)]
pub enum Launch {
    /// Through the mechanism: this program with these arguments.
    Confined {
        /// The program (bwrap).
        program: String,
        /// Its arguments, the process's own command line at their end.
        args: Vec<String>,
    },
    /// Through the Landlock launcher: this program with these arguments, in the network the
    /// process would have unconfined.
    Restricted {
        /// The launcher (the daemon's own program).
        program: String,
        /// Its arguments, the process's own command line at their end.
        args: Vec<String>,
        /// Its private temporary directory, to keep until it has ended.
        tmp: CallTmp,
    },
    /// As it is (mode off, or best_effort without a mechanism).
    Unconfined,
}

impl Confinement {
    /// How to start `program args` in `cwd` (`private_network`: in a network namespace of its
    /// own). Err when it cannot be confined and the mode is required.
    pub fn launch(
        &self,
        program: &str,
        args: &[String],
        cwd: &Path,
        private_network: bool,
    ) -> Result<Launch, Unconfinable> {
        let sandbox = &self.sandbox;
        match (sandbox.mode, &sandbox.mechanism) {
            (SandboxMode::Off, _) => Ok(Launch::Unconfined),
            (_, Ok(Mechanism::Bubblewrap { program: bwrap, .. })) => {
                let profile = bwrap::Profile {
                    deny: &sandbox.deny,
                    projects_root: sandbox.projects_root.as_deref(),
                    writable: self
                        .project
                        .iter()
                        .chain(self.writable.iter())
                        .chain(sandbox.writable.iter())
                        .map(PathBuf::as_path)
                        .collect(),
                    readable: self.readable.iter().map(PathBuf::as_path).collect(),
                    private_network,
                };
                Ok(Launch::Confined {
                    program: bwrap.to_string_lossy().into_owned(),
                    args: bwrap::arguments(&profile, program, args, cwd),
                })
            }
            (_, Ok(Mechanism::Landlock { abi, launcher })) => {
                let unconfinable = |reason: String| Unconfinable { reason };
                let tmp = CallTmp::create().map_err(unconfinable)?;
                let profile = self.landlock_profile(*abi, &tmp);
                let args =
                    landlock::launcher_args(&profile, program, args).map_err(unconfinable)?;
                Ok(Launch::Restricted {
                    program: launcher.to_string_lossy().into_owned(),
                    args,
                    tmp,
                })
            }
            (SandboxMode::BestEffort, Err(why)) => {
                tracing::warn!(
                    program,
                    reason = %why,
                    "running unconfined (sandbox.mode = \"best_effort\")"
                );
                Ok(Launch::Unconfined)
            }
            (SandboxMode::Required, Err(why)) => Err(Unconfinable {
                reason: why.clone(),
            }),
        }
    }
}

impl Confinement {
    /// What the Landlock launcher is told: the paths resolved now (symbolic links followed, the
    /// missing ones left out), the projects root hidden like a deny zone (the project, writable,
    /// is the one part of it granted).
    fn landlock_profile(&self, abi: i32, tmp: &CallTmp) -> landlock::LandlockProfile {
        let sandbox = &self.sandbox;
        let real = |paths: &mut dyn Iterator<Item = &PathBuf>| -> Vec<PathBuf> {
            paths
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .collect()
        };
        let mut writable = real(
            &mut self
                .project
                .iter()
                .chain(self.writable.iter())
                .chain(sandbox.writable.iter()),
        );
        writable.push(tmp.path().to_path_buf());
        landlock::LandlockProfile {
            abi,
            hidden: real(&mut sandbox.deny.iter().chain(sandbox.projects_root.iter())),
            writable,
            readable: real(&mut self.readable.iter()),
            tmp: tmp.path().to_path_buf(),
        }
    }
}
