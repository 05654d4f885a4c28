//! The web console: static files embedded in the binary, served at `/` (the page) and
//! `/console/{version}/{file}` (its scripts, styles and icon). They hold no data, so they need no
//! token; every API call the page makes carries one (docs/console.md).
//!
//! The page's files are plain ES modules, embedded as they are in the repository: no build step.
//! `version` is a hash of the files' bytes, computed at compile time, so an asset URL names one
//! exact content and can be cached for good; the page itself (which names the current version)
//! is revalidated on every load.

use crate::error::ApiError;
use crate::extract::ApiPath;
use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::LazyLock;

/// What the page may load and do: its own scripts and styles only (no inline script, no event
/// handler attributes, no eval), requests to the daemon only, images only from the daemon or
/// `data:` URLs, no framing, no `<base>`.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("../console/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

const ASSETS: &[Asset] = &[
    asset!("api.js", JS),
    asset!("app.js", JS),
    asset!("auth.js", JS),
    asset!("dom.js", JS),
    asset!("markdown.js", JS),
    asset!("session.js", JS),
    asset!("sessions.js", JS),
    asset!("sse.js", JS),
    asset!("start.js", JS),
    asset!("transcript.js", JS),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
];

const INDEX: &str = include_str!("../console/index.html");

/// FNV-1a over `bytes`, continuing from `hash`: enough to tell one build's files from another's.
const fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

const fn assets_hash() -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < ASSETS.len() {
        hash = fnv1a(hash, ASSETS[i].body);
        i += 1;
    }
    fnv1a(hash, INDEX.as_bytes())
}

/// The version segment of the asset URLs.
static VERSION: LazyLock<String> = LazyLock::new(|| format!("{:016x}", assets_hash()));

/// The page, with its asset URLs pointing at this build's version.
static PAGE: LazyLock<String> =
    LazyLock::new(|| INDEX.replace("{{ASSETS}}", &format!("/console/{}", *VERSION)));

/// The console's routes (no auth: they carry no data).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(page))
        .route("/console/{version}/{file}", get(asset))
        // On every answer of these routes, an extractor's refusal included.
        .layer(middleware::map_response(secured))
}

/// Headers every console answer carries.
async fn secured(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    resp
}

async fn page() -> Response {
    // no-cache: the page names the current build's assets, so it is revalidated on every load.
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        PAGE.as_str(),
    )
        .into_response()
}

async fn asset(ApiPath((version, file)): ApiPath<(String, String)>) -> Response {
    let found = ASSETS
        .iter()
        .find(|a| a.name == file)
        .filter(|_| version == *VERSION);
    match found {
        Some(a) => (
            [
                (header::CONTENT_TYPE, a.content_type),
                // The URL changes whenever any file does.
                (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
            ],
            a.body,
        )
            .into_response(),
        // Another build's version (a page loaded before an upgrade) or no such file.
        None => {
            ApiError::NotFound(format!("no console file '{file}' in this build")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_this_builds_assets() {
        assert!(!PAGE.contains("{{ASSETS}}"));
        assert!(PAGE.contains(&format!("/console/{}/app.js", *VERSION)));
        for a in ASSETS {
            assert!(!a.body.is_empty(), "{}", a.name);
        }
    }
}
