//! nsqd as an nsqlookupd client: one persistent V1 connection per `--lookupd-tcp-address`,
//! IDENTIFY + REGISTER replay on every (re)connection, REGISTER/UNREGISTER as topics and
//! channels come and go, PING every 15 s, lazy reconnection, runtime address changes.
//! IDENTIFY's body is the `PeerInfo` `server.rs` builds: NSQ's fields, and ours,
//! `replication`, when this node replicates its publishes (replication/discover.rs).
//!
//! One task owns every connection and handles events strictly in order; engine hooks feed it
//! through an unbounded channel (they are synchronous and must never block).

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use nsq_core::Engine;
use nsq_protocol::lookup::{encode_lookup_command, take_lookup_response, LookupCommand, PeerInfo};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::timeout;

/// Dial timeout and per-operation deadline, as the reference.
const IO_TIMEOUT: Duration = Duration::from_secs(1);
const PING_INTERVAL: Duration = Duration::from_secs(15);
/// How often dropped connections are noticed and re-established. The reference only notices
/// at the next PING (up to 15 s); we notice a closed connection within a second and
/// reconnect (re-IDENTIFY, re-REGISTER) at once, so a restarted lookupd learns our topics
/// quickly. Failed connection attempts are retried at this pace too.
const RECONNECT_INTERVAL: Duration = Duration::from_secs(1);
/// Background retry pace for an unreachable lookupd.
const RETRY_BACKOFF: Duration = Duration::from_secs(5);

/// Replication's fencing (docs/replication.md, "Fencing") counts an nsqlookupd's answer to
/// a PING as proof that this node is heard: with it the loop PINGs every `every` (more often
/// than NSQ's 15 s, several times per fencing interval) and calls `heard` with the lookupd's
/// index and the time each answered PING was sent.
pub struct LookupProof {
    pub every: Duration,
    pub heard: Box<dyn Fn(usize, std::time::Instant) + Send + Sync>,
}

enum Event {
    Command(LookupCommand),
    SetAddresses(Vec<String>),
}

/// The handle the daemon keeps: feeds events to the lookup task.
#[derive(Clone)]
pub struct Lookup {
    tx: mpsc::UnboundedSender<Event>,
    /// `broadcast_address:http_port` of every identified lookupd (channel pre-creation).
    http_addrs: Arc<Mutex<Vec<(String, String)>>>,
    /// The TCP addresses configured (`--lookupd-tcp-address`, then `PUT
    /// /config/nsqlookupd_tcp_addresses`), identified or not.
    configured: Arc<Mutex<Vec<String>>>,
}

impl Lookup {
    /// Creates the handle (with `addrs` configured, those `run` starts with) and the
    /// receiving end the task will own.
    pub fn new(addrs: Vec<String>) -> (Lookup, LookupReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        let http_addrs = Arc::new(Mutex::new(Vec::new()));
        (
            Lookup {
                tx,
                http_addrs: http_addrs.clone(),
                configured: Arc::new(Mutex::new(addrs)),
            },
            LookupReceiver { rx, http_addrs },
        )
    }

    pub fn register(&self, topic: &str, channel: Option<&str>) {
        let _ = self.tx.send(Event::Command(LookupCommand::Register {
            topic: topic.to_string(),
            channel: channel.map(str::to_string),
        }));
    }

    pub fn unregister(&self, topic: &str, channel: Option<&str>) {
        let _ = self.tx.send(Event::Command(LookupCommand::Unregister {
            topic: topic.to_string(),
            channel: channel.map(str::to_string),
        }));
    }

    /// `PUT /config/nsqlookupd_tcp_addresses`.
    pub fn set_addresses(&self, addrs: Vec<String>) {
        *self.configured.lock() = addrs.clone();
        let _ = self.tx.send(Event::SetAddresses(addrs));
    }

    /// Every configured lookupd: its TCP address and, once identified, its HTTP address.
    pub fn lookupds(&self) -> Vec<(String, Option<String>)> {
        let http = self.http_addrs.lock().clone();
        self.configured
            .lock()
            .iter()
            .map(|tcp| {
                let h = http.iter().find(|(t, _)| t == tcp).map(|(_, h)| h.clone());
                (tcp.clone(), h)
            })
            .collect()
    }

