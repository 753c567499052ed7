//! The origin's side of a link (docs/replication.md, "The link"): one task per peer dials
//! its TCP port, sends `"  R1"` and HELLO, reads WELCOME, then either resumes from the
//! replica's `last_seq + 1` (when the outbox still holds it) or catches the replica up
//! (CATCHUP_BEGIN, a STATE item per topic and unsettled message interleaved with the live
//! frames, CATCHUP_END). The writer sends everything queued since its last write in one
//! write, and a HEARTBEAT after 1 s of silence; the reader takes ACKs; 5 s without a frame
//! ends the session. Reconnects back off from 100 ms to 2 s.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use nsq_protocol::replication::{self, Frame, Hello, WelcomeAnswer, LINK_VERSION, MAGIC_R1};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use nsq_core::replication::Msg;

use super::catchup::{start_catchup, Catchup};
use super::driver::{status_entry, CoreLink, SessionCmd};
use super::link::{read_frame, LinkRead, LinkStream, LinkWrite};
use super::log::Take;
use super::membership::{self, handshake};
use super::{Replication, HEARTBEAT, LINK_TIMEOUT};

/// Reconnection backoff bounds.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Bytes of live frames per write, and of STATE items added to one write.
const WRITE_LIVE: usize = 1 << 20;
const WRITE_STATE: usize = 256 << 10;

/// The ports HELLO announces.
#[derive(Debug, Clone, Copy)]
pub(super) struct HelloInfo {
    pub tcp_port: u16,
    pub http_port: u16,
}

/// Why a session ended.
#[derive(Debug)]
pub(super) enum End {
    /// The peer is this very node: stop dialling it.
    SelfLink,
    /// The peer is the node another peer entry (at this address) links to: stop dialling it.
    Duplicate(String),
    /// Before WELCOME.
    NotEstablished(String),
    /// After WELCOME.
    Lost(String),
    /// The peer took an epoch over; its manifest is applied (a new session follows).
    Returned(String),
    /// The peer took an epoch over; its manifest could not be received or applied.
    ManifestFailed(String),
}

