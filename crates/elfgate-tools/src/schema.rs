//! Tool input schemas, derived with schemars from the structs the tools parse their input into,
//! so that what the model is told and what the tool accepts cannot drift apart. Property
//! descriptions are the fields' doc comments.

use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// The JSON schema of `T` as the model sees it: a plain object schema, without the meta-schema,
/// title or the struct's own description (the tool's description says what it does).
pub fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| s.meta_schema = None)
        .with_transform(RecursiveTransform(plain))
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(root) = schema.as_object_mut() {
        root.remove("title");
        root.remove("description");
    }
    schema
}

/// Rewrites what schemars adds for Rust types into what the model needs to know.
fn plain(schema: &mut Schema) {
    let Some(o) = schema.as_object_mut() else {
        return;
    };
    // An Option field may be left out; the tools never want an explicit null, so the model is
    // not offered one (neither as a type nor as the default of a `#[serde(default)]` field).
    if let Some(Value::Array(types)) = o.get("type") {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if let [only] = kept.as_slice() {
            o.insert("type".into(), only.clone());
        }
    }
    if o.get("default") == Some(&Value::Null) {
        o.remove("default");
    }
    // "uint32" and the like are not JSON Schema formats; providers that accept a subset of JSON
    // Schema reject formats they do not know, and the bounds already say what matters.
    if o.get("type") == Some(&json!("integer")) {
        o.remove("format");
    }
}

/// How a tool's schema fails to describe its argument struct (see [`check_args_schema`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the schema does not fit the arguments: {0}")]
pub struct SchemaMismatch(String);

/// Why a tool's input does not fit its schema (see [`check_input`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InputError {
    /// The input is not an object.
    #[error("the arguments must be a JSON object")]
    NotAnObject,
    /// A required property is missing.
    #[error("missing required argument '{0}'")]
    Missing(String),
    /// A property the schema does not have, which it forbids.
    #[error("unknown argument '{0}'")]
    Unknown(String),
    /// A property of the wrong JSON type.
    #[error("argument '{name}' must be of type {expected}, got {got}")]
    WrongType {
        /// The property.
        name: String,
        /// The types it may have, joined with "or".
        expected: String,
        /// What it was.
        got: Value,
    },
    /// A number under the property's minimum.
    #[error("argument '{name}' must be at least {minimum}, got {got}")]
    BelowMinimum {
        /// The property.
        name: String,
        /// Its minimum.
        minimum: f64,
        /// What it was.
        got: Value,
    },
}

/// Checks that `schema`, the input schema a tool shows the model, describes what deserializing
/// `T` accepts: an object schema whose `required` list is exactly the properties `T` cannot do
/// without. Every tool's tests run it on the tool's schema and argument struct.
pub fn check_args_schema<T: DeserializeOwned>(schema: &Value) -> Result<(), SchemaMismatch> {
    let fail = |why: String| SchemaMismatch(why);
    if schema["type"] != "object" {
        return Err(fail(format!("not an object schema: {schema}")));
    }
    let props = schema["properties"]
        .as_object()
        .ok_or_else(|| fail(format!("no properties: {schema}")))?;
    let required: Vec<&str> = match schema.get("required") {
        None => Vec::new(),
        Some(r) => r
            .as_array()
            .ok_or_else(|| fail(format!("required is not a list: {schema}")))?
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| fail(format!("required holds {v}")))
            })
            .collect::<Result<_, _>>()?,
    };
    if let Some(r) = required.iter().find(|r| !props.contains_key(**r)) {
        return Err(fail(format!("'{r}' is required but not a property")));
    }
    let full: Map<String, Value> = props
        .iter()
        .map(|(k, p)| {
            Ok((
                k.clone(),
                sample(p).ok_or_else(|| fail(format!("no sample for {k}: {p}")))?,
            ))
        })
        .collect::<Result<_, SchemaMismatch>>()?;
    serde_json::from_value::<T>(Value::Object(full.clone()))
        .map_err(|e| fail(format!("a value with every property does not parse: {e}")))?;
    for name in props.keys() {
        let mut without = full.clone();
        without.remove(name);
        let parses = serde_json::from_value::<T>(Value::Object(without)).is_ok();
        let listed = required.contains(&name.as_str());
        if parses == listed {
            return Err(fail(format!(
                "'{name}' is {} in the schema, but the arguments {} it",
                if listed { "required" } else { "optional" },
                if parses { "do without" } else { "need" },
            )));
        }
    }
    Ok(())
}

