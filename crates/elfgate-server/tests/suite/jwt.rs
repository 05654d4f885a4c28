//! Single sign-on (`[auth.jwt]`): a JWT of the identity provider, checked against its JWKS (a
//! file, or a URL fetched through the outbound guard), is a principal beside API keys; an
//! expired, foreign, forged or unknown-key token is refused with the 401 of a bad key.

use crate::common;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};

const ISSUER: &str = "https://idp.example";
const AUDIENCE: &str = "elfgate";

/// An identity provider's RSA signing key, made by the test.
struct SigningKey {
    kid: String,
    pair: KeyPair,
}

impl SigningKey {
    fn new(kid: &str) -> SigningKey {
        SigningKey {
            kid: kid.into(),
            pair: KeyPair::generate(KeySize::Rsa2048).unwrap(),
        }
    }

    /// The public key as a JWK.
    fn jwk(&self) -> Value {
        let public = self.pair.public_key();
        json!({
            "kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid,
            "n": B64.encode(public.modulus().big_endian_without_leading_zero()),
            "e": B64.encode(public.exponent().big_endian_without_leading_zero()),
        })
    }

    /// An RS256 token of `claims`, its header naming `kid`.
    fn sign(&self, kid: &str, claims: &Value) -> String {
        let header = json!({"alg": "RS256", "typ": "JWT", "kid": kid});
        let message = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(claims.to_string())
        );
        let mut signature = vec![0; self.pair.public_modulus_len()];
        self.pair
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                message.as_bytes(),
                &mut signature,
            )
            .unwrap();
        format!("{message}.{}", B64.encode(signature))
    }

    /// A token of this key for `sub`, valid for an hour, with `extra` claims.
    fn token(&self, sub: &str, extra: Value) -> String {
        self.sign(&self.kid, &claims(sub, now() + 3600, extra))
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A token's claims for `sub`, expiring at `exp`, with `extra` over the standard ones.
fn claims(sub: &str, exp: i64, extra: Value) -> Value {
    let mut claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now(), "exp": exp});
    claims
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    claims
}

fn jwks(keys: &[&SigningKey]) -> String {
    json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()}).to_string()
}

/// `[auth.jwt]` with the JWKS at `source` (a `jwks_file = …` or `jwks_url = …` line): the team
/// from the `team` claim, or a group; the role from a group.
fn sso_toml(source: &str) -> String {
    format!(
        r#"
[auth.jwt]
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
{source}
team_claim = "team"
jwks_min_refetch_secs = 1

[auth.jwt.groups]
research-devs = {{ team = "research", role = "member" }}
research-readers = {{ team = "research", role = "viewer" }}
"#
    )
}

/// A daemon with `extra_toml`, its log (with the reasons of refused JWTs) in `log`.
fn daemon_with(mock: &MockServer, extra_toml: String, log: &Path) -> Daemon {
    Daemon::start(
        mock,
        Opts {
            extra_toml,
            log_file: Some(log.to_path_buf()),
            env: vec![(
                "ELFGATE_LOG".into(),
                "warn,elfgate_server::auth=info".into(),
            )],
            ..Opts::default()
        },
    )
}

/// Waits until the daemon's log at `log` holds `text`.
async fn logged(log: &Path, text: &str) {
    common::poll_until(&format!("{text} in the log"), || {
        std::fs::read_to_string(log)
            .ok()
            .filter(|l| l.contains(text))
    })
    .await;
}

