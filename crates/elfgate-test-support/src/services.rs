//! The PostgreSQL server of the tests that need one (the store's conformance suite on PostgreSQL,
//! the daemon on PostgreSQL): `ELFGATE_TEST_POSTGRES_URL`, an administrator's URL, which
//! scripts/test.sh sets after starting a private server. Each test gets a database of its own.
//! Without it the test skips, saying so, unless REQUIRE_CLUSTER_TESTS=require (scripts/test.sh
//! sets it), which makes a missing server a failure.

use sqlx::Connection;

/// The administrator's URL of the tests' PostgreSQL server, if there is one.
pub fn postgres_admin_url() -> Option<String> {
    let url = std::env::var("ELFGATE_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        assert_ne!(
            std::env::var("REQUIRE_CLUSTER_TESTS").as_deref(),
            Ok("require"),
            "ELFGATE_TEST_POSTGRES_URL is required (scripts/test.sh starts a private PostgreSQL)"
        );
        eprintln!(
            "PostgreSQL test skipped: ELFGATE_TEST_POSTGRES_URL is not set (scripts/test.sh sets it)"
        );
    }
    url
}

/// `url` (postgres://…/DB?…) naming database `name` instead.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let server = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    }
}

/// A new, empty database on the tests' server: its URL. None when there is no server (the test
/// skips).
pub async fn postgres_database() -> Option<String> {
    let admin = postgres_admin_url()?;
    let name = format!("elfgate_test_{}", uuid_like());
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to ELFGATE_TEST_POSTGRES_URL: {e}"));
    // The name is ours (digits and underscores), never input.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    Some(with_database(&admin, &name))
}

/// A name no other test of this run uses: the process, the time and a counter.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}_{nanos}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn a_url_is_pointed_at_another_database() {
        assert_eq!(
            with_database("postgres://u@127.0.0.1:5/postgres", "t1"),
            "postgres://u@127.0.0.1:5/t1"
        );
        assert_eq!(
            with_database("postgres://u:p@h:5/postgres?sslmode=disable", "t1"),
            "postgres://u:p@h:5/t1?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:5", "t1"), "postgres://h:5/t1");
    }
}
