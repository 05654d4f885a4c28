//! The JSON body of a front door's request: the same Content-Type rule as the rest of the API
//! (see crate::extract), with failures as [`ApiError`]s.

use crate::error::ApiError;
use axum::http::{HeaderMap, header};
use serde_json::Value;

/// Parses `bytes` as a JSON object, refusing a body not declared as JSON.
pub fn json_object(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, ApiError> {
    let declared = headers
        .get(header::CONTENT_TYPE)
        .map(|v| crate::extract::is_json_media_type(v.as_bytes()));
    if declared != Some(true) {
        return Err(ApiError::UnsupportedMediaType(
            "the body must be declared as Content-Type: application/json".into(),
        ));
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid(None, format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::invalid(
            None,
            "the body must be a JSON object".to_string(),
        ));
    }
    Ok(value)
}

/// How an API names a field deep in a body: OpenAI `messages[2].content`, Anthropic
/// `messages.2.content`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStyle {
    /// `a[0].b`
    Brackets,
    /// `a.0.b`
    Dots,
}

/// Reads the body into its API's typed request. A value of the wrong type (or shape) is a 400
/// naming where it is, in the API's own style; fields the type does not know are tolerated, as
/// those APIs tolerate them.
pub fn typed<T: serde::de::DeserializeOwned>(
    body: &Value,
    style: PathStyle,
) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let param = param_of(e.path(), style);
        let message = match &param {
            Some(p) => format!("'{p}': {}", e.inner()),
            None => e.inner().to_string(),
        };
        ApiError::invalid(param, message)
    })
}

fn param_of(path: &serde_path_to_error::Path, style: PathStyle) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => match style {
                PathStyle::Brackets => out.push_str(&format!("[{index}]")),
                PathStyle::Dots => out.push_str(&format!(".{index}")),
            },
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

/// A required field that was absent (or null).
pub fn required<T>(value: Option<T>, name: &str) -> Result<T, ApiError> {
    value.ok_or_else(|| ApiError::invalid(Some(name.to_string()), format!("'{name}' is required")))
}

/// A string or a list of strings (`stop`, `stop_sequences`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged, expecting = "a string or an array of strings")]
pub enum OneOrMany {
    /// One.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl OneOrMany {
    /// As a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, serde::Deserialize)]
    struct Body {
        #[serde(rename = "messages")]
        _messages: Vec<Message>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Message {
        #[serde(rename = "content")]
        _content: String,
    }

    #[test]
    fn a_wrong_type_is_named_in_the_apis_style() {
        let body = json!({"messages": [{"content": "a"}, {"content": 5}], "other": true});
        for (style, param) in [
            (PathStyle::Brackets, "messages[1].content"),
            (PathStyle::Dots, "messages.1.content"),
        ] {
            match typed::<Body>(&body, style) {
                Err(ApiError::InvalidParam { param: p, message }) => {
                    assert_eq!(p, param);
                    assert!(message.contains("expected a string"), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
