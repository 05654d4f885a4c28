//! SQL the SQLite store's modules share.

/// The highest seq logged for a session (one `?`: the session). A merged row covers
/// `seq..=last_seq` and rows never overlap, so the row with the highest first seq holds it.
pub(super) const LAST_LOGGED_SEQ: &str =
    "SELECT COALESCE(last_seq, seq) FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1";
