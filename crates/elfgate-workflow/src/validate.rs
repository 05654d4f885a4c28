//! The checks a definition passes before it is stored: its name, its steps' ids and kinds, the
//! tools they call, every template (syntax, and the variables it names: declared inputs and
//! earlier steps only; no string built from literals past a bound), the schedule's cron
//! expression (one that fires within the next years) and time zone, and the inputs' defaults.

use crate::definition::{StepKind, WorkflowDefinition};
use minijinja::Environment;
use serde_json::Value;
use std::collections::HashSet;
use std::str::FromStr;

/// What is wrong with a definition: the field, as a path (`steps[1] (sum).model.prompt`), and
/// why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct DefinitionError {
    /// The field.
    pub field: String,
    /// What is wrong with it.
    pub why: String,
}

fn error(field: impl Into<String>, why: impl Into<String>) -> DefinitionError {
    DefinitionError {
        field: field.into(),
        why: why.into(),
    }
}

/// The longest name of a workflow, a step or an input.
const MAX_NAME: usize = 64;

/// The most steps a workflow has.
pub const MAX_STEPS: usize = 100;

/// The most retries of a step.
const MAX_RETRIES: u32 = 10;

/// Checks `def`; `known_tool` says whether a tool name is in the registry.
pub fn validate(
    def: &WorkflowDefinition,
    known_tool: impl Fn(&str) -> bool,
) -> Result<(), DefinitionError> {
    check_name("name", &def.name)?;
    if let Some(max) = def.max_cost_usd
        && !(0.0..=elfgate_core::budget::MAX_BUDGET_USD).contains(&max)
    {
        return Err(error(
            "maxCostUsd",
            format!(
                "{max} is outside 0..={}",
                elfgate_core::budget::MAX_BUDGET_USD
            ),
        ));
    }
    for (name, spec) in &def.inputs {
        let field = format!("inputs.{name}");
        check_name(&field, name)?;
        if let Some(d) = &spec.default
            && !spec.kind.admits(d)
        {
            return Err(error(
                format!("{field}.default"),
                format!("{d} is not of type {}", spec.kind.as_str()),
            ));
        }
    }
    if let Some(s) = &def.schedule {
        let cron = check_cron(&s.cron).map_err(|why| error("schedule.cron", why))?;
        let tz = match &s.timezone {
            Some(tz) => chrono_tz::Tz::from_str(tz).map_err(|_| {
                error(
                    "schedule.timezone",
                    format!("'{tz}' is not an IANA time zone"),
                )
            })?,
            None => chrono_tz::UTC,
        };
        check_fires(&cron, tz, chrono::Utc::now())
            .map_err(|why| error("schedule.cron", format!("'{}' {why}", s.cron)))?;
    }
    if let Some(t) = &def.on_run_end {
        if t.engines
            .as_ref()
            .is_some_and(|e| e.contains(&elfgate_core::EngineType::Workflow))
        {
            return Err(error(
                "onRunEnd.engines",
                "workflow runs do not trigger workflows (a workflow could trigger itself)",
            ));
        }
        if def
            .inputs
            .get("run")
            .is_none_or(|i| i.kind != crate::InputType::Object)
        {
            return Err(error(
                "onRunEnd",
                "the workflow must declare an input 'run' of type object (the ended run's record)",
            ));
        }
    }
    if def.steps.is_empty() {
        return Err(error("steps", "a workflow has at least one step"));
    }
    if def.steps.len() > MAX_STEPS {
        return Err(error("steps", format!("at most {MAX_STEPS} steps")));
    }
    let env = templates();
    let mut earlier: HashSet<&str> = HashSet::new();
    for (i, step) in def.steps.iter().enumerate() {
        let at = format!("steps[{i}]");
        check_name(&format!("{at}.id"), &step.id)?;
        if earlier.contains(step.id.as_str()) {
            return Err(error(
                format!("{at}.id"),
                format!("'{}' is the id of an earlier step too", step.id),
            ));
        }
        let at = format!("{at} ({})", step.id);
        let kind = step.kind().map_err(|said| {
            let said = if said.is_empty() {
                "none".to_string()
            } else {
                said.join(" and ")
            };
            error(
                at.clone(),
                format!("a step has exactly one of tool, model, agent and if (this one: {said})"),
            )
        })?;
        if step.arguments.is_some() && !matches!(kind, StepKind::Tool(..)) {
            return Err(error(
                format!("{at}.arguments"),
                "only a tool step has arguments",
            ));
        }
        if step.otherwise.is_some() && !matches!(kind, StepKind::If(..)) {
            return Err(error(
                format!("{at}.otherwise"),
                "only an if step has otherwise",
            ));
        }
        if let Some(r) = &step.retries
            && !(1..=MAX_RETRIES).contains(&r.max)
        {
            return Err(error(
                format!("{at}.retries.max"),
                format!("1 to {MAX_RETRIES}"),
            ));
        }
        let check = |field: String, src: &str| check_template(&env, def, &earlier, &field, src);
        match kind {
            StepKind::Tool(tool, arguments) => {
                if !known_tool(tool) {
                    return Err(error(
                        format!("{at}.tool"),
                        format!("unknown tool '{tool}'"),
                    ));
                }
                match arguments {
                    None | Some(Value::Object(_)) => {}
                    Some(_) => {
                        return Err(error(
                            format!("{at}.arguments"),
                            "a JSON object is required",
                        ));
                    }
                }
                if let Some(args) = arguments {
                    for (path, src) in strings_in(args, &format!("{at}.arguments")) {
                        check(path, src)?;
                    }
                }
            }
            StepKind::Model(m) => {
                check(format!("{at}.model.prompt"), &m.prompt)?;
                if let Some(s) = &m.system_prompt {
                    check(format!("{at}.model.systemPrompt"), s)?;
                }
                if let Some(schema) = &m.output_schema
                    && !schema.is_object()
                {
                    return Err(error(
                        format!("{at}.model.outputSchema"),
                        "a JSON schema (an object) is required",
                    ));
                }
            }
            StepKind::Agent(a) => {
                check(format!("{at}.agent.prompt"), &a.prompt)?;
                if let Some(s) = &a.system_prompt {
                    check(format!("{at}.agent.systemPrompt"), s)?;
                }
                for (j, t) in a.enabled_tools.iter().flatten().enumerate() {
                    if !known_tool(t) {
                        return Err(error(
                            format!("{at}.agent.enabledTools[{j}]"),
                            format!("unknown tool '{t}'"),
                        ));
                    }
                }
            }
            StepKind::If(condition, _) => check(format!("{at}.if"), condition)?,
        }
        earlier.insert(step.id.as_str());
    }
    Ok(())
}

