//! A fleet on a NATS server that wants its clients authenticated and encrypted: users and
//! passwords, a token, accounts that keep the fleet's subjects from everyone else, TLS with a CA
//! and client certificates; a node that cannot get on the bus says so (its log, `/readyz`,
//! `/v1/cluster`) and never crashes; a node cut off from NATS alone is reported as such, and
//! nothing of it is adopted.

use super::fleet::node_opts;
use crate::common;

use common::{Daemon, GUARD, chat};
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::{PrivateNats, postgres_database};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The variable the nodes of these tests read their NATS secret from.
const SECRET_VAR: &str = "FLEET_NATS_SECRET";

/// Node `id` on `database` and the NATS server at `nats` with `[cluster]` `keys` and `env`; its
/// log in the file returned.
pub(super) fn node(
    mock: &MockServer,
    database: &str,
    nats: &str,
    id: &str,
    keys: &str,
    env: &[(&str, &str)],
) -> (Daemon, PathBuf) {
    let dir = tempfile::tempdir().unwrap().keep();
    let mut opts = node_opts(&dir, database, nats, id, keys);
    opts.env
        .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let log = dir.join("node.log");
    opts.log_file = Some(log.clone());
    (Daemon::start_in(dir, mock, opts), log)
}

/// Polls `node` until its `/readyz` answers `status`; the last answer's body.
async fn until_ready_is(node: &Daemon, status: u16) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let (s, body) = node.get("/readyz").await;
        if s == status {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz stays {s}: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// `a` and `b` are on the bus: ready, connected, and a run on A is interrupted through B (a
/// request only the bus carries to A), which B's follower sees end.
pub(super) async fn assert_on_one_bus(a: &Daemon, b: &Daemon) {
    for node in [a, b] {
        until_ready_is(node, 200).await;
        let (_, cluster) = node.get("/v1/cluster").await;
        assert_eq!(cluster["busConnected"], true, "{cluster}");
    }
    let (sid, run) = a.create(chat("long", "mock:tokens=5000,delay_ms=10")).await;
    let mut through_b = b.events(&sid, None).await;
    through_b.until_text("tok0 ").await;
    let (status, body) = b.interrupt_and_wait(&sid).await;
    assert_eq!(status, 200, "{body}");
    let end = through_b.until_complete(&run).await;
    assert_eq!(end.last().unwrap().data["finishReason"], "interrupted");
}

/// `node` could not get on the bus, and says so: a log line with `why`, `/readyz` 503,
/// `busConnected` false; it serves on, and nothing panicked.
pub(super) async fn assert_off_the_bus(node: &Daemon, log: &Path, why: &str) {
    common::poll_until(&format!("a log line saying {why}"), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        (text.contains("cannot connect to NATS") && text.contains(why)).then_some(())
    })
    .await;
    let body = until_ready_is(node, 503).await;
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("NATS")),
        "{body}"
    );
    let (_, cluster) = node.get("/v1/cluster").await;
    assert_eq!(cluster["busConnected"], false, "{cluster}");
    assert_eq!(node.get("/healthz").await.0, 200);
    let text = std::fs::read_to_string(log).unwrap();
    assert!(!text.contains("panicked"), "{text}");
}

#[tokio::test]
async fn a_fleet_on_a_nats_with_a_user_and_password_works_and_a_wrong_password_is_told() {
    let Some(nats) = PrivateNats::start_with(&["--user", "elfgate", "--pass", "s3cret-pass"])
    else {
        return;
    };
    let Some(database) = postgres_database().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let keys = format!("nats_user = \"elfgate\"\nnats_password_env = \"{SECRET_VAR}\"");
    let right = [(SECRET_VAR, "s3cret-pass")];
    let (a, _) = node(&mock, &database, &nats.url, "a", &keys, &right);
    let (b, _) = node(&mock, &database, &nats.url, "b", &keys, &right);
    assert_on_one_bus(&a, &b).await;

    let wrong = [(SECRET_VAR, "not-it")];
    let (c, log) = node(&mock, &database, &nats.url, "c", &keys, &wrong);
    assert_off_the_bus(&c, &log, "authorization violation").await;

    // Credentials in the URL are refused at load, the key named and the secret not repeated.
    let dir = tempfile::tempdir().unwrap().keep();
    let url = format!("nats://elfgate:s3cret-pass@127.0.0.1:{}", nats.port);
    let err = Daemon::start_refused(&dir, &mock, node_opts(&dir, &database, &url, "d", ""));
    assert!(
        err.contains("cluster.nats_url") && err.contains("carries credentials"),
        "{err}"
    );
    assert!(!err.contains("s3cret-pass"), "{err}");
    // So is a password variable that is not set.
    let err = Daemon::start_refused(
        &dir,
        &mock,
        node_opts(&dir, &database, &nats.url, "d", &keys),
    );
    assert!(
        err.contains("cluster.nats_password_env") && err.contains(SECRET_VAR),
        "{err}"
    );
}

