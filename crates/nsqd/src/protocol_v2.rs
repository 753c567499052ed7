//! The V2 TCP protocol's connection loops (nsqd/protocol_v2.go, `IOLoop` and `messagePump`):
//! one reader task (`read_loop`: reads, decodes, and runs each command through
//! `commands.rs`) and one writer task (`write_loop`: responses, message delivery,
//! heartbeats) per connection, meeting in [`Client`]. The accept loop that spawns [`serve`] is
//! in `server.rs`; the byte streams and their upgrades are `transport.rs`, the read side and its
//! buffer `input.rs`.
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

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use nsq_core::Channel;
use nsq_protocol::command::{Command, DecodeError, Decoder};
use nsq_protocol::error::NsqError;
use nsq_protocol::frame;
use nsq_protocol::identify::Negotiated;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant, Sleep};

use crate::client::{Client, ConnState};
use crate::commands::{self, send_error, send_response, AckWait, Fins, Gate, Reply};
use crate::input::Input;
use crate::nsqd::Nsqd;
use crate::park::{Load, ParkPolicy};
use crate::transport::{self, ReadSide, WriteSide};

/// Stop taking messages into one write once this many bytes are buffered.
const FLUSH_BYTES: usize = 256 * 1024;
/// Messages taken from the channel per lock acquisition.
const TAKE_CHUNK: usize = 512;
/// A timer deadline that is never reached in practice (disabled timers).
const FAR: Duration = Duration::from_secs(86_400 * 365);
/// Publishes whose acknowledgement may be pending at once on one connection: with this many
/// the reader waits for the oldest before reading on.
const MAX_PENDING: usize = 64;

/// Serves one accepted TCP connection to the end.
pub(crate) async fn serve(nsqd: Arc<Nsqd>, mut stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let mut magic = [0u8; 4];
    if stream.read_exact(&mut magic).await.is_err() {
        return;
    }
    if &magic != nsq_protocol::MAGIC_V2 {
        // Replication links (docs/replication.md): only when replication is on; otherwise
        // "  R1" is an unknown magic like any other.
        if &magic == nsq_protocol::replication::MAGIC_R1 {
            if let Some(r) = &nsqd.replication {
                crate::replication::serve_link(r.clone(), stream, peer).await;
                return;
            }
        }
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
    let mut writer = Some(tokio::spawn(write_loop(
        client.clone(),
        wr,
        Beat::start(&client),
    )));
    read_loop(&nsqd, &client, rd, &mut writer).await;
    client.close_after_flush();
    if let Some(w) = writer {
        let _ = w.await;
    }
    if let Some(ch) = client.channel.get() {
        ch.remove_consumer(client.id);
    }
    nsqd.remove_client(client.id);
}

/// The read deadline of the command being read: set when the previous command completed (or
/// at the start) to now + 2 × heartbeat and NOT moved by reads that only bring part of a
/// command, so a body trickled in byte by byte cannot hold the connection open
/// (nsqd/protocol_v2.go, `IOLoop`: SetReadDeadline once per command, before its line; the
/// body is read under the same deadline).
struct ReadDeadline<'t> {
    /// None: heartbeats are off, and so is the deadline.
    at: Option<Instant>,
    /// Armed lazily: it may fire before `at` (set when an earlier command completed) and is
    /// then moved on to it, so a busy connection re-arms it once per deadline period instead
    /// of once per read.
    timer: Pin<&'t mut Sleep>,
    /// When `timer` fires (None: never armed).
    armed: Option<Instant>,
}

impl ReadDeadline<'_> {
    /// A command completed (or the connection started): the next must be read in time.
    fn restart(&mut self, heartbeat: Option<Duration>) {
        self.at = heartbeat.map(|h| Instant::now() + h * 2);
        if let Some(d) = self.at {
            if self.armed.is_none_or(|t| t > d) {
                self.arm(d);
            }
        }
    }

    fn arm(&mut self, d: Instant) {
        self.timer.as_mut().reset(d);
        self.armed = Some(d);
    }

    /// Resolves once the deadline has passed; never without one.
    async fn passed(&mut self) {
        let Some(d) = self.at else {
            return std::future::pending().await;
        };
        loop {
            self.timer.as_mut().await;
            if Instant::now() >= d {
                return;
            }
            self.arm(d);
        }
    }
}

/// The reader is done: what had to be sent is queued, or the connection is closed.
struct Stop;

