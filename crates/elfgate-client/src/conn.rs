//! The daemon's address and token, and the client's requests and their failures.

use super::args::ConnArgs;
use super::exit;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The daemon's address when neither `--url` nor ELFGATE_URL says otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7420";

/// Why a client command failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection, or a connection that broke.
    #[error("{}", unreachable_message(url, source))]
    Unreachable {
        /// The daemon's base URL.
        url: String,
        /// The transport error.
        source: reqwest::Error,
    },
    /// 401: no token, or one the daemon does not know (unknown, expired, revoked).
    #[error("the daemon refused the token {from} ({status}): {message}")]
    Auth {
        /// The HTTP status.
        status: u16,
        /// The daemon's message.
        message: String,
        /// Where the token came from.
        from: String,
    },
    /// 401 and the client had no token to send: says where it looked.
    #[error(
        "the daemon wants a token and the client found none: no --token, no ELFGATE_TOKEN, and {looked} \
         (run the client where the daemon runs, with the same ELFGATE_DATABASE_URL, or pass \
         --token \"$(cat DATA_DIR/token)\")"
    )]
    NoToken {
        /// Where the token file was looked for, as a phrase.
        looked: String,
    },
    /// Any other error answer.
    #[error("{status}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The daemon's message.
        message: String,
    },
    /// A success whose body is not the API's answer (another server on that port, or a daemon
    /// of another version).
    #[error("the answer of {path} is not the API's: {source}")]
    Unexpected {
        /// The request's path.
        path: String,
        /// What did not fit.
        source: serde_json::Error,
    },
    /// A token that cannot be sent in a header (a control character, say).
    #[error("the token cannot be sent in an HTTP header: {0}")]
    BadToken(#[from] reqwest::header::InvalidHeaderValue),
    /// The HTTP client could not be built.
    #[error("cannot set up the HTTP client: {0}")]
    Setup(#[source] reqwest::Error),
}

/// "could not connect to URL: connection refused" for a failed connect (the cause is the
/// innermost error of the chain, which reqwest's own message leaves out), else "lost the
/// connection to URL: cause".
fn unreachable_message(url: &str, e: &reqwest::Error) -> String {
    let mut cause: Option<String> = None;
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        cause = Some(match s.downcast_ref::<std::io::Error>() {
            // The kind's own words ("connection refused"), not "Connection refused (os error 111)".
            Some(io) if io.kind() != std::io::ErrorKind::Other => io.kind().to_string(),
            _ => s.to_string(),
        });
        source = s.source();
    }
    let cause = cause.unwrap_or_else(|| e.to_string());
    if e.is_connect() {
        format!("could not connect to {url}: {cause}")
    } else if e.is_timeout() {
        format!("no answer from {url} in time: {cause}")
    } else {
        format!("lost the connection to {url}: {cause}")
    }
}

/// Where the client's token came from, to say so when it is refused or missing.
#[derive(Debug, Clone)]
pub enum TokenOrigin {
    /// `--token`.
    Flag,
    /// ELFGATE_TOKEN.
    Env,
    /// The daemon's token file at this path.
    File(std::path::PathBuf),
    /// None found; the token file was looked for here (None: the configuration names no data
    /// directory, or could not be read).
    Missing(Option<std::path::PathBuf>),
}

impl ClientError {
    /// The process's exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Unreachable { .. }
            | ClientError::Auth { .. }
            | ClientError::NoToken { .. } => exit::UNREACHABLE,
            ClientError::Refused { .. } | ClientError::Unexpected { .. } => exit::RUN_ERROR,
            ClientError::BadToken(_) => exit::USAGE,
            ClientError::Setup(_) => exit::UNREACHABLE,
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
    /// Where the token came from.
    pub token_origin: TokenOrigin,
}

impl Conn {
    /// The daemon from `--url` (else ELFGATE_URL, else [`DEFAULT_URL`]) and the token from
    /// `--token`, else ELFGATE_TOKEN, else the daemon's token file at `token_file`.
    pub fn new(
        args: &ConnArgs,
        token_file: Option<std::path::PathBuf>,
    ) -> Result<Conn, ClientError> {
        let base = args
            .url
            .clone()
            .or_else(|| std::env::var("ELFGATE_URL").ok())
            .unwrap_or_else(|| DEFAULT_URL.to_string())
            .trim_end_matches('/')
            .to_string();
        let (token, token_origin) = match (&args.token, std::env::var("ELFGATE_TOKEN")) {
            (Some(t), _) => (Some(t.clone()), TokenOrigin::Flag),
            (None, Ok(t)) if !t.is_empty() => (Some(t), TokenOrigin::Env),
            (None, _) => match token_file {
                Some(path) => match std::fs::read_to_string(&path) {
                    Ok(text) => (Some(text.trim().to_string()), TokenOrigin::File(path)),
                    Err(_) => (None, TokenOrigin::Missing(Some(path))),
                },
                None => (None, TokenOrigin::Missing(None)),
            },
        };
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
            .build()
            .map_err(ClientError::Setup)?;
        Ok(Conn {
            base,
            http,
            token_origin,
        })
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

    /// GET `path`: its answer as `T` (`Value` for the raw JSON).
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let resp = self
            .http
            .get(self.url(path))
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        self.answer(path, resp).await
    }

    /// POST `body` to `path`, JSON both ways: the answer as `T`.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let resp = self
            .http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        self.answer(path, resp).await
    }

    /// DELETE `path`: Ok on any success, whatever its body.
    pub async fn delete(&self, path: &str) -> Result<(), ClientError> {
        let resp = self
            .http
            .delete(self.url(path))
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = resp.status().as_u16();
        if status < 300 {
            return Ok(());
        }
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        Err(self.error_answer(status, &body))
    }

    /// The body of a success as `T`, or the error answer as a [`ClientError`].
    async fn answer<T: DeserializeOwned>(
        &self,
        path: &str,
        resp: reqwest::Response,
    ) -> Result<T, ClientError> {
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
            return serde_json::from_value(body).map_err(|source| ClientError::Unexpected {
                path: path.split('?').next().unwrap_or(path).to_string(),
                source,
            });
        }
        Err(self.error_answer(status, &body))
    }

    /// The daemon's `{"error": {"code", "message"}}` answer as a [`ClientError`]; a refused or
    /// missing token says where the client looked for it. A 403 is not about the token: the key
    /// is known and may not do this (a viewer's prompt, a scope it lacks).
    pub fn error_answer(&self, status: u16, body: &Value) -> ClientError {
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("no message")
            .to_string();
        if status != 401 {
            return ClientError::Refused { status, message };
        }
        let from = match &self.token_origin {
            TokenOrigin::Flag => "given with --token".to_string(),
            TokenOrigin::Env => "from ELFGATE_TOKEN".to_string(),
            TokenOrigin::File(path) => format!("read from {}", path.display()),
            TokenOrigin::Missing(looked) => {
                return ClientError::NoToken {
                    looked: match looked {
                        Some(path) => format!("no token file at {}", path.display()),
                        None => {
                            "no token file (the configuration names no data directory)".to_string()
                        }
                    },
                };
            }
        };
        ClientError::Auth {
            status,
            message,
            from,
        }
    }
}
