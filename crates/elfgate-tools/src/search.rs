//! web_search: asks a configured search backend (`[tools.web_search]`) and returns the results as
//! title, URL and snippet. Registered only when a backend is configured: without one the model is
//! offered no search it could not get.

use crate::tool::{
    BuiltinTool, PermissionTier, ToolContext, ToolDecl, ToolError, ToolKind, ToolOutput,
};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

/// Most results one search may ask for.
pub const MAX_RESULTS: u32 = 20;

/// `[tools.web_search]`: which backend answers searches.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebSearchConfig {
    /// `searxng` (a SearXNG-compatible JSON endpoint), `brave` (Brave Search's API) or `tavily`.
    pub backend: SearchBackendKind,
    /// The backend's base URL (default: Brave's and Tavily's public APIs; required for SearXNG).
    #[serde(default)]
    pub url: Option<String>,
    /// The variable holding the backend's API key (Brave, Tavily; SearXNG takes none).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Results returned when the model does not ask for a number (at most 20).
    #[serde(default = "default_results")]
    pub max_results: u32,
    /// Seconds a search may take.
    #[serde(default = "default_timeout")]
    pub timeout_secs: f64,
}

fn default_results() -> u32 {
    5
}

fn default_timeout() -> f64 {
    15.0
}

/// The search backends web_search speaks to.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SearchBackendKind {
    /// `GET {url}/search?q=…&format=json`.
    Searxng,
    /// `GET {url}/res/v1/web/search?q=…&count=N` with `X-Subscription-Token`.
    Brave,
    /// `POST {url}/search` `{query, max_results}` with a bearer key.
    Tavily,
}

/// Why a `[tools.web_search]` section cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SearchConfigError {
    /// SearXNG has no public default.
    #[error("tools.web_search.url is required for the searxng backend")]
    NoUrl,
    /// A URL that is not one.
    #[error("tools.web_search.url '{0}' is not an http(s) URL")]
    BadUrl(String),
    /// A keyed backend without its key variable's name.
    #[error("tools.web_search.api_key_env is required for the {0} backend")]
    NoKeyEnv(&'static str),
}

/// A result as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult {
    /// The page's title.
    pub title: String,
    /// Its URL.
    pub url: String,
    /// What the backend quotes of it.
    pub snippet: String,
}

/// The web_search tool, bound to its backend.
#[derive(Debug, Clone)]
pub struct WebSearch {
    kind: SearchBackendKind,
    url: String,
    /// The key's variable and its value when it is set.
    key: Option<(String, Option<String>)>,
    max_results: u32,
    timeout: Duration,
}

impl WebSearch {
    /// The tool for `config`, its key read from the environment now (a missing one makes each
    /// search fail saying which variable to set).
    pub fn new(config: &WebSearchConfig) -> Result<WebSearch, SearchConfigError> {
        let url = match (config.backend, &config.url) {
            (_, Some(u)) => u.trim_end_matches('/').to_string(),
            (SearchBackendKind::Searxng, None) => return Err(SearchConfigError::NoUrl),
            (SearchBackendKind::Brave, None) => "https://api.search.brave.com".to_string(),
            (SearchBackendKind::Tavily, None) => "https://api.tavily.com".to_string(),
        };
        if reqwest::Url::parse(&url)
            .ok()
            .is_none_or(|u| !matches!(u.scheme(), "http" | "https"))
        {
            return Err(SearchConfigError::BadUrl(url));
        }
        let key = match (config.backend, &config.api_key_env) {
            (SearchBackendKind::Searxng, _) => None,
            (kind, None) => {
                return Err(SearchConfigError::NoKeyEnv(match kind {
                    SearchBackendKind::Brave => "brave",
                    _ => "tavily",
                }));
            }
            (_, Some(var)) => Some((
                var.clone(),
                std::env::var(var).ok().filter(|v| !v.is_empty()),
            )),
        };
        Ok(WebSearch {
            kind: config.backend,
            url,
            key,
            max_results: config.max_results.clamp(1, MAX_RESULTS),
            timeout: crate::clamped_secs(config.timeout_secs, 0.1, 600.0),
        })
    }

    /// The key, or the error that names its variable.
    fn key(&self) -> Result<&str, String> {
        match &self.key {
            Some((_, Some(k))) => Ok(k),
            Some((var, None)) => Err(format!(
                "the search backend's key is not set: set {var} in the daemon's environment"
            )),
            None => Ok(""),
        }
    }

    /// Searches for `query` with the configured number of results: how many came, and the
    /// results as the tool renders them (numbered title, URL and snippet); or what went wrong.
    pub async fn search_rendered(&self, query: &str) -> Result<(usize, String), String> {
        let results = self.search(query, self.max_results).await?;
        Ok((results.len(), render(query, &results)))
    }