/// One connection's reader: its input, the decoder, and what consecutive commands share.
struct Reader<'a> {
    nsqd: &'a Arc<Nsqd>,
    client: &'a Arc<Client>,
    /// The writer task (replaced by a new one after an upgrade; `None` after a failed one).
    writer: &'a mut Option<JoinHandle<Handover>>,
    input: Input,
    decoder: Decoder,
    gate: Gate<'a>,
    fins: Fins,
    /// Publishes stored, in command order, whose acknowledgement (durable, replicated) is
    /// still pending (`Reply::Wait`): the reader goes on reading and storing the next
    /// publishes meanwhile (docs/replication.md, Acknowledgement: no round trip per message
    /// on the publisher's path), and answers them in order as they complete. Any command
    /// other than PUB/MPUB/DPUB, and any answer that is not pending, first waits for all of
    /// them, so every answer goes out in command order as in the reference
    /// (nsqd/protocol_v2.go, `IOLoop`, which answers each command before reading the next).
    pending: VecDeque<AckWait>,
}

impl Reader<'_> {
    /// What the parking policy needs to know before the next read.
    fn load(&self) -> Load {
        Load {
            plain_tcp: self.input.plain_tcp(),
            subscribed: self.client.state() == ConnState::Subscribed,
            ready: self.client.ready_count(),
            in_flight: self.client.in_flight(),
        }
    }

    /// Runs every complete command in the buffer, in order; returns whether any completed.
    /// Consecutive FINs are finished together (`Fins`), and FIN/REQ free window space
    /// quietly: the writer is woken at most once for the whole batch.
    async fn run_buffered(&mut self) -> Result<bool, Stop> {
        let mut completed = false;
        let mut freed = false;
        loop {
            // A consumer's run of FINs, taken without a `Command` each (the decoder's
            // `take_fins`); with publishes pending they go the general way, which answers
            // those first.
            if self.pending.is_empty() {
                let fins = &mut self.fins;
                let taken =
                    self.decoder
                        .take_fins(&mut self.input.buf, &mut self.gate, &mut |id| fins.push(id));
                match taken {
                    Ok(0) => {}
                    Ok(_) => {
                        completed = true;
                        self.gate.command_done();
                    }
                    Err(e) => {
                        // As the general way: the FINs before the bad line are applied.
                        self.fins.flush(self.client);
                        return Err(self.bad_input(e).await);
                    }
                }
            }
            let decoded = self
                .decoder
                .decode_with(&mut self.input.buf, &mut self.gate);
            if !matches!(decoded, Ok(Some(Command::Fin { .. }))) {
                freed |= self.fins.flush(self.client);
            }
            let cmd = match decoded {
                Ok(Some(cmd)) => cmd,
                Ok(None) => break,
                Err(e) => {
                    self.drain().await?;
                    return Err(self.bad_input(e).await);
                }
            };
            completed = true;
            self.gate.command_done();
            let publish = matches!(
                cmd,
                Command::Pub { .. } | Command::Mpub { .. } | Command::Dpub { .. }
            );
            if !publish {
                self.drain().await?;
            }
            if let Command::Fin { id } = cmd {
                self.fins.push(id);
                continue;
            }
            freed |= matches!(cmd, Command::Req { .. });
            match commands::exec(self.nsqd, self.client, cmd).await {
                Ok(Reply::Wait(wait)) => {
                    self.pending.push_back(wait);
                    while self.pending.len() >= MAX_PENDING {
                        self.answer_head().await?;
                    }
                }
                reply => {
                    self.drain().await?;
                    self.answer(reply).await?;
                }
            }
        }
        if freed {
            self.client.window_freed();
        }
        Ok(completed)
    }

    /// Waits for the oldest pending publish and answers it (nothing if none is pending).
    async fn answer_head(&mut self) -> Result<(), Stop> {
        let Some(wait) = self.pending.front_mut() else {
            return Ok(());
        };
        let reply = wait.await;
        self.pending.pop_front();
        self.answer(reply).await
    }

    /// Answers every pending publish, in order, waiting for each.
    async fn drain(&mut self) -> Result<(), Stop> {
        while !self.pending.is_empty() {
            self.answer_head().await?;
        }
        Ok(())
    }

    /// The oldest pending publish completed with `reply`: answers it, then every following
    /// one that is already complete (one replica acknowledgement usually completes many).
    async fn answer_completed(&mut self, reply: Result<Reply, NsqError>) -> Result<(), Stop> {
        self.pending.pop_front();
        self.answer(reply).await?;
        while let Some(reply) = self.pending.front_mut().and_then(poll_once) {
            self.pending.pop_front();
            self.answer(reply).await?;
        }
        Ok(())
    }

    /// Queues a command's answer for the writer, and performs the upgrades an IDENTIFY
    /// negotiated once its response is queued.
    async fn answer(&mut self, reply: Result<Reply, NsqError>) -> Result<(), Stop> {
        match reply {
            Ok(Reply::Nothing) => {}
            Ok(Reply::Response(data)) => send_response(self.client, &data),
            // Only from exec, which the reader queues in `pending` instead.
            Ok(Reply::Wait(wait)) => {
                let reply = wait.await;
                return Box::pin(self.answer(reply)).await;
            }
            Ok(Reply::Upgrade(response, negotiated)) => {
                send_response(self.client, &response);
                let rd = std::mem::replace(&mut self.input.rd, ReadSide::closed());
                let writer = self.writer.take().ok_or(Stop)?;
                // Boxed: the TLS handshake's future is large and happens once.
                let (rd, writer) =
                    Box::pin(upgrade(self.nsqd, self.client, rd, writer, &negotiated))
                        .await
                        .ok_or(Stop)?;
                self.input.rd = rd;
                *self.writer = Some(writer);
                // Bytes read past the IDENTIFY in the old framing are discarded, as the
                // reference does (clients wait for the upgrade to complete).
                self.input.buf.clear();
            }
            Err(e) => {
                send_error(self.client, &e);
                if e.fatal() {
                    self.client.close_after_flush();
                    return Err(Stop);
                }
            }
        }
        Ok(())
    }

    /// The decoder refused the input: a line too long closes at once without an answer (the
    /// reference's line read fails, nsqd/protocol_v2.go, `IOLoop`); anything else answers with
    /// its error first.
    async fn bad_input(&mut self, e: DecodeError) -> Stop {
        match e {
            DecodeError::LineTooLong => self.client.close_now(),
            DecodeError::Fatal(e) => {
                self.gate.create_pending_topic().await;
                send_error(self.client, &e);
                self.client.close_after_flush();
            }
        }
        Stop
    }

    /// The stream ended (EOF, a read error, or the read deadline) with the buffer's rest left
    /// over: in the middle of a command's body the reference's `io.ReadFull` fails and the
    /// command answers with its fatal read error before the connection closes — e.g.
    /// `E_BAD_MESSAGE PUB failed to read message body` (nsqd/protocol_v2.go, `PUB`, `MPUB` via
    /// `readMPUB`, `DPUB`, `IDENTIFY`, `AUTH`); an MPUB has created its topic by then. Between
    /// commands or inside a command line it closes silently (`IOLoop`), at once if the
    /// deadline passed.
    async fn ended(&mut self, deadline_passed: bool) {
        if self.drain().await.is_err() {
            return;
        }
        if let Some(e) = self.decoder.incomplete_read_error(&self.input.buf) {
            self.gate.create_pending_topic().await;
            send_error(self.client, &e);
            self.client.close_after_flush();
        } else if deadline_passed {
            self.client.close_now();
        }
    }
}

