//! The OpenAPI document served at /openapi.json.

use serde_json::{Value, json};

/// The document.
pub fn document() -> Value {
    json!({"openapi": "3.1.0", "info": {"title": "Elfgate", "version": env!("CARGO_PKG_VERSION")}, "paths": {}})
}
