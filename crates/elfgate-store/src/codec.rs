//! Conversions between rows and domain records.

use crate::StoreError;
use chrono::{DateTime, Utc};
use std::str::FromStr;

/// Timestamps are stored as fixed-width RFC 3339 UTC text, which sorts like time.
pub fn ts(t: &DateTime<Utc>) -> String {
    elfgate_core::timefmt::rfc3339_millis(t)
}

pub fn parse_ts(s: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("timestamp '{s}': {e}")))
}

pub fn parse<T: FromStr>(what: &str, s: &str) -> Result<T, StoreError>
where
    T::Err: std::fmt::Display,
{
    T::from_str(s).map_err(|e| StoreError::Corrupt(format!("{what} '{s}': {e}")))
}

pub fn parse_opt<T: FromStr>(what: &str, s: Option<String>) -> Result<Option<T>, StoreError>
where
    T::Err: std::fmt::Display,
{
    s.map(|s| parse(what, &s)).transpose()
}

/// A run's channel as stored: a JSON object, or NULL for a run no channel sent.
pub fn channel_text(channel: &elfgate_core::ChannelOrigin) -> Option<String> {
    if channel.is_empty() {
        return None;
    }
    // Three optional strings always serialize; None would only drop the origin.
    serde_json::to_string(channel).ok()
}