/// GET /v1/me with `bearer`: the status and the body.
async fn me(d: &Daemon, bearer: &str) -> (u16, Value) {
    let r = d
        .anon
        .get(d.url("/v1/me"))
        .bearer_auth(bearer)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// What a refused bearer is told, less what differs per request.
fn refusal(body: &Value) -> (Value, Value) {
    (
        body["error"]["code"].clone(),
        body["error"]["message"].clone(),
    )
}

#[tokio::test]
async fn a_jwt_of_the_identity_provider_is_a_principal_and_a_bad_one_gets_a_bad_keys_401() {
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let idp = SigningKey::new("idp-1");
    let jwks_file = dir.path().join("jwks.json");
    std::fs::write(&jwks_file, jwks(&[&idp])).unwrap();
    let log = dir.path().join("daemon.log");
    let d = daemon_with(
        &mock,
        sso_toml(&format!("jwks_file = \"{}\"", jwks_file.display())),
        &log,
    );

    let alice = idp.token(
        "alice",
        json!({"team": "research", "groups": ["research-devs"]}),
    );
    let (status, who) = me(&d, &alice).await;
    assert_eq!(status, 200, "{who}");
    assert_eq!(who["user"], "alice");
    assert_eq!(who["team"], "research");
    assert_eq!(who["role"], "member");
    assert!(who.get("keyId").is_none_or(Value::is_null), "{who}");
    // The team from a group when the token has no team claim; the role from the group.
    let bob = idp.token("bob", json!({"groups": ["research-readers"]}));
    let (status, who) = me(&d, &bob).await;
    assert_eq!(status, 200, "{who}");
    assert_eq!(
        (&who["user"], &who["team"], &who["role"]),
        (&json!("bob"), &json!("research"), &json!("viewer"))
    );

    // What a bad key is told.
    let (status, bad_key) = me(&d, "egk_nosuchkey_0000000000000000").await;
    assert_eq!(status, 401);
    let devs = || json!({"groups": ["research-devs"]});
    let hour = now() + 3600;
    let other_key = SigningKey::new("idp-1");
    // What each is; below, the reason the daemon logs for it (the client is told none).
    let refused = [
        (
            "expired",
            idp.sign("idp-1", &claims("alice", now() - 3600, devs())),
        ),
        (
            "another audience",
            idp.sign(
                "idp-1",
                &claims(
                    "alice",
                    hour,
                    json!({"aud": "other", "groups": ["research-devs"]}),
                ),
            ),
        ),
        (
            "another issuer",
            idp.sign(
                "idp-1",
                &claims(
                    "alice",
                    hour,
                    json!({"iss": "https://evil.example", "groups": ["research-devs"]}),
                ),
            ),
        ),
        // Signed by another key under the provider's key id.
        ("a forged signature", other_key.token("alice", devs())),
        (
            "an unknown kid",
            idp.sign("idp-2", &claims("alice", hour, devs())),
        ),
        ("no role", idp.token("carol", json!({"team": "research"}))),
        ("malformed", "abc.def.ghi".to_string()),
        (
            "alg none",
            format!(
                "{}.{}.",
                B64.encode(json!({"alg": "none", "kid": "idp-1"}).to_string()),
                B64.encode(claims("alice", hour, devs()).to_string())
            ),
        ),
    ];
    let reasons = [
        "expired",
        "another audience",
        "another issuer",
        "bad signature",
        "signed by a key the JWKS does not hold",
        "no role (role claim or mapped group)",
        "malformed",
        "malformed",
    ];
    for ((what, token), reason) in refused.into_iter().zip(reasons) {
        let (status, body) = me(&d, &token).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert_eq!(refusal(&body), refusal(&bad_key), "{what}: {body}");
        logged(&log, &format!("reason={reason}")).await;
    }
    // And the one that passed still does.
    assert_eq!(me(&d, &alice).await.0, 200);
}

/// A tiny JWKS server on loopback; what it serves can be changed.
async fn jwks_server(served: Arc<Mutex<String>>) -> String {
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let served = served.clone();
            async move { served.lock().unwrap().clone() }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn a_jwks_url_is_fetched_through_the_outbound_guard_and_again_for_a_new_key() {
    let mock = MockServer::start().await.unwrap();
    let first = SigningKey::new("k1");
    let served = Arc::new(Mutex::new(jwks(&[&first])));
    let url = jwks_server(served.clone()).await;
    let token = first.token("alice", json!({"groups": ["research-devs"]}));

    // A loopback address is refused by the outbound guard unless the operator allows it.
    let logs = tempfile::tempdir().unwrap();
    let guarded_log = logs.path().join("guarded.log");
    let guarded = daemon_with(
        &mock,
        sso_toml(&format!("jwks_url = \"{url}\"")),
        &guarded_log,
    );
    assert_eq!(me(&guarded, &token).await.0, 401);
    logged(
        &guarded_log,
        "allow it with auth.jwt.allow_private_addresses",
    )
    .await;

    let d = daemon_with(
        &mock,
        sso_toml(&format!(
            "jwks_url = \"{url}\"\nallow_private_addresses = true"
        )),
        &logs.path().join("allowed.log"),
    );
    let (status, who) = me(&d, &token).await;
    assert_eq!((status, &who["user"]), (200, &json!("alice")), "{who}");

    // The provider rotates its keys: a token of the new key makes the daemon read the JWKS
    // again (at most once a second here, so the first tries may come too soon).
    let second = SigningKey::new("k2");
    *served.lock().unwrap() = jwks(&[&first, &second]);
    let rotated = second.token("dave", json!({"groups": ["research-readers"]}));
    let deadline = tokio::time::Instant::now() + common::GUARD;
    loop {
        let (status, who) = me(&d, &rotated).await;
        if status == 200 {
            assert_eq!(who["user"], "dave");
            break;
        }
        assert_eq!(status, 401, "{who}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new key was never fetched"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[test]
fn a_bad_sso_configuration_refuses_to_start_naming_the_key() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mock = runtime.block_on(MockServer::start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hmac_only = dir.path().join("hmac.json");
    std::fs::write(
        &hmac_only,
        r#"{"keys": [{"kty": "oct", "kid": "shared", "k": "c2VjcmV0"}]}"#,
    )
    .unwrap();
    let cases: [(String, &str); 4] = [
        (sso_toml(""), "auth.jwt.jwks_file or auth.jwt.jwks_url"),
        (
            sso_toml(&format!("jwks_file = \"{}\"", hmac_only.display())),
            "auth.jwt.jwks_file",
        ),
        (
            sso_toml(&format!(
                "jwks_file = \"{}\"",
                Path::new("/nonexistent/jwks.json").display()
            )),
            "auth.jwt.jwks_file: cannot read",
        ),
        (
            sso_toml("jwks_url = \"ftp://idp.example/jwks\""),
            "auth.jwt.jwks_url",
        ),
    ];
    for (toml, named) in cases {
        let data = tempfile::tempdir().unwrap();
        let stderr = Daemon::start_refused(
            data.path(),
            &mock,
            Opts {
                extra_toml: toml,
                ..Opts::default()
            },
        );
        assert!(stderr.contains(named), "{named}: {stderr}");
    }
}
