//! `[sandbox]`: how the processes started for an agent are confined.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What happens to a process the daemon cannot confine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// It is not run: the call fails with the reason.
    Required,
    /// It runs unconfined, with a warning per process.
    BestEffort,
    /// Nothing is confined (logged loudly at start).
    Off,
}

impl SandboxMode {
    /// The name the configuration and the API use.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Required => "required",
            SandboxMode::BestEffort => "best_effort",
            SandboxMode::Off => "off",
        }
    }
}

/// Which mechanism confines processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MechanismChoice {
    /// bubblewrap when it runs here, else Landlock when the kernel has it.
    #[default]
    Auto,
    /// bubblewrap only.
    Bwrap,
    /// Landlock only.
    Landlock,
}

/// `[sandbox]` as configured.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// required, best_effort or off; unset: required when the daemon finds a mechanism at start,
    /// best_effort otherwise.
    pub mode: Option<SandboxMode>,
    /// auto, bwrap or landlock.
    pub mechanism: MechanismChoice,
    /// A directory holding the projects of several sessions: a confined process sees none of it
    /// but its own session's project.
    pub projects_root: Option<PathBuf>,
    /// Paths hidden from confined processes on top of the built-in deny zones.
    pub extra_deny_paths: Vec<PathBuf>,
    /// Directories every confined process may write besides its project (a shared build
    /// cache, say).
    pub writable_paths: Vec<PathBuf>,
    /// Directories the operator's hooks may write besides the project (their logs, say).
    pub hook_writable_paths: Vec<PathBuf>,
    /// The bubblewrap program (a name looked up in PATH, or a path).
    pub bwrap: String,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            mode: None,
            mechanism: MechanismChoice::Auto,
            projects_root: None,
            extra_deny_paths: Vec::new(),
            writable_paths: Vec::new(),
            hook_writable_paths: Vec::new(),
            bwrap: "bwrap".into(),
        }
    }
}

/// A `[sandbox]` value that parses but cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxConfigError {
    /// A path that must be absolute is not.
    #[error("sandbox.{key}: '{path}' must be an absolute path")]
    NotAbsolute {
        /// The key.
        key: &'static str,
        /// The value.
        path: String,
    },
    /// The projects root is `/`: it would hide the whole file system.
    #[error(
        "sandbox.projects_root: '/' would hide the whole file system; name the directory that holds the projects"
    )]
    RootAsProjectsRoot,
    /// No bubblewrap program named.
    #[error("sandbox.bwrap: must name the bubblewrap program (default \"bwrap\")")]
    EmptyBwrap,
}

impl SandboxConfig {
    /// Values that parse but cannot be used, named by their key.
    pub fn validate(&self) -> Result<(), SandboxConfigError> {
        if let Some(root) = &self.projects_root {
            if !root.is_absolute() {
                return Err(SandboxConfigError::NotAbsolute {
                    key: "projects_root",
                    path: root.display().to_string(),
                });
            }
            if root.parent().is_none() {
                return Err(SandboxConfigError::RootAsProjectsRoot);
            }
        }
        for (key, paths) in [
            ("extra_deny_paths", &self.extra_deny_paths),
            ("writable_paths", &self.writable_paths),
            ("hook_writable_paths", &self.hook_writable_paths),
        ] {
            if let Some(p) = paths.iter().find(|p| !p.is_absolute()) {
                return Err(SandboxConfigError::NotAbsolute {
                    key,
                    path: p.display().to_string(),
                });
            }
        }
        if self.bwrap.trim().is_empty() {
            return Err(SandboxConfigError::EmptyBwrap);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_and_an_empty_program_are_refused_by_key() {
        let ok = SandboxConfig::default();
        assert_eq!(ok.validate(), Ok(()));
        let rel = SandboxConfig {
            projects_root: Some("projects".into()),
            ..SandboxConfig::default()
        };
        assert!(
            rel.validate()
                .unwrap_err()
                .to_string()
                .contains("sandbox.projects_root")
        );
        let root = SandboxConfig {
            projects_root: Some("/".into()),
            ..SandboxConfig::default()
        };
        assert_eq!(root.validate(), Err(SandboxConfigError::RootAsProjectsRoot));
        let deny = SandboxConfig {
            extra_deny_paths: vec!["secrets".into()],
            ..SandboxConfig::default()
        };
        assert!(
            deny.validate()
                .unwrap_err()
                .to_string()
                .contains("sandbox.extra_deny_paths")
        );
        let bwrap = SandboxConfig {
            bwrap: " ".into(),
            ..SandboxConfig::default()
        };
        assert_eq!(bwrap.validate(), Err(SandboxConfigError::EmptyBwrap));
    }
}