/// Reads and runs the connection's commands until it ends. `writer` is the writer task, which
/// an IDENTIFY upgrade replaces.
async fn read_loop(
    nsqd: &Arc<Nsqd>,
    client: &Arc<Client>,
    rd: ReadSide,
    writer: &mut Option<JoinHandle<Handover>>,
) {
    let mut reader = Reader {
        nsqd,
        client,
        writer,
        input: Input::new(rd),
        decoder: Decoder::new(nsqd.tcp.limits),
        gate: Gate::new(nsqd, client),
        fins: Fins::default(),
        pending: VecDeque::new(),
    };
    let timer = tokio::time::sleep_until(Instant::now());
    tokio::pin!(timer);
    let mut deadline = ReadDeadline {
        at: None,
        timer,
        armed: None,
    };
    deadline.restart(client.settings.lock().heartbeat);
    let mut parking = ParkPolicy::new(nsqd.tcp.parked_reads);
    let mut closed = client.closed_rx();
    // Whether the read deadline passed when the stream ended (else EOF or a read error).
    let deadline_passed = loop {
        let Ok(completed) = reader.run_buffered().await else {
            return;
        };
        if completed {
            deadline.restart(client.settings.lock().heartbeat);
        }
        // Parked reads are for consumers; a connection with publishes pending reads as
        // usual, so each read stays cancellable by the next acknowledgement.
        let waiting = !reader.pending.is_empty();
        let park = parking.next_read(reader.load()) && !waiting;
        let acked = tokio::select! {
            r = reader.input.fill(park) => match r {
                Ok(n) if n > 0 => {
                    parking.read_done(n);
                    None
                }
                _ => break false,
            },
            r = head(&mut reader.pending), if waiting => Some(r),
            // The reference sets the deadline for the next command once it has answered the
            // last (nsqd/protocol_v2.go, `IOLoop`): none runs while publishes are pending.
            () = deadline.passed(), if !waiting => break true,
            _ = closed.wait_for(|c| *c) => return,
        };
        if let Some(reply) = acked {
            if reader.answer_completed(reply).await.is_err() {
                return;
            }
            if reader.pending.is_empty() {
                deadline.restart(client.settings.lock().heartbeat);
            }
        }
    };
    reader.ended(deadline_passed).await;
}

