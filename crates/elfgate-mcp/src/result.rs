//! What a server says, in the shapes the rest of the daemon takes: its tools (name, schema,
//! read-only hint) and a call's result as the text of a tool_result block.
//!
//! Both are read from the JSON of the protocol types, the wire format the specification fixes,
//! rather than from the SDK's structs, whose shape changes between its versions.

use serde_json::{Value, json};

/// One tool a server offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTool {
    /// The server's name for it.
    pub name: String,
    /// Its description.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: Value,
    /// The server says it does not change anything (annotations.readOnlyHint).
    pub read_only_hint: bool,
}

impl ServerTool {
    /// Reads a `tools/list` entry.
    pub fn from_json(v: &Value) -> Option<ServerTool> {
        let name = v.get("name")?.as_str()?.to_string();
        let description = v
            .get("description")
            .and_then(Value::as_str)
            .or_else(|| v.get("title").and_then(Value::as_str))
            .unwrap_or_default()
            .to_string();
        let input_schema = match v.get("inputSchema") {
            Some(s @ Value::Object(_)) => s.clone(),
            _ => json!({"type": "object"}),
        };
        let read_only_hint = v
            .pointer("/annotations/readOnlyHint")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Some(ServerTool {
            name,
            description,
            input_schema,
            read_only_hint,
        })
    }
}

fn content_text(c: &Value) -> String {
    let ty = c.get("type").and_then(Value::as_str).unwrap_or_default();
    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
    match ty {
        "text" => s("text").to_string(),
        "image" | "audio" => format!(
            "[{ty}: {}, {} bytes of base64 data not shown]",
            s("mimeType"),
            s("data").len()
        ),
        "resource" => {
            let r = c.get("resource").cloned().unwrap_or(Value::Null);
            let rs = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
            match r.get("text").and_then(Value::as_str) {
                Some(text) => format!("[resource {}]\n{text}", rs("uri")),
                None => format!(
                    "[resource {}: {}, {} bytes of base64 data not shown]",
                    rs("uri"),
                    rs("mimeType"),
                    rs("blob").len()
                ),
            }
        }
        "resource_link" => {
            let mut t = format!("[resource link {}", s("uri"));
            if !s("name").is_empty() {
                t.push_str(&format!(" ({})", s("name")));
            }
            if !s("description").is_empty() {
                t.push_str(&format!(": {}", s("description")));
            }
            t.push(']');
            t
        }
        _ => c.to_string(),
    }
}

/// A `tools/call` result as the text the model sees, and whether it is an error.
pub fn result_text(result: &Value) -> (String, bool) {
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut parts: Vec<String> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(content_text).collect())
        .unwrap_or_default();
    if let Some(sc) = result.get("structuredContent") {
        let already = parts.iter().any(|p| {
            serde_json::from_str::<Value>(p)
                .map(|v| &v == sc)
                .unwrap_or(false)
        });
        if !already {
            parts.push(format!("[structuredContent]\n{sc}"));
        }
    }
    if parts.is_empty() {
        parts.push("(no content)".into());
    }
    (parts.join("\n"), is_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_content_becomes_text() {
        let (t, err) = result_text(&json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}},
                {"type": "resource", "resource": {"uri": "file:///b", "blob": "AA",
                 "mimeType": "application/octet-stream"}},
                {"type": "resource_link", "uri": "file:///c", "name": "c"},
            ],
            "structuredContent": {"sum": 3},
            "isError": true,
        }));
        assert!(err);
        assert_eq!(
            t,
            "hello\n[image: image/png, 4 bytes of base64 data not shown]\n[resource file:///a]\n\
             body\n[resource file:///b: application/octet-stream, 2 bytes of base64 data not \
             shown]\n[resource link file:///c (c)]\n[structuredContent]\n{\"sum\":3}"
        );
        // Structured content a server also gave as text is not repeated.
        let (t, err) = result_text(&json!({
            "content": [{"type": "text", "text": "{\"sum\":3}"}],
            "structuredContent": {"sum": 3},
        }));
        assert!(!err);
        assert_eq!(t, "{\"sum\":3}");
        assert_eq!(result_text(&json!({"content": []})).0, "(no content)");
    }

    #[test]
    fn a_tool_entry_keeps_its_schema_and_read_only_hint() {
        let t = ServerTool::from_json(&json!({"name": "echo", "description": "Echo",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}}))
        .unwrap();
        assert!(t.read_only_hint);
        assert_eq!(t.input_schema["properties"]["message"]["type"], "string");
        let t = ServerTool::from_json(&json!({"name": "x"})).unwrap();
        assert!(!t.read_only_hint);
        assert_eq!(t.input_schema, json!({"type": "object"}));
    }
}
