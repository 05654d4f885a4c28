//! A fleet on a NATS server in operator mode (decentralised JWT authentication): each node logs
//! in with a `.creds` file (`[cluster] nats_creds_file`), a user JWT signed by the account and
//! the user's NKey seed; a node whose user is unknown to the server, or whose JWT has expired,
//! says so and never crashes.
//!
//! The operator, the account and the users are made here, as `nsc` would make them: a NATS JWT
//! is base64url(header) . base64url(claims) . base64url(the issuer's Ed25519 signature of the
//! first two parts), the claims those of the nats-io/jwt v2 library.

use super::fleet_transport::{assert_off_the_bus, assert_on_one_bus, node};
use base64::Engine;
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::{PrivateNats, postgres_database};
use nkeys::KeyPair;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// No limit, in a JWT's limits.
const NO_LIMIT: i64 = -1;

fn unix_now() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(now.as_secs()).unwrap()
}

/// A NATS JWT of `subject` signed by `issuer`, with `nats` as its NATS-specific claims.
fn jwt(issuer: &KeyPair, subject: &str, name: &str, nats: Value, expires: Option<i64>) -> String {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let mut claims = json!({
        "jti": format!("{name}-{}", unix_now()),
        "iat": unix_now(),
        "iss": issuer.public_key(),
        "sub": subject,
        "name": name,
        "nats": nats,
    });
    if let Some(exp) = expires {
        claims["exp"] = json!(exp);
    }
    let header = json!({"typ": "JWT", "alg": "ed25519-nkey"});
    let signed = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = issuer.sign(signed.as_bytes()).unwrap();
    format!("{signed}.{}", b64(&signature))
}

/// An account's JWT, issued by `operator`, without limits.
fn account_jwt(operator: &KeyPair, account: &KeyPair) -> String {
    let limits = json!({
        "subs": NO_LIMIT, "data": NO_LIMIT, "payload": NO_LIMIT, "imports": NO_LIMIT,
        "exports": NO_LIMIT, "wildcards": true, "conn": NO_LIMIT, "leaf": NO_LIMIT,
    });
    let nats = json!({"limits": limits, "type": "account", "version": 2});
    jwt(operator, &account.public_key(), "fleet", nats, None)
}

/// A `.creds` file in `dir` for a user of `account`: its JWT (expiring at `expires`) and seed.
fn creds_file(dir: &Path, name: &str, account: &KeyPair, expires: Option<i64>) -> PathBuf {
    let user = KeyPair::new_user();
    let nats = json!({
        "pub": {}, "sub": {},
        "subs": NO_LIMIT, "data": NO_LIMIT, "payload": NO_LIMIT,
        "type": "user", "version": 2,
    });
    let token = jwt(account, &user.public_key(), name, nats, expires);
    let file = dir.join(format!("{name}.creds"));
    std::fs::write(
        &file,
        format!(
            "-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n",
            user.seed().unwrap()
        ),
    )
    .unwrap();
    file
}

fn creds_key(file: &Path) -> String {
    format!("nats_creds_file = \"{}\"", file.display())
}

#[tokio::test]
async fn a_fleet_logging_in_with_creds_files_works_and_an_unknown_or_expired_user_is_told() {
    let dir = tempfile::tempdir().unwrap().keep();
    let operator = KeyPair::new_operator();
    let account = KeyPair::new_account();
    let operator_jwt = jwt(
        &operator,
        &operator.public_key(),
        "operator",
        json!({"type": "operator", "version": 2}),
        None,
    );
    let conf = dir.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "operator: \"{operator_jwt}\"\nresolver: MEMORY\nresolver_preload: {{\n  {}: \
             \"{}\"\n}}\n",
            account.public_key(),
            account_jwt(&operator, &account)
        ),
    )
    .unwrap();
    let Some(nats) = PrivateNats::start_with(&["-c", conf.to_str().unwrap()]) else {
        return;
    };
    let Some(database) = postgres_database().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a_creds = creds_key(&creds_file(&dir, "node-a", &account, None));
    let b_creds = creds_key(&creds_file(&dir, "node-b", &account, None));
    let (a, _) = node(&mock, &database, &nats.url, "a", &a_creds, &[]);
    let (b, _) = node(&mock, &database, &nats.url, "b", &b_creds, &[]);
    assert_on_one_bus(&a, &b).await;

    // A user signed by an account the server does not know.
    let stranger = KeyPair::new_account();
    let unknown = creds_key(&creds_file(&dir, "stranger", &stranger, None));
    let (c, log) = node(&mock, &database, &nats.url, "c", &unknown, &[]);
    assert_off_the_bus(&c, &log, "authorization violation").await;

    // A user of the fleet's account whose JWT expired a minute ago.
    let expired = creds_key(&creds_file(
        &dir,
        "expired",
        &account,
        Some(unix_now() - 60),
    ));
    let (d, log) = node(&mock, &database, &nats.url, "d", &expired, &[]);
    assert_off_the_bus(&d, &log, "authorization violation").await;
}
