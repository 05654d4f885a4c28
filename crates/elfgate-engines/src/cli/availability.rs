//! Whether each backend's program is installed: found once at start (the configured path, else
//! the project's `tools/cli/node_modules/.bin/`, else PATH) and asked for its `--version` with a
//! timeout. GET /v1/engines shows the result; a session on a backend that is not available is
//! refused with what to install.

use super::backend::BackendProgram;
use super::settings::BackendConfig;
use elfgate_core::CliBackend;
use elfgate_tools::process::{self, ChildEnv, End, ProcessSpec};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Where the project's install script puts the pinned CLIs, relative to the daemon's working
/// directory.
pub(crate) const PROJECT_BIN: &str = "tools/cli/node_modules/.bin";

/// What the probe found of one backend.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// The program, when found.
    pub binary: Option<PathBuf>,
    /// Its version, or why it cannot be used.
    pub version: Result<String, Unusable>,
}

/// Why a backend's program cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unusable {
    /// No program at the configured path.
    #[error("{program} not found at {configured}: {hint}", hint = install_hint(*backend))]
    NotAtPath {
        /// The backend.
        backend: CliBackend,
        /// Its usual program name.
        program: &'static str,
        /// The configured path.
        configured: String,
    },
    /// No program of that name in the project folder or PATH.
    #[error("{name} not found in {PROJECT_BIN} or PATH: {hint}", hint = install_hint(*backend))]
    NotOnPath {
        /// The backend.
        backend: CliBackend,
        /// The name looked for.
        name: String,
    },
    /// The program could not be started.
    #[error("{binary} cannot be started: {why}")]
    CannotStart {
        /// The program.
        binary: String,
        /// The operating system's answer.
        why: String,
    },
    /// `--version` succeeded but printed nothing.
    #[error("`{binary} --version` printed nothing")]
    NoVersion {
        /// The program.
        binary: String,
    },
    /// `--version` failed.
    #[error("`{binary} --version` failed ({status}): {stderr}")]
    VersionFailed {
        /// The program.
        binary: String,
        /// Its exit status.
        status: String,
        /// The first line of its stderr.
        stderr: String,
    },
    /// `--version` did not answer in time.
    #[error("`{binary} --version` did not answer within {timeout:?}")]
    VersionTimeout {
        /// The program.
        binary: String,
        /// The time allowed.
        timeout: Duration,
    },
}

impl Found {
    /// The program when it can be used.
    pub(crate) fn usable(&self) -> Option<&Path> {
        self.version.as_ref().ok().and(self.binary.as_deref())
    }
}

fn install_hint(b: CliBackend) -> String {
    format!(
        "install it with scripts/install-cli-tools.sh (into {PROJECT_BIN}) or `npm install -g {}`, \
         or set engines.cli.{}.binary",
        b.package(),
        b.as_str()
    )
}

/// The program of `b` as configured: a path, or a name looked up in `cwd`'s project folder,
/// then in `path` (a PATH value).
pub(crate) fn resolve(
    b: CliBackend,
    configured: Option<&str>,
    cwd: &Path,
    path: Option<&str>,
) -> Result<PathBuf, Unusable> {
    let name = configured.unwrap_or(b.program());
    if name.contains('/') {
        let p = cwd.join(name);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(Unusable::NotAtPath {
                backend: b,
                program: b.program(),
                configured: name.to_string(),
            })
        };
    }
    let dirs = std::iter::once(cwd.join(PROJECT_BIN))
        .chain(std::env::split_paths(path.unwrap_or_default()).map(|d| cwd.join(d)));
    for dir in dirs {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Unusable::NotOnPath {
        backend: b,
        name: name.to_string(),
    })
}

/// Finds `b`'s program and asks it for its version, in `env` (its clean environment).
pub(crate) async fn probe(
    b: CliBackend,
    cfg: &BackendConfig,
    env: ChildEnv,
    timeout: Duration,
) -> Found {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let path = std::env::var("PATH").ok();
    let binary = match resolve(b, cfg.binary.as_deref(), &cwd, path.as_deref()) {
        Ok(p) => p,
        Err(why) => {
            return Found {
                binary: None,
                version: Err(why),
            };
        }
    };
    let mut spec = ProcessSpec::new(binary.display().to_string(), &cwd);
    spec.args = vec!["--version".to_string()];
    spec.env = env;
    spec.timeout = Some(timeout);
    spec.grace = Duration::from_millis(500);
    spec.stdout_cap = 4096;
    spec.stderr_cap = 4096;
    let shown = binary.display().to_string();
    let version = match process::run(&spec, &CancellationToken::new()).await {
        Err(e) => Err(Unusable::CannotStart {
            binary: shown,
            why: e.to_string(),
        }),
        Ok(out) => {
            let first = |bytes: &[u8]| {
                String::from_utf8_lossy(bytes)
                    .lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty())
                    .map(str::to_string)
            };
            match out.end {
                End::Exited(s) if s.success() => first(&out.stdout.bytes)
                    .or_else(|| first(&out.stderr.bytes))
                    .ok_or(Unusable::NoVersion { binary: shown }),
                End::Exited(s) => Err(Unusable::VersionFailed {
                    binary: shown,
                    status: s.to_string(),
                    stderr: first(&out.stderr.bytes).unwrap_or_default(),
                }),
                _ => Err(Unusable::VersionTimeout {
                    binary: shown,
                    timeout,
                }),
            }
        }
    };
    Found {
        binary: Some(binary),
        version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_folder_comes_before_path_and_a_missing_program_says_what_to_install() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join(PROJECT_BIN);
        std::fs::create_dir_all(&bin).unwrap();
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(bin.join("codex"), "").unwrap();
        std::fs::write(other.join("codex"), "").unwrap();
        std::fs::write(other.join("gemini"), "").unwrap();
        let path = other.display().to_string();
        let found = |b| resolve(b, None, dir.path(), Some(&path));
        assert_eq!(found(CliBackend::Codex).unwrap(), bin.join("codex"));
        assert_eq!(found(CliBackend::GeminiCli).unwrap(), other.join("gemini"));
        let why = found(CliBackend::ClaudeCode).unwrap_err().to_string();
        assert!(why.contains("@anthropic-ai/claude-code"), "{why}");
        assert!(why.contains("scripts/install-cli-tools.sh"), "{why}");
        let why = resolve(CliBackend::Codex, Some("./nope"), dir.path(), None)
            .unwrap_err()
            .to_string();
        assert!(why.contains("not found at ./nope"), "{why}");
    }
}
