//! The V2 TCP protocol (nsqd/protocol_v2.go, `IOLoop` and `messagePump`): one reader task
//! (commands) and one writer task (responses, message delivery, heartbeats) per connection,
//! meeting in [`Client`]. The accept loop that spawns [`serve`] is in `server.rs`.
//!
//! The writer batches: every wake-up it takes as many messages as the RDY window allows (up to
//! a flush threshold) from the channel under one lock, encodes them with any queued responses
//! into one buffer and writes it with one syscall.
//!
//! The reader batches too: a consumer with most of a large RDY window in flight has its socket
//! parked out of the reactor and read once a millisecond, so clients that write one FIN per
//! syscall (go-nsq) cost the daemon one wake-up per millisecond, not one per message. The
//! policy is `park.rs` (`ParkPolicy`, `--parked-reads`); bench/README.md ("Parked reads") has
//! the measurements.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nsq_core::{FinishError, SubscribeError};
use nsq_protocol::command::{
    clamp_req_timeout, Command, CommandKind, DecodeError, DecodeHooks, Decoder, Verdict,
};
use nsq_protocol::error::NsqError;
use nsq_protocol::frame;
use nsq_protocol::identify::{negotiate, parse_identify, IdentifyResponse, Negotiated};
use nsq_protocol::names::is_ephemeral;
use nsq_protocol::MessageId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::{timeout, Instant};

use crate::client::{Client, ConnState, Handover};
use crate::nsqd::Nsqd;
use crate::park::{Load, ParkPolicy};
use crate::transport::{self, ReadSide, WriteSide};

/// Stop taking messages into one write once this many bytes are buffered.
const FLUSH_BYTES: usize = 256 * 1024;
/// Messages taken from the channel per lock acquisition.
const TAKE_CHUNK: usize = 512;
/// A connection's first read buffer (allocated when bytes arrive).
const READ_BUF_MIN: usize = 4 * 1024;
/// Read buffers grow to this when a read leaves less than 4 KiB free.
const READ_BUF_MAX: usize = 64 * 1024;
/// A timer deadline that is never reached in practice (disabled timers).
const FAR: Duration = Duration::from_secs(86_400 * 365);

/// Serves one accepted TCP connection to the end.
pub(crate) async fn serve(nsqd: Arc<Nsqd>, mut stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let mut magic = [0u8; 4];
    if stream.read_exact(&mut magic).await.is_err() {
        return;
    }
    if &magic != nsq_protocol::MAGIC_V2 {
        let mut b = BytesMut::new();
        frame::put_error(&mut b, b"E_BAD_PROTOCOL");
        let _ = stream.write_all(&b).await;
        let _ = stream.shutdown().await;
        return;
    }
    let client = nsqd.new_client(peer);
    let (rd, wr) = match transport::split(stream) {
        Ok(halves) => halves,
        Err(e) => {
            tracing::error!("client({peer}): failed to set up the connection - {e}");
            nsqd.remove_client(client.id);
            return;
        }
    };
    let writer = tokio::spawn(write_loop(client.clone(), wr));
    read_loop(&nsqd, &client, rd).await;
    client.close_after_flush();
    let _ = writer.await;
    if let Some(ch) = client.channel.get() {
        ch.remove_consumer(client.id);
    }
    nsqd.remove_client(client.id);
}

/// The per-command state checks of the reference, run before any parameter validation.
struct Gate<'a> {
    nsqd: &'a Nsqd,
    client: &'a Client,
    /// The topic of an MPUB whose body is still being read: the reference creates the topic
    /// before reading the body, so a body error must still leave the topic created.
    mpub_topic: Option<String>,
}

