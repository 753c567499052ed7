//! Replication across nsqd (issue 22; docs/replication.md is the design this follows): with
//! `--replication-peer` given, or members found through nsqlookupd ([`discover`]), this node
//! streams its publishes and settlements to its peers
//! (the origin side: [`log`] and [`origin`]) and keeps its peers' unsettled messages in
//! replica backlogs (the replica side: [`replica`], over `nsq_core::replica::ReplicaStore`);
//! with `--replicas=N` ≥ 2 a publish is acknowledged only once N−1 members of the replica set
//! stored it ([`Replication::wait_replicated`]). `replication.dat` is [`identity`].
//!
//! NSQ has nothing like it (nsqd/tcp.go, `Handle`, refuses any magic but `"  V2"`); with
//! replication off none of this exists and the daemon behaves as NSQ does.

mod backlog;
mod catchup;
mod commands;
mod deliver;
mod discover;
mod driver;
mod handoff;
pub mod identity;
mod leave;
mod link;
pub mod log;
mod lookupd_debug;
pub mod membership;
mod origin;
mod replica;
pub mod returning;
mod served;
mod settings;
pub mod takeover;
mod views;

pub use views::{BacklogInfo, PeerInfo};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nsq_core::replica::OriginBytes;
use nsq_core::Engine;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub(crate) use backlog::Backlog;
pub use identity::Identity;
use log::OriginLog;
pub(crate) use replica::serve_link;
pub use settings::Settings;

/// A link with no frame for this long is dead (docs/replication.md, fixed constants).
pub const LINK_TIMEOUT: Duration = Duration::from_secs(5);
/// An idle link sends a HEARTBEAT this often.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a clean shutdown waits for the replicas to acknowledge everything.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// One peer as this node, its origin, sees it: a `--replication-peer`, or a member found
/// through nsqlookupd (`discover.rs`).
#[derive(Debug, Clone)]
struct Peer {
    addr: String,
    /// Its replication node ID (0 until its first CHALLENGE proved it).
    node_id: u64,
    /// Its session holds `node_id` from the CHALLENGE to the session's end: no other entry
    /// links to that node meanwhile (`discover.rs`, `claim`).
    claimed: bool,
    /// Its dialling stopped for good: it is this very node, or a node another entry links to.
    dropped: bool,
    /// A session is up (WELCOME received).
    live: bool,
    /// The highest seq it acknowledged in this session (the core's count).
    acked: u64,
    /// The outbox frames up to this seq are not needed by its session any more.
    floor: u64,
    catching_up: bool,
    in_set: bool,
    /// The core has this session (it decided whether the peer is in the set).
    decided: bool,
    last_seen: Option<Instant>,
}

impl Peer {
    fn new(addr: String) -> Peer {
        Peer {
            addr,
            node_id: 0,
            claimed: false,
            dropped: false,
            live: false,
            acked: 0,
            floor: 0,
            catching_up: false,
            in_set: false,
            decided: false,
            last_seen: None,
        }
    }
}

/// The replica set and the acknowledgements as the views (`/stats`), the outbox's trimming
/// and the clean stop see them (docs/replication.md, "Who holds which origin's messages"):
/// a copy of the core's `Group` (`nsq_core::replication::group`), taken by the driver after
/// each event that may change it (`driver.rs`), keyed here by the peer's address (the
/// `--replication-peer`s first, then the members found through nsqlookupd, which are only
/// ever added).
struct Group {
    need: usize,
    peers: Vec<Peer>,
}

impl Group {
    fn acked_by(&self, seq: u64) -> usize {
        self.peers
            .iter()
            .filter(|p| p.in_set && p.acked >= seq)
            .count()
    }
}