/// The template environment of workflows, as checks see it (they render nothing: no fuel).
pub fn templates() -> Environment<'static> {
    crate::template::environment(None)
}

/// A name: 1 to 64 letters, digits, `-`, `_` or `.`, starting with a letter or a digit.
fn check_name(field: &str, name: &str) -> Result<(), DefinitionError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(error(
            field,
            format!(
                "'{name}' is not a name: 1 to {MAX_NAME} letters, digits, '-', '_' or '.', \
                 starting with a letter or a digit"
            ),
        ))
    }
}

/// A cron expression with five fields, or six with a second first.
pub fn check_cron(expr: &str) -> Result<croner::Cron, String> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .build()
        .parse(expr)
        .map_err(|e| format!("'{expr}' is not a cron expression: {e}"))
}

/// A schedule must fire within this many years of the time it is stored.
pub const MAX_YEARS_TO_FIRST_FIRE: i32 = 10;

/// The first fire time of `cron` in `tz` after `now`, when it comes within
/// [`MAX_YEARS_TO_FIRST_FIRE`] years; else why not (`0 0 0 31 2 *`, February 31st, never does).
pub fn check_fires(
    cron: &croner::Cron,
    tz: chrono_tz::Tz,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let never = || format!("has no fire time in the next {MAX_YEARS_TO_FIRST_FIRE} years");
    let next = cron
        .find_next_occurrence(&now.with_timezone(&tz), false)
        .map_err(|_| never())?
        .with_timezone(&chrono::Utc);
    let horizon = now
        .checked_add_months(chrono::Months::new(
            12 * MAX_YEARS_TO_FIRST_FIRE.unsigned_abs(),
        ))
        .ok_or_else(never)?;
    if next > horizon {
        return Err(never());
    }
    Ok(next)
}