impl DecodeHooks for Gate<'_> {
    fn gate(&mut self, raw_name: &[u8], kind: Option<CommandKind>) -> Result<Verdict, NsqError> {
        if self.nsqd.tcp.tls_required
            && kind != Some(CommandKind::Identify)
            && !self.client.meta.lock().tls
        {
            return Err(NsqError::tls_required(raw_name));
        }
        let state = self.client.state();
        let Some(kind) = kind else {
            return Ok(Verdict::Proceed);
        };
        let ok = match kind {
            CommandKind::Identify | CommandKind::Auth => state == ConnState::Init,
            CommandKind::Sub => {
                if state != ConnState::Init {
                    false
                } else if self.client.settings.lock().heartbeat.is_none() {
                    return Err(NsqError::sub_heartbeats_disabled());
                } else {
                    true
                }
            }
            CommandKind::Rdy => {
                if state == ConnState::Closing {
                    return Ok(Verdict::Ignore);
                }
                state == ConnState::Subscribed
            }
            CommandKind::Fin | CommandKind::Req | CommandKind::Touch => {
                state == ConnState::Subscribed || state == ConnState::Closing
            }
            CommandKind::Cls => state == ConnState::Subscribed,
            CommandKind::Pub | CommandKind::Mpub | CommandKind::Dpub | CommandKind::Nop => true,
        };
        if ok {
            Ok(Verdict::Proceed)
        } else {
            Err(NsqError::cannot_in_current_state(kind.name()))
        }
    }

    fn mpub_topic(&mut self, topic: &str) -> Result<(), NsqError> {
        // Created (with lookupd channel pre-creation, which is async) by exec, or by
        // read_loop if the body turns out bad.
        self.mpub_topic = Some(topic.to_string());
        Ok(())
    }
}

/// FINs waiting to be applied as one batch.
#[derive(Default)]
struct Fins {
    ids: Vec<MessageId>,
    failed: Vec<(MessageId, FinishError)>,
}

impl Fins {
    /// Finishes the pending FINs with one channel lock round and queues the `E_FIN_FAILED`
    /// errors in order. Returns whether any FIN was applied (window space freed).
    fn flush(&mut self, client: &Client) -> bool {
        if self.ids.is_empty() {
            return false;
        }
        let ch = client.channel.get().expect("FIN allowed only after SUB");
        let n = ch.finish_many(client.id, &self.ids, &mut self.failed);
        client.finished(n);
        for (id, e) in self.failed.drain(..) {
            send_error(client, &NsqError::fin_failed(&id, &e.to_string()));
        }
        self.ids.clear();
        n > 0
    }
}

