//! Rendering a workflow's templates within limits: a template is a program its definition's
//! author wrote, so each render has fuel (a bound on the instructions it runs, hence on its
//! time), a bound on what it writes, and a way to stop when the run is cancelled. The caller runs
//! it off the async workers (see the `workflow` engine); this module is the synchronous part.

use minijinja::{Environment, Error, ErrorKind, Value};
use std::io;

/// The default fuel of one render: about a million of the template engine's instructions, a
/// fraction of a second of one core, far beyond what a loop over a step's output needs.
pub const DEFAULT_FUEL: u64 = 1_000_000;

/// The default bound on what one render writes, and on a step's output: 1 MiB.
pub const DEFAULT_OUTPUT_BYTES: usize = 1 << 20;

/// How far one render may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The instructions it may run.
    pub fuel: u64,
    /// The bytes it may write.
    pub output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: DEFAULT_FUEL,
            output_bytes: DEFAULT_OUTPUT_BYTES,
        }
    }
}

/// Why a render failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The run was cancelled while it rendered.
    #[error("interrupted")]
    Cancelled,
    /// It would have written more than the limit.
    #[error("the rendered text is over the limit of {0} bytes")]
    TooLong(usize),
    /// It ran out of fuel (a loop too long, or one that does not end).
    #[error("the template ran out of fuel ({0} instructions): a loop too long or endless")]
    OutOfFuel(u64),
    /// Anything else the template engine says (a value missing, a filter's error, …).
    #[error("{0}")]
    Template(String),
}

/// The template environment of workflows: a value a template names that is not there is an
/// error, never an empty string; `shell_quote` quotes a value for a POSIX shell; with `fuel`,
/// a render stops after that many instructions.
pub fn environment(fuel: Option<u64>) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.set_fuel(fuel);
    env.add_filter("shell_quote", shell_quote);
    env
}

/// `value` as one word of a POSIX shell command line, whatever it holds: in single quotes, each
/// single quote in it written as `'\''`. A list is its items, each quoted, separated by spaces.
/// A NUL byte cannot be in a shell word: an error.
pub fn shell_quote(value: &Value) -> Result<String, Error> {
    if value.kind() == minijinja::value::ValueKind::Seq
        && let Ok(items) = value.try_iter()
    {
        let quoted: Result<Vec<String>, Error> = items.map(|item| shell_quote(&item)).collect();
        return Ok(quoted?.join(" "));
    }
    let text = match value.as_str() {
        Some(s) => s.to_string(),
        None => value.to_string(),
    };
    if text.contains('\0') {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "shell_quote: a NUL byte cannot be in a shell word",
        ));
    }
    Ok(format!("'{}'", text.replace('\'', r"'\''")))
}

/// Renders `src` over `scope` with `env` (made by [`environment`] with `limits.fuel`), writing at
/// most `limits.output_bytes`; `cancelled` is asked at each write, and a true answer stops it.
pub fn render(
    env: &Environment<'static>,
    src: &str,
    scope: &serde_json::Value,
    limits: Limits,
    cancelled: &dyn Fn() -> bool,
) -> Result<String, RenderError> {
    let template = env
        .template_from_str(src)
        .map_err(|e| RenderError::Template(e.to_string()))?;
    let mut out = Bounded {
        text: Vec::new(),
        limit: limits.output_bytes,
        cancelled,
        stopped: None,
    };
    let rendered = template.render_captured_to(scope, &mut out);
    if let Some(why) = out.stopped {
        return Err(why);
    }
    match rendered {
        Ok(_) => String::from_utf8(out.text)
            .map_err(|_| RenderError::Template("the rendered text is not UTF-8".into())),
        Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(RenderError::OutOfFuel(limits.fuel)),
        Err(e) => Err(RenderError::Template(e.to_string())),
    }
}

/// A writer that refuses to grow past `limit` or to go on once `cancelled` says so, and keeps
/// why it stopped (the template engine only sees a failed write).
struct Bounded<'a> {
    text: Vec<u8>,
    limit: usize,
    cancelled: &'a dyn Fn() -> bool,
    stopped: Option<RenderError>,
}

impl io::Write for Bounded<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if (self.cancelled)() {
            self.stopped = Some(RenderError::Cancelled);
            return Err(io::Error::other("cancelled"));
        }
        if self.text.len().saturating_add(buf.len()) > self.limit {
            self.stopped = Some(RenderError::TooLong(self.limit));
            return Err(io::Error::other("over the limit"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limited(fuel: u64, output_bytes: usize) -> (Environment<'static>, Limits) {
        let limits = Limits { fuel, output_bytes };
        (environment(Some(fuel)), limits)
    }

    #[test]
    fn a_template_renders_within_its_limits() {
        let (env, limits) = limited(10_000, 100);
        let out = render(
            &env,
            "hi {{ inputs.who }}",
            &json!({"inputs": {"who": "ann"}}),
            limits,
            &|| false,
        );
        assert_eq!(out, Ok("hi ann".to_string()));
    }

    #[test]
    fn an_endless_loop_runs_out_of_fuel() {
        let (env, limits) = limited(10_000, 1 << 20);
        let src =
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}";
        assert_eq!(
            render(&env, src, &json!({}), limits, &|| false),
            Err(RenderError::OutOfFuel(10_000))
        );
    }

    #[test]
    fn writing_past_the_limit_stops_the_render() {
        let (env, limits) = limited(1_000_000, 1000);
        let src = "{% for a in range(10) %}{{ 'x' * 600 }}{% endfor %}";
        assert_eq!(
            render(&env, src, &json!({}), limits, &|| false),
            Err(RenderError::TooLong(1000))
        );
    }

    #[test]
    fn a_cancelled_render_stops_at_its_next_write() {
        let (env, limits) = limited(1_000_000, 1 << 20);
        assert_eq!(
            render(&env, "{{ 'x' }}", &json!({}), limits, &|| true),
            Err(RenderError::Cancelled)
        );
    }

    #[test]
    fn shell_quote_makes_one_inert_word() {
        let (env, limits) = limited(10_000, 1000);
        let scope =
            json!({"inputs": {"s": "a'; rm -rf / #", "n": 3, "l": ["x y", "z"], "z": "a\u{0}b"}});
        let render = |src| render(&env, src, &scope, limits, &|| false);
        assert_eq!(
            render("echo {{ inputs.s | shell_quote }}"),
            Ok(r"echo 'a'\''; rm -rf / #'".to_string())
        );
        assert_eq!(
            render("{{ inputs.n | shell_quote }}"),
            Ok("'3'".to_string())
        );
        assert_eq!(
            render("{{ inputs.l | shell_quote }}"),
            Ok("'x y' 'z'".to_string())
        );
        assert_eq!(render("{{ '' | shell_quote }}"), Ok("''".to_string()));
        assert!(render("{{ inputs.z | shell_quote }}").is_err());
    }
}
