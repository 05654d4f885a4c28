//! The slow-subscriber rule for a client following, through one node, a session another node runs:
//! the same bound as on the owner. The owner runs in this process, so that the test can publish a
//! burst on the session's bus much larger than the buffers between the follower node and a client
//! that stopped reading.

use super::fleet::{metric, node_on};
use super::slow_subscriber::{
    SlowClient, burst_read_along, resumed_then_interrupted, stalled_run, until_reset,
};
use crate::common;

use elfgate_mockllm::MockServer;
use elfgate_server::app::Daemon;
use elfgate_server::config::Config;
use elfgate_test_support::services::fleet_services;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_another_nodes_session_is_reset_and_nobody_else_is() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    // Node A, in this process, on the fleet's database and NATS.
    let dir = tempfile::tempdir().unwrap().keep();
    // The fleet's secret, from a file of this user's alone (this process's environment has none).
    let secret = dir.join("fleet-secret");
    std::fs::write(&secret, elfgate_test_support::services::FLEET_SECRET).unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let config_file = common::write_config(
        &dir,
        &mock,
        &format!(
            "\n[cluster]\nnats_url = \"{nats}\"\nnode_id = \"a\"\nlease_secs = 4\n\
             heartbeat_secs = 1\nsecret_file = \"{}\"\n",
            secret.display()
        ),
    );
    let sqlite = format!("url = \"sqlite://{}\"", dir.join("elfgate.db").display());
    let config = std::fs::read_to_string(&config_file).unwrap();
    assert!(config.contains(&sqlite));
    let config = config.replacen(
        &sqlite,
        &format!("url = \"{database}\"\ndata_dir = \"{}\"", dir.display()),
        1,
    );
    std::fs::write(&config_file, config).unwrap();
    let daemon = Daemon::build(Config::load(Some(&config_file)).unwrap())
        .await
        .unwrap();
    let state = daemon.state.clone();
    let token = daemon.state.config.token.clone().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(daemon.serve(listener, async move {
        let _ = stopped.await;
    }));
    // Node B follows it.
    let b = node_on(&mock, &database, &nats, "b");
    let b_addr: std::net::SocketAddr = b.base.trim_start_matches("http://").parse().unwrap();

    // A run on A that streams one token and then stalls keeps the session live there.
    let http = common::authenticated_client(Some(&token));
    let (sid, run) = stalled_run(&http, &base).await;

    // Two clients of B, both caught up with the run's first token.
    let path = format!("/v1/sessions/{sid}/events");
    let (mut slow, held) =
        SlowClient::at_first_token(b_addr, &sid, b.token.as_deref().unwrap()).await;
    let mut reader = b.events(&sid.to_string(), None).await;
    let start = reader.until_n("streamDelta", 1).await.last().unwrap().seq();

    // The burst on A: B's reader reads along, B's slow client reads nothing.
    let bus = state.dispatcher.hub().get(sid).expect("the session's bus");
    let last = burst_read_along(&bus, run, start, &mut reader).await;

    // The slow client now reads what the buffers held, in order, then `reset` from the first seq
    // it lacks, then the end of its stream; B counts it.
    let cursor = until_reset(&mut slow, held, sid, last).await;
    assert_eq!(metric(&b, "elfgate_fleet_follow_resets_total").await, 1.0);

    // Reconnecting to B with its cursor, it gets every event it lacked, once, in order; the run
    // still ends normally, seen once by B's clients.
    resumed_then_interrupted(
        (&b.http, &b.url(&path)),
        (&http, &base),
        &mut reader,
        (sid, run),
        (cursor, last),
    )
    .await;

    let _ = stop.send(());
    server.await.unwrap();
}
