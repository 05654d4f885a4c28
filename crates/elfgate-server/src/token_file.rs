//! The bearer token when ELFGATE_TOKEN is not set: generated at first start into a file of the
//! data directory that only the daemon's user can read, and read from there afterwards, so that
//! the project's own clients (and the user, with `cat`) find it without configuration.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The token file's name in the data directory.
pub const TOKEN_FILE: &str = "token";

/// Random bytes in a generated token (hex-encoded: twice as many characters).
const TOKEN_BYTES: usize = 32;

/// Where the daemon's token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// ELFGATE_TOKEN.
    Environment,
    /// The token file, read or just created.
    File {
        /// The file.
        path: PathBuf,
        /// Whether this start created it.
        created: bool,
    },
    /// No data directory to keep it in (an in-memory database): a new token at every start.
    Ephemeral,
}

/// The token file cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// Reading, creating or securing the file failed.
    #[error("token file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no token.
    #[error("token file {0} is empty: delete it to have a new token generated")]
    Empty(PathBuf),
    /// The system's random source failed.
    #[error("cannot read random bytes for a token: {0}")]
    Random(std::io::Error),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TokenFileError + '_ {
    move |source| TokenFileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A new random token, hex-encoded.
pub fn generate() -> Result<String, TokenFileError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(TokenFileError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Reads the token from `dir`'s token file, creating the file (mode 0600) with a new token when
/// it does not exist. A file others can read is made private again, with a warning.
pub fn load_or_create(dir: &Path) -> Result<(String, TokenSource), TokenFileError> {
    let path = dir.join(TOKEN_FILE);
    elfgate_core::private_files::create_private_dir_all(dir).map_err(io_err(dir))?;
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            restrict_to_owner(&path)?;
            let token = text.trim().to_string();
            if token.is_empty() {
                return Err(TokenFileError::Empty(path));
            }
            Ok((
                token,
                TokenSource::File {
                    path,
                    created: false,
                },
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = generate()?;
            write_new(&path, &token)?;
            Ok((
                token,
                TokenSource::File {
                    path,
                    created: true,
                },
            ))
        }
        Err(e) => Err(io_err(&path)(e)),
    }
}

#[cfg(unix)]
fn write_new(path: &Path, token: &str) -> Result<(), TokenFileError> {
    use std::os::unix::fs::OpenOptionsExt;
    // create_new: two daemons starting at once must not both write (and one overwrite the token
    // the other already printed).
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(format!("{token}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_err(path))
}

#[cfg(not(unix))]
fn write_new(path: &Path, token: &str) -> Result<(), TokenFileError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(format!("{token}\n").as_bytes())
        .map_err(io_err(path))
}

#[cfg(unix)]
fn restrict_to_owner(path: &Path) -> Result<(), TokenFileError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(io_err(path))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        tracing::warn!(path = %path.display(), mode = format!("{:o}", mode & 0o777),
            "the token file was readable by other users; made it private (0600)");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err(path))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn restrict_to_owner(_path: &Path) -> Result<(), TokenFileError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_private_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let (t1, s1) = load_or_create(dir.path()).unwrap();
        assert_eq!(t1.len(), TOKEN_BYTES * 2);
        assert!(matches!(s1, TokenSource::File { created: true, .. }));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(TOKEN_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (t2, s2) = load_or_create(dir.path()).unwrap();
        assert_eq!(t1, t2);
        assert!(matches!(s2, TokenSource::File { created: false, .. }));
    }

    #[test]
    fn empty_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TOKEN_FILE), "  \n").unwrap();
        assert!(matches!(
            load_or_create(dir.path()),
            Err(TokenFileError::Empty(_))
        ));
    }
}
