//! Timestamps as fixed-width RFC 3339 UTC text with milliseconds (`2026-12-01T09:49:21.263Z`),
//! the form events and stored rows carry. Every event is stamped, and chrono's general formatter
//! goes through `core::fmt` for each field; this writes the 24 bytes directly and gives the same
//! text.

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};

/// Appends `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`, exactly as
/// `t.to_rfc3339_opts(SecondsFormat::Millis, true)` writes it.
pub fn push_rfc3339_millis(out: &mut Vec<u8>, t: &DateTime<Utc>) {
    let n = t.naive_utc();
    let (date, time) = (n.date(), n.time());
    let year = date.year();
    let nanos = time.nanosecond();
    // Years outside four digits and leap seconds have their own spellings: chrono's.
    let Ok(year @ 0..=9999) = u32::try_from(year) else {
        out.extend_from_slice(t.to_rfc3339_opts(SecondsFormat::Millis, true).as_bytes());
        return;
    };
    if nanos >= 1_000_000_000 {
        out.extend_from_slice(t.to_rfc3339_opts(SecondsFormat::Millis, true).as_bytes());
        return;
    }
    let mut b = *b"0000-00-00T00:00:00.000Z";
    digits(&mut b[0..4], year);
    digits(&mut b[5..7], date.month());
    digits(&mut b[8..10], date.day());
    digits(&mut b[11..13], time.hour());
    digits(&mut b[14..16], time.minute());
    digits(&mut b[17..19], time.second());
    digits(&mut b[20..23], nanos / 1_000_000);
    out.extend_from_slice(&b);
}

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (see [`push_rfc3339_millis`]).
pub fn rfc3339_millis(t: &DateTime<Utc>) -> String {
    let mut out = Vec::with_capacity(24);
    push_rfc3339_millis(&mut out, t);
    // Only ASCII digits and punctuation were written, or chrono's own text.
    String::from_utf8(out).unwrap_or_else(|_| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// Writes `v` in decimal into `out`, right-aligned and zero-padded to its length.
fn digits(out: &mut [u8], mut v: u32) {
    for d in out.iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn matches_chronos_rfc3339_with_millis() {
        let times = [
            Utc::now(),
            Utc.with_ymd_and_hms(1970, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap()
                + chrono::Duration::milliseconds(999),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 6, 15, 12, 30, 5).unwrap()
                + chrono::Duration::microseconds(7_654),
            // A leap second.
            Utc.from_utc_datetime(
                &chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
                    .unwrap()
                    .and_hms_milli_opt(23, 59, 59, 1_500)
                    .unwrap(),
            ),
        ];
        for t in times {
            assert_eq!(
                rfc3339_millis(&t),
                t.to_rfc3339_opts(SecondsFormat::Millis, true),
                "{t:?}"
            );
        }
    }
}
