//! Where the JWKS is read from: a file, or a URL fetched through the outbound guard (checked
//! addresses only, public ones unless `auth.jwt.allow_private_addresses`), at most
//! [`MAX_JWKS_BYTES`] either way.

use super::keyset::{KeySet, KeySetError};
use crate::config::{JwtConfig, MAX_JWKS_BYTES};
use elfgate_tools::outbound::{AddressPolicy, GuardedClient};
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a JWKS URL has to answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Redirects followed (each target checked as the first).
const MAX_REDIRECTS: usize = 3;

/// Why the JWKS could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file.
    #[error("cannot read {path}: {why}")]
    File {
        /// The file.
        path: PathBuf,
        /// The system's error.
        why: std::io::Error,
    },
    /// The URL's fetch.
    #[error("cannot fetch {url}: {why}")]
    Fetch {
        /// The URL.
        url: String,
        /// What failed.
        why: String,
    },
    /// More than [`MAX_JWKS_BYTES`].
    #[error("the JWKS is larger than {MAX_JWKS_BYTES} bytes")]
    TooLarge,
    /// Not a usable key set.
    #[error("the JWKS {0}")]
    Keys(#[from] KeySetError),
}

/// `jwks_file` or `jwks_url`.
pub enum JwksSource {
    /// A file.
    File(PathBuf),
    /// A URL, and the guarded client that fetches it.
    Url {
        /// The URL.
        url: String,
        /// The client.
        client: GuardedClient,
    },
}

impl JwksSource {
    /// The source `config` names (one of the two, as its check made sure).
    pub fn new(config: &JwtConfig) -> Self {
        match (&config.jwks_file, &config.jwks_url) {
            (Some(path), _) => JwksSource::File(path.clone()),
            (None, url) => JwksSource::Url {
                url: url.clone().unwrap_or_default(),
                client: GuardedClient::new(
                    AddressPolicy {
                        allow_private: config.allow_private_addresses,
                        allow_setting: "auth.jwt.allow_private_addresses",
                        verb: "fetch the JWKS from",
                    },
                    FETCH_TIMEOUT,
                    "elfgate-jwks",
                ),
            },
        }
    }

    /// A file's keys, read now (None for a URL: it is fetched when a token first needs it).
    pub fn read_now(&self) -> Option<Result<KeySet, ReadError>> {
        match self {
            JwksSource::File(path) => Some(parse_file(path, std::fs::read(path))),
            JwksSource::Url { .. } => None,
        }
    }

    /// The keys as the source has them now.
    pub async fn read(&self) -> Result<KeySet, ReadError> {
        match self {
            JwksSource::File(path) => parse_file(path, tokio::fs::read(path).await),
            JwksSource::Url { url, client } => {
                let fail = |why: String| ReadError::Fetch {
                    url: url.clone(),
                    why,
                };
                let mut resp = client
                    .get(url, MAX_REDIRECTS, &CancellationToken::new())
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                if !resp.status().is_success() {
                    return Err(fail(format!("status {}", resp.status())));
                }
                let mut body = Vec::new();
                while let Some(chunk) = resp.chunk().await.map_err(|e| fail(e.to_string()))? {
                    if body.len() + chunk.len() > MAX_JWKS_BYTES {
                        return Err(ReadError::TooLarge);
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(KeySet::parse(&body)?)
            }
        }
    }
}

fn parse_file(path: &std::path::Path, read: std::io::Result<Vec<u8>>) -> Result<KeySet, ReadError> {
    let bytes = read.map_err(|why| ReadError::File {
        path: path.to_path_buf(),
        why,
    })?;
    if bytes.len() > MAX_JWKS_BYTES {
        return Err(ReadError::TooLarge);
    }
    Ok(KeySet::parse(&bytes)?)
}