/// Replication's state in the daemon (see the module comment).
pub struct Replication {
    pub identity: Identity,
    pub settings: Settings,
    /// The group's shared secret (`membership`); `None`: membership is the peer list.
    secret: Option<membership::Secret>,
    /// TLS on links (`link`), with `--tls-cert`.
    link_tls: Option<link::LinkTls>,
    data_path: PathBuf,
    /// The origin's log; also the engine's replicator.
    pub log: Arc<OriginLog>,
    group: Mutex<Group>,
    /// The highest seq N−1 replicas acknowledged (publishes wait on it): the core's
    /// `AckPublish` (`driver.rs`).
    pub(crate) committed: watch::Sender<u64>,
    /// The highest seq whose publish the core failed (`FailPublish`: no N−1 acknowledgements
    /// within `--replication-ack-timeout`, or its epoch was taken over).
    pub(crate) failed: watch::Sender<u64>,
    backlogs: Mutex<HashMap<(u64, u64), Arc<Backlog>>>,
    /// The bytes of each origin's backlogs, all its epochs together: the bound
    /// `--replication-max-backlog-bytes` applies to this sum.
    origin_bytes: Mutex<HashMap<u64, Arc<OriginBytes>>>,
    engine: OnceLock<Arc<Engine>>,
    /// Set at shutdown: links end.
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    publish_waiting: AtomicU64,
    publish_failures: AtomicU64,
    /// Backlogs of peers this node took over (docs/replication.md, Takeover).
    takeovers: AtomicU64,
    /// The copy each kept manifest was taken from (TAKEN_OVER and STATUS carry it), from
    /// the record beside the manifest (`deliver::Taken`).
    taken_seq: Mutex<HashMap<(u64, u64), deliver::Taken>>,
    /// The start of this node's monotonic clock, which PING stamps count from.
    pub(super) clock_base: Instant,
    /// Link sessions that began with a catch-up instead of resuming (origin side).
    catchups: AtomicU64,
    /// Return (`returning.rs`): the current epoch, the startup hold.
    ret: returning::State,
    /// Manifests kept, by (origin, epoch): the IDs taken over (until MANIFEST_APPLIED).
    taken: Mutex<BTreeMap<(u64, u64), u64>>,
    /// Serialises takeovers, handoff adoptions and the deletion of copies and manifests.
    takeover_lock: tokio::sync::Mutex<()>,
    /// The replication core's task (`driver.rs`).
    driver: driver::Driver,
    /// Link sessions are numbered (`driver.rs`, a newer one of a peer and link supersedes).
    sessions: AtomicU64,
    /// A poll of the nsqlookupds runs (`takeover.rs`).
    polling: AtomicBool,
    /// The takeovers running here (`takeover.rs`).
    running: Mutex<HashSet<(u64, u64)>>,
    /// The handoffs being sent from here (`handoff.rs`).
    handing: Mutex<HashSet<(u64, u64)>>,
    /// Finding members through nsqlookupd (`discover.rs`).
    discovery: discover::State,
    /// Whether the replica backlogs are replayed yet (`backlog.rs`, [`Replication::replay`]):
    /// links, sessions and the takeover watch wait for it; clients need not.
    replay: watch::Sender<backlog::Replay>,
}

