//! Parsing of the model-name mini language (`NAME:k=v,k=v`).

/// Upper bound on `tokens=N` / `think=N` so garbage input cannot exhaust memory.
pub const MAX_TOKENS: usize = 200_000;

/// Behaviour requested through the model string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Behavior {
    /// Number of text tokens to produce.
    pub tokens: usize,
    /// Delay before each token, in milliseconds.
    pub delay_ms: u64,
    /// `fail=CODE[xN]`: status code and optional count (None = always).
    pub fail: Option<(u16, Option<u64>)>,
    /// `retry_after=S` header value.
    pub retry_after: Option<String>,
    /// `drop_after=K`.
    pub drop_after: Option<usize>,
    /// `stall_after=K`.
    pub stall_after: Option<usize>,
    /// `error_after=K`.
    pub error_after: Option<usize>,
    /// Number of thinking tokens.
    pub think: usize,
    /// Emit one tool call to this tool after the text.
    pub tool: Option<String>,
    /// Echo the last user message.
    pub echo: bool,
    /// Use the named script.
    pub script: Option<String>,
    /// `cache_read=N`: report N prompt tokens read from the prompt cache.
    pub cache_read: Option<u64>,
    /// `cache_write=N`: report N prompt tokens written to the prompt cache.
    pub cache_write: Option<u64>,
    /// `context_limit=N`: refuse a prompt over N tokens as the provider does.
    pub context_limit: Option<u64>,
    /// `gate=NAME`: a stream waits before its first token until the test opens the gate.
    pub gate: Option<String>,
}

impl Default for Behavior {
    fn default() -> Self {
        Self {
            tokens: 5,
            delay_ms: 0,
            fail: None,
            retry_after: None,
            drop_after: None,
            stall_after: None,
            error_after: None,
            think: 0,
            tool: None,
            echo: false,
            script: None,
            cache_read: None,
            cache_write: None,
            context_limit: None,
            gate: None,
        }
    }
}

fn parse_count(v: &str) -> Option<usize> {
    v.trim().parse::<usize>().ok().map(|n| n.min(MAX_TOKENS))
}

fn parse_fail(v: &str) -> Option<(u16, Option<u64>)> {
    let v = v.trim();
    let (code, times) = match v.split_once(['x', 'X']) {
        Some((c, n)) => (c, Some(n.trim().parse::<u64>().ok()?)),
        None => (v, None),
    };
    let code = code.trim().parse::<u16>().ok()?;
    (400..=599).contains(&code).then_some((code, times))
}

impl Behavior {
    /// Parse a model string. Never fails: unknown keys and malformed values are ignored.
    pub fn parse(model: &str) -> Self {
        let mut b = Self::default();
        let Some((_, params)) = model.split_once(':') else {
            return b;
        };
        for pair in params.split(',') {
            let Some((k, v)) = pair.split_once('=') else {
                continue;
            };
            let v = v.trim();
            match k.trim() {
                "tokens" => b.tokens = parse_count(v).unwrap_or(b.tokens),
                // Cap at one hour per token: anything larger is surely a typo.
                "delay_ms" => {
                    b.delay_ms = v.parse::<u64>().map_or(b.delay_ms, |d| d.min(3_600_000));
                }
                "fail" => b.fail = parse_fail(v).or(b.fail),
                "retry_after" if !v.is_empty() && v.bytes().all(|c| c.is_ascii_graphic()) => {
                    b.retry_after = Some(v.to_string());
                }
                "drop_after" => b.drop_after = parse_count(v).or(b.drop_after),
                "stall_after" => b.stall_after = parse_count(v).or(b.stall_after),
                "error_after" => b.error_after = parse_count(v).or(b.error_after),
                "think" => b.think = parse_count(v).unwrap_or(b.think),
                "tool" if !v.is_empty() => b.tool = Some(v.to_string()),
                "echo" => b.echo = matches!(v, "1" | "true" | "yes" | "on"),
                "script" if !v.is_empty() => b.script = Some(v.to_string()),
                "cache_read" => b.cache_read = v.parse().ok().or(b.cache_read),
                "cache_write" => b.cache_write = v.parse().ok().or(b.cache_write),
                "context_limit" => b.context_limit = v.parse().ok().or(b.context_limit),
                "gate" if !v.is_empty() => b.gate = Some(v.to_string()),
                _ => {}
            }
        }
        b
    }
}