async fn read_loop(nsqd: &Arc<Nsqd>, client: &Arc<Client>, mut rd: ReadSide) {
    // Allocated when bytes arrive and released whenever it is empty while waiting for more on
    // a plain TCP socket (see below): an idle connection holds no read buffer.
    let mut buf = BytesMut::new();
    // The capacity to allocate next time: the last buffer's, so a busy connection keeps
    // reading in large chunks.
    let mut buf_size = READ_BUF_MIN;
    let mut decoder = Decoder::new(nsqd.tcp.limits);
    let mut closed = client.closed_rx();
    let mut gate = Gate {
        nsqd,
        client,
        mpub_topic: None,
    };
    let mut freed = false;
    // Consecutive FINs of one read, finished together under one channel lock (see
    // `Fins::flush`); any other command flushes them first, so responses keep their order.
    let mut fins = Fins::default();
    // The read deadline of the command being read: set when the previous command completed
    // (or at the start) to now + 2 × heartbeat and NOT moved by reads that only bring part of
    // a command, so a body trickled in byte by byte cannot hold the connection open
    // (nsqd/protocol_v2.go, IOLoop: SetReadDeadline once per command, before its line; the
    // body is read under the same deadline).
    let mut deadline: Option<Instant> = None;
    let read_timer = tokio::time::sleep_until(Instant::now());
    tokio::pin!(read_timer);
    // When `read_timer` fires (None: never armed).
    let mut timer_at: Option<Instant> = None;
    // Whether each read is parked (crate::park).
    let mut parking = ParkPolicy::new(nsqd.tcp.parked_reads);
    let mut started = false;
    loop {
        let mut completed = !started;
        started = true;
        loop {
            let decoded = decoder.decode_with(&mut buf, &mut gate);
            if !matches!(decoded, Ok(Some(Command::Fin { .. }))) {
                freed |= fins.flush(client);
            }
            completed |= matches!(decoded, Ok(Some(_)));
            match decoded {
                Ok(Some(Command::Fin { id })) => {
                    gate.mpub_topic = None;
                    fins.ids.push(id);
                }
                Ok(Some(Command::Identify { body })) => match identify(nsqd, client, &body) {
                    Ok(None) => {}
                    Ok(Some(negotiated)) => {
                        rd = match upgrade(nsqd, client, rd, &negotiated).await {
                            Some(r) => r,
                            None => return,
                        };
                        // Bytes read past the IDENTIFY in the old framing are discarded, as
                        // the reference does (clients wait for the upgrade to complete).
                        buf.clear();
                    }
                    Err(e) => {
                        send_error(client, &e);
                        client.close_after_flush();
                        return;
                    }
                },
                Ok(Some(cmd)) => {
                    gate.mpub_topic = None;
                    freed |= matches!(cmd, Command::Req { .. });
                    if let Err(e) = exec(nsqd, client, cmd).await {
                        let fatal = e.fatal();
                        send_error(client, &e);
                        if fatal {
                            client.close_after_flush();
                            return;
                        }
                    }
                }
                Ok(None) => {
                    // FIN/REQ freed window space quietly; at most one wake-up for the whole
                    // batch.
                    if std::mem::take(&mut freed) {
                        client.window_freed();
                    }
                    break;
                }
                Err(DecodeError::LineTooLong) => {
                    client.close_now();
                    return;
                }
                Err(DecodeError::Fatal(e)) => {
                    if let Some(topic) = gate.mpub_topic.take() {
                        let _ = nsqd.topic(&topic).await;
                    }
                    send_error(client, &e);
                    client.close_after_flush();
                    return;
                }
            }
        }
        // Idle (nothing partial buffered) on plain TCP: give the buffer back and wait for
        // readability without one; `read` allocates again. Upgraded streams (TLS, snappy,
        // deflate) may hold decoded bytes internally, so they always read into a buffer.
        let lazy = matches!(rd, ReadSide::Tcp(_)) && buf.is_empty();
        if lazy && buf.capacity() > 0 {
            buf_size = buf.capacity().clamp(READ_BUF_MIN, READ_BUF_MAX);
            buf = BytesMut::new();
        }
        if completed {
            deadline = client
                .settings
                .lock()
                .heartbeat
                .map(|h| Instant::now() + h * 2);
        }
        // The timer is armed lazily: it may fire before the current deadline (set when an
        // earlier command completed), and is then moved on to it, so a busy connection
        // re-arms it once per deadline period instead of once per read.
        if let Some(d) = deadline {
            if timer_at.is_none_or(|t| t > d) {
                read_timer.as_mut().reset(d);
                timer_at = Some(d);
            }
        }
        // A saturated consumer's FINs are collected on a timer (crate::park).
        let park = parking.next_read(Load {
            plain_tcp: matches!(rd, ReadSide::Tcp(_)),
            subscribed: client.state() == ConnState::Subscribed,
            ready: client.ready_count(),
            in_flight: client.in_flight(),
        });
        loop {
            let fill = async {
                if park {
                    if let ReadSide::Tcp(r) = &mut rd {
                        r.park();
                        tokio::time::sleep(ParkPolicy::POLL).await;
                        if let Some(n) = r.read_parked(&mut buf, ParkPolicy::MAX_READ)? {
                            return Ok(n);
                        }
                    }
                }
                if lazy {
                    if let ReadSide::Tcp(r) = &mut rd {
                        r.readable().await?;
                    }
                    buf.reserve(buf_size);
                } else if buf.capacity() - buf.len() < 4096 {
                    buf.reserve(READ_BUF_MAX);
                }
                rd.read_buf(&mut buf).await
            };
            // Whether the read deadline passed (else the stream ended).
            let deadline_passed = tokio::select! {
                r = fill => match r {
                    Ok(0) | Err(_) => false,
                    Ok(n) => {
                        parking.read_done(n);
                        break;
                    }
                },
                _ = &mut read_timer, if deadline.is_some() => {
                    let d = deadline.expect("guarded");
                    if Instant::now() < d {
                        read_timer.as_mut().reset(d);
                        timer_at = Some(d);
                        continue;
                    }
                    true
                }
                _ = closed.wait_for(|c| *c) => return,
            };
            // In a command line the deadline closes without an error frame; in a body, EOF
            // and the deadline both answer with the body's read error (see `cut_short`).
            if !cut_short(nsqd, client, &decoder, &buf, &mut gate).await && deadline_passed {
                client.close_now();
            }
            return;
        }
    }
}