/// Polls a pending publish once: its answer if it has completed.
fn poll_once(wait: &mut AckWait) -> Option<Result<Reply, NsqError>> {
    match wait.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(reply) => Some(reply),
        Poll::Pending => None,
    }
}

/// Resolves with the answer of the oldest pending publish (left in the queue), which must exist.
async fn head(pending: &mut VecDeque<AckWait>) -> Result<Reply, NsqError> {
    match pending.front_mut() {
        Some(wait) => wait.await,
        None => std::future::pending().await,
    }
}

/// Performs the negotiated upgrades: the writer task flushes what is queued (the IDENTIFY
/// response goes out in the old framing) and ends, handing its write side over; both sides are
/// upgraded together and a new writer task takes the new write side, carrying the heartbeat on
/// (nsqd/protocol_v2.go, `IDENTIFY`; nsqd/client_v2.go, `UpgradeTLS`, holds the client's
/// write lock instead). Returns the new read side and writer task, or `None` if the connection
/// must close.
async fn upgrade(
    nsqd: &Nsqd,
    client: &Arc<Client>,
    rd: ReadSide,
    writer: JoinHandle<Handover>,
    negotiated: &Negotiated,
) -> Option<(ReadSide, JoinHandle<Handover>)> {
    client.request_handover();
    // None: the writer ended for another reason (the connection is closing).
    let (wr, beat) = writer.await.ok().flatten()?;
    let record = &mut |l| client.upgraded(l);
    match transport::upgrade(rd, wr, negotiated, nsqd.tls.as_ref(), record).await {
        Ok((rd, wr)) => Some((rd, tokio::spawn(write_loop(client.clone(), wr, beat)))),
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

/// Where the heartbeat stands: its interval and when the next is due, carried from one writer
/// task to the next across an upgrade.
#[derive(Debug, Clone, Copy)]
struct Beat {
    every: Option<Duration>,
    next: Instant,
}

impl Beat {
    /// A new connection's: the first heartbeat one interval from now.
    fn start(client: &Client) -> Beat {
        let every = client.settings.lock().heartbeat;
        Beat {
            every,
            next: Instant::now() + every.unwrap_or(FAR),
        }
    }
}

/// How a writer task ends: `Some` with its write side and heartbeat when it hands them over for
/// an upgrade (`Client::request_handover`), `None` when the connection is done.
type Handover = Option<(WriteSide, Beat)>;

/// The heartbeat: one timer for the writer's life, moved on when it fires (a fixed ticker, as
/// nsqd/protocol_v2.go, `messagePump`), not re-created at every wake-up.
struct Heartbeat<'t> {
    /// None: heartbeats are off.
    every: Option<Duration>,
    timer: Pin<&'t mut Sleep>,
}

impl Heartbeat<'_> {
    /// The interval may have changed (IDENTIFY): a new one starts a new period.
    fn set(&mut self, every: Option<Duration>) {
        if every != self.every {
            self.every = every;
            if let Some(h) = every {
                self.timer.as_mut().reset(Instant::now() + h);
            }
        }
    }

    /// Resolves when a heartbeat is due (never while they are off) and starts the next
    /// period.
    async fn due(&mut self) {
        let Some(h) = self.every else {
            return std::future::pending().await;
        };
        self.timer.as_mut().await;
        let next = self.timer.deadline() + h;
        self.timer.as_mut().reset(next.max(Instant::now()));
    }
}

