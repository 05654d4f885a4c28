//! This daemon as a node of a fleet (`[cluster]`): the PostgreSQL store's leases decide which node
//! runs a session (see the store's `postgres::fleet`); NATS carries what the other nodes need
//! live. Each event a node publishes goes out on its session's subject (`relay`), so that a
//! client following the session through another node gets it at once; a control request (a
//! prompt, an interrupt, a permission answer, a tool run, a delete) that reaches a node other than
//! the session's owner is forwarded to the owner and answered by it (`forward`).
//!
//! NATS is a bus, never the record: the event log in PostgreSQL is. A follower dedupes by seq
//! and fills any gap from the log, and reads the log on its own while NATS is away, so a lost or
//! late message costs latency, never an event.

mod connect;
pub(crate) mod envelope;
pub(crate) mod follow;
pub(crate) mod forward;
pub(crate) mod keys;
pub(crate) mod owner;
pub(crate) mod recent;
pub(crate) mod relay;
pub(crate) mod signed;
pub(crate) mod signing;
pub(crate) mod stream;

use elfgate_core::{EventRelay, SessionId};
use elfgate_store::PgStore;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Events waiting to be relayed to NATS; past it they are dropped from the relay (not the log).
const RELAY_QUEUE: usize = 16_384;

/// Why a fleet node could not start.
#[derive(Debug, thiserror::Error)]
pub enum FleetStartError {
    /// The fleet's id could not be read from the store.
    #[error(transparent)]
    Store(#[from] elfgate_store::StoreError),
    /// The NATS URL is not one the client can use.
    #[error("cluster.nats_url: {0}")]
    Nats(#[from] async_nats::ConnectError),
    /// The fleet's secret cannot key the bus's signatures.
    #[error("cluster.secret_env: the secret cannot be used as a key")]
    Secret,
    /// The node's NATS credentials or TLS files could not be used.
    #[error("{0}")]
    Access(String),
}

/// A fleet node's connections: the store (its leases) and NATS.
pub struct Fleet {
    /// This node's id.
    pub node_id: Arc<str>,
    /// `elfgate.FLEET`: the start of every subject of this fleet (its id comes from the
    /// database), so that fleets sharing a NATS server never hear each other.
    subjects: String,
    /// The store, for what only PostgreSQL knows (who owns a session, the nodes).
    pub store: PgStore,
    /// The NATS connection; it reconnects by itself.
    pub nats: async_nats::Client,
    /// What went over the bus, for the node's metrics.
    pub(crate) counts: BusCounts,
    /// The fleet's key: signs what this node sends, verifies what it takes.
    key: signing::BusKey,
    /// Forwarded requests carried out, whose replays are dropped.
    pub(crate) seen_requests: forward::SeenRequests,
    /// How often nodes renew their leases (`cluster.heartbeat_secs`): a node whose last
    /// heartbeat is older than two of them has stopped, one that is younger is alive.
    pub(crate) heartbeat: Duration,
    /// The sessions of other nodes this node's clients follow, one subscription each.
    pub(crate) follows: follow::Follows,
    /// Whether the NATS server keeps the fleet's recent events (`stream`) at the last look.
    stream_ready: AtomicBool,
}

/// Counts of this node's traffic on the bus.
#[derive(Debug, Default)]
pub(crate) struct BusCounts {
    /// Events published on their sessions' subjects.
    pub(crate) events_relayed: AtomicU64,
    /// Events the relay could not publish (followers fill them from the log).
    pub(crate) relay_failures: AtomicU64,
    /// Control requests sent to the node that owns their session.
    pub(crate) requests_forwarded: AtomicU64,
    /// Control requests other nodes sent here, answered.
    pub(crate) requests_served: AtomicU64,
    /// Requests of other nodes' followers for recent events, answered from memory.
    pub(crate) recent_served: AtomicU64,
    /// Messages dropped unread, by reason (see [`signed::Dropped`]).
    pub(crate) dropped: [AtomicU64; signed::Dropped::ALL.len()],
    /// Clients following another node's session that fell too far behind and were sent `reset`.
    pub(crate) follow_resets: AtomicU64,
    /// Followers' catch-ups read from the fleet's stream on the NATS server, not the owner.
    pub(crate) stream_reads: AtomicU64,
}

impl Fleet {
    /// Connects to NATS (in the background: a node starts while NATS is away, and catches up when
    /// it is back) and starts relaying the events `relay` receives. Returns the fleet and the
    /// relay's sender, for the event hub.
    pub async fn start(
        node_id: String,
        store: PgStore,
        cluster: &crate::config::ClusterConfig,
    ) -> Result<(Arc<Fleet>, EventRelay), FleetStartError> {
        let key =
            signing::BusKey::new(cluster.secret.0.as_bytes()).ok_or(FleetStartError::Secret)?;
        let fleet_id = store.fleet_id().await?;
        let nats = connect::connect(&node_id, cluster).await?;
        let fleet = Arc::new(Fleet {
            node_id: node_id.into(),
            subjects: format!("elfgate.{fleet_id}"),
            store,
            nats,
            counts: BusCounts::default(),
            key,
            seen_requests: forward::SeenRequests::default(),
            heartbeat: Duration::from_secs(cluster.heartbeat_secs),
            follows: follow::Follows::default(),
            stream_ready: AtomicBool::new(false),
        });
        tokio::spawn(stream::keep(fleet.clone()));
        let (tx, rx) = tokio::sync::mpsc::channel(RELAY_QUEUE);
        tokio::spawn(relay::publish(fleet.clone(), rx));
        Ok((fleet, tx))
    }

    /// The subject a session's events are published on.
    pub(crate) fn events_subject(&self, session: SessionId) -> String {
        format!("{}.events.{session}", self.subjects)
    }

    /// Every session's [`Self::events_subject`].
    fn events_subject_all(&self) -> String {
        format!("{}.events.*", self.subjects)
    }

    /// The subject asking for a session's recent events: the node that runs it answers from
    /// memory.
    pub(crate) fn recent_subject(&self, session: SessionId) -> String {
        format!("{}.recent.{session}", self.subjects)
    }

    /// Every session's [`Self::recent_subject`].
    fn recent_subject_all(&self) -> String {
        format!("{}.recent.*", self.subjects)
    }

    /// The subject a node answers forwarded control requests on.
    fn control_subject(&self, node: &str) -> String {
        format!("{}.node.{node}.http", self.subjects)
    }

    /// The node's fleet metrics in the Prometheus text format, to follow the daemon's own.
    pub fn render_prometheus(&self) -> String {
        let store = self.store.fleet_counts().unwrap_or_default();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::with_capacity(1024);
        let _ = writeln!(out, "# HELP elfgate_node_info This node of the fleet.");
        let _ = writeln!(out, "# TYPE elfgate_node_info gauge");
        let _ = writeln!(
            out,
            "elfgate_node_info{{node=\"{}\",version=\"{}\"}} 1",
            self.node_id,
            env!("CARGO_PKG_VERSION")
        );
        let gauges = [
            (
                "elfgate_fleet_bus_connected",
                "Whether the node is connected to NATS (1) or not (0).",
                u64::from(self.nats_connected()),
            ),
            (
                "elfgate_fleet_recent_stream",
                "Whether the NATS server keeps the fleet's recent events for followers (1) or not (0).",
                u64::from(self.stream_ready()),
            ),
            (
                "elfgate_fleet_leases_held",
                "Sessions whose lease this node holds (runs it runs).",
                store.leases_held,
            ),
        ];
        let counters = [
            (
                "elfgate_fleet_events_relayed_total",
                "Events published on the bus for other nodes' followers.",
                load(&self.counts.events_relayed),
            ),
            (
                "elfgate_fleet_relay_failures_total",
                "Events the bus did not take (followers read them from the log).",
                load(&self.counts.relay_failures),
            ),
            (
                "elfgate_fleet_requests_forwarded_total",
                "Control requests forwarded to the node that owns the session.",
                load(&self.counts.requests_forwarded),
            ),
            (
                "elfgate_fleet_requests_served_total",
                "Control requests other nodes forwarded here, answered.",
                load(&self.counts.requests_served),
            ),
            (
                "elfgate_fleet_recent_served_total",
                "Other nodes' followers' requests for recent events, answered from memory.",
                load(&self.counts.recent_served),
            ),
            (
                "elfgate_fleet_stream_reads_total",
                "Followers' catch-ups read from the fleet's stream on the NATS server (not the owner).",
                load(&self.counts.stream_reads),
            ),
            (
                "elfgate_fleet_follow_resets_total",
                "Clients following another node's session sent reset for falling 1024 events behind.",
                load(&self.counts.follow_resets),
            ),
            (
                "elfgate_fleet_runs_adopted_total",
                "Runs this node ended by adopting their sessions (node_lost, daemon_restart).",
                store.runs_adopted,
            ),
            (
                "elfgate_fleet_sessions_fenced_total",
                "Sessions whose lease this node lost to another node.",
                store.sessions_fenced,
            ),
        ];
        for (kind, list) in [("gauge", &gauges[..]), ("counter", &counters[..])] {
            for (name, help, value) in list {
                let _ = writeln!(out, "# HELP {name} {help}");
                let _ = writeln!(out, "# TYPE {name} {kind}");
                let _ = writeln!(out, "{name} {value}");
            }
        }
        let name = "elfgate_fleet_messages_dropped_total";
        let _ = writeln!(
            out,
            "# HELP {name} Bus messages dropped unread: unsigned, badly signed, stale, replayed, \
             or from a node that does not own the session."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        for (reason, count) in signed::Dropped::ALL.iter().zip(&self.counts.dropped) {
            let _ = writeln!(
                out,
                "{name}{{reason=\"{}\"}} {}",
                reason.as_str(),
                load(count)
            );
        }
        out
    }

    /// Whether NATS is connected now.
    pub fn nats_connected(&self) -> bool {
        matches!(
            self.nats.connection_state(),
            async_nats::connection::State::Connected
        )
    }
}