    /// Asks the backend; the results, or what went wrong in words for the model.
    async fn search(&self, query: &str, n: u32) -> Result<Vec<SearchResult>, String> {
        let client = reqwest::Client::builder()
            .timeout(self.timeout)
            .build()
            .map_err(|e| format!("search client: {e}"))?;
        let with_query = |path: &str, pairs: &[(&str, &str)]| {
            let mut url = reqwest::Url::parse(&format!("{}{path}", self.url))
                .map_err(|e| format!("search URL: {e}"))?;
            url.query_pairs_mut().extend_pairs(pairs);
            Ok::<_, String>(url)
        };
        let req = match self.kind {
            SearchBackendKind::Searxng => {
                client.get(with_query("/search", &[("q", query), ("format", "json")])?)
            }
            SearchBackendKind::Brave => client
                .get(with_query(
                    "/res/v1/web/search",
                    &[("q", query), ("count", &n.to_string())],
                )?)
                .header("Accept", "application/json")
                .header("X-Subscription-Token", self.key()?),
            SearchBackendKind::Tavily => client
                .post(format!("{}/search", self.url))
                .bearer_auth(self.key()?)
                .json(&json!({"query": query, "max_results": n})),
        };
        let resp = req
            .header("User-Agent", "elfgate-web-search")
            .send()
            .await
            .map_err(|e| format!("the search backend did not answer: {e}"))?;
        let status = resp.status();
        let body: Value = resp
            .json()
            .await
            .map_err(|e| format!("the search backend answered HTTP {status} with no JSON: {e}"))?;
        if !status.is_success() {
            return Err(format!("the search backend answered HTTP {status}: {body}"));
        }
        let (list, snippet) = match self.kind {
            SearchBackendKind::Searxng | SearchBackendKind::Tavily => (&body["results"], "content"),
            SearchBackendKind::Brave => (&body["web"]["results"], "description"),
        };
        let text = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
        Ok(list
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .take(n as usize)
                    .map(|r| SearchResult {
                        title: text(r, "title"),
                        url: text(r, "url"),
                        snippet: text(r, snippet),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// The results as the tool answers them: numbered, title, URL, snippet.
fn render(query: &str, results: &[SearchResult]) -> String {
    if results.is_empty() {
        return format!("No results for \"{query}\".");
    }
    let mut out = format!("Results for \"{query}\":\n");
    for (i, r) in results.iter().enumerate() {
        out.push_str(&format!(
            "\n{}. {}\n   {}\n   {}\n",
            i + 1,
            r.title,
            r.url,
            r.snippet
        ));
    }
    out
}

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// What to search the web for.
    query: String,
    /// How many results (1 to 20; default: the daemon's).
    #[serde(default)]
    max_results: Option<u32>,
}

#[async_trait]
impl BuiltinTool for WebSearch {
    type Args = SearchArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "web_search",
        description: "Search the web; returns results as title, URL and snippet. Fetch a page \
                      with web_fetch to read it.",
        tier: PermissionTier::ConfirmOnce,
        kind: ToolKind::Network,
        works_in_project: false,
    };
    async fn run(&self, a: SearchArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let query = a.query.trim();
        if query.is_empty() {
            return Ok(ToolOutput::error("query must not be empty"));
        }
        let n = a
            .max_results
            .unwrap_or(self.max_results)
            .clamp(1, MAX_RESULTS);
        tokio::select! {
            _ = ctx.cancel.cancelled() => Err(ToolError::Interrupted),
            r = self.search(query, n) => Ok(match r {
                Ok(results) => ToolOutput::ok(render(query, &results)),
                Err(why) => ToolOutput::error(why),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(backend: SearchBackendKind, url: Option<&str>, key: Option<&str>) -> WebSearchConfig {
        WebSearchConfig {
            backend,
            url: url.map(str::to_string),
            api_key_env: key.map(str::to_string),
            max_results: 5,
            timeout_secs: 5.0,
        }
    }

    #[test]
    fn a_backend_needs_what_it_cannot_do_without() {
        use SearchBackendKind::*;
        assert_eq!(
            WebSearch::new(&config(Searxng, None, None)).unwrap_err(),
            SearchConfigError::NoUrl
        );
        assert_eq!(
            WebSearch::new(&config(Brave, None, None)).unwrap_err(),
            SearchConfigError::NoKeyEnv("brave")
        );
        assert!(matches!(
            WebSearch::new(&config(Searxng, Some("ftp://x"), None)).unwrap_err(),
            SearchConfigError::BadUrl(_)
        ));
        let w = WebSearch::new(&config(Tavily, None, Some("ELFGATE_TEST_UNSET_KEY"))).unwrap();
        assert!(w.key().unwrap_err().contains("ELFGATE_TEST_UNSET_KEY"));
    }

    #[test]
    fn results_read_as_numbered_entries() {
        let r = [SearchResult {
            title: "Rust".into(),
            url: "https://rust-lang.org".into(),
            snippet: "A language".into(),
        }];
        assert_eq!(
            render("rust", &r),
            "Results for \"rust\":\n\n1. Rust\n   https://rust-lang.org\n   A language\n"
        );
        assert_eq!(render("x", &[]), "No results for \"x\".");
    }
}