/// Moves the responses the reader queued, in order, to the end of `out`.
fn take_responses(client: &Client, out: &mut BytesMut) {
    let mut queued = client.out.lock();
    if queued.is_empty() {
        return;
    }
    if out.is_empty() {
        std::mem::swap(out, &mut *queued);
    } else {
        out.extend_from_slice(&queued);
        queued.clear();
    }
}

/// Encodes as many messages as the RDY window allows into `out`, taking them from the channel
/// (into flight) a chunk per lock. Returns whether it stopped because `out` is full.
fn take_messages(client: &Client, ch: &Channel, out: &mut BytesMut) -> bool {
    let (msg_timeout, sample_rate) = {
        let s = client.settings.lock();
        (s.msg_timeout, s.sample_rate)
    };
    loop {
        let window = client.window();
        if window == 0 {
            return false;
        }
        if out.len() >= FLUSH_BYTES {
            return true;
        }
        // Frames are encoded straight into `out` under the channel lock (a copy of each body;
        // no clone of the message).
        let n = ch.take_with(
            client.id,
            window.min(TAKE_CHUNK),
            msg_timeout,
            sample_rate,
            &mut |m| frame::put_message(out, m.timestamp, m.attempts, &m.id, &m.body),
        );
        if n == 0 {
            return false;
        }
        client.delivered(n);
    }
}

/// Writes `out` (if anything is in it) within `limit` and empties it; false if the write
/// failed or took too long.
async fn flush(wr: &mut WriteSide, out: &mut BytesMut, limit: Option<Duration>) -> bool {
    if out.is_empty() {
        return true;
    }
    let write = async {
        wr.write_all(out).await?;
        wr.flush().await
    };
    let ok = match limit {
        Some(h) => matches!(timeout(h, write).await, Ok(Ok(()))),
        None => write.await.is_ok(),
    };
    out.clear();
    if out.capacity() > 4 * FLUSH_BYTES {
        *out = BytesMut::new();
    }
    ok
}

/// Resolves when the channel has messages for a consumer whose RDY window is open; never
/// otherwise (the channel's wake-up is registered before the channel is looked at, so a
/// message put meanwhile is not missed).
async fn messages_ready(wait: Pin<&mut Option<tokio::sync::futures::Notified<'_>>>, open: bool) {
    match (wait.as_pin_mut(), open) {
        (Some(w), true) => w.await,
        _ => std::future::pending().await,
    }
}

/// Sends the connection's frames: the reader's responses, messages as the RDY window allows,
/// heartbeats; ends handing the write side over when the reader asks (an IDENTIFY upgrade).
async fn write_loop(client: Arc<Client>, mut wr: WriteSide, beat: Beat) -> Handover {
    // Grows on first use (an idle connection never sends a frame before its first
    // heartbeat) and is then reused.
    let mut out = BytesMut::new();
    let timer = tokio::time::sleep_until(beat.next);
    tokio::pin!(timer);
    let mut heartbeat = Heartbeat {
        every: beat.every,
        timer,
    };
    loop {
        let chan = client.channel.get().cloned();
        let chan_wait = chan.as_ref().map(|c| c.notified());
        tokio::pin!(chan_wait);
        if let Some(w) = chan_wait.as_mut().as_pin_mut() {
            w.enable();
        }
        take_responses(&client, &mut out);
        let closing = client.closing_after_flush();
        let full = match &chan {
            Some(ch) if !closing => take_messages(&client, ch, &mut out),
            _ => false,
        };
        if !flush(&mut wr, &mut out, heartbeat.every).await || closing || client.is_closed() {
            break;
        }
        if client.handover_requested() {
            // Everything queued before the upgrade (the IDENTIFY response) goes out in the
            // old framing first.
            take_responses(&client, &mut out);
            if !flush(&mut wr, &mut out, None).await {
                break;
            }
            let beat = Beat {
                every: heartbeat.every,
                next: heartbeat.timer.deadline(),
            };
            return Some((wr, beat));
        }
        if full {
            continue;
        }
        heartbeat.set(client.settings.lock().heartbeat);
        let open = client.window() > 0;
        tokio::select! {
            _ = client.wake.notified() => {}
            () = messages_ready(chan_wait.as_mut(), open) => {}
            () = heartbeat.due() => frame::put_response(&mut out, frame::HEARTBEAT),
        }
    }
    let _ = wr.shutdown().await;
    client.close_now();
    None
}