/// The stream ended (EOF, a read error, or the read deadline) with `buf` left over: in the
/// middle of a command's body the reference's `io.ReadFull` fails and the command answers
/// with its fatal read error before the connection closes — e.g. `E_BAD_MESSAGE PUB failed to
/// read message body` (nsqd/protocol_v2.go, `PUB`, `MPUB` via `readMPUB`, `DPUB`,
/// `IDENTIFY`, `AUTH`); an MPUB has created its topic by then. Between commands or inside a
/// command line it closes silently (`IOLoop`). Returns whether an error was queued (the
/// writer then flushes it and closes).
async fn cut_short(
    nsqd: &Arc<Nsqd>,
    client: &Client,
    decoder: &Decoder,
    buf: &[u8],
    gate: &mut Gate<'_>,
) -> bool {
    let Some(e) = decoder.incomplete_read_error(buf) else {
        return false;
    };
    if let Some(topic) = gate.mpub_topic.take() {
        let _ = nsqd.topic(&topic).await;
    }
    send_error(client, &e);
    client.close_after_flush();
    true
}

/// Takes the write side from the writer task, performs the negotiated upgrades and hands the
/// new write side back; returns the new read side, or `None` if the connection must close.
async fn upgrade(
    nsqd: &Nsqd,
    client: &Client,
    rd: ReadSide,
    negotiated: &Negotiated,
) -> Option<ReadSide> {
    let (give_tx, give_rx) = oneshot::channel();
    let (back_tx, back_rx) = oneshot::channel();
    *client.handover.lock() = Some(Handover {
        give: give_tx,
        back: back_rx,
    });
    client.wake.notify_one();
    let wr = give_rx.await.ok()?;
    match transport::upgrade(rd, wr, negotiated, nsqd.tls.as_ref(), client).await {
        Ok((rd, wr)) => {
            let _ = back_tx.send(wr);
            Some(rd)
        }
        Err(e) => {
            // The reference sends `E_IDENTIFY_FAILED IDENTIFY failed <err>` on a connection
            // that is usually already broken; we log and close.
            tracing::error!(
                "client({}): IDENTIFY upgrade failed - {e}",
                client.remote_addr
            );
            client.close_now();
            None
        }
    }
}

/// The auth check of SUB/PUB/MPUB/DPUB (nsqd/protocol_v2.go, `CheckAuth`), refreshing an expired authorization.
async fn check_auth(
    nsqd: &Nsqd,
    client: &Client,
    cmd: &str,
    topic: &str,
    channel: &str,
) -> Result<(), NsqError> {
    if !nsqd.tcp.auth_required {
        return Ok(());
    }
    let current = client.auth.lock().clone();
    let Some((mut state, secret)) = current else {
        return Err(NsqError::auth_first(cmd));
    };
    if state.is_expired() {
        state = query_auth(nsqd, client, &secret).await.map_err(|e| {
            tracing::warn!("client({}): auth refresh failed - {e}", client.remote_addr);
            NsqError::auth_failed()
        })?;
        *client.auth.lock() = Some((state.clone(), secret));
    }
    if state.allows(topic, channel, cmd == "SUB") {
        Ok(())
    } else {
        Err(NsqError::unauthorized(cmd, topic, channel))
    }
}

async fn query_auth(
    nsqd: &Nsqd,
    client: &Client,
    secret: &[u8],
) -> Result<crate::auth::AuthState, crate::auth::AuthError> {
    let (tls, cn) = {
        let m = client.meta.lock();
        (m.tls, m.tls_common_name.clone())
    };
    crate::auth::query(
        &nsqd.http_client,
        &nsqd.opts.auth_http_addresses,
        secret,
        &client.remote_addr.ip().to_string(),
        tls,
        &cn,
    )
    .await
}

