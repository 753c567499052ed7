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
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use nsq_core::replication::Msg;
use nsq_protocol::replication::{self, Challenge, Frame, Hello, LinkErrorCode, LINK_VERSION};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::driver::InLink;
use super::link::read_frame;
use super::link::LinkStream;
use super::membership::{self, Side};
use super::served::Session;
use super::{Replication, LINK_TIMEOUT};

pub(super) async fn send(stream: &mut LinkStream, f: &Frame) -> std::io::Result<()> {
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
        standby: None,
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
/// without a secret, the origin must come from an address of the peer list (the
/// `--replication-peer`s and the members found through nsqlookupd). `Err` says why.
async fn stranger(repl: &Replication, hello: &Hello, peer: SocketAddr) -> Result<(), String> {
    if hello.node_id == 0 {
        return Err("node ID 0".into());
    }
    if repl.secret().is_none() && !membership::listed_peer(&repl.peer_addrs(), peer.ip()).await {
        return Err(format!(
            "{} is no --replication-peer nor a member found through nsqlookupd",
            peer.ip()
        ));
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
