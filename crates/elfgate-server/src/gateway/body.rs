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

/// Field readers that name the field in their error.
pub struct Fields<'a>(pub &'a Value);

impl<'a> Fields<'a> {
    fn wrong(name: &str, want: &str) -> ApiError {
        ApiError::invalid(Some(name.to_string()), format!("'{name}' must be {want}"))
    }

    /// A present, non-null field.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    /// A required string.
    pub fn req_str(&self, name: &str) -> Result<&'a str, ApiError> {
        match self.get(name) {
            None => Err(ApiError::invalid(
                Some(name.to_string()),
                format!("'{name}' is required"),
            )),
            Some(v) => v.as_str().ok_or_else(|| Self::wrong(name, "a string")),
        }
    }

    /// An optional bool.
    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        self.get(name)
            .map(|v| v.as_bool().ok_or_else(|| Self::wrong(name, "a boolean")))
            .transpose()
    }

    /// An optional number.
    pub fn f32(&self, name: &str) -> Result<Option<f32>, ApiError> {
        self.get(name)
            .map(|v| {
                v.as_f64()
                    .map(|f| f as f32)
                    .ok_or_else(|| Self::wrong(name, "a number"))
            })
            .transpose()
    }

    /// An optional non-negative integer.
    pub fn u32(&self, name: &str) -> Result<Option<u32>, ApiError> {
        self.get(name)
            .map(|v| {
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| Self::wrong(name, "a non-negative integer"))
            })
            .transpose()
    }

    /// A required array.
    pub fn req_array(&self, name: &str) -> Result<&'a Vec<Value>, ApiError> {
        match self.get(name) {
            None => Err(ApiError::invalid(
                Some(name.to_string()),
                format!("'{name}' is required"),
            )),
            Some(v) => v.as_array().ok_or_else(|| Self::wrong(name, "an array")),
        }
    }

    /// An optional array.
    pub fn array(&self, name: &str) -> Result<Option<&'a Vec<Value>>, ApiError> {
        self.get(name)
            .map(|v| v.as_array().ok_or_else(|| Self::wrong(name, "an array")))
            .transpose()
    }

    /// A string or an array of strings, as a list.
    pub fn strings(&self, name: &str) -> Result<Vec<String>, ApiError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| Self::wrong(name, "a string or an array of strings"))
                })
                .collect(),
            Some(_) => Err(Self::wrong(name, "a string or an array of strings")),
        }
    }
}