/// A value a property schema accepts.
fn sample(p: &Value) -> Option<Value> {
    Some(match p["type"].as_str()? {
        "string" => json!("x"),
        "integer" => p.get("minimum").cloned().unwrap_or(json!(1)),
        "number" => json!(1.0),
        "boolean" => json!(true),
        "array" => json!([]),
        "object" => json!({}),
        _ => return None,
    })
}

/// Checks `input` against a tool's object schema before anything runs (a tool run outside a turn
/// answers 422 instead of a tool error): an object, every required property, no unknown property
/// when `additionalProperties` is false, and the JSON type (and `minimum`) of each known property.
/// Deeper constraints are left to the tool's own parsing.
pub fn check_input(schema: &Value, input: &Value) -> Result<(), InputError> {
    let Some(obj) = input.as_object() else {
        return Err(InputError::NotAnObject);
    };
    let props = schema.get("properties").and_then(Value::as_object);
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !obj.contains_key(name) {
            return Err(InputError::Missing(name.to_string()));
        }
    }
    for (name, value) in obj {
        let Some(prop) = props.and_then(|p| p.get(name)) else {
            if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
                return Err(InputError::Unknown(name.clone()));
            }
            continue;
        };
        let types: Vec<&str> = match prop.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => continue,
        };
        if !types.iter().any(|t| type_matches(t, value)) {
            return Err(InputError::WrongType {
                name: name.clone(),
                expected: types.join(" or "),
                got: value.clone(),
            });
        }
        if let (Some(min), Some(v)) = (prop.get("minimum").and_then(Value::as_f64), value.as_f64())
            && v < min
        {
            return Err(InputError::BelowMinimum {
                name: name.clone(),
                minimum: min,
                got: value.clone(),
            });
        }
    }
    Ok(())
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "null" => v.is_null(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// Demo.
    #[derive(Deserialize, JsonSchema)]
    #[expect(dead_code, reason = "only its schema is read")]
    struct Args {
        /// The path.
        path: String,
        #[serde(default)]
        #[schemars(range(min = 1, max = 9))]
        limit: Option<u32>,
        #[serde(default)]
        flag: bool,
        tags: Option<Vec<String>>,
    }

    #[test]
    fn options_are_optional_without_null_and_docs_become_descriptions() {
        assert_eq!(
            schema_of::<Args>(),
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "The path."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 9},
                "flag": {"type": "boolean", "default": false},
                "tags": {"type": "array", "items": {"type": "string"}}
            }, "required": ["path"]})
        );
        check_args_schema::<Args>(&schema_of::<Args>()).unwrap();
    }

    #[test]
    fn a_required_list_that_differs_from_the_struct_is_caught() {
        let mut s = schema_of::<Args>();
        s["required"] = json!(["path", "limit"]);
        let e = check_args_schema::<Args>(&s).unwrap_err();
        assert!(e.to_string().contains("'limit' is required"), "{e}");
        s["required"] = json!([]);
        let e = check_args_schema::<Args>(&s).unwrap_err();
        assert!(e.to_string().contains("'path' is optional"), "{e}");
    }

    #[test]
    fn inputs_are_checked_against_the_schema() {
        let schema = crate::fs_tools::read_schema_for_tests();
        assert!(check_input(&schema, &json!({"path": "a"})).is_ok());
        assert!(check_input(&schema, &json!({"path": "a", "start_line": 2})).is_ok());
        let e = |v: Value| check_input(&schema, &v).unwrap_err().to_string();
        assert!(e(json!([1])).contains("JSON object"));
        assert!(e(json!({})).contains("missing required argument 'path'"));
        assert!(e(json!({"path": 1})).contains("type string"));
        assert!(e(json!({"path": "a", "start_line": 0})).contains("at least 1"));
        assert!(e(json!({"path": "a", "x": 0})).contains("unknown argument 'x'"));
    }
}