/// Dials peer `i` until the daemon stops.
pub(super) async fn run_peer(repl: Arc<Replication>, i: usize, info: HelloInfo) {
    let mut stop = repl.stopping();
    let mut backoff = BACKOFF_MIN;
    let addr = repl.group.lock().peers[i].addr.clone();
    let mut last_error = String::new();
    loop {
        if *stop.borrow() {
            return;
        }
        let began = Instant::now();
        let end = tokio::select! {
            e = session(&repl, i, &addr, info) => e,
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => return,
        };
        repl.session_down(i);
        if !matches!(end, End::ManifestFailed(_)) {
            // Answered (or unreachable): the startup hold waits no more for it.
            repl.peer_answered(i);
        }
        match end {
            End::Returned(done) => {
                tracing::info!("REPLICATION: {addr}: {done}");
                backoff = BACKOFF_MIN;
            }
            End::ManifestFailed(e) => {
                tracing::error!("REPLICATION: {addr}: {e}");
            }
            End::SelfLink => {
                tracing::warn!("REPLICATION: peer {addr} is this node, dropped");
                return;
            }
            End::Duplicate(other) => {
                tracing::warn!("REPLICATION: peer {addr} is the node at {other}, dropped");
                return;
            }
            End::Lost(e) => {
                tracing::warn!("REPLICATION: link to {addr} ended - {e}");
                // A session that lasted starts the backoff over; one refused at once (a full
                // backlog) keeps backing off.
                if began.elapsed() >= LINK_TIMEOUT {
                    backoff = BACKOFF_MIN;
                }
            }
            End::NotEstablished(e) => {
                if e != last_error {
                    tracing::warn!("REPLICATION: cannot link to {addr} - {e}");
                    last_error = e;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn session(repl: &Arc<Replication>, i: usize, addr: &str, info: HelloInfo) -> End {
    let stream = match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return End::NotEstablished(e.to_string()),
        Err(_) => return End::NotEstablished("connect timed out".into()),
    };
    let _ = stream.set_nodelay(true);
    // With a certificate the link is TLS from after the magic (link.rs).
    let mut stream = match repl.link_tls() {
        None => LinkStream::Plain(stream),
        Some(tls) => {
            let mut tcp = stream;
            if let Err(e) = tcp.write_all(MAGIC_R1).await {
                return End::NotEstablished(e.to_string());
            }
            match tls.connect(tcp, addr).await {
                Ok(s) => s,
                Err(e) => return End::NotEstablished(format!("TLS handshake failed - {e}")),
            }
        }
    };
    let id = repl.identity;
    let s = &repl.settings;
    // The epoch now: a session of an older one ends (see the select below).
    let mut epoch_watch = repl.epoch_watch();
    let epoch = *epoch_watch.borrow_and_update();
    // An unclean epoch a peer already took over is not announced again: another holder of
    // it would take it over a second time (it is dropped below instead).
    let unclean = id.previous_unclean.filter(|&e| e > repl.taken_epoch());
    let hello = Hello {
        version: LINK_VERSION,
        node_id: id.node_id,
        epoch,
        resume: id.start_seq > 0,
        sync: s.sync,
        previous_unclean: unclean.is_some(),
        resume_seq: id.start_seq,
        previous_epoch: unclean.unwrap_or(0),
        replicas: s.replicas as u16,
        max_frame: s.max_frame,
        nsqd_node_id: s.nsqd_node_id,
        broadcast_address: s.broadcast_address.clone(),
        tcp_port: if s.tcp_port != 0 {
            s.tcp_port
        } else {
            info.tcp_port
        },
        http_port: if s.http_port != 0 {
            s.http_port
        } else {
            info.http_port
        },
        nonce: membership::nonce(),
    };
    let mut out = BytesMut::with_capacity(256);
    if !stream.is_tls() {
        out.put_slice(MAGIC_R1);
    }
    if let Err(e) = replication::try_encode(&Frame::Hello(hello.clone()), &mut out) {
        return End::NotEstablished(format!("cannot encode HELLO - {e}"));
    }
    // An answer to this HELLO proves the replica heard this node after now (fencing).
    let hello_at = repl.clock();
    if let Err(e) = stream.write_all(&out).await {
        return End::NotEstablished(e.to_string());
    }
    let binding = stream.binding();
    let (mut rd, mut wr) = stream.split();
    let mut buf = BytesMut::with_capacity(8 << 10);
    // The replica proves it is a member before anything is sent to it (membership.rs).
    let c = match handshake(repl, i, &mut rd, &mut wr, &mut buf, &hello, &binding).await {
        Ok(c) => c,
        Err(end) => return end,
    };
    let replica = c.node_id;
    // The core knows of the session from here to its end, however it ends, at the address
    // the replica gives for itself (a new node ID there ends the old identity in the core).
    let (ctl_tx, mut ctl) = mpsc::unbounded_channel();
    // The reader queues MANIFEST_APPLIED through the writer (a TAKEN_OVER mid-session).
    let ctl_tx2 = ctl_tx.clone();
    let (bulk_tx, mut bulk) = mpsc::channel(2);
    let core = CoreLink::up(
        repl,
        replica,
        format!("{}:{}", c.broadcast_address, c.tcp_port),
        ctl_tx,
        bulk_tx,
    );
    // The replica's STATUS may come first (the core sends it as the link comes up).
    let first = loop {
        match read_frame(&mut rd, &mut buf, s.max_frame).await {
            Ok(Frame::Status(entries)) => {
                core.received(Msg::Status(entries.iter().map(status_entry).collect()))
            }
            Ok(Frame::Heartbeat) => {}
            other => break other,
        }
    };
    let welcome = match first {
        Ok(Frame::Welcome(w)) if w.node_id == replica => w,
        Ok(Frame::Welcome(w)) => {
            return End::NotEstablished(format!(
                "WELCOME from {:016x} after CHALLENGE from {replica:016x}",
                w.node_id
            ))
        }
        Ok(Frame::Error { code, text }) => {
            return End::NotEstablished(format!("refused ({code:?}): {text}"))
        }
        Ok(Frame::TakenOver {
            epoch,
            by_node,
            entries,
            last_seq,
        }) => {
            // Return (docs/replication.md): apply the manifest, then a new session. The core
            // fences this node's delivery meanwhile (the taker delivers those messages).
            core.received(Msg::TakenOver { epoch, last_seq });
            return match super::returning::taken_over(
                repl,
                &mut rd,
                &mut wr,
                &mut buf,
                (epoch, by_node, entries, last_seq),
            )
            .await
            {
                Ok(done) => End::Returned(done),
                Err(e) => End::ManifestFailed(format!(
                    "epoch {epoch} taken over by {by_node:016x}, manifest not applied - {e}"
                )),
            };
        }
        Ok(other) => return End::NotEstablished(format!("unexpected {other:?}")),
        Err(e) => {
            // E_BAD_PROTOCOL from a node with replication off is not a link frame.
            return End::NotEstablished(e);
        }
    };
    let (front, last) = repl.log.bounds();
    let resume = welcome.answer == WelcomeAnswer::Resume
        && welcome.last_seq <= last
        && welcome.last_seq + 1 >= front;
    let floor = if resume { welcome.last_seq } else { last };
    // The outbox keeps `floor` on for this session until the core placed it (in the set, it
    // may resume from there); the log's position first, so that the core knows the
    // replica's `last_seq` is within it.
    repl.session_up(i, welcome.node_id, floor);
    core.logged(last);
    core.received(Msg::Welcome {
        epoch,
        resume: resume.then_some(welcome.last_seq),
        echo: hello_at,
    });
    // Epochs of this node a peer took over: this peer's copies of them are not needed (it
    // may hold one without having been the taker), DROP before anything else.
    let taken = repl.taken_epoch();
    if taken > 0 && taken < epoch {
        let mut b = BytesMut::new();
        let taker = repl.taken_by();
        replication::encode(
            &Frame::Drop {
                epoch: taken,
                taker,
            },
            &mut b,
        );
        if let Err(e) = wr.write_all(&b).await {
            return End::Lost(e.to_string());
        }
    }
    repl.peer_answered(i);
    tracing::info!(
        "REPLICATION: linked to {addr} ({:016x}), it holds seq {}",
        welcome.node_id,
        welcome.last_seq
    );
    let max_frame = welcome.max_frame.max(replication::MIN_MAX_FRAME);
    let to_writer = ctl_tx2;
    let ends = Ends {
        ctl: &mut ctl,
        bulk: &mut bulk,
        epoch_watch: &mut epoch_watch,
        epoch,
    };
    let peer = Peer { i, addr };
    tokio::select! {
        e = writer(repl, &peer, &mut wr, max_frame, ends) => End::Lost(e),
        e = reader(repl, i, &core, &mut rd, buf, &to_writer) => End::Lost(e),
    }
}

/// The peer a writer streams to: its `--replication-peer` index and address.
struct Peer<'a> {
    i: usize,
    addr: &'a str,
}

/// The core placed the peer in the replica set: the log goes to it from `from` on, or after
/// a catch-up (CATCHUP_BEGIN at the log's end now, STATE items with the live frames).
fn begin_stream(
    repl: &Arc<Replication>,
    peer: &Peer<'_>,
    from: Option<u64>,
    out: &mut BytesMut,
) -> (u64, Option<Catchup>) {
    match from {
        Some(from) => {
            repl.streaming(peer.i, from - 1);
            tracing::info!(
                "REPLICATION: replicating to {}, resuming after seq {}",
                peer.addr,
                from - 1
            );
            (from, None)
        }
        None => {
            // The log's end first, then the snapshot: a settlement logged after the end read
            // here follows its STATE on the wire (`nsq_core::replicator::CatchupScan`).
            let (_, last) = repl.log.bounds();
            let chunks = start_catchup(repl);
            repl.streaming(peer.i, last);
            repl.count_catchup();
            replication::encode(&Frame::CatchupBegin { seq: last }, out);
            tracing::info!(
                "REPLICATION: replicating to {}, catching it up at seq {last}",
                peer.addr
            );
            let c = Catchup {
                chunks,
                items: VecDeque::new(),
                limit: last,
                complete: false,
            };
            (last + 1, Some(c))
        }
    }
}

/// Sends PINGs and the core's frames, and once the core placed the peer in the replica set
/// ([`SessionCmd::Stream`]) the live frames (and a catch-up, if any), until the link fails.
/// A member outside the set gets no log: it holds no copy of this node (STANDBY). A
/// catch-up whose snapshot fails ends the session without CATCHUP_END: the replica's copy
/// stays incomplete and the next session catches up again.
async fn writer(
    repl: &Arc<Replication>,
    peer: &Peer<'_>,
    wr: &mut LinkWrite,
    _max_frame: u32,
    ends: Ends<'_>,
) -> String {
    let Ends {
        ctl,
        bulk,
        epoch_watch,
        epoch,
    } = ends;
    // The epoch ended (a taker's manifest applied): what is queued (MANIFEST_APPLIED among
    // it) goes out, then the session ends and the next starts in the new epoch.
    let mut ending = false;
    let mut rx = repl.log.subscribe();
    let mut out = BytesMut::with_capacity(64 << 10);
    // Nothing of the log until the core says the peer is in the set.
    let mut streaming = false;
    let mut next = 0;
    let mut catchup: Option<Catchup> = None;
    let mut last_write = Instant::now();
    // PING goes out at its own pace, busy link or idle: its PONG is the proof of life that
    // fencing counts (docs/replication.md, The core).
    let ping_every = repl.ping_every();
    let mut next_ping = Instant::now();
    loop {
        if Instant::now() >= next_ping {
            let stamp = u64::try_from(repl.clock().as_nanos()).unwrap_or(u64::MAX);
            replication::encode(&Frame::Ping { stamp }, &mut out);
            next_ping = Instant::now() + ping_every;
        }
        rx.borrow_and_update();
        if let Some(c) = catchup.as_mut() {
            if c.items.is_empty() && !c.complete {
                match c.chunks.try_recv() {
                    Ok(chunk) => {
                        if let Err(e) = c.take(chunk) {
                            return flush_and_end(wr, &out, e).await;
                        }
                    }
                    Err(mpsc::error::TryRecvError::Empty) => {}
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        return "catch-up snapshot ended without completing".into();
                    }
                }
            }
        }
        // Live frames first (during a catch-up, only up to the last chunk's seq).
        let limit = catchup.as_ref().map_or(u64::MAX, |c| c.limit);
        if streaming && next <= limit {
            match repl.log.take(next, WRITE_LIVE) {
                Take::Gone => {
                    return format!("fell behind the outbox (seq {next}): catch-up needed")
                }
                Take::Frames(frames) => {
                    let room = usize::try_from(limit - next + 1).unwrap_or(usize::MAX);
                    for f in frames.into_iter().take(room) {
                        out.put_slice(&f.head);
                        out.put_slice(&f.tail);
                        next += 1;
                    }
                }
            }
        }
        if let Some(c) = catchup.as_mut() {
            // STATE items fill the rest of the write.
            let start = out.len();
            while out.len() - start < WRITE_STATE {
                let Some(item) = c.items.pop_front() else {
                    break;
                };
                if let Err(e) = replication::try_encode(&Frame::State(item), &mut out) {
                    // A STATE that cannot be encoded would leave the copy incomplete.
                    return format!("catch-up item not encodable - {e}");
                }
            }
            if c.items.is_empty() && c.complete {
                replication::encode(&Frame::CatchupEnd { seq: next - 1 }, &mut out);
                catchup = None;
            }
        }
        // The core's frames (STATUS) and a handoff's chunk, if any waits.
        loop {
            match ctl.try_recv() {
                Ok(SessionCmd::Frame(f)) => {
                    if let Err(e) = replication::try_encode(&f, &mut out) {
                        return format!("frame not encodable - {e}");
                    }
                }
                Ok(SessionCmd::Close | SessionCmd::Refuse) => {
                    return flush_and_end(wr, &out, "closed by the core".into()).await;
                }
                Ok(SessionCmd::Stream { from }) if !streaming => {
                    streaming = true;
                    (next, catchup) = begin_stream(repl, peer, from, &mut out);
                }
                Ok(_) => {}
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return "core gone".into(),
            }
        }
        if out.len() < WRITE_LIVE {
            if let Ok(b) = bulk.try_recv() {
                out.put_slice(&b);
            }
        }
        if ending && out.is_empty() {
            return format!(
                "epoch {epoch} ended (taken over), reconnecting in epoch {}",
                repl.epoch()
            );
        }
        if out.is_empty() {
            let beat = last_write + HEARTBEAT;
            let waiting = catchup
                .as_ref()
                .is_some_and(|c| c.items.is_empty() && !c.complete);
            tokio::select! {
                r = rx.changed(), if streaming => {
                    if r.is_err() {
                        return "log closed".into();
                    }
                }
                _ = tokio::time::sleep_until(beat) => {
                    replication::encode(&Frame::Heartbeat, &mut out);
                }
                _ = tokio::time::sleep_until(next_ping) => {}
                c = ctl.recv() => match c {
                    Some(SessionCmd::Frame(f)) => {
                        if let Err(e) = replication::try_encode(&f, &mut out) {
                            return format!("frame not encodable - {e}");
                        }
                    }
                    Some(SessionCmd::Close | SessionCmd::Refuse) => return "closed by the core".into(),
                    Some(SessionCmd::Stream { from }) if !streaming => {
                        streaming = true;
                        (next, catchup) = begin_stream(repl, peer, from, &mut out);
                    }
                    Some(_) => {}
                    None => return "core gone".into(),
                },
                Some(b) = bulk.recv() => out.put_slice(&b),
                _ = async { epoch_watch.wait_for(|e| *e != epoch).await.is_ok() }, if !ending => ending = true,
                chunk = async { catchup.as_mut().expect("guarded").chunks.recv().await }, if waiting => {
                    let c = catchup.as_mut().expect("guarded");
                    match chunk {
                        Some(chunk) => {
                            if let Err(e) = c.take(chunk) {
                                return flush_and_end(wr, &out, e).await;
                            }
                        }
                        None => return "catch-up snapshot ended without completing".into(),
                    }
                }
            }
            if out.is_empty() {
                continue;
            }
        }
        if let Err(e) = wr.write_all(&out).await {
            return e.to_string();
        }
        out.clear();
        last_write = Instant::now();
    }
}

/// What the writer takes besides the log: the core's frames, a handoff's chunks, and the
/// epoch whose end ends the session.
struct Ends<'a> {
    ctl: &'a mut mpsc::UnboundedReceiver<SessionCmd>,
    bulk: &'a mut mpsc::Receiver<Bytes>,
    epoch_watch: &'a mut tokio::sync::watch::Receiver<u64>,
    epoch: u64,
}

/// A catch-up that cannot go on ends the session, but what was queued before it (its
/// CATCHUP_BEGIN, live frames) goes out first: the replica then knows its copy is being
/// caught up and stays incomplete, whichever of the two the writer noticed first.
async fn flush_and_end(wr: &mut LinkWrite, out: &[u8], e: String) -> String {
    if !out.is_empty() {
        if let Err(w) = wr.write_all(out).await {
            return format!("{e} (and the link failed - {w})");
        }
    }
    e
}

/// Takes ACKs (and heartbeats) until the link fails.
async fn reader(
    repl: &Arc<Replication>,
    i: usize,
    core: &CoreLink<'_>,
    rd: &mut LinkRead,
    mut buf: BytesMut,
    to_writer: &mpsc::UnboundedSender<SessionCmd>,
) -> String {
    loop {
        match read_frame(rd, &mut buf, repl.settings.max_frame).await {
            Ok(Frame::TakenOver {
                epoch,
                by_node,
                entries,
                last_seq,
            }) => {
                // A member that took an earlier epoch of this node over while this session
                // ran (docs/replication.md, Return): its manifest follows.
                core.received(Msg::TakenOver { epoch, last_seq });
                let taken = (epoch, by_node, entries, last_seq);
                match super::returning::taken_over_live(repl, rd, &mut buf, taken, to_writer).await
                {
                    Ok(done) => tracing::info!("REPLICATION: {done}"),
                    Err(e) => {
                        return format!(
                            "epoch {epoch} taken over by {by_node:016x}, manifest not applied - {e}"
                        )
                    }
                }
            }
            Ok(Frame::Ack { seq }) => {
                core.received(Msg::Ack { seq });
                repl.on_ack(i, seq);
            }
            Ok(Frame::Status(entries)) => {
                core.received(Msg::Status(entries.iter().map(status_entry).collect()));
                repl.seen_frame(i, Frame::Status(entries));
            }
            Ok(f @ Frame::Heartbeat) => repl.seen_frame(i, f),
            Ok(Frame::Pong { stamp }) => {
                core.received(Msg::Pong {
                    stamp: Duration::from_nanos(stamp),
                });
                repl.seen_frame(i, Frame::Heartbeat);
            }
            Ok(Frame::HandoffDone { origin, epoch }) => {
                core.received(Msg::HandoffDone { origin, epoch });
                repl.seen_frame(i, Frame::Heartbeat);
            }
            Ok(Frame::Error { code, text }) => {
                return format!("error from replica ({code:?}): {text}")
            }
            Ok(other) => return format!("unexpected frame type 0x{:02x}", other.frame_type()),
            Err(e) => return e,
        }
    }
}