    /// HTTP addresses (`host:port`) of the lookupds identified so far.
    pub fn http_addresses(&self) -> Vec<String> {
        self.http_addrs
            .lock()
            .iter()
            .map(|(_, h)| h.clone())
            .collect()
    }
}

/// The task's end of the event channel.
pub struct LookupReceiver {
    rx: mpsc::UnboundedReceiver<Event>,
    http_addrs: Arc<Mutex<Vec<(String, String)>>>,
}

struct Peer {
    addr: String,
    conn: Option<(TcpStream, BytesMut)>,
    /// After a failed connection attempt, background retries wait until then (commands and
    /// PINGs still try at once, as the reference).
    retry_at: tokio::time::Instant,
}

/// Runs the lookup loop until the handle side is dropped.
pub async fn run(
    engine: Arc<Engine>,
    info: PeerInfo,
    addrs: Vec<String>,
    max_body: usize,
    r: LookupReceiver,
    proof: Option<LookupProof>,
) {
    let LookupReceiver { mut rx, http_addrs } = r;
    let ctx = Ctx {
        engine,
        info,
        max_body,
        http_addrs,
    };
    let mut peers: Vec<Peer> = Vec::new();
    add_peers(&ctx, &mut peers, addrs).await;
    let every = proof
        .as_ref()
        .map_or(PING_INTERVAL, |p| p.every.min(PING_INTERVAL));
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut check = tokio::time::interval(RECONNECT_INTERVAL);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = check.tick() => {
                for p in peers.iter_mut() {
                    if p.conn.as_ref().is_some_and(|(s, _)| peer_closed(s)) {
                        tracing::info!("LOOKUPD({}): connection closed by peer", p.addr);
                        p.conn = None;
                    }
                    if p.conn.is_none() && tokio::time::Instant::now() >= p.retry_at {
                        p.command(&ctx, None).await;
                    }
                }
            }
            _ = ping.tick() => {
                for (i, p) in peers.iter_mut().enumerate() {
                    // The frequent PINGs of fencing do not redial an unreachable lookupd
                    // before its backoff ends (NSQ's 15 s PING always tries).
                    if proof.is_some()
                        && p.conn.is_none()
                        && tokio::time::Instant::now() < p.retry_at
                    {
                        continue;
                    }
                    let sent = std::time::Instant::now();
                    if p.command(&ctx, Some(&LookupCommand::Ping)).await {
                        if let Some(proof) = &proof {
                            (proof.heard)(i, sent);
                        }
                    }
                }
            }
            ev = rx.recv() => match ev {
                None => break,
                Some(Event::Command(cmd)) => {
                    for p in peers.iter_mut() {
                        p.command(&ctx, Some(&cmd)).await;
                    }
                }
                Some(Event::SetAddresses(addrs)) => {
                    peers.retain(|p| addrs.contains(&p.addr));
                    ctx.http_addrs.lock().retain(|(tcp, _)| addrs.contains(tcp));
                    let new: Vec<String> =
                        addrs.into_iter().filter(|a| !peers.iter().any(|p| &p.addr == a)).collect();
                    add_peers(&ctx, &mut peers, new).await;
                }
            }
        }
    }
}

async fn add_peers(ctx: &Ctx, peers: &mut Vec<Peer>, addrs: Vec<String>) {
    for addr in addrs {
        if peers.iter().any(|p| p.addr == addr) {
            continue;
        }
        tracing::info!("LOOKUP({addr}): adding peer");
        let mut p = Peer {
            addr,
            conn: None,
            retry_at: tokio::time::Instant::now(),
        };
        p.command(ctx, None).await;
        peers.push(p);
    }
}

struct Ctx {
    engine: Arc<Engine>,
    info: PeerInfo,
    max_body: usize,
    http_addrs: Arc<Mutex<Vec<(String, String)>>>,
}

