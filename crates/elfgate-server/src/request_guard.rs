//! Refuses requests that a web page, rather than the user, may have sent: a foreign Host header
//! (DNS rebinding) or a foreign Origin (cross-site requests), and answers CORS for the origins the
//! configuration lists.
//!
//! A browser lets any page send requests to 127.0.0.1; only the answers are hidden from it. So
//! the daemon must refuse such requests itself, before any handler runs:
//! - Host must name this machine (a loopback name, a loopback or the bound IP address, or a
//!   configured name): a page on `evil.example` whose DNS name was rebound to 127.0.0.1 sends
//!   `Host: evil.example`.
//! - Origin, when present, must be the daemon's own (`http://` + the Host) or a configured one.
//!   Browsers send Origin on every cross-origin request and on every POST; with no Origin,
//!   `Sec-Fetch-Site: cross-site` or `same-site` still tells a page's request from a tool's.
//! - A CORS preflight (OPTIONS with Access-Control-Request-Method) from a configured origin is
//!   answered here, before auth, because browsers send no credentials with a preflight.

use crate::error::ApiError;
pub use crate::origin::{BadOrigin, parse_origin};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The request headers a web client may send (the answer to a preflight).
const ALLOWED_HEADERS: &str = "authorization, content-type, last-event-id, accept";
const ALLOWED_METHODS: &str = "GET, POST, DELETE, OPTIONS";
/// How long a browser may cache a preflight answer, in seconds.
const PREFLIGHT_MAX_AGE: &str = "600";

/// What the guard checks against, built once from the configuration.
#[derive(Debug, Clone)]
pub struct RequestGuard {
    bound_ip: IpAddr,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
}

impl RequestGuard {
    /// A guard for a daemon bound on `bind`.
    pub fn new(bind: SocketAddr, allowed_hosts: &[String], allowed_origins: &[String]) -> Self {
        RequestGuard {
            bound_ip: bind.ip(),
            allowed_hosts: allowed_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
            allowed_origins: allowed_origins
                .iter()
                .filter_map(|o| parse_origin(o).ok())
                .collect(),
        }
    }

    /// Whether `host` (a Host header value, port included or not) names this daemon.
    pub fn host_allowed(&self, host: &str) -> bool {
        let name = strip_port(host).to_ascii_lowercase();
        if name == "localhost" || name.ends_with(".localhost") {
            // RFC 6761: these names always resolve to loopback.
            return true;
        }
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            // DNS rebinding needs a name; an address literal means the client chose this host.
            // Still, only addresses the daemon can be reached on are taken.
            return ip.is_loopback() || ip == self.bound_ip || self.bound_ip.is_unspecified();
        }
        self.allowed_hosts.contains(&name)
    }

    /// Whether a page of `origin` may call the API, given the request's Host.
    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let origin = origin.to_ascii_lowercase();
        if self.allowed_origins.contains(&origin) {
            return true;
        }
        // The daemon's own pages: same scheme-less host and port as the request's Host, which
        // the host check has already accepted.
        match (origin.strip_prefix("http://"), host) {
            (Some(o), Some(h)) => o == h.to_ascii_lowercase(),
            _ => false,
        }
    }

    /// Whether `origin` is one of the configured cross-origin clients (which get CORS headers).
    fn is_configured_origin(&self, origin: &str) -> bool {
        self.allowed_origins
            .iter()
            .any(|o| o.eq_ignore_ascii_case(origin))
    }
}

/// `host:port`, `[v6]:port`, `host` or `[v6]` → the host part (brackets kept for v6).
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

