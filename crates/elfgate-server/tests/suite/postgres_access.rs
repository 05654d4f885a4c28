//! The daemon on a PostgreSQL server that wants a password and TLS: the password from a file
//! (`[storage] password_file`) or `PGPASSWORD`, never written in the configuration; `sslmode`
//! and the CA of the URL (`sslrootcert`) honoured.

use super::fleet_transport::test_pki;
use crate::common;

use common::{Daemon, Opts, chat};
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::{PostgresSetup, PrivatePostgres};

const PASSWORD: &str = "pg-s3cret";

/// A daemon's options for the database at `url`, with more `env`.
fn on(url: &str, dir: &std::path::Path, env: &[(&str, String)]) -> Opts {
    let mut vars = vec![
        ("ELFGATE_DATABASE_URL".to_string(), url.to_string()),
        (
            "ELFGATE_STORAGE__DATA_DIR".to_string(),
            dir.display().to_string(),
        ),
    ];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.clone())));
    Opts {
        env: vars,
        ..Opts::default()
    }
}

/// A daemon on `url` with `env` runs a session to its end.
async fn serves(mock: &MockServer, url: &str, env: &[(&str, String)]) {
    let dir = tempfile::tempdir().unwrap().keep();
    let mut d = Daemon::start_in(dir.clone(), mock, on(url, &dir, env));
    let (sid, run) = d.create(chat("hi", "mock:tokens=2")).await;
    let mut sse = d.events(&sid, None).await;
    let evs = sse.until_complete(&run).await;
    assert_eq!(evs.last().unwrap().data["finishReason"], "stop");
    drop(sse);
    d.terminate();
}

/// A daemon on `url` with `env` refuses to start; its error output.
fn refused(mock: &MockServer, url: &str, env: &[(&str, String)]) -> String {
    let dir = tempfile::tempdir().unwrap().keep();
    Daemon::start_refused(&dir, mock, on(url, &dir, env))
}

#[tokio::test]
async fn a_postgresql_requiring_a_password_and_tls_is_reached_with_the_password_from_a_file_or_pgpassword()
 {
    let pki = tempfile::tempdir().unwrap().keep();
    test_pki(&pki);
    let read = |name: &str| std::fs::read_to_string(pki.join(name)).unwrap();
    let Some(pg) = PrivatePostgres::start_with(&PostgresSetup {
        password: Some(PASSWORD.into()),
        tls: Some((read("server.pem"), read("server.key"))),
    }) else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let ca = pki.join("ca.pem").display().to_string();
    let verified = format!("{}?sslmode=verify-full&sslrootcert={ca}", pg.url);
    let password_file = pki.join("pg-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let from_file = (
        "ELFGATE_STORAGE__PASSWORD_FILE",
        password_file.display().to_string(),
    );

    // The password from a file, the server's certificate verified against the CA.
    serves(&mock, &verified, std::slice::from_ref(&from_file)).await;
    // The password from PGPASSWORD.
    serves(&mock, &verified, &[("PGPASSWORD", PASSWORD.to_string())]).await;

    // Without the password; without TLS (sslmode honoured: the server takes no plain
    // connection); with a CA that did not sign the server's certificate: refused, saying why.
    let err = refused(&mock, &verified, &[]);
    assert!(err.contains("password"), "{err}");
    let plain = format!("{}?sslmode=disable", pg.url);
    let err = refused(&mock, &plain, std::slice::from_ref(&from_file));
    assert!(err.contains("no encryption"), "{err}");
    let other_pki = tempfile::tempdir().unwrap().keep();
    test_pki(&other_pki);
    let wrong_ca = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        pg.url,
        other_pki.join("ca.pem").display()
    );
    let err = refused(&mock, &wrong_ca, std::slice::from_ref(&from_file));
    assert!(err.contains("certificate"), "{err}");
    // A password file that is missing is named.
    let missing = (
        "ELFGATE_STORAGE__PASSWORD_FILE",
        "/nonexistent/pw".to_string(),
    );
    let err = refused(&mock, &verified, &[missing]);
    assert!(err.contains("storage.password_file"), "{err}");
}