/// AUTH (nsqd/protocol_v2.go, `AUTH`).
async fn auth(nsqd: &Nsqd, client: &Client, secret: Bytes) -> Result<(), NsqError> {
    if client.auth.lock().is_some() {
        return Err(NsqError::auth_already_set());
    }
    if !nsqd.tcp.auth_required {
        return Err(NsqError::auth_disabled());
    }
    let state = query_auth(nsqd, client, &secret).await.map_err(|e| {
        tracing::warn!("client({}): auth failed - {e}", client.remote_addr);
        NsqError::auth_failed()
    })?;
    if state.permission_count() == 0 {
        return Err(NsqError::auth_no_authorizations());
    }
    {
        let mut m = client.meta.lock();
        m.authed = true;
        m.auth_identity = state.identity.clone();
        m.auth_identity_url = state.identity_url.clone();
    }
    let body = state.response_json();
    *client.auth.lock() = Some((state, secret));
    send_response(client, &body);
    Ok(())
}

fn send_error(client: &Client, e: &NsqError) {
    let data = e.to_frame_data();
    client.send_frame(|b| frame::put_error(b, &data));
}

fn send_response(client: &Client, data: &[u8]) {
    client.send_frame(|b| frame::put_response(b, data));
}

/// Runs one decoded command. `Err` is the error frame to send (fatal or not, per its code).
async fn exec(nsqd: &Arc<Nsqd>, client: &Arc<Client>, cmd: Command) -> Result<(), NsqError> {
    if nsqd.drain.is_draining() {
        crate::drain::check_tcp(nsqd, &cmd)?;
    }
    match cmd {
        Command::Nop => Ok(()),
        Command::Fin { id } => {
            // read_loop batches FINs (`Fins`); this path serves any other caller.
            let ch = client.channel.get().expect("FIN allowed only after SUB");
            match ch.finish(client.id, &id) {
                Ok(()) => {
                    client.finished(1);
                    Ok(())
                }
                Err(e) => Err(NsqError::fin_failed(&id, &e.to_string())),
            }
        }
        Command::Rdy { count } => {
            client.set_ready_count(count);
            Ok(())
        }
        Command::Req { id, timeout_ms } => {
            let ch = client.channel.get().expect("REQ allowed only after SUB");
            let delay = clamp_req_timeout(timeout_ms, nsqd.tcp.limits.max_req_timeout_ms);
            match ch.requeue(client.id, &id, delay) {
                Ok(()) => {
                    client.requeued();
                    Ok(())
                }
                Err(e) => Err(NsqError::req_failed(&id, &e.to_string())),
            }
        }
        Command::Touch { id } => {
            let ch = client.channel.get().expect("TOUCH allowed only after SUB");
            let msg_timeout = client.settings.lock().msg_timeout;
            ch.touch(client.id, &id, msg_timeout)
                .map_err(|e: FinishError| NsqError::touch_failed(&id, &e.to_string()))
        }
        Command::Pub { topic, body } => {
            check_auth(nsqd, client, "PUB", &topic, "").await?;
            let t = nsqd
                .topic(&topic)
                .await
                .map_err(|e| NsqError::pub_failed(&e.to_string()))?;
            // OK only once stored (and, in durable mode, synced): docs/durability.md.
            t.put(body, Duration::ZERO)
                .map_err(|e| NsqError::pub_failed(&e.to_string()))?
                .durable()
                .await
                .map_err(|e| NsqError::pub_failed(&e.to_string()))?;
            client.add_pub_count(&topic, 1);
            send_response(client, frame::OK);
            Ok(())
        }
        Command::Mpub { topic, bodies } => {
            check_auth(nsqd, client, "MPUB", &topic, "").await?;
            let n = bodies.len() as u64;
            let t = nsqd
                .topic(&topic)
                .await
                .map_err(|e| NsqError::mpub_failed(&e.to_string()))?;
            // OK only once stored (and, in durable mode, synced): docs/durability.md.
            t.put_many(bodies, Duration::ZERO)
                .map_err(|e| NsqError::mpub_failed(&e.to_string()))?
                .durable()
                .await
                .map_err(|e| NsqError::mpub_failed(&e.to_string()))?;
            client.add_pub_count(&topic, n);
            send_response(client, frame::OK);
            Ok(())
        }
        Command::Dpub {
            topic,
            defer_ms,
            body,
        } => {
            check_auth(nsqd, client, "DPUB", &topic, "").await?;
            let t = nsqd
                .topic(&topic)
                .await
                .map_err(|e| NsqError::dpub_failed(&e.to_string()))?;
            let defer = Duration::from_millis(defer_ms.max(0) as u64);
            // OK only once stored (and, in durable mode, synced): docs/durability.md.
            t.put(body, defer)
                .map_err(|e| NsqError::dpub_failed(&e.to_string()))?
                .durable()
                .await
                .map_err(|e| NsqError::dpub_failed(&e.to_string()))?;
            client.add_pub_count(&topic, 1);
            send_response(client, frame::OK);
            Ok(())
        }
        Command::Sub { topic, channel } => sub(nsqd, client, &topic, &channel).await,
        Command::Cls => {
            client.set_ready_count(0);
            client.set_state(ConnState::Closing);
            send_response(client, frame::CLOSE_WAIT);
            Ok(())
        }
        Command::Identify { body } => identify(nsqd, client, &body).map(|_| ()),
        Command::Auth { body } => auth(nsqd, client, body).await,
    }
}

