//! The replica's side of a link (docs/replication.md, "The link"): a connection that opened
//! with `"  R1"` on the TCP port. HELLO names the origin and its epoch; once the origin proved
//! its membership the session is the core's (`driver.rs`): it reports HELLO and every control
//! frame, and carries out the answer — WELCOME (the backlog of that `(origin, epoch)` opened
//! or created; RESUME after its last seq, or CATCHUP when it holds nothing complete),
//! TAKEN_OVER with the manifest, STATUS, PONG, HANDOFF_DONE, or the end of the session. Every
//! read's log frames are stored in one append (synced when HELLO set SYNC) and acknowledged
//! with the highest seq held — the core's rule, applied here without a round trip: a replica
//! does not acknowledge during a catch-up (until CATCHUP_END its backlog is not complete up to
//! its seq). A full backlog is ERROR 2, a frame out of sequence ERROR 3. Compaction runs after
//! the ACK is sent. A HANDOFF from this member (a holder of another origin's epoch this node
//! takes over) is spilled to disk (`handoff.rs`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use nsq_core::replica::{manifest, Record, ReplicaStore, StoreError};
use nsq_core::replication::{Event, Msg};
use nsq_protocol::replication::{
    self, Challenge, Frame, Hello, LinkErrorCode, Welcome, WelcomeAnswer, LINK_VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::driver::{status_entry, InLink, SessionCmd};
use super::handoff::Spill;
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
    // From here the core decides (`driver.rs`): the session reports the link, HELLO and
    // every control frame, and carries out what the core answers — WELCOME (the backlog
    // opened), TAKEN_OVER with the manifest, or nothing yet (a takeover of an older epoch of
    // this origin comes first). A new node ID at the address of one it knew ends that
    // identity in the core.
    let origin = hello.node_id;
    let addr = format!("{}:{}", hello.broadcast_address, hello.tcp_port);
    let (tx, rx) = mpsc::unbounded_channel();
    let link = InLink::up(&repl, origin, addr, tx);
    link.received(Msg::Hello {
        epoch: hello.epoch,
        previous_unclean: hello.previous_unclean.then_some(hello.previous_epoch),
        stamp: Duration::ZERO,
    });
    let mut s = Session {
        repl: &repl,
        link: &link,
        addr: (hello.broadcast_address.clone(), hello.tcp_port),
        sync: hello.sync,
        backlog: None,
        spill: None,
        manifest_sent: None,
        last_stored: None,
    };
    let end = s.run(&mut stream, buf, rx).await;
    s.stored(true);
    if let Some((b, session)) = &s.backlog {
        b.link_down(*session);
    }
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

/// How often at most the store's progress is reported to the core between appends (the end
/// of a catch-up and the session's end are reported at once).
const STORED_EVERY: Duration = Duration::from_millis(100);

/// One served link's session (see [`serve_link`]).
struct Session<'a> {
    repl: &'a Arc<Replication>,
    link: &'a InLink,
    /// The origin's broadcast address and TCP port (its HELLO).
    addr: (String, u16),
    sync: bool,
    /// The backlog the core welcomed the origin into, and this session's number on it.
    backlog: Option<(Arc<Backlog>, u64)>,
    /// A handoff arriving from this member (as a holder of another origin's epoch).
    spill: Option<Spill>,
    /// The epoch whose manifest was sent: MANIFEST_APPLIED of it ends the session.
    manifest_sent: Option<u64>,
    /// When the store's progress was last reported, and what it was.
    last_stored: Option<(Instant, u64, bool)>,
}