/// Why replication could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    #[error(transparent)]
    Identity(#[from] identity::IdentityError),
    #[error("failed to open replica backlog {}: {source}", dir.display())]
    Backlog {
        dir: PathBuf,
        source: nsq_core::replica::StoreError,
    },
    #[error("failed to list {}: {source}", dir.display())]
    List {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// `--replication-secret-file` unreadable or empty, or the links' TLS configuration.
    #[error("{0}")]
    Link(String),
}

impl Replication {
    /// Reads `replication.dat` (starting this run's epoch). Blocking (startup). The replica
    /// backlogs under `<data-path>/replica/` are replayed afterwards by
    /// [`Replication::replay`], while nsqd already serves its clients.
    pub fn open(data_path: &Path, settings: Settings) -> Result<Arc<Self>, ReplicationError> {
        let secret = if settings.secret_file.is_empty() {
            tracing::warn!(
                "REPLICATION: no --replication-secret-file: the link trusts the network (any host at a --replication-peer address, or listed by nsqlookupd in this group, may link)"
            );
            None
        } else {
            Some(
                membership::Secret::read(Path::new(&settings.secret_file))
                    .map_err(ReplicationError::Link)?,
            )
        };
        let link_tls = link::LinkTls::build(
            &settings.tls_cert,
            &settings.tls_key,
            &settings.tls_root_ca_file,
        )
        .map_err(ReplicationError::Link)?;
        let identity = identity::load_and_start(data_path)?;
        tracing::info!(
            "REPLICATION: node {:016x}, epoch {}, replicas {}, peers {:?}",
            identity.node_id,
            identity.epoch,
            settings.replicas,
            settings.peers
        );
        let peers = settings.peers.iter().cloned().map(Peer::new).collect();
        let repl = Arc::new(Replication {
            group: Mutex::new(Group {
                need: settings.replicas - 1,
                peers,
            }),
            log: OriginLog::new(identity.start_seq),
            committed: watch::channel(identity.start_seq).0,
            failed: watch::channel(0).0,
            identity,
            data_path: data_path.to_path_buf(),
            backlogs: Mutex::new(HashMap::new()),
            origin_bytes: Mutex::new(HashMap::new()),
            engine: OnceLock::new(),
            stop: watch::channel(false).0,
            tasks: Mutex::new(Vec::new()),
            publish_waiting: AtomicU64::new(0),
            publish_failures: AtomicU64::new(0),
            takeovers: AtomicU64::new(0),
            taken_seq: Mutex::new(HashMap::new()),
            clock_base: Instant::now(),
            catchups: AtomicU64::new(0),
            ret: returning::State::new(identity.epoch),
            taken: Mutex::new(BTreeMap::new()),
            takeover_lock: tokio::sync::Mutex::new(()),
            driver: driver::Driver::new(),
            sessions: AtomicU64::new(0),
            polling: AtomicBool::new(false),
            running: Mutex::new(HashSet::new()),
            handing: Mutex::new(HashSet::new()),
            replay: watch::channel(backlog::Replay::Pending).0,
            discovery: discover::State::new(settings.replicas >= 2 && settings.lookupds),
            settings,
            secret,
            link_tls,
        });
        Ok(repl)
    }

    /// This node's monotonic clock: the time since replication started (PING stamps, and
    /// the time the replication core is fed with).
    pub(crate) fn clock(&self) -> Duration {
        self.clock_base.elapsed()
    }

    /// How often an origin's session sends PING: the link's proof of life that fencing
    /// counts (several per fencing interval, T/2; at most every second).
    pub(crate) fn ping_every(&self) -> Duration {
        (self.settings.takeover_timeout / 8).clamp(Duration::from_millis(50), HEARTBEAT)
    }

    /// The group's shared secret, if it has one.
    pub(crate) fn secret(&self) -> Option<&membership::Secret> {
        self.secret.as_ref()
    }

    /// TLS on links, when this node has a certificate.
    pub(crate) fn link_tls(&self) -> Option<&link::LinkTls> {
        self.link_tls.as_ref()
    }

    /// Hands the engine over (catch-ups read it).
    pub fn set_engine(&self, engine: Arc<Engine>) {
        let _ = self.engine.set(engine);
    }

    pub(crate) fn engine(&self) -> Option<&Arc<Engine>> {
        self.engine.get()
    }

    /// `--replicas` ≥ 2: this node's publishes are replicated (it dials its peers).
    pub fn replicates_own(&self) -> bool {
        self.settings.replicas >= 2
    }

    /// Starts one link task per peer (the TCP ports must be known: HELLO carries them); none
    /// with `--replicas=1`.
    pub fn start_links(self: &Arc<Self>, tcp_port: u16, http_port: Option<u16>) {
        if !self.replicates_own() {
            return;
        }
        let n = self.group.lock().peers.len();
        self.start_return(n);
        let hello = origin::HelloInfo {
            tcp_port,
            http_port: http_port.unwrap_or(0),
        };
        // Peers found through nsqlookupd later are dialled with the same.
        let _ = self.discovery.hello.set(hello);
        for i in 0..n {
            self.spawn_peer(i, hello);
        }
    }

    /// Starts the task dialling peer `i` (`origin.rs`). Once it ends before the daemon
    /// stops, the peer is dropped (this very node, or a node another entry links to).
    fn spawn_peer(self: &Arc<Self>, i: usize, hello: origin::HelloInfo) {
        let r = self.clone();
        // Sessions begin once the replica backlogs are open (STATUS lists them).
        self.tasks.lock().push(tokio::spawn(async move {
            if r.replayed().await {
                origin::run_peer(r.clone(), i, hello).await;
                if !*r.stop.borrow() {
                    r.group.lock().peers[i].dropped = true;
                }
            }
        }));
    }

    /// Starts the replication core's task (`driver.rs`), with nsqlookupd to poll for the
    /// gone rule, and the search for members through nsqlookupd (`discover.rs`).
    pub fn start_takeover_watch(
        self: &Arc<Self>,
        lookup: crate::lookup::Lookup,
        client: nsq_http::client::HttpClient,
    ) {
        self.start_discovery(lookup.clone(), client.clone());
        self.start_driver(lookup, client);
    }

    /// A stop signal for link tasks.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    // ---- the group ---------------------------------------------------------------------

    /// The outbox keeps what a member of the set still needs, and what a session the core
    /// has not placed yet may resume from.
    fn trim_outbox(&self, g: &Group) {
        let needed = g
            .peers
            .iter()
            .filter(|p| p.live && (p.in_set || !p.decided));
        match needed.map(|p| p.floor).min() {
            Some(floor) => self.log.trim_to(floor),
            // Only members outside the set are linked: one that joins catches up.
            None if g.peers.iter().any(|p| p.live) => self.log.trim_to(self.log.last_seq()),
            // Nobody linked: kept for a session that may resume.
            None => {}
        }
    }

    /// A session with peer `i` was welcomed: `floor` is what it holds of the log already.
    /// Whether it joins the set is the core's decision (`sync_group`).
    pub(crate) fn session_up(&self, i: usize, node_id: u64, floor: u64) {
        let mut g = self.group.lock();
        let p = &mut g.peers[i];
        p.node_id = node_id;
        p.live = true;
        p.floor = floor;
        p.acked = 0;
        p.catching_up = false;
        p.in_set = false;
        p.decided = false;
        p.last_seen = Some(Instant::now());
        self.trim_outbox(&g);
    }

    /// The session with peer `i` streams from `floor + 1` on (a catch-up: from the log's
    /// end when it began).
    pub(crate) fn streaming(&self, i: usize, floor: u64) {
        let mut g = self.group.lock();
        g.peers[i].floor = floor;
        self.trim_outbox(&g);
    }

    /// Peer `i` acknowledged `seq`.
    pub(crate) fn on_ack(&self, i: usize, seq: u64) {
        let mut g = self.group.lock();
        let p = &mut g.peers[i];
        p.floor = p.floor.max(seq);
        p.last_seen = Some(Instant::now());
        self.trim_outbox(&g);
    }

    /// A frame came from peer `i` (its `last_seen`).
    pub(crate) fn seen_frame(&self, i: usize, _f: nsq_protocol::replication::Frame) {
        self.group.lock().peers[i].last_seen = Some(Instant::now());
    }

    /// Peer `i`'s session ended.
    pub(crate) fn session_down(&self, i: usize) {
        let mut g = self.group.lock();
        let p = &mut g.peers[i];
        let was_live = p.live;
        p.live = false;
        p.claimed = false;
        p.in_set = false;
        p.decided = false;
        p.catching_up = false;
        if was_live {
            tracing::warn!("REPLICATION: link to {} lost", g.peers[i].addr);
        }
        self.trim_outbox(&g);
    }

    /// The core's replica set and acknowledgements, copied for the views and the outbox.
    pub(crate) fn sync_group(&self, core: &nsq_core::replication::Group) {
        let mut g = self.group.lock();
        // The outbox's floor moves only when a peer is placed or leaves the set (an ACK
        // trims it already, `on_ack`).
        let mut placed = false;
        for p in g.peers.iter_mut().filter(|p| p.live) {
            if let Some(c) = core.peer(p.node_id).filter(|c| c.live) {
                placed |= !p.decided || p.in_set != c.in_set;
                p.decided = true;
                p.in_set = c.in_set;
                p.catching_up = c.catching_up;
                p.acked = c.acked;
            }
        }
        if placed {
            self.trim_outbox(&g);
        }
    }

    // ---- acknowledgement ---------------------------------------------------------------

    /// Waits until N−1 members of the replica set acknowledged `seq` (docs/replication.md,
    /// Acknowledgement); `Err` is the reason a publish fails with after
    /// `--replication-ack-timeout`: `not enough replicas: 0 of 1 stored it within 10s`.
    pub async fn wait_replicated(&self, seq: u64) -> Result<(), String> {
        let mut rx = self.committed.subscribe();
        if !self.replicates_own() || *rx.borrow_and_update() >= seq {
            return Ok(());
        }
        // The core decides (`driver.rs`): one event per waiting publish on its channel, no
        // round trip; its answers arrive as `committed` and `failed`.
        let mut failed = self.failed.subscribe();
        self.core_event(nsq_core::replication::Event::Published { seq });
        // Counted while waiting, also if the wait is dropped (a connection that closes with
        // pipelined publishes pending: protocol_v2.rs, `Reader::pending`).
        struct Waiting<'a>(&'a AtomicU64);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.publish_waiting.fetch_add(1, Ordering::Relaxed);
        let waiting = Waiting(&self.publish_waiting);
        // The core fails it after the ack timeout on its clock (ticked every 100 ms); this
        // bound only covers a core that stopped (shutdown).
        let bound = self.settings.ack_timeout + Duration::from_secs(1);
        let acked = tokio::time::timeout(bound, async {
            tokio::select! {
                r = rx.wait_for(|c| *c >= seq) => r.is_ok(),
                _ = failed.wait_for(|f| *f >= seq) => false,
            }
        })
        .await;
        drop(waiting);
        // A later publish's failure may pass this one: it counts as acknowledged when it was.
        if acked.unwrap_or(false) || *self.committed.borrow() >= seq {
            return Ok(());
        }
        self.publish_failures.fetch_add(1, Ordering::Relaxed);
        let (got, need) = {
            let g = self.group.lock();
            (g.acked_by(seq), g.need)
        };
        Err(format!(
            "not enough replicas: {got} of {need} stored it within {}",
            nsq_go::duration::format(self.settings.ack_timeout)
        ))
    }

    // ---- shutdown ----------------------------------------------------------------------

    /// Clean stop (docs/replication.md, Return): waits (at most 5 s) for the live links to
    /// acknowledge everything queued, ends the links and writes `clean_seq`.
    pub async fn shutdown(&self) {
        if !self.replicates_own() {
            // Only the replica side: its links end; there is no epoch of its own to close.
            self.stop.send_replace(true);
            return;
        }
        let last = self.log.last_seq();
        let deadline = tokio::time::Instant::now() + SHUTDOWN_WAIT;
        loop {
            let behind = {
                let g = self.group.lock();
                g.peers.iter().any(|p| p.live && p.in_set && p.floor < last)
            };
            if !behind || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.stop.send_replace(true);
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
        let last = self.log.last_seq();
        // The epoch may have moved since the start (a peer took one over).
        let id = Identity {
            epoch: self.epoch(),
            ..self.identity
        };
        if let Err(e) = identity::write(&self.data_path, &id, Some(last)) {
            tracing::error!("REPLICATION: failed to record the clean stop - {e}");
        }
    }
}