/// IDENTIFY: applies the settings and answers; returns the upgrades to perform, if any.
fn identify(nsqd: &Nsqd, client: &Client, body: &[u8]) -> Result<Option<Negotiated>, NsqError> {
    let req = parse_identify(body)?;
    {
        let mut meta = client.meta.lock();
        meta.client_id = req.client_id.clone();
        meta.hostname = req.hostname.clone();
        meta.user_agent = req.user_agent.clone();
    }
    let settings = req.validate(&nsqd.tcp.identify_limits)?;
    *client.settings.lock() = settings;
    client.wake.notify_one();
    if !req.feature_negotiation {
        send_response(client, frame::OK);
        return Ok(None);
    }
    let negotiated = negotiate(&req, &nsqd.tcp.features)?;
    let resp = IdentifyResponse::new(
        nsqd.tcp.limits.max_rdy_count,
        nsqd.tcp.identify_limits.max_msg_timeout_ms,
        &settings,
        &negotiated,
        nsqd.tcp.features.max_deflate_level,
        nsqd.tcp.auth_required,
    );
    send_response(client, &resp.to_json());
    let upgrades = negotiated.tls_v1 || negotiated.snappy || negotiated.deflate;
    Ok(upgrades.then_some(negotiated))
}

async fn sub(
    nsqd: &Arc<Nsqd>,
    client: &Arc<Client>,
    topic: &str,
    channel: &str,
) -> Result<(), NsqError> {
    check_auth(nsqd, client, "SUB", topic, channel).await?;
    let ephemeral = is_ephemeral(topic) || is_ephemeral(channel);
    for attempt in 0..2 {
        let t = nsqd
            .topic(topic)
            .await
            .map_err(|_| NsqError::sub_failed_exiting())?;
        let ch = match t.get_or_create_channel(channel) {
            Ok((ch, _)) => ch,
            Err(_) if ephemeral && attempt == 0 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(_) if ephemeral => return Err(NsqError::sub_failed_deleted()),
            Err(_) => return Err(NsqError::sub_failed_exiting()),
        };
        match ch.add_consumer(client.clone()) {
            Ok(()) => {
                let _ = client.channel.set(ch);
                client.set_state(ConnState::Subscribed);
                send_response(client, frame::OK);
                return Ok(());
            }
            Err(SubscribeError::TooManyConsumers(n)) => {
                return Err(NsqError::sub_consumer_limit(topic, channel, n as i64));
            }
            Err(SubscribeError::Exiting) if ephemeral && attempt == 0 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(SubscribeError::Exiting) if ephemeral => return Err(NsqError::sub_failed_deleted()),
            Err(SubscribeError::Exiting) => return Err(NsqError::sub_failed_exiting()),
        }
    }
    Err(NsqError::sub_failed_deleted())
}

