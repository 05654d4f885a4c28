//! A workflow's definition: the JSON a client sends to `POST /v1/workflows` and the store keeps,
//! one version per change.

use elfgate_core::{EngineType, FinishReason, PermissionMode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// A workflow: its steps run in order, each with an id that later steps' templates name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowDefinition {
    /// The workflow's name: 1 to 64 letters, digits, `-`, `_` or `.`, starting with a letter or
    /// a digit; unique among the daemon's workflows.
    pub name: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The directory its tool and agent steps work in (must exist where it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_path: Option<String>,
    /// Which tool calls run without asking (as a tinyelf session's); default `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    /// The inputs a run takes, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, InputSpec>,
    /// When it runs by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// Runs it when a run of another session ends, as the filters say; the ended run's record
    /// is its `run` input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_run_end: Option<RunEndTrigger>,
    /// What a tool call that would ask a person does in a run nobody watches: `ask` (a
    /// permission request through the API, waiting up to the permission timeout) or `deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unattended: Option<Unattended>,
    /// Dollars one run of it may spend (its model and agent steps together), like a session's
    /// engineConfig `maxCostUsd`: at the limit the run pauses (`budget_paused`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// The steps, in the order they run.
    pub steps: Vec<Step>,
}

/// One input of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputSpec {
    /// Its JSON type.
    #[serde(rename = "type")]
    pub kind: InputType,
    /// What it means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its value when a run gives none; an input without a default must be given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub default: Option<Value>,
}

/// The JSON type of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InputType {
    /// A string.
    String,
    /// Any number.
    Number,
    /// A whole number.
    Integer,
    /// true or false.
    Boolean,
    /// A JSON object.
    Object,
    /// A JSON array.
    Array,
}

impl InputType {
    /// Whether `v` is of this type.
    pub fn admits(self, v: &Value) -> bool {
        match self {
            InputType::String => v.is_string(),
            InputType::Number => v.is_number(),
            InputType::Integer => v.is_i64() || v.is_u64(),
            InputType::Boolean => v.is_boolean(),
            InputType::Object => v.is_object(),
            InputType::Array => v.is_array(),
        }
    }

    /// The name, as the definition spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            InputType::String => "string",
            InputType::Number => "number",
            InputType::Integer => "integer",
            InputType::Boolean => "boolean",
            InputType::Object => "object",
            InputType::Array => "array",
        }
    }
}

/// A schedule: a cron expression in a time zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Schedule {
    /// Five fields (minute to weekday) or six (a second first).
    pub cron: String,
    /// An IANA time zone (`Europe/Berlin`); default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// What happens to fire times missed while no daemon ran; default `skip`.
    #[serde(default)]
    pub missed: Missed,
}

/// Which ended runs start a workflow (each filter absent: any).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunEndTrigger {
    /// The engines of the sessions whose runs count (never `workflow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engines: Option<Vec<EngineType>>,
    /// The finish reasons that count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reasons: Option<Vec<FinishReason>>,
}

impl RunEndTrigger {
    /// Whether a run of an `engine` session that ended with `reason` counts.
    pub fn matches(&self, engine: EngineType, reason: FinishReason) -> bool {
        engine != EngineType::Workflow
            && self.engines.as_ref().is_none_or(|e| e.contains(&engine))
            && self
                .finish_reasons
                .as_ref()
                .is_none_or(|r| r.contains(&reason))
    }
}

/// What happens to a schedule's fire times missed while no daemon ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum Missed {
    /// They are dropped; the next fire time is the next one to come.
    #[default]
    Skip,
    /// One run makes up for all of them, at start.
    RunOnce,
}

/// What a tool call that would ask a person does in a run nobody watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum Unattended {
    /// A permission request through the API, as in any session.
    Ask,
    /// Denied at once.
    Deny,
}

/// One step. Exactly one of `tool`, `model`, `agent` and `if` says what it does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    /// Its id, unique in the workflow; later steps name its output `steps.ID.output`.
    pub id: String,
    /// A registry tool to call (built-in, or an MCP server's `mcp__SERVER__TOOL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The tool's arguments: strings in it are templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub arguments: Option<Value>,
    /// One model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelStep>,
    /// A run of the agent loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentStep>,
    /// A condition (a template that renders to true or false) on earlier outputs.
    #[serde(default, rename = "if", skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// With `if`: what a false condition does; default `end`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otherwise: Option<Otherwise>,
    /// A failure of this step does not end the run; its output is then the error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continue_on_error: bool,
    /// Tries after a failure, with their backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<Retries>,
}

/// What a step does, as one value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepKind<'a> {
    /// A registry tool and its arguments.
    Tool(&'a str, Option<&'a Value>),
    /// One model call.
    Model(&'a ModelStep),
    /// A run of the agent loop.
    Agent(&'a AgentStep),
    /// A condition.
    If(&'a str, Otherwise),
}

impl Step {
    /// What it does, when it says exactly one thing (else the names of what it says).
    pub fn kind(&self) -> Result<StepKind<'_>, Vec<&'static str>> {
        let said: Vec<&'static str> = [
            ("tool", self.tool.is_some()),
            ("model", self.model.is_some()),
            ("agent", self.agent.is_some()),
            ("if", self.condition.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        match (&self.tool, &self.model, &self.agent, &self.condition) {
            (Some(t), None, None, None) => Ok(StepKind::Tool(t, self.arguments.as_ref())),
            (None, Some(m), None, None) => Ok(StepKind::Model(m)),
            (None, None, Some(a), None) => Ok(StepKind::Agent(a)),
            (None, None, None, Some(c)) => Ok(StepKind::If(c, self.otherwise.unwrap_or_default())),
            _ => Err(said),
        }
    }
}

/// What a false `if` does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum Otherwise {
    /// The run ends there, as a success.
    #[default]
    End,
    /// The next step is skipped; the run goes on after it.
    SkipNext,
}

/// Tries after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Retries {
    /// How many more tries (1 to 10).
    pub max: u32,
    /// Milliseconds before the first retry, doubled for each next one (default 1000).
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
}

fn default_backoff_ms() -> u64 {
    1000
}

/// One model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelStep {
    /// The configured provider (default: the daemon's default provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The model (default: the provider's default model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The prompt: a template.
    pub prompt: String,
    /// The system prompt: a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// A JSON schema the answer must fit; the step's output is then the parsed JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub output_schema: Option<Value>,
    /// The answer's token limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// A run of the agent loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentStep {
    /// The prompt: a template.
    pub prompt: String,
    /// The system prompt: a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The configured provider (default: the daemon's default provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The model (default: the provider's default model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The tools it may use (default: all the registry's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_tools: Option<Vec<String>>,
    /// Its permission mode (default: the workflow's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
}