impl Peer {
    /// Sends `cmd` (connecting, identifying and re-registering first if needed); errors close
    /// the connection and are only logged, as the reference. True if `cmd` was answered.
    async fn command(&mut self, ctx: &Ctx, cmd: Option<&LookupCommand>) -> bool {
        if self.conn.is_none() {
            match self.connect(ctx).await {
                Ok(c) => self.conn = Some(c),
                Err(e) => {
                    tracing::error!("LOOKUPD({}): error connecting - {e}", self.addr);
                    self.retry_at = tokio::time::Instant::now() + RETRY_BACKOFF;
                    return false;
                }
            }
        }
        let Some(cmd) = cmd else { return false };
        let (stream, buf) = self.conn.as_mut().expect("connected above");
        if let Err(e) = round_trip(stream, buf, cmd, ctx.max_body).await {
            tracing::error!("LOOKUPD({}): error sending command - {e}", self.addr);
            self.conn = None;
            return false;
        }
        true
    }

    async fn connect(&mut self, ctx: &Ctx) -> Result<(TcpStream, BytesMut), LookupError> {
        tracing::info!("LOOKUP connecting to {}", self.addr);
        let mut stream = timeout(IO_TIMEOUT, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| LookupError::DialTimeout)??;
        let _ = stream.set_nodelay(true);
        timeout(IO_TIMEOUT, stream.write_all(nsq_protocol::MAGIC_V1))
            .await
            .map_err(|_| LookupError::WriteTimeout)??;
        let mut buf = BytesMut::new();
        let identify = LookupCommand::Identify {
            body: ctx.info.to_json().into(),
        };
        let resp = round_trip(&mut stream, &mut buf, &identify, ctx.max_body).await?;
        if &resp[..] == b"E_INVALID" {
            return Err(LookupError::Invalid);
        }
        let peer = PeerInfo::from_json(&resp).map_err(LookupError::BadIdentify)?;
        tracing::info!("LOOKUPD({}): peer info {peer:?}", self.addr);
        if peer.broadcast_address.is_empty() {
            tracing::error!("LOOKUPD({}): no broadcast address", self.addr);
        } else {
            let http = format!("{}:{}", peer.broadcast_address, peer.http_port);
            let mut addrs = ctx.http_addrs.lock();
            addrs.retain(|(tcp, _)| tcp != &self.addr);
            addrs.push((self.addr.clone(), http));
        }
        // Replay every registration: a topic alone if it has no channels, else its channels.
        for t in ctx.engine.topics() {
            let channels = t.channels();
            let cmds: Vec<LookupCommand> = if channels.is_empty() {
                vec![LookupCommand::Register {
                    topic: t.name().to_string(),
                    channel: None,
                }]
            } else {
                channels
                    .iter()
                    .map(|c| LookupCommand::Register {
                        topic: t.name().to_string(),
                        channel: Some(c.name().to_string()),
                    })
                    .collect()
            };
            for c in cmds {
                round_trip(&mut stream, &mut buf, &c, ctx.max_body).await?;
            }
        }
        Ok((stream, buf))
    }
}

/// Why talking to one lookupd failed (logged; the connection is dropped and retried).
#[derive(Debug, thiserror::Error)]
enum LookupError {
    #[error("dial timeout")]
    DialTimeout,
    #[error("write timeout")]
    WriteTimeout,
    #[error("read timeout")]
    ReadTimeout,
    #[error("EOF")]
    Eof,
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Response(#[from] nsq_protocol::lookup::ResponseTooBig),
    #[error("lookupd returned E_INVALID")]
    Invalid,
    #[error("bad IDENTIFY response - {0}")]
    BadIdentify(serde_json::Error),
}

/// Whether lookupd closed the connection (it never sends unsolicited data, so any readable
/// state between commands means EOF or an error).
fn peer_closed(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    !matches!(s.try_read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Writes one command and reads its `[size][data]` response, each within the deadline.
async fn round_trip(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    cmd: &LookupCommand,
    max_body: usize,
) -> Result<bytes::Bytes, LookupError> {
    let mut out = BytesMut::new();
    encode_lookup_command(&mut out, cmd);
    timeout(IO_TIMEOUT, stream.write_all(&out))
        .await
        .map_err(|_| LookupError::WriteTimeout)??;
    loop {
        if let Some(resp) = take_lookup_response(buf, max_body)? {
            return Ok(resp);
        }
        let n = timeout(IO_TIMEOUT, stream.read_buf(buf))
            .await
            .map_err(|_| LookupError::ReadTimeout)??;
        if n == 0 {
            return Err(LookupError::Eof);
        }
    }
}