#[tokio::test]
async fn a_fleet_on_a_nats_with_a_token_works_and_a_node_without_it_is_told() {
    let Some(nats) = PrivateNats::start_with(&["--auth", "fleet-t0ken"]) else {
        return;
    };
    let Some(database) = postgres_database().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let keys = format!("nats_token_env = \"{SECRET_VAR}\"");
    let token = [(SECRET_VAR, "fleet-t0ken")];
    let (a, _) = node(&mock, &database, &nats.url, "a", &keys, &token);
    let (b, _) = node(&mock, &database, &nats.url, "b", &keys, &token);
    assert_on_one_bus(&a, &b).await;

    let (c, log) = node(&mock, &database, &nats.url, "c", "", &[]);
    assert_off_the_bus(&c, &log, "authorization violation").await;
}

#[tokio::test]
async fn a_fleet_on_a_nats_with_nkey_users_works_and_an_unknown_key_is_told() {
    let dir = tempfile::tempdir().unwrap().keep();
    let fleet_key = nkeys::KeyPair::new_user();
    let stranger = nkeys::KeyPair::new_user();
    let conf = dir.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "authorization: {{ users: [ {{nkey: {}}} ] }}\n",
            fleet_key.public_key()
        ),
    )
    .unwrap();
    let Some(nats) = PrivateNats::start_with(&["-c", conf.to_str().unwrap()]) else {
        return;
    };
    let Some(database) = postgres_database().await else {
        return;
    };
    let seed_file = |name: &str, key: &nkeys::KeyPair| {
        let file = dir.join(name);
        std::fs::write(&file, key.seed().unwrap()).unwrap();
        format!("nats_nkey_file = \"{}\"", file.display())
    };
    let keys = seed_file("fleet.nk", &fleet_key);
    let mock = MockServer::start().await.unwrap();
    let (a, _) = node(&mock, &database, &nats.url, "a", &keys, &[]);
    let (b, _) = node(&mock, &database, &nats.url, "b", &keys, &[]);
    assert_on_one_bus(&a, &b).await;

    let other = seed_file("stranger.nk", &stranger);
    let (c, log) = node(&mock, &database, &nats.url, "c", &other, &[]);
    assert_off_the_bus(&c, &log, "authorization violation").await;
}

#[tokio::test]
async fn nats_accounts_give_the_nodes_the_fleet_subjects_and_others_see_none_of_it() {
    let dir = tempfile::tempdir().unwrap().keep();
    let fleet_user = |name: &str| {
        format!(
            "{{user: {name}, password: {name}-pass, permissions: {{publish: [\"elfgate.>\", \
             \"_INBOX.>\"], subscribe: [\"elfgate.>\", \"_INBOX.>\"]}}}}"
        )
    };
    let conf = dir.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "accounts: {{\n  FLEET: {{ users: [ {}, {} ] }}\n  OTHER: {{ users: [ {{user: \
             other, password: other-pass}} ] }}\n}}\n",
            fleet_user("a"),
            fleet_user("b")
        ),
    )
    .unwrap();
    let Some(nats) = PrivateNats::start_with(&["-c", conf.to_str().unwrap()]) else {
        return;
    };
    let Some(database) = postgres_database().await else {
        return;
    };
    // Another account's client listening to everything it may.
    let outsider =
        async_nats::ConnectOptions::with_user_and_password("other".into(), "other-pass".into())
            .connect(nats.url.as_str())
            .await
            .unwrap();
    let mut everything = outsider.subscribe(">").await.unwrap();
    outsider.flush().await.unwrap();

    let mock = MockServer::start().await.unwrap();
    let keys = |id: &str| format!("nats_user = \"{id}\"\nnats_password_env = \"{SECRET_VAR}\"");
    let (a, _) = node(
        &mock,
        &database,
        &nats.url,
        "a",
        &keys("a"),
        &[(SECRET_VAR, "a-pass")],
    );
    let (b, _) = node(
        &mock,
        &database,
        &nats.url,
        "b",
        &keys("b"),
        &[(SECRET_VAR, "b-pass")],
    );
    assert_on_one_bus(&a, &b).await;

    // Everything the fleet said went through the server before this marker: the first message
    // the outsider gets is its own marker.
    outsider.publish("marker", "end".into()).await.unwrap();
    outsider.flush().await.unwrap();
    let first = tokio::time::timeout(GUARD, futures_util::StreamExt::next(&mut everything))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.subject.as_str(), "marker", "{first:?}");
}