/// Parses `src` and checks the variables it names: `inputs.NAME` of a declared input, and
/// `steps.ID…` of an earlier step.
fn check_template(
    env: &Environment<'static>,
    def: &WorkflowDefinition,
    earlier: &HashSet<&str>,
    field: &str,
    src: &str,
) -> Result<(), DefinitionError> {
    // Before it is compiled: compiling folds constants, which is what this check bounds.
    crate::template_check::check_literals(src).map_err(|why| error(field, why))?;
    let template = env
        .template_from_str(src)
        .map_err(|e| error(field, format!("not a template: {e}")))?;
    for name in template.undeclared_variables(true) {
        let mut parts = name.split('.');
        match (parts.next(), parts.next()) {
            (Some("inputs"), Some(input)) if def.inputs.contains_key(input) => {}
            (Some("inputs"), Some(input)) => {
                return Err(error(
                    field,
                    format!("names input '{input}', which the workflow does not declare"),
                ));
            }
            (Some("steps"), Some(step)) if earlier.contains(step) => {}
            (Some("steps"), Some(step)) if def.steps.iter().any(|s| s.id == step) => {
                return Err(error(
                    field,
                    format!("names step '{step}', which runs later"),
                ));
            }
            (Some("steps"), Some(step)) => {
                return Err(error(
                    field,
                    format!("names step '{step}', which does not exist"),
                ));
            }
            _ => {
                return Err(error(
                    field,
                    format!(
                        "names '{name}': a template may name inputs.NAME and steps.ID.output only"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Every string in `v`, with its path under `at`.
fn strings_in<'a>(v: &'a Value, at: &str) -> Vec<(String, &'a str)> {
    match v {
        Value::String(s) => vec![(at.to_string(), s.as_str())],
        Value::Array(items) => items
            .iter()
            .enumerate()
            .flat_map(|(i, x)| strings_in(x, &format!("{at}[{i}]")))
            .collect(),
        Value::Object(map) => map
            .iter()
            .flat_map(|(k, x)| strings_in(x, &format!("{at}.{k}")))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(v: Value) -> WorkflowDefinition {
        serde_json::from_value(v).unwrap()
    }

    fn known(t: &str) -> bool {
        matches!(t, "glob" | "write_file" | "read_file")
    }

    fn example() -> Value {
        json!({"name": "morning-notes", "projectPath": "/srv/notes", "permissionMode": "default",
        "inputs": {"day": {"type": "string"}},
        "schedule": {"cron": "0 0 7 * * *", "timezone": "Europe/Berlin", "missed": "skip"},
        "steps": [
          {"id": "list", "tool": "glob", "arguments": {"pattern": "*.md"}},
          {"id": "sum", "model": {"providerId": "openai", "model": "gpt-4.1-mini",
            "prompt": "Summarize: {{ steps.list.output }}"}},
          {"id": "check", "if": "{{ steps.sum.output | length > 0 }}"},
          {"id": "save", "tool": "write_file", "arguments": {"path": "summary-{{ inputs.day }}.md",
            "content": "{{ steps.sum.output }}"}}
        ]})
    }

    #[test]
    fn the_documented_example_is_valid_and_round_trips() {
        let d = def(example());
        assert_eq!(validate(&d, known), Ok(()));
        assert_eq!(serde_json::to_value(&d).unwrap(), example());
    }

    #[test]
    fn each_mistake_is_named_by_its_field() {
        let cases: Vec<(Value, &str, &str)> = vec![
            (json!({"name": "a b"}), "name", "not a name"),
            (json!({"steps": []}), "steps", "at least one step"),
            (
                json!({"steps": [{"id": "x", "tool": "nope"}]}),
                "steps[0] (x).tool",
                "unknown tool 'nope'",
            ),
            (
                json!({"steps": [{"id": "x", "tool": "glob", "model": {"prompt": "p"}}]}),
                "steps[0] (x)",
                "tool and model",
            ),
            (
                json!({"steps": [{"id": "x"}]}),
                "steps[0] (x)",
                "this one: none",
            ),
            (
                json!({"steps": [{"id": "a", "tool": "glob"}, {"id": "a", "tool": "glob"}]}),
                "steps[1].id",
                "earlier step",
            ),
            (
                json!({"steps": [{"id": "a", "tool": "glob",
                        "arguments": {"pattern": "{{ steps.b.output }}"}},
                       {"id": "b", "tool": "glob"}]}),
                "steps[0] (a).arguments.pattern",
                "runs later",
            ),
            (
                json!({"steps": [{"id": "a", "model": {"prompt": "{{ steps.zz.output }}"}}]}),
                "steps[0] (a).model.prompt",
                "does not exist",
            ),
            (
                json!({"steps": [{"id": "a", "model": {"prompt": "{{ inputs.month }}"}}]}),
                "steps[0] (a).model.prompt",
                "does not declare",
            ),
            (
                json!({"steps": [{"id": "a", "model": {"prompt": "{{ oops }"}}]}),
                "steps[0] (a).model.prompt",
                "not a template",
            ),
            (
                json!({"steps": [{"id": "a", "model": {"prompt": "{{ env.HOME }}"}}]}),
                "steps[0] (a).model.prompt",
                "inputs.NAME and steps.ID.output only",
            ),
            (
                json!({"schedule": {"cron": "61 * * * *"}}),
                "schedule.cron",
                "not a cron expression",
            ),
            (
                json!({"schedule": {"cron": "0 0 0 31 2 *"}}),
                "schedule.cron",
                "no fire time in the next 10 years",
            ),
            (
                json!({"steps": [{"id": "a", "model": {"prompt": "{{ 'x' * 100000000 }}"}}]}),
                "steps[0] (a).model.prompt",
                "from literals",
            ),
            (
                json!({"schedule": {"cron": "0 7 * * *", "timezone": "Mars/Olympus"}}),
                "schedule.timezone",
                "IANA",
            ),
            (
                json!({"inputs": {"n": {"type": "integer", "default": "seven"}}}),
                "inputs.n.default",
                "not of type integer",
            ),
            (
                json!({"steps": [{"id": "a", "tool": "glob", "retries": {"max": 0}}]}),
                "steps[0] (a).retries.max",
                "1 to 10",
            ),
            (
                json!({"steps": [{"id": "a", "agent": {"prompt": "p", "enabledTools": ["shell"]}}]}),
                "steps[0] (a).agent.enabledTools[0]",
                "unknown tool 'shell'",
            ),
            (
                json!({"steps": [{"id": "a", "model": {"prompt": "p"}, "arguments": {}}]}),
                "steps[0] (a).arguments",
                "only a tool step",
            ),
            (
                json!({"onRunEnd": {"engines": ["chat"]}}),
                "onRunEnd",
                "an input 'run' of type object",
            ),
            (
                json!({"onRunEnd": {"engines": ["workflow"]}, "inputs": {"run": {"type": "object"}}}),
                "onRunEnd.engines",
                "could trigger itself",
            ),
        ];
        for (patch, field, why) in cases {
            let mut v = json!({"name": "w", "steps": [{"id": "s", "tool": "glob"}]});
            for (k, x) in patch.as_object().unwrap() {
                v[k] = x.clone();
            }
            let e = validate(&def(v.clone()), known).expect_err(&v.to_string());
            assert_eq!(e.field, field, "{v}: {e}");
            assert!(e.why.contains(why), "{v}: {e}");
        }
    }

    #[test]
    fn a_five_field_cron_and_a_six_field_one_are_both_cron() {
        assert!(check_cron("*/5 * * * *").is_ok());
        assert!(check_cron("30 */5 * * * *").is_ok());
        assert!(check_cron("every day").is_err());
    }

    #[test]
    fn unknown_fields_are_refused_when_the_body_is_read() {
        let e = serde_json::from_value::<WorkflowDefinition>(
            json!({"name": "w", "steps": [], "stepz": []}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("stepz"), "{e}");
    }
}
