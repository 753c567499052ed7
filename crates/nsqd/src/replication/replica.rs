//! The replica's side of a link (docs/replication.md, "The link"): a connection that opened
//! with `"  R1"` on the TCP port. HELLO names the origin and its epoch; the backlog of that
//! `(origin, epoch)` is opened (recovered from its segments) or created, WELCOME says RESUME
//! after its last seq or CATCHUP when it holds nothing complete; then every read's log frames
//! are stored in one append (synced when HELLO set SYNC) and acknowledged with the highest seq
//! held. A replica does not acknowledge during a catch-up: until CATCHUP_END its backlog is not
//! complete up to its seq. A full backlog is ERROR 2, a frame out of sequence ERROR 3.
//! Compaction runs after the ACK is sent.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use nsq_core::replica::{manifest, Record, ReplicaStore, StoreError};
use nsq_protocol::replication::{
    self, Challenge, Frame, Hello, LinkErrorCode, Welcome, WelcomeAnswer, LINK_VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::link::LinkStream;
use super::membership::{self, Side};
use super::origin::read_frame;
use super::{Backlog, Replication, HEARTBEAT, LINK_TIMEOUT};

async fn send(stream: &mut LinkStream, f: &Frame) -> std::io::Result<()> {
    let mut b = BytesMut::with_capacity(64);
    if let Err(e) = replication::try_encode(f, &mut b) {
        return Err(std::io::Error::other(e));
    }
    stream.write_all(&b).await
}

async fn refuse(stream: &mut LinkStream, code: LinkErrorCode, text: String) {
    let _ = send(stream, &Frame::Error { code, text }).await;
    let _ = stream.shutdown().await;
}

/// Serves one replication link (the magic has been read).
pub(crate) async fn serve_link(repl: Arc<Replication>, tcp: TcpStream, peer: SocketAddr) {
    let _ = tcp.set_nodelay(true);
    // Nothing of a link is served before the replica backlogs are open (`backlog.rs`); the
    // peer waits (or dials again after its timeout).
    if !repl.replayed().await {
        return;
    }
    // With a certificate, links are TLS: a HELLO in the clear is refused readably.
    let mut stream = match repl.link_tls() {
        None => LinkStream::Plain(tcp),
        Some(tls) => {
            let mut first = [0u8; 1];
            let peeked = tokio::time::timeout(LINK_TIMEOUT, tcp.peek(&mut first)).await;
            if !matches!(peeked, Ok(Ok(1)) if first[0] == 0x16) {
                tracing::warn!("REPLICATION: link from {peer} refused: not TLS");
                let text = "TLS required".to_string();
                return refuse(&mut LinkStream::Plain(tcp), LinkErrorCode::NotInGroup, text).await;
            }
            match tls.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("REPLICATION: link from {peer}: TLS handshake failed - {e}");
                    return;
                }
            }
        }
    };
    let max_frame = repl.settings.max_frame;
    let mut buf = BytesMut::with_capacity(64 << 10);
    let hello = match read_frame(&mut stream, &mut buf, max_frame).await {
        Ok(Frame::Hello(h)) => h,
        Ok(other) => {
            let text = format!("expected HELLO, got type 0x{:02x}", other.frame_type());
            return refuse(&mut stream, LinkErrorCode::BadFrame, text).await;
        }
        Err(e) => {
            tracing::warn!("REPLICATION: link from {peer}: {e}");
            return refuse(&mut stream, LinkErrorCode::BadFrame, e).await;
        }
    };
    // Only members link (docs/replication.md, Membership); nothing of a stranger is kept.
    // A stranger is refused whatever the version of its HELLO (node ID 0, or without a
    // secret an address no peer has); a member's HELLO of another version is unsupported.
    let mut admitted = stranger(&repl, &hello, peer).await;
    if admitted.is_ok() {
        if hello.version != LINK_VERSION {
            let text = format!("unsupported version {}", hello.version);
            return refuse(&mut stream, LinkErrorCode::UnsupportedVersion, text).await;
        }
        if hello.node_id == repl.identity.node_id {
            let text = membership::SELF_LINK.to_string();
            return refuse(&mut stream, LinkErrorCode::NotInGroup, text).await;
        }
        admitted = prove(&repl, &mut stream, &mut buf, &hello).await;
    }
    if let Err(why) = admitted {
        tracing::warn!(
            "REPLICATION: link from {peer} (node {:016x}) refused: {why}",
            hello.node_id
        );
        return refuse(
            &mut stream,
            LinkErrorCode::NotInGroup,
            membership::NOT_IN_GROUP.into(),
        )
        .await;
    }
    if hello.nsqd_node_id == repl.settings.nsqd_node_id {
        tracing::warn!(
            "REPLICATION: origin {:016x} ({peer}) has this node's --node-id {}: message IDs may collide after a takeover",
            hello.node_id,
            hello.nsqd_node_id
        );
    }
    // A member that answers at the address of an origin this node holds, with another node
    // ID, replaced it (Node identity): the old identity's epochs end now.
    let at = format!("{}:{}", hello.broadcast_address, hello.tcp_port);
    for old in repl.origins_at(&hello.broadcast_address, hello.tcp_port, hello.node_id) {
        repl.identity_replaced(old, hello.node_id, &at);
    }
    let (origin, epoch) = (hello.node_id, hello.epoch);
    if hello.previous_unclean {
        // Its earlier epochs ended with the crash: gone now, no timeout (Takeover).
        repl.epochs_ended(origin, hello.previous_epoch).await;
    }
    let guard = repl.takeover_lock.lock().await;
    // An epoch of this origin taken over here and not yet applied by it (Return): the answer
    // is the manifest, the oldest first. It is read under the lock, as MANIFEST_APPLIED
    // deletes it, so a session that finds it listed also finds the file.
    loop {
        let taken = repl
            .taken
            .lock()
            .keys()
            .find(|(o, e)| *o == origin && *e <= epoch)
            .map(|&(_, e)| e);
        let Some(taken) = taken else {
            break;
        };
        let path = manifest::manifest_path(&repl.data_path, origin, taken);
        let p = path.clone();
        let read = tokio::task::spawn_blocking(move || manifest::read(&p, taken)).await;
        let records = match read {
            Ok(Ok(m)) => m,
            Ok(Err(manifest::ManifestError::Io(e))) if e.kind() == std::io::ErrorKind::NotFound => {
                // Gone from the disk: applied (or removed by hand); the next one, or WELCOME.
                tracing::warn!(
                    "REPLICATION: manifest {} listed but not found; counted as applied",
                    path.display()
                );
                repl.taken.lock().remove(&(origin, taken));
                continue;
            }
            Ok(Err(e)) => {
                tracing::error!("REPLICATION: manifest {} - {e}", path.display());
                return refuse(&mut stream, LinkErrorCode::Internal, e.to_string()).await;
            }
            Err(e) => return refuse(&mut stream, LinkErrorCode::Internal, e.to_string()).await,
        };
        drop(guard);
        return answer_taken_over(&repl, &mut stream, buf, peer, origin, taken, records).await;
    }
    let r = repl.clone();
    let (address, port) = (hello.broadcast_address.clone(), hello.tcp_port);
    let opened = tokio::task::spawn_blocking(move || {
        let b = r.open_backlog(origin, epoch)?;
        b.set_address(&address, port);
        Ok::<_, super::ReplicationError>(b)
    })
    .await;
    let backlog = match opened {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            tracing::error!("REPLICATION: {e}");
            return refuse(&mut stream, LinkErrorCode::Internal, e.to_string()).await;
        }
        Err(e) => {
            return refuse(&mut stream, LinkErrorCode::Internal, e.to_string()).await;
        }
    };
    let session = backlog.session.fetch_add(1, Ordering::AcqRel) + 1;
    backlog.link_up(session);
    drop(guard);
    let (last_seq, catching_up) = {
        let s = backlog.store.lock();
        (s.last_seq(), s.index().catching_up())
    };
    let answer = if last_seq == 0 || catching_up {
        WelcomeAnswer::Catchup
    } else {
        WelcomeAnswer::Resume
    };
    let welcome = Frame::Welcome(Welcome {
        version: LINK_VERSION,
        node_id: repl.identity.node_id,
        answer,
        last_seq,
        max_frame,
    });
    if send(&mut stream, &welcome).await.is_err() {
        return;
    }
    tracing::info!(
        "REPLICATION: replicating {origin:016x} epoch {epoch} from {peer} ({answer:?} after seq {last_seq})"
    );
    let end = session_loop(&repl, &backlog, session, hello.sync, &mut stream, buf).await;
    backlog.link_down(session);
    match end {
        Ok(()) => {}
        Err((Some(code), text)) => {
            tracing::warn!("REPLICATION: link from {peer} ({origin:016x}): {text}");
            refuse(&mut stream, code, text).await;
        }
        Err((None, text)) => {
            tracing::info!("REPLICATION: link from {peer} ({origin:016x}) ended - {text}");
        }
    }
}

