//! A workflow's templates, rendered off the async workers: a template is a program, and one that
//! runs long (up to its fuel) must hold up neither the daemon's other work (`/healthz`, interrupts,
//! shutdown) nor its own run's cancellation. Renders run on the blocking pool, at most one per
//! core at a time (so that hostile templates take those cores and no more), and the run stops
//! waiting for one as soon as it is cancelled; the render itself stops at its next write, or when
//! its fuel runs out. See docs/workflows.md, "Limits".

use elfgate_workflow::template::{Limits, RenderError, environment, render};
use minijinja::Environment;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Renders templates within their limits.
pub struct Renderer {
    env: Arc<Environment<'static>>,
    limits: Limits,
    slots: Arc<Semaphore>,
}

impl Renderer {
    /// A renderer with `limits`, as many renders at once as the machine has cores.
    pub fn new(limits: Limits) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Renderer {
            env: Arc::new(environment(Some(limits.fuel))),
            limits,
            slots: Arc::new(Semaphore::new(cores)),
        }
    }

    /// Its limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// `src` rendered over `scope`; [`RenderError::Cancelled`] as soon as `cancel` fires.
    pub async fn render(
        &self,
        src: &str,
        scope: &Arc<Value>,
        cancel: &CancellationToken,
    ) -> Result<String, RenderError> {
        let slot = tokio::select! {
            () = cancel.cancelled() => return Err(RenderError::Cancelled),
            slot = self.slots.clone().acquire_owned() => slot
                .map_err(|_| RenderError::Template("the renderer is closed".into()))?,
        };
        let (env, src, scope, limits, token) = (
            self.env.clone(),
            src.to_string(),
            scope.clone(),
            self.limits,
            cancel.clone(),
        );
        let job = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            render(&env, &src, &scope, limits, &|| token.is_cancelled())
        });
        tokio::select! {
            () = cancel.cancelled() => Err(RenderError::Cancelled),
            done = job => done
                .unwrap_or_else(|e| Err(RenderError::Template(format!("the render failed: {e}")))),
        }
    }
}

/// `output` within `limit` bytes: a longer text cut (on a character's boundary) with a note
/// saying so; other JSON longer than that is refused (a cut would not be JSON).
pub fn bounded_output(output: Value, limit: usize) -> Result<Value, String> {
    match output {
        Value::String(text) if text.len() > limit => {
            // Room for the note at its longest (the kept count has at most the limit's digits).
            let longest = format!(
                "\n[... output cut: {limit} of {} bytes kept ...]",
                text.len()
            );
            let mut end = limit.saturating_sub(longest.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let note = format!("\n[... output cut: {end} of {} bytes kept ...]", text.len());
            Ok(Value::String(format!("{}{note}", &text[..end])))
        }
        Value::String(text) => Ok(Value::String(text)),
        other => {
            let len = other.to_string().len();
            if len > limit {
                Err(format!(
                    "the output is {len} bytes of JSON, over the limit of {limit} bytes"
                ))
            } else {
                Ok(other)
            }
        }
    }
}

/// The run's answer: the JSON of every step's `{output, status}`; when that is longer than
/// `limit`, the outputs longer than their share of it are left out with a note (each is whole in
/// its step's `stepEnd`).
pub fn answer_within(outputs: &serde_json::Map<String, Value>, limit: usize) -> String {
    let whole = Value::Object(outputs.clone()).to_string();
    if whole.len() <= limit {
        return whole;
    }
    let share = limit / outputs.len().max(1);
    let mut kept = outputs.clone();
    for ended in kept.values_mut() {
        let len = ended["output"].to_string().len();
        if len > share {
            ended["output"] = Value::String(format!(
                "[output of {len} bytes left out of the run's answer; it is in the step's stepEnd]"
            ));
        }
    }
    Value::Object(kept).to_string()
}

/// Every string in `v`, in order, with its path under `at`.
pub fn strings_of<'a>(v: &'a Value, at: &str, out: &mut Vec<(String, &'a str)>) {
    match v {
        Value::String(s) => out.push((at.to_string(), s.as_str())),
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                strings_of(x, &format!("{at}[{i}]"), out);
            }
        }
        Value::Object(map) => {
            for (k, x) in map {
                strings_of(x, &format!("{at}.{k}"), out);
            }
        }
        _ => {}
    }
}

/// `v` with its strings, in the order [`strings_of`] lists them, taken from `new`.
pub fn with_strings(v: &Value, new: &mut impl Iterator<Item = String>) -> Value {
    match v {
        Value::String(s) => Value::String(new.next().unwrap_or_else(|| s.clone())),
        Value::Array(items) => Value::Array(items.iter().map(|x| with_strings(x, new)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, x)| (k.clone(), with_strings(x, new)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_long_text_is_cut_with_a_note_within_the_limit() {
        let out = bounded_output(Value::String("é".repeat(1000)), 300).unwrap();
        let text = out.as_str().unwrap();
        assert!(text.len() <= 300, "{}", text.len());
        assert!(text.contains("output cut"), "{text}");
        assert!(text.contains("of 2000 bytes kept"), "{text}");
        assert_eq!(bounded_output(json!("short"), 300), Ok(json!("short")));
        assert!(bounded_output(json!({"k": "x".repeat(400)}), 300).is_err());
    }

    #[test]
    fn strings_go_back_where_they_were() {
        let v = json!({"a": "1", "b": [2, "3", {"c": "4"}]});
        let mut found = Vec::new();
        strings_of(&v, "arguments", &mut found);
        let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["arguments.a", "arguments.b[1]", "arguments.b[2].c"]);
        let mut new = ["x", "y", "z"].into_iter().map(str::to_string);
        assert_eq!(
            with_strings(&v, &mut new),
            json!({"a": "x", "b": [2, "y", {"c": "z"}]})
        );
    }
}
