//! The error that ended a run, as its record keeps it: a code and a message, stored in columns of
//! their own and written on the wire as the one string `code: message` that a run's `error` has
//! always been.

use crate::event::ErrorInfo;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The code of a stored error whose text names none (see [`RunError::parse`]).
pub const UNNAMED_CODE: &str = "other";

/// The error that ended a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    /// A machine code: an [`crate::ErrorCode`]'s wire name, or the finish reason of a run ended
    /// for it by a restart (`daemon_restart`) or by another node (`node_lost`).
    pub code: String,
    /// What happened, for a human.
    pub message: String,
}

impl RunError {
    /// An error with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        RunError {
            code: code.into(),
            message: message.into(),
        }
    }

    /// Reads the one-string form `code: message`. The code is what comes before the first `": "`
    /// when that is a word of lowercase letters, digits and `_`; a text without one is all
    /// message, with the code [`UNNAMED_CODE`].
    pub fn parse(text: &str) -> Self {
        match text.split_once(": ") {
            Some((code, message)) if is_code(code) => RunError::new(code, message),
            _ => RunError::new(UNNAMED_CODE, text),
        }
    }
}

fn is_code(word: &str) -> bool {
    !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl From<&ErrorInfo> for RunError {
    fn from(e: &ErrorInfo) -> Self {
        RunError::new(e.code.as_str(), e.message.clone())
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl Serialize for RunError {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RunError {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(RunError::parse(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn the_wire_form_is_code_colon_message_and_reads_back() {
        let e = RunError::from(&ErrorInfo::new(
            ErrorCode::UpstreamStatus,
            "the provider answered 503: busy",
        ));
        assert_eq!(e.code, "upstream_status");
        let wire = serde_json::to_value(&e).unwrap();
        assert_eq!(wire, "upstream_status: the provider answered 503: busy");
        assert_eq!(serde_json::from_value::<RunError>(wire).unwrap(), e);
    }

    #[test]
    fn a_text_without_a_code_is_all_message() {
        for text in [
            "no code here",
            "Not a code: text",
            ": empty code",
            "two words: x",
        ] {
            let e = RunError::parse(text);
            assert_eq!((e.code.as_str(), e.message.as_str()), (UNNAMED_CODE, text));
        }
        let e = RunError::parse("node_lost: the node went away");
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("node_lost", "the node went away")
        );
    }
}