/// The checks of a HELLO that need no handshake (`membership`): node ID 0 is no member;
/// without a secret, the origin must come from an address of the peer list. `Err` says why.
async fn stranger(repl: &Replication, hello: &Hello, peer: SocketAddr) -> Result<(), String> {
    if hello.node_id == 0 {
        return Err("node ID 0".into());
    }
    if repl.secret().is_none() && !membership::listed_peer(&repl.settings.peers, peer.ip()).await {
        return Err(format!("{} is no --replication-peer", peer.ip()));
    }
    Ok(())
}

/// The handshake's proofs (`membership`): CHALLENGE carries this node's proof, and the
/// origin must answer with AUTH and its own. `Err` says why the origin is not admitted.
async fn prove(
    repl: &Replication,
    stream: &mut LinkStream,
    buf: &mut BytesMut,
    hello: &Hello,
) -> Result<(), String> {
    let secret = repl.secret();
    let mut challenge = Challenge {
        node_id: repl.identity.node_id,
        nonce: membership::nonce(),
        broadcast_address: repl.settings.broadcast_address.clone(),
        tcp_port: repl.settings.tcp_port,
        proof: Default::default(),
    };
    let binding = stream.binding();
    challenge.proof = membership::proof(secret, Side::Replica, hello, &challenge, &binding);
    send(stream, &Frame::Challenge(challenge.clone()))
        .await
        .map_err(|e| format!("cannot send CHALLENGE - {e}"))?;
    match read_frame(stream, buf, repl.settings.max_frame).await {
        Ok(Frame::Auth { proof }) => {
            if membership::verify(secret, Side::Origin, hello, &challenge, &binding, &proof) {
                Ok(())
            } else if secret.is_some() {
                Err("wrong proof (another secret, or none)".into())
            } else {
                Err("it sent a proof: it has a secret, this node has none".into())
            }
        }
        Ok(Frame::Error { code, text }) => Err(format!("it refused ({code:?}): {text}")),
        Ok(other) => Err(format!(
            "expected AUTH, got type 0x{:02x}",
            other.frame_type()
        )),
        Err(e) => Err(format!("no AUTH - {e}")),
    }
}

