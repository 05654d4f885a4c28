//! What an inbound hook delivery (`POST /v1/hooks/{name}`) must carry: its signature's form,
//! read before anything else so that a request without one learns nothing (not even whether
//! the hook exists), and its timestamp's distance from the daemon's clock.

use super::signature;
use axum::http::HeaderMap;

/// The signature a delivery came with.
#[derive(Debug)]
pub enum Signed<'a> {
    /// Standard Webhooks' three headers: the id and timestamp are signed with the body.
    Standard {
        /// `webhook-id`.
        id: &'a str,
        /// `webhook-timestamp`, in seconds since the epoch.
        timestamp: i64,
        /// `webhook-signature`: one or more space-separated `v1,BASE64`.
        signatures: &'a str,
    },
    /// `X-Elfgate-Signature-256` or GitHub's `X-Hub-Signature-256`: `sha256=HEX` of the body
    /// alone, which a captured delivery replays for ever.
    BodyOnly {
        /// The header's value.
        header: &'a str,
    },
}

/// The headers a body-only signature may come in.
const BODY_ONLY_HEADERS: [&str; 2] = ["x-elfgate-signature-256", "x-hub-signature-256"];

/// The longest `webhook-id` taken.
const MAX_ID_LEN: usize = 256;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, String> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map(str::trim)
                .map_err(|_| format!("{name}: not visible ASCII"))
        })
        .transpose()
}

/// The delivery's signature, checked for its form only (no key is needed for that): an error
/// names what is missing or malformed.
pub fn signature_form(headers: &HeaderMap) -> Result<Signed<'_>, String> {
    let id = header(headers, "webhook-id")?;
    let timestamp = header(headers, "webhook-timestamp")?;
    let signatures = header(headers, "webhook-signature")?;
    if id.is_some() || timestamp.is_some() || signatures.is_some() {
        let (Some(id), Some(timestamp), Some(signatures)) = (id, timestamp, signatures) else {
            return Err(
                "webhook-id, webhook-timestamp and webhook-signature come together: one is missing"
                    .into(),
            );
        };
        if id.is_empty() || id.len() > MAX_ID_LEN {
            return Err(format!("webhook-id: 1 to {MAX_ID_LEN} characters"));
        }
        let timestamp = timestamp.parse().map_err(|_| {
            "webhook-timestamp: not a number of seconds since the epoch".to_string()
        })?;
        if signature::standard_signatures(signatures).next().is_none() {
            return Err("webhook-signature: no v1,BASE64 signature in it".into());
        }
        return Ok(Signed::Standard {
            id,
            timestamp,
            signatures,
        });
    }
    for name in BODY_ONLY_HEADERS {
        if let Some(value) = header(headers, name)? {
            return match signature::body_only_signature(value) {
                Some(_) => Ok(Signed::BodyOnly { header: value }),
                None => Err(format!("{name}: not sha256=HEX")),
            };
        }
    }
    Err(
        "no signature: sign the delivery with Standard Webhooks' headers webhook-id, \
         webhook-timestamp and webhook-signature (v1,BASE64 of HMAC-SHA256 over \
         ID.TIMESTAMP.BODY under the hook's secret)"
            .into(),
    )
}

/// A timestamp within the tolerance of `now` (both in seconds since the epoch), either way.
pub fn check_timestamp(timestamp: i64, now: i64) -> Result<(), String> {
    if timestamp.abs_diff(now) > signature::TOLERANCE_SECS.unsigned_abs() {
        return Err(format!(
            "webhook-timestamp {timestamp} is more than {} seconds from the daemon's clock \
             ({now}): a delivery is taken within five minutes of being signed",
            signature::TOLERANCE_SECS
        ));
    }
    Ok(())
}

/// Whether `signed` is a signature of `body` under `key` (compared in constant time).
pub fn verifies(signed: &Signed<'_>, key: &[u8], body: &[u8]) -> bool {
    match signed {
        Signed::Standard {
            id,
            timestamp,
            signatures,
        } => signature::verify_standard(key, id, *timestamp, body, signatures),
        Signed::BodyOnly { header } => signature::verify_body_only(key, body, header),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn each_malformed_form_is_named() {
        for (pairs, want) in [
            (vec![], "no signature"),
            (vec![("webhook-id", "m")], "one is missing"),
            (
                vec![
                    ("webhook-id", "m"),
                    ("webhook-timestamp", "soon"),
                    ("webhook-signature", "v1,AAAA"),
                ],
                "webhook-timestamp: not a number",
            ),
            (
                vec![
                    ("webhook-id", "m"),
                    ("webhook-timestamp", "1"),
                    ("webhook-signature", "v2,AAAA"),
                ],
                "no v1,BASE64",
            ),
            (
                vec![("x-hub-signature-256", "md5=00")],
                "x-hub-signature-256: not sha256=HEX",
            ),
        ] {
            let e = signature_form(&headers(&pairs)).unwrap_err();
            assert!(e.contains(want), "{pairs:?}: {e}");
        }
    }

    #[test]
    fn the_tolerance_is_five_minutes_either_way() {
        assert!(check_timestamp(1000, 1300).is_ok());
        assert!(check_timestamp(1300, 1000).is_ok());
        assert!(check_timestamp(1000, 1301).is_err());
        assert!(check_timestamp(1301, 1000).is_err());
        assert!(check_timestamp(i64::MIN, 1000).is_err());
    }
}
