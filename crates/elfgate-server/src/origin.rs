//! Configured origins (`server.allowed_origins`): checked when the configuration loads and
//! matched by the request guard. On its own so that the configuration does not depend on the
//! guard, which depends on the application state, which holds the configuration.

/// An origin in the configuration that is not `scheme://host[:port]`.
#[derive(Debug, thiserror::Error)]
#[error("an origin is scheme://host[:port] with scheme http or https, no path, no trailing slash")]
pub struct BadOrigin;

/// Checks one configured origin and returns it in the form browsers send (lower case).
pub fn parse_origin(origin: &str) -> Result<String, BadOrigin> {
    let lower = origin.trim().to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .ok_or(BadOrigin)?;
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(BadOrigin);
    }
    Ok(lower)
}