/// Answers a returning origin whose epoch `epoch` this node took over (docs/replication.md,
/// Return): TAKEN_OVER, the manifest as stored (`records`), MANIFEST_END; then waits for
/// MANIFEST_APPLIED of that epoch, deletes the manifest and closes.
async fn answer_taken_over(
    repl: &Arc<Replication>,
    stream: &mut LinkStream,
    mut buf: BytesMut,
    peer: SocketAddr,
    origin: u64,
    epoch: u64,
    records: Vec<replication::Manifest>,
) {
    let path = manifest::manifest_path(&repl.data_path, origin, epoch);
    tracing::info!(
        "REPLICATION: {origin:016x} ({peer}) returned; epoch {epoch} was taken over here, sending its manifest ({} IDs)",
        manifest::count(&records)
    );
    let mut out = BytesMut::new();
    let last_seq = repl
        .taken_seq
        .lock()
        .get(&(origin, epoch))
        .map_or(0, |t| t.last_seq);
    let mut frames = vec![Frame::TakenOver {
        epoch,
        by_node: repl.identity.node_id,
        entries: manifest::count(&records),
        last_seq,
    }];
    frames.extend(records.into_iter().map(Frame::Manifest));
    frames.push(Frame::ManifestEnd { epoch });
    for f in &frames {
        if let Err(e) = replication::try_encode(f, &mut out) {
            return refuse(stream, LinkErrorCode::Internal, e.to_string()).await;
        }
    }
    if stream.write_all(&out).await.is_err() {
        return;
    }
    let max_frame = repl.settings.max_frame;
    let mut stop = repl.stopping();
    let mut last_write = Instant::now();
    let mut last_read = Instant::now();
    loop {
        loop {
            match replication::decode(&mut buf, max_frame) {
                Ok(Some(Frame::ManifestApplied { epoch: e })) if e == epoch => {
                    // Under the lock a session reads manifests with (see `serve_link`): the
                    // entry and the file go together.
                    let guard = repl.takeover_lock.lock().await;
                    repl.taken.lock().remove(&(origin, epoch));
                    repl.taken_seq.lock().remove(&(origin, epoch));
                    let r = tokio::task::spawn_blocking(move || {
                        super::deliver::Taken::remove(&path);
                        std::fs::remove_file(&path)
                    })
                    .await;
                    drop(guard);
                    match r {
                        Ok(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => {
                            tracing::error!("REPLICATION: failed to delete the manifest - {e}");
                        }
                        _ => {}
                    }
                    // The origin is back and keeps what the manifest did not take: no
                    // holder's copy of the epoch is needed any more.
                    let whole = super::deliver::Taken {
                        last_seq: u64::MAX,
                        complete: true,
                    };
                    repl.retired
                        .lock()
                        .insert((origin, epoch), (std::time::Instant::now(), whole));
                    repl.status_change();
                    tracing::info!(
                        "REPLICATION: {origin:016x} applied the manifest of epoch {epoch}"
                    );
                    let _ = stream.shutdown().await;
                    return;
                }
                Ok(Some(Frame::Heartbeat | Frame::Status(_) | Frame::Ping { .. })) => {}
                Ok(Some(other)) => {
                    let text = format!(
                        "expected MANIFEST_APPLIED, got type 0x{:02x}",
                        other.frame_type()
                    );
                    return refuse(stream, LinkErrorCode::BadFrame, text).await;
                }
                Ok(None) => break,
                Err(e) => {
                    return refuse(stream, LinkErrorCode::BadFrame, format!("bad frame - {e}"))
                        .await
                }
            }
        }
        buf.reserve(8 << 10);
        tokio::select! {
            r = stream.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => last_read = Instant::now(),
            },
            _ = tokio::time::sleep_until(last_write + HEARTBEAT) => {
                if send(stream, &Frame::Heartbeat).await.is_err() {
                    return;
                }
                last_write = Instant::now();
            }
            _ = tokio::time::sleep_until(last_read + LINK_TIMEOUT) => return,
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => return,
        }
    }
}