/// A CA, and the certificates it signs: a server's for 127.0.0.1 and a client's. PEM files in
/// `dir`: ca.pem, server.pem, server.key, client.pem, client.key.
pub(crate) fn test_pki(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    for (name, names) in [
        ("server", vec!["127.0.0.1", "localhost"]),
        ("client", vec!["node"]),
    ] {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(ToString::to_string).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}

#[tokio::test]
async fn a_fleet_on_a_nats_requiring_tls_and_client_certificates_works_and_a_node_without_them_is_told()
 {
    let pki = tempfile::tempdir().unwrap().keep();
    test_pki(&pki);
    let file = |name: &str| pki.join(name).display().to_string();
    let Some(nats) = PrivateNats::start_with(&[
        "--tls",
        "--tlscert",
        &file("server.pem"),
        "--tlskey",
        &file("server.key"),
        "--tlscacert",
        &file("ca.pem"),
        "--tlsverify",
    ]) else {
        return;
    };
    let Some(database) = postgres_database().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let url = format!("tls://127.0.0.1:{}", nats.port);
    let keys = format!(
        "nats_tls_ca = \"{}\"\nnats_tls_cert = \"{}\"\nnats_tls_key = \"{}\"",
        file("ca.pem"),
        file("client.pem"),
        file("client.key")
    );
    let (a, _) = node(&mock, &database, &url, "a", &keys, &[]);
    let (b, _) = node(&mock, &database, &url, "b", &keys, &[]);
    assert_on_one_bus(&a, &b).await;

    // A node that does not know the CA (nor has a client certificate), on a nats:// URL the
    // server upgrades to TLS: its handshake fails, it says why, and it does not crash.
    let (c, log) = node(&mock, &database, &nats.url, "c", "", &[]);
    assert_off_the_bus(&c, &log, "certificate").await;
}

#[tokio::test]
async fn a_node_cut_off_from_nats_alone_is_reported_unreachable_and_nothing_of_it_is_adopted() {
    let Some(bus_a) = PrivateNats::start() else {
        return;
    };
    let Some(mut bus_b) = PrivateNats::start() else {
        return;
    };
    let Some(database) = postgres_database().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let (a, _) = node(&mock, &database, &bus_a.url, "a", "", &[]);
    let (b, _) = node(&mock, &database, &bus_b.url, "b", "", &[]);
    let (sid, run) = b.create(chat("long", "mock:tokens=5000,delay_ms=10")).await;
    let mut on_b = b.events(&sid, None).await;
    on_b.until_text("tok0 ").await;

    // B loses NATS (and only NATS): it is not ready, and renews its leases all along.
    bus_b.stop();
    until_ready_is(&b, 503).await;
    let (status, body) = a
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 503, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("node b") && message.contains("cut off from NATS"),
        "{body}"
    );

    // The run is B's to the end: stopped by its own client, never adopted.
    let (status, body) = b.interrupt_and_wait(&sid).await;
    assert_eq!(status, 200, "{body}");
    let end = on_b.until_complete(&run).await;
    assert_eq!(end.last().unwrap().data["finishReason"], "interrupted");
    assert_eq!(end.iter().filter(|e| e.event == "complete").count(), 1);
    let (_, metrics) = a.get_text("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "elfgate_fleet_runs_adopted_total 0"),
        "{metrics}"
    );
}