impl Session<'_> {
    /// Tells the core how far the backlog's store is (`force`: whatever was reported).
    fn stored(&mut self, force: bool) {
        let Some((b, _)) = &self.backlog else { return };
        let (last_seq, complete) = {
            let s = b.store.lock();
            (s.last_seq(), !s.index().catching_up())
        };
        let due = match self.last_stored {
            None => true,
            Some((at, seq, c)) => {
                c != complete || (seq != last_seq && (force || at.elapsed() >= STORED_EVERY))
            }
        };
        if !due {
            return;
        }
        self.last_stored = Some((Instant::now(), last_seq, complete));
        self.repl.core_event(Event::Stored {
            origin: b.origin,
            epoch: b.epoch,
            last_seq,
            complete,
        });
    }

    /// The core welcomed the origin into `epoch`: its backlog is opened (recovered) or
    /// created, this session becomes the one writing it, and WELCOME says RESUME after its
    /// last seq, or CATCHUP when it holds nothing complete.
    async fn welcome(&mut self, stream: &mut LinkStream, epoch: u64) -> LinkEnd {
        let origin = self.link.origin;
        let r = self.repl.clone();
        let addr = self.addr.clone();
        let opened = tokio::task::spawn_blocking(move || {
            let b = r.open_backlog(origin, epoch)?;
            b.set_address(&addr.0, addr.1);
            Ok::<_, super::ReplicationError>(b)
        })
        .await;
        let backlog = match opened {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                tracing::error!("REPLICATION: {e}");
                return Err((Some(LinkErrorCode::Internal), e.to_string()));
            }
            Err(e) => return Err((Some(LinkErrorCode::Internal), e.to_string())),
        };
        let session = backlog.session.fetch_add(1, Ordering::AcqRel) + 1;
        backlog.link_up(session);
        let (last_seq, catching_up) = {
            let s = backlog.store.lock();
            (s.last_seq(), s.index().catching_up())
        };
        let answer = if last_seq == 0 || catching_up {
            WelcomeAnswer::Catchup
        } else {
            WelcomeAnswer::Resume
        };
        self.backlog = Some((backlog, session));
        self.last_stored = None;
        self.stored(true);
        let welcome = Frame::Welcome(Welcome {
            version: LINK_VERSION,
            node_id: self.repl.identity.node_id,
            answer,
            last_seq,
            max_frame: self.repl.settings.max_frame,
        });
        send(stream, &welcome)
            .await
            .map_err(|e| (None, e.to_string()))?;
        tracing::info!(
            "REPLICATION: replicating {origin:016x} epoch {epoch} ({answer:?} after seq {last_seq})"
        );
        Ok(())
    }

    /// TAKEN_OVER of `epoch` (the copy up to `last_seq`), the manifest as stored, and
    /// MANIFEST_END; MANIFEST_APPLIED of it ends the session.
    async fn manifest(&mut self, stream: &mut LinkStream, epoch: u64, last_seq: u64) -> LinkEnd {
        let origin = self.link.origin;
        let path = manifest::manifest_path(&self.repl.data_path, origin, epoch);
        let p = path.clone();
        let records = match tokio::task::spawn_blocking(move || manifest::read(&p, epoch)).await {
            Ok(Ok(m)) => m,
            Ok(Err(manifest::ManifestError::Io(e))) if e.kind() == std::io::ErrorKind::NotFound => {
                // Gone from the disk (removed by hand): counted as applied, so that the origin
                // is answered (issue 28, defect 7: a listed manifest not found refused it).
                tracing::warn!(
                    "REPLICATION: manifest {} listed but not found; counted as applied",
                    path.display()
                );
                self.link.received(Msg::ManifestApplied { epoch });
                return Ok(());
            }
            Ok(Err(e)) => {
                // Without it the origin would keep delivering what this node took: the
                // session ends, and the core answers the next one again.
                tracing::error!("REPLICATION: manifest {} - {e}", path.display());
                return Err((Some(LinkErrorCode::Internal), e.to_string()));
            }
            Err(e) => return Err((Some(LinkErrorCode::Internal), e.to_string())),
        };
        tracing::info!(
            "REPLICATION: {origin:016x} returned; epoch {epoch} was taken over here, sending its manifest ({} IDs)",
            manifest::count(&records)
        );
        let mut frames = vec![Frame::TakenOver {
            epoch,
            by_node: self.repl.identity.node_id,
            entries: manifest::count(&records),
            last_seq,
        }];
        frames.extend(records.into_iter().map(Frame::Manifest));
        frames.push(Frame::ManifestEnd { epoch });
        let mut out = BytesMut::new();
        for f in &frames {
            replication::try_encode(f, &mut out)
                .map_err(|e| (Some(LinkErrorCode::Internal), e.to_string()))?;
        }
        stream
            .write_all(&out)
            .await
            .map_err(|e| (None, e.to_string()))?;
        self.manifest_sent = Some(epoch);
        Ok(())
    }

    /// Serves the session until it ends (see [`serve_link`]).
    async fn run(
        &mut self,
        stream: &mut LinkStream,
        mut buf: BytesMut,
        mut rx: mpsc::UnboundedReceiver<SessionCmd>,
    ) -> LinkEnd {
        let repl = self.repl;
        let max_frame = repl.settings.max_frame;
        let mut stop = repl.stopping();
        let mut last_write = Instant::now();
        let mut last_read = Instant::now();
        loop {
            // Frames already buffered (HELLO may have come with more) are handled first.
            let mut records = Vec::new();
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
                        Frame::Heartbeat | Frame::Goodbye { .. } => {}
                        Frame::Ping { stamp } => self.link.received(Msg::Ping {
                            stamp: Duration::from_nanos(stamp),
                        }),
                        Frame::Status(entries) => self
                            .link
                            .received(Msg::Status(entries.iter().map(status_entry).collect())),
                        Frame::Drop { epoch, taker } => {
                            self.link.received(Msg::Drop { epoch, taker })
                        }
                        Frame::ManifestApplied { epoch } => {
                            self.link.received(Msg::ManifestApplied { epoch });
                            if self.manifest_sent == Some(epoch) && self.backlog.is_none() {
                                // The origin moves on to its next epoch: a new session.
                                return Ok(());
                            }
                        }
                        Frame::Handoff {
                            origin,
                            epoch,
                            item,
                        } => {
                            Spill::add(&mut self.spill, repl, self.link.origin, origin, epoch, item)
                                .map_err(|e| (Some(LinkErrorCode::Internal), e))?
                        }
                        Frame::HandoffEnd {
                            origin,
                            epoch,
                            items,
                        } => self.handoff_end(origin, epoch, items).await?,
                        Frame::Error { code, text } => {
                            return Err((None, format!("error from origin ({code:?}): {text}")))
                        }
                        other => {
                            let text =
                                format!("unexpected frame type 0x{:02x}", other.frame_type());
                            return Err((Some(LinkErrorCode::BadFrame), text));
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        return Err((Some(LinkErrorCode::BadFrame), format!("bad frame - {e}")))
                    }
                }
            }
            if !records.is_empty() {
                let inline = buffered - buf.len() <= INLINE_APPEND_BYTES;
                if let Some(ack) = self.append(records, inline).await? {
                    send(stream, &Frame::Ack { seq: ack })
                        .await
                        .map_err(|e| (None, e.to_string()))?;
                    last_write = Instant::now();
                }
                self.stored(false);
            }
            // Read more, carry out the core's commands, send a HEARTBEAT when idle.
            buf.reserve(64 << 10);
            tokio::select! {
                r = stream.read_buf(&mut buf) => match r {
                    Ok(0) => return Err((None, "connection closed".into())),
                    Ok(_) => last_read = Instant::now(),
                    Err(e) => return Err((None, e.to_string())),
                },
                c = rx.recv() => {
                    match c {
                        None | Some(SessionCmd::Close) => return Ok(()),
                        Some(SessionCmd::Refuse) => {
                            return Err((Some(LinkErrorCode::NotInGroup), membership::NOT_IN_GROUP.into()))
                        }
                        Some(SessionCmd::Frame(f)) => {
                            send(stream, &f).await.map_err(|e| (None, e.to_string()))?;
                        }
                        Some(SessionCmd::Welcome { epoch }) => self.welcome(stream, epoch).await?,
                        Some(SessionCmd::Manifest { epoch, last_seq }) => {
                            self.manifest(stream, epoch, last_seq).await?
                        }
                    }
                    last_write = Instant::now();
                }
                _ = tokio::time::sleep_until(last_write + HEARTBEAT) => {
                    send(stream, &Frame::Heartbeat).await.map_err(|e| (None, e.to_string()))?;
                    last_write = Instant::now();
                }
                _ = tokio::time::sleep_until(last_read + LINK_TIMEOUT) => {
                    return Err((None, format!("no frame for {LINK_TIMEOUT:?}")));
                }
                _ = tokio::time::sleep(STORED_EVERY), if self.last_stored.is_some_and(|(at, _, _)| at.elapsed() < STORED_EVERY) => {
                    self.stored(true);
                }
                // `wait_for` sees a stop sent before this session subscribed.
                _ = async { stop.wait_for(|s| *s).await.is_ok() } => return Ok(()),
            }
        }
    }

    /// Appends one read's log frames to the welcomed backlog: the seq to acknowledge, if the
    /// copy is complete (a replica does not acknowledge during a catch-up: until
    /// CATCHUP_END its backlog is not complete up to its seq).
    async fn append(
        &mut self,
        records: Vec<Record>,
        inline: bool,
    ) -> Result<Option<u64>, (Option<LinkErrorCode>, String)> {
        let Some((backlog, session)) = self.backlog.clone() else {
            return Err((
                Some(LinkErrorCode::BadFrame),
                "a log frame before WELCOME".into(),
            ));
        };
        let sync = self.sync;
        // A small batch without SYNC is appended here: one buffered write into the page
        // cache costs less than handing it to a blocking thread and back (two wake-ups per
        // read). A sync, a large batch, or a store held by someone else (a takeover holds its
        // lock for long) goes to a blocking thread.
        let here = if inline && !sync {
            backlog
                .store
                .try_lock()
                .map(|mut s| store(&backlog, &mut s, session, &records, sync))
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
            Ok(None) => Err((None, "superseded by a newer session".into())),
            Ok(Some((last, catching_up, compact))) => {
                if catching_up {
                    return Ok(None);
                }
                if compact {
                    let b = backlog.clone();
                    let r = tokio::task::spawn_blocking(move || b.store.lock().compact()).await;
                    if let Ok(Err(e)) = r {
                        tracing::error!("REPLICATION: compaction failed - {e}");
                    }
                }
                Ok(Some(last))
            }
            Err(e @ StoreError::Full { .. }) => Err((Some(LinkErrorCode::Full), e.to_string())),
            Err(e @ StoreError::Index(_)) => {
                Err((Some(LinkErrorCode::OutOfSequence), e.to_string()))
            }
            Err(e) => {
                tracing::error!("REPLICATION: failed to store - {e}");
                Err((Some(LinkErrorCode::Internal), e.to_string()))
            }
        }
    }

    /// HANDOFF_END: the spill is kept whole and the core hears the handoff arrived.
    async fn handoff_end(&mut self, origin: u64, epoch: u64, items: u64) -> LinkEnd {
        let Some(spill) = self.spill.take() else {
            return Err((
                Some(LinkErrorCode::BadFrame),
                "HANDOFF_END without HANDOFF".into(),
            ));
        };
        let r = self.repl.clone();
        let ended = tokio::task::spawn_blocking(move || spill.end(&r, origin, epoch, items))
            .await
            .map_err(|e| (Some(LinkErrorCode::Internal), e.to_string()))?;
        match ended {
            Ok(()) => {
                self.repl.core_event(Event::HandoffReceived {
                    from: self.link.origin,
                    origin,
                    epoch,
                });
                Ok(())
            }
            Err(e) => {
                tracing::warn!("REPLICATION: handoff from {:016x}: {e}", self.link.origin);
                Ok(())
            }
        }
    }
}