async fn write_loop(client: Arc<Client>, mut wr: WriteSide) {
    // Grows on first use (an idle connection never sends a frame before its first
    // heartbeat) and is then reused.
    let mut out = BytesMut::new();
    let mut hb_every = client.settings.lock().heartbeat;
    // One heartbeat timer for the connection's life, moved on when it fires (a fixed ticker,
    // as nsqd/protocol_v2.go, messagePump), not re-created at every wake-up.
    let hb_timer = tokio::time::sleep_until(Instant::now() + hb_every.unwrap_or(FAR));
    tokio::pin!(hb_timer);
    loop {
        let chan = client.channel.get().cloned();
        let chan_wait = chan.as_ref().map(|c| c.notified());
        tokio::pin!(chan_wait);
        if let Some(w) = chan_wait.as_mut().as_pin_mut() {
            w.enable();
        }

        // Responses the reader queued, in order.
        {
            let mut o = client.out.lock();
            if !o.is_empty() {
                if out.is_empty() {
                    std::mem::swap(&mut out, &mut *o);
                } else {
                    out.extend_from_slice(&o);
                    o.clear();
                }
            }
        }
        let closing = client.closing_after_flush();

        // Messages, as many as the RDY window allows.
        let mut full = false;
        if let (Some(ch), false) = (&chan, closing) {
            let (msg_timeout, sample_rate) = {
                let s = client.settings.lock();
                (s.msg_timeout, s.sample_rate)
            };
            loop {
                let window = client.window();
                if window == 0 {
                    break;
                }
                if out.len() >= FLUSH_BYTES {
                    full = true;
                    break;
                }
                // Frames are encoded straight into `out` under the channel lock (a
                // copy of each body; no clone of the message).
                let n = ch.take_with(
                    client.id,
                    window.min(TAKE_CHUNK),
                    msg_timeout,
                    sample_rate,
                    &mut |m| frame::put_message(&mut out, m.timestamp, m.attempts, &m.id, &m.body),
                );
                if n == 0 {
                    break;
                }
                client.delivered(n);
            }
        }

        if !out.is_empty() {
            let write = async {
                wr.write_all(&out).await?;
                wr.flush().await
            };
            let ok = match hb_every {
                Some(h) => matches!(timeout(h, write).await, Ok(Ok(()))),
                None => write.await.is_ok(),
            };
            if !ok {
                break;
            }
            out.clear();
            if out.capacity() > 4 * FLUSH_BYTES {
                out = BytesMut::new();
            }
        }
        if closing || client.is_closed() {
            break;
        }
        let handover = client.handover.lock().take();
        if let Some(Handover { give, back }) = handover {
            // Everything queued before the upgrade (the IDENTIFY response) goes out in the
            // old framing first.
            let rest = std::mem::take(&mut *client.out.lock());
            if !rest.is_empty() && (wr.write_all(&rest).await.is_err() || wr.flush().await.is_err())
            {
                break;
            }
            if give.send(wr).is_err() {
                client.close_now();
                return;
            }
            match back.await {
                Ok(upgraded) => wr = upgraded,
                Err(_) => {
                    client.close_now();
                    return;
                }
            }
            continue;
        }
        if full {
            continue;
        }

        // Heartbeat settings may have changed (IDENTIFY).
        let hb_now = client.settings.lock().heartbeat;
        if hb_now != hb_every {
            hb_every = hb_now;
            if let Some(h) = hb_every {
                hb_timer.as_mut().reset(Instant::now() + h);
            }
        }
        let eligible = client.window() > 0;
        let chan_ready = async {
            match (chan_wait.as_mut().as_pin_mut(), eligible) {
                (Some(w), true) => w.await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = client.wake.notified() => {}
            _ = chan_ready => {}
            _ = &mut hb_timer, if hb_every.is_some() => {
                frame::put_response(&mut out, frame::HEARTBEAT);
                let h = hb_every.expect("guarded");
                let next = hb_timer.deadline() + h;
                hb_timer.as_mut().reset(next.max(Instant::now()));
            }
        }
    }
    let _ = wr.shutdown().await;
    client.close_now();
}
