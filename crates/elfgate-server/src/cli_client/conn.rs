//! The daemon's address and token, and the client's requests and their failures.

use super::args::ClientArgs;
use super::exit;
use crate::token_file::TOKEN_FILE;
use serde_json::Value;

/// The daemon's address when neither `--url` nor ELFGATE_URL says otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7420";

/// Why a client command failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection, or a connection that broke.
    #[error("cannot reach the daemon at {url}: {source}")]
    Unreachable {
        /// The daemon's base URL.
        url: String,
        /// The transport error.
        source: reqwest::Error,
    },
    /// 401 or 403: no token, or not the daemon's.
    #[error("the daemon refused the token ({status}): {message}")]
    Auth {
        /// The HTTP status.
        status: u16,
        /// The daemon's message.
        message: String,
    },
    /// Any other error answer.
    #[error("{status}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The daemon's message.
        message: String,
    },
}

impl ClientError {
    /// The process's exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Unreachable { .. } | ClientError::Auth { .. } => exit::UNREACHABLE,
            ClientError::Refused { .. } => exit::RUN_ERROR,
        }
    }
}

/// The daemon to talk to.
#[derive(Clone)]
pub struct Conn {
    /// The base URL, without a trailing slash.
    pub base: String,
    /// Sends the token with every request.
    pub http: reqwest::Client,
}

impl Conn {
    /// The daemon from `--url` (else ELFGATE_URL, else [`DEFAULT_URL`]) and the token from
    /// `--token`, else ELFGATE_TOKEN, else the daemon's token file.
    pub fn new(args: &ClientArgs) -> anyhow::Result<Conn> {
        let base = args
            .url
            .clone()
            .or_else(|| std::env::var("ELFGATE_URL").ok())
            .unwrap_or_else(|| DEFAULT_URL.to_string())
            .trim_end_matches('/')
            .to_string();
        let token = args
            .token
            .clone()
            .or_else(|| std::env::var("ELFGATE_TOKEN").ok())
            .or_else(token_from_file);
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = token.filter(|t| !t.is_empty()) {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                reqwest::header::HeaderValue::from_str(&format!("Bearer {t}"))?,
            );
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()?;
        Ok(Conn { base, http })
    }

    /// The full URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A transport failure.
    pub fn unreachable(&self, source: reqwest::Error) -> ClientError {
        ClientError::Unreachable {
            url: self.base.clone(),
            source,
        }
    }

    /// GET `path` as JSON.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        let resp = self
            .http
            .get(self.url(path))
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        self.json(resp).await
    }

    /// POST `body` to `path`, JSON both ways.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let resp = self
            .http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        self.json(resp).await
    }

    /// The JSON body of a success, or the error answer as a [`ClientError`].
    pub async fn json(&self, resp: reqwest::Response) -> Result<Value, ClientError> {
        let status = resp.status().as_u16();
        let body: Value = resp
            .json()
            .await
            .map_err(|e| self.unreachable(e))
            .or_else(|e| {
                if status < 300 {
                    Err(e)
                } else {
                    Ok(Value::Null)
                }
            })?;
        if status < 300 {
            return Ok(body);
        }
        Err(error_answer(status, &body))
    }
}

/// The daemon's `{"error": {"code", "message"}}` answer as a [`ClientError`].
pub fn error_answer(status: u16, body: &Value) -> ClientError {
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or("no message")
        .to_string();
    if status == 401 || status == 403 {
        ClientError::Auth { status, message }
    } else {
        ClientError::Refused { status, message }
    }
}

/// The token file of the daemon that this machine's configuration describes (the default
/// configuration, ELFGATE_* variables and ELFGATE_DATABASE_URL), as the daemon would find it.
fn token_from_file() -> Option<String> {
    let config = crate::Config::load(None).ok()?;
    let dir = crate::app::data_dir(&config.storage.url)?;
    let text = std::fs::read_to_string(dir.join(TOKEN_FILE)).ok()?;
    Some(text.trim().to_string())
}