/// How often a served link carries this node's STATUS.
const STATUS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The most frame bytes of one read that are appended without a blocking thread.
const INLINE_APPEND_BYTES: usize = 256 << 10;

/// Appends one read's records to the backlog's store (synced if the link asked for SYNC):
/// the store's last seq, whether a catch-up is in progress, and whether it wants compacting;
/// `None` if a newer session of the same origin took the backlog over.
fn store(
    b: &Backlog,
    s: &mut ReplicaStore,
    session: u64,
    records: &[Record],
    sync: bool,
) -> Result<Option<(u64, bool, bool)>, StoreError> {
    if b.session.load(Ordering::Acquire) != session {
        return Ok(None);
    }
    s.append(records)?;
    if sync {
        s.sync()?;
    }
    Ok(Some((
        s.last_seq(),
        s.index().catching_up(),
        s.wants_compaction(),
    )))
}

type LinkEnd = Result<(), (Option<LinkErrorCode>, String)>;

async fn session_loop(
    repl: &Arc<Replication>,
    backlog: &Arc<Backlog>,
    session: u64,
    sync: bool,
    stream: &mut LinkStream,
    mut buf: BytesMut,
) -> LinkEnd {
    let max_frame = repl.settings.max_frame;
    let mut stop = repl.stopping();
    let mut last_write = Instant::now();
    let mut last_read = Instant::now();
    // STATUS (this node's backlogs and their states) goes to the origin every second.
    let mut last_status = Instant::now() - STATUS_EVERY;
    let mut status_changes = repl.status_changes();
    loop {
        // Frames already buffered (HELLO may have come with more) are handled first.
        let mut records = Vec::new();
        let mut drop_epoch = None;
        let mut ping = None;
        let buffered = buf.len();
        loop {
            match replication::decode(&mut buf, max_frame) {
                Ok(Some(f)) => match f {
                    Frame::Pub(_)
                    | Frame::State(_)
                    | Frame::Fin(_)
                    | Frame::Req(_)
                    | Frame::Fanout(_)
                    | Frame::Admin(_)
                    | Frame::CatchupBegin { .. }
                    | Frame::CatchupEnd { .. } => records.push(Record::Frame(f)),
                    Frame::Heartbeat | Frame::Status(_) | Frame::Goodbye { .. } => {}
                    Frame::Drop { epoch, .. } => drop_epoch = Some(epoch),
                    // Answered once per read, with the newest stamp (below).
                    Frame::Ping { stamp } => ping = ping.max(Some(stamp)),
                    Frame::Error { code, text } => {
                        return Err((None, format!("error from origin ({code:?}): {text}")))
                    }
                    other => {
                        let text = format!("unexpected frame type 0x{:02x}", other.frame_type());
                        return Err((Some(LinkErrorCode::BadFrame), text));
                    }
                },
                Ok(None) => break,
                Err(e) => return Err((Some(LinkErrorCode::BadFrame), format!("bad frame - {e}"))),
            }
        }
        if backlog.session.load(Ordering::Acquire) != session {
            return Err((None, "superseded by a newer session".into()));
        }
        if !records.is_empty() {
            // A small batch without SYNC is appended here: one buffered write into the page
            // cache costs less than handing it to a blocking thread and back (two wake-ups per
            // read). A sync, a large batch, or a store held by someone else (a takeover holds
            // its lock for long) goes to a blocking thread as before.
            let inline = !sync && buffered - buf.len() <= INLINE_APPEND_BYTES;
            let here = if inline {
                backlog
                    .store
                    .try_lock()
                    .map(|mut s| store(backlog, &mut s, session, &records, sync))
            } else {
                None
            };
            let stored = match here {
                Some(r) => r,
                None => {
                    let b = backlog.clone();
                    tokio::task::spawn_blocking(move || {
                        let mut s = b.store.lock();
                        store(&b, &mut s, session, &records, sync)
                    })
                    .await
                    .map_err(|e| (Some(LinkErrorCode::Internal), e.to_string()))?
                }
            };
            match stored {
                Ok(None) => return Err((None, "superseded by a newer session".into())),
                Ok(Some((last, catching_up, compact))) => {
                    if !catching_up {
                        send(stream, &Frame::Ack { seq: last })
                            .await
                            .map_err(|e| (None, e.to_string()))?;
                        last_write = Instant::now();
                        if compact {
                            let b = backlog.clone();
                            let r =
                                tokio::task::spawn_blocking(move || b.store.lock().compact()).await;
                            if let Ok(Err(e)) = r {
                                tracing::error!("REPLICATION: compaction failed - {e}");
                            }
                        }
                    }
                }
                Err(e @ StoreError::Full { .. }) => {
                    return Err((Some(LinkErrorCode::Full), e.to_string()))
                }
                Err(e @ StoreError::Index(_)) => {
                    return Err((Some(LinkErrorCode::OutOfSequence), e.to_string()))
                }
                Err(e) => {
                    tracing::error!("REPLICATION: failed to store - {e}");
                    return Err((Some(LinkErrorCode::Internal), e.to_string()));
                }
            }
        }
        if let Some(stamp) = ping {
            // The origin's proof that a member heard it at `stamp` (its fencing counts it).
            backlog.ping_echo.fetch_max(stamp, Ordering::AcqRel);
            send(stream, &Frame::Pong { stamp })
                .await
                .map_err(|e| (None, e.to_string()))?;
            last_write = Instant::now();
        }
        if let Some(epoch) = drop_epoch {
            let (r, origin) = (repl.clone(), backlog.origin);
            let _ = tokio::task::spawn_blocking(move || r.drop_backlogs(origin, epoch)).await;
        }
        if last_status.elapsed() >= STATUS_EVERY {
            send(stream, &Frame::Status(repl.status_entries()))
                .await
                .map_err(|e| (None, e.to_string()))?;
            last_status = Instant::now();
            last_write = last_status;
        }
        // Read more, sending a HEARTBEAT when idle.
        buf.reserve(64 << 10);
        tokio::select! {
            r = stream.read_buf(&mut buf) => match r {
                Ok(0) => return Err((None, "connection closed".into())),
                Ok(_) => last_read = Instant::now(),
                Err(e) => return Err((None, e.to_string())),
            },
            _ = tokio::time::sleep_until(last_write + HEARTBEAT) => {
                let mut b = BytesMut::new();
                replication::encode(&Frame::Heartbeat, &mut b);
                stream.write_all(&b).await.map_err(|e| (None, e.to_string()))?;
                last_write = Instant::now();
            }
            _ = tokio::time::sleep_until(last_read + LINK_TIMEOUT) => {
                return Err((None, format!("no frame for {LINK_TIMEOUT:?}")));
            }
            _ = tokio::time::sleep_until(last_status + STATUS_EVERY) => {}
            // A takeover state changed: STATUS now, not at the next second.
            Ok(()) = status_changes.changed() => last_status = Instant::now() - STATUS_EVERY,
            // `wait_for` sees a stop sent before this session subscribed (`changed` would not).
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => return Ok(()),
        }
    }
}