fn request_host(req: &Request) -> Option<String> {
    if let Some(h) = req.headers().get(header::HOST) {
        return Some(String::from_utf8_lossy(h.as_bytes()).into_owned());
    }
    // HTTP/2 carries the host in the :authority pseudo-header, which ends up in the URI.
    req.uri().authority().map(|a| a.as_str().to_string())
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The middleware: refuse, answer a preflight, or pass on (adding CORS headers for configured
/// origins). It takes the guard alone, not the application state, which holds the guard.
pub async fn guard_requests(
    State(guard): State<Arc<RequestGuard>>,
    req: Request,
    next: Next,
) -> Response {
    let guard = &*guard;
    let host = request_host(&req);
    if let Some(h) = &host
        && !guard.host_allowed(h)
    {
        return ApiError::Refused(format!(
            "Host '{h}' is not a name of this daemon; add it to [server] allowed_hosts if it is"
        ))
        .into_response();
    }
    let origin = header_str(req.headers(), header::ORIGIN).map(str::to_string);
    match &origin {
        Some(o) if !guard.origin_allowed(o, host.as_deref()) => {
            return ApiError::Refused(format!(
                "requests from web pages of origin '{o}' are refused; add the origin to \
                 [server] allowed_origins to let it call the API"
            ))
            .into_response();
        }
        None => {
            let site = header_str(
                req.headers(),
                header::HeaderName::from_static("sec-fetch-site"),
            );
            if matches!(site, Some("cross-site" | "same-site")) {
                return ApiError::Refused(
                    "requests from other sites' web pages are refused".into(),
                )
                .into_response();
            }
        }
        Some(_) => {}
    }
    let cors_origin = origin.filter(|o| guard.is_configured_origin(o));
    let is_preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if is_preflight {
        let mut resp = StatusCode::NO_CONTENT.into_response();
        if let Some(o) = &cors_origin {
            let h = resp.headers_mut();
            add_cors(h, o);
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(ALLOWED_METHODS),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static(ALLOWED_HEADERS),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static(PREFLIGHT_MAX_AGE),
            );
        }
        return resp;
    }
    let mut resp = next.run(req).await;
    if let Some(o) = &cors_origin {
        add_cors(resp.headers_mut(), o);
    }
    resp
}

fn add_cors(headers: &mut HeaderMap, origin: &str) {
    if let Ok(v) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    headers.append(header::VARY, HeaderValue::from_static("origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(bind: &str) -> RequestGuard {
        RequestGuard::new(
            bind.parse().unwrap(),
            &["elfgate.lan".into()],
            &["http://localhost:5173".into()],
        )
    }

    #[test]
    fn hosts() {
        let g = guard("127.0.0.1:7420");
        for ok in [
            "127.0.0.1:7420",
            "localhost:7420",
            "LOCALHOST",
            "app.localhost:1",
            "[::1]:7420",
            "127.0.0.2",
            "elfgate.lan:7420",
        ] {
            assert!(g.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:7420",
            "10.0.0.5:7420",
            "localhost.evil",
        ] {
            assert!(!g.host_allowed(bad), "{bad}");
        }
        // Bound on every address: any address literal reaches it, names still must be listed.
        let any = guard("0.0.0.0:7420");
        assert!(any.host_allowed("10.0.0.5:7420"));
        assert!(!any.host_allowed("evil.example:7420"));
    }

    #[test]
    fn origins() {
        let g = guard("127.0.0.1:7420");
        assert!(g.origin_allowed("http://127.0.0.1:7420", Some("127.0.0.1:7420")));
        assert!(g.origin_allowed("http://localhost:5173", Some("127.0.0.1:7420")));
        assert!(!g.origin_allowed("http://localhost:5174", Some("127.0.0.1:7420")));
        assert!(!g.origin_allowed("null", Some("127.0.0.1:7420")));
        assert!(!g.origin_allowed("https://evil.example", Some("127.0.0.1:7420")));
        assert!(!g.origin_allowed("http://127.0.0.1:7420", None));
    }

    #[test]
    fn configured_origins_are_checked() {
        assert!(parse_origin("http://localhost:5173").is_ok());
        assert!(parse_origin("https://console.example").is_ok());
        assert!(parse_origin("http://localhost:5173/").is_err());
        assert!(parse_origin("localhost:5173").is_err());
        assert!(parse_origin("*").is_err());
    }
}