/// Split text into chunks at whitespace boundaries, keeping the whitespace:
/// every chunk is a word followed by its trailing whitespace; concatenating
/// the chunks yields the original text exactly.
pub fn split_words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut prev_ws = false;
    let mut seen_word = false;
    for (i, c) in text.char_indices() {
        let ws = c.is_whitespace();
        if !ws && prev_ws && seen_word {
            out.push(text[start..i].to_string());
            start = i;
        }
        if !ws {
            seen_word = true;
        }
        prev_ws = ws;
    }
    if start < text.len() {
        out.push(text[start..].to_string());
    }
    out
}

/// Split a string into 2-3 fragments on char boundaries (1 if it is shorter than 2 chars).
pub fn fragments(s: &str) -> Vec<String> {
    let idx: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
    let n = idx.len();
    if n < 2 {
        return vec![s.to_string()];
    }
    let parts = if n >= 3 { 3 } else { 2 };
    let mut out = Vec::with_capacity(parts);
    let mut prev = 0;
    for p in 1..parts {
        let cut = idx[n * p / parts];
        out.push(s[prev..cut].to_string());
        prev = cut;
    }
    out.push(s[prev..].to_string());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_defaults() {
        assert_eq!(Behavior::parse("mock"), Behavior::default());
        assert_eq!(Behavior::parse(""), Behavior::default());
        assert_eq!(Behavior::parse(":::,,=,x=y"), Behavior::default());
    }

    #[test]
    fn parse_keys() {
        let b = Behavior::parse(
            "mock:tokens=50,delay_ms=10,fail=500x2,id=abc,retry_after=3,think=2,tool=ls,echo=1",
        );
        assert_eq!(b.tokens, 50);
        assert_eq!(b.delay_ms, 10);
        assert_eq!(b.fail, Some((500, Some(2))));
        assert_eq!(b.retry_after.as_deref(), Some("3"));
        assert_eq!(b.think, 2);
        assert_eq!(b.tool.as_deref(), Some("ls"));
        assert!(b.echo);
        let c = Behavior::parse("m:cache_read=7,cache_write=x");
        assert_eq!((c.cache_read, c.cache_write), (Some(7), None));
        assert_eq!(
            Behavior::parse("m:context_limit=50").context_limit,
            Some(50)
        );
        assert_eq!(Behavior::parse("m:fail=429").fail, Some((429, None)));
        assert_eq!(Behavior::parse("m:fail=200").fail, None);
        assert_eq!(Behavior::parse("m:fail=abc").fail, None);
        assert_eq!(Behavior::parse("m:tokens=-1").tokens, 5);
        assert_eq!(Behavior::parse("m:tokens=99999999999").tokens, MAX_TOKENS);
    }

    #[test]
    fn words() {
        assert_eq!(
            split_words("Hello world  foo\n"),
            vec!["Hello ", "world  ", "foo\n"]
        );
        assert_eq!(split_words("  lead x"), vec!["  lead ", "x"]);
        assert!(split_words("").is_empty());
        assert_eq!(split_words("   "), vec!["   "]);
    }

    #[test]
    fn frags() {
        assert_eq!(fragments("{}"), vec!["{", "}"]);
        assert_eq!(fragments(""), vec![""]);
        let s = r#"{"path":"/tmp/ü"}"#;
        let f = fragments(s);
        assert_eq!(f.len(), 3);
        assert_eq!(f.concat(), s);
    }
}
