//! The consumer (go-nsq consumer.go + conn.go's consumer side).
//!
//! * One task per nsqd connection reads frames (messages go straight into the consumer's
//!   queue; heartbeats are answered with NOP) and writes commands: every FIN/REQ/TOUCH/RDY that
//!   is queued when the writer wakes goes out in one write, and a lone FIN is written at once.
//! * One coordinator task owns all RDY and backoff state (go-nsq's `maybeUpdateRDY`,
//!   `updateRDY`, `startStopContinueBackoff`, `resume`, `redistributeRDY`, lookupd polling and
//!   reconnects) and hears about connections and verdicts through one event queue. A FIN only
//!   becomes an event while the consumer is in backoff, so the normal path costs nothing there.
//! * Messages are consumed as a [`Stream`](futures_core::Stream) ([`Consumer::next`]) or by
//!   [`Consumer::run`] with a [`Handler`] (`Ok` → FIN, `Err` or panic → REQ with backoff).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::FutureExt;
use nsq_protocol::command;
use nsq_protocol::frame::{FrameType, CLOSE_WAIT, HEARTBEAT};
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};
use nsq_protocol::MessageId;
use rand::Rng;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::config::Config;
use crate::conn::{self, BoxWrite, FrameReader};
use crate::error::Error;
use crate::golog::{GoLog, LogLevel};
use crate::lookupd;
use crate::message::Message;

/// Commands the writer takes per write.
const WRITE_BATCH: usize = 1024;
/// go-nsq's delay before retrying a RDY that did not fit under max_in_flight (updateRDY).
const RDY_RETRY: Duration = Duration::from_secs(5);

/// A snapshot of a consumer's counters (go-nsq's `ConsumerStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    pub messages_received: u64,
    pub messages_finished: u64,
    pub messages_requeued: u64,
    pub connections: usize,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) finished: AtomicU64,
    pub(crate) requeued: AtomicU64,
    pub(crate) connections: AtomicUsize,
}

/// What a verdict tells the backoff state machine (go-nsq's backoffSignal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackoffSignal {
    Backoff,
    Continue,
    Resume,
}

/// Called with a message that exceeded `max_attempts`, just before it is FINished
/// (go-nsq's `FailedMessageLogger`).
pub type GiveUpHook = Arc<dyn Fn(&Message) + Send + Sync>;

/// State shared by the consumer handle, its connections and its messages.
pub(crate) struct ConsumerShared {
    pub(crate) topic: String,
    pub(crate) channel: String,
    pub(crate) config: Config,
    pub(crate) stats: Counters,
    /// go-nsq's log lines, when `config.logger` asks for them.
    pub(crate) golog: GoLog,
    events: mpsc::UnboundedSender<Event>,
    /// The coordinator's backoff counter, mirrored so verdicts know whether to report.
    backoff_counter: AtomicI32,
    give_up: Option<GiveUpHook>,
}

impl ConsumerShared {
    pub(crate) fn in_backoff(&self) -> bool {
        self.backoff_counter.load(Ordering::Relaxed) > 0
    }

    /// A FIN or REQ that moves the backoff state: the coordinator applies `signal` first
    /// (sending RDY 0 to every connection when it enters or continues backoff) and only then
    /// queues `cmd`, as go-nsq's conn.go `writeLoop` calls `OnBackoff`/`OnResume`/`OnContinue`
    /// (whose `updateRDY` writes the RDY at once) before it writes the FIN or REQ. So nsqd never
    /// sees a `REQ <id> 0` while the old RDY still lets it deliver the message again.
    pub(crate) fn verdict(&self, conn: &Arc<ConnShared>, cmd: ConnCmd, signal: BackoffSignal) {
        let ev = Event::Verdict {
            conn: conn.clone(),
            cmd,
            signal,
        };
        if let Err(mpsc::error::SendError(Event::Verdict { conn, cmd, .. })) = self.events.send(ev)
        {
            // The coordinator is gone (the consumer has stopped): no RDY to update.
            let _ = conn.cmd_tx.send(cmd);
        }
    }
}

/// A command for a connection's writer.
#[derive(Debug)]
pub(crate) enum ConnCmd {
    Fin(MessageId),
    Req(MessageId, i64),
    Touch(MessageId),
    Rdy(i64),
    Nop,
    Cls,
    /// Re-check whether a closing connection can close now.
    Wake,
    /// Close at once.
    Close,
}

/// State shared by one connection's task and the messages it delivered.
pub(crate) struct ConnShared {
    pub(crate) addr: String,
    pub(crate) cmd_tx: mpsc::UnboundedSender<ConnCmd>,
    pub(crate) consumer: Arc<ConsumerShared>,
    /// Messages delivered and not yet FINished/REQueued (the writer decrements).
    in_flight: AtomicI64,
    /// Messages received on this connection (the coordinator's idle check reads it).
    received: AtomicU64,
    /// Set by CLOSE_WAIT: close once nothing is in flight.
    closing: std::sync::atomic::AtomicBool,
}

enum Event {
    AddNsqd(String, Option<oneshot::Sender<Result<(), Error>>>),
    AddLookupd(String),
    Connected {
        addr: String,
        id: u64,
        conn: Arc<ConnShared>,
        max_rdy: i64,
    },
    ConnectFailed(String, Error),
    /// nsqd refused SUB (and so closed the connection): a connection that opened and closed
    /// at once, as go-nsq sees it ([`dial_inner`]).
    SubscribeRefused(String),
    Closed {
        addr: String,
        id: u64,
    },
    /// A FIN/REQ to queue after applying its backoff signal ([`ConsumerShared::verdict`]).
    Verdict {
        conn: Arc<ConnShared>,
        cmd: ConnCmd,
        signal: BackoffSignal,
    },
    Lookup(Vec<String>),
    LookupFailed,
    ChangeMaxInFlight(usize),
    Stop,
}

/// Consumes `topic`/`channel` from nsqd instances given directly and/or discovered through
/// nsqlookupd.
///
/// ```no_run
/// # async fn demo() -> Result<(), nsq_client::Error> {
/// use nsq_client::{Config, Consumer};
/// let mut config = Config::default();
/// config.max_in_flight = 100;
/// let mut consumer = Consumer::new("events", "archive", config)?;
/// consumer.connect_to_nsqd("127.0.0.1:4150").await?;
/// while let Some(msg) = consumer.next().await {
///     println!("{:?}", msg.body());
///     msg.finish();
/// }
/// # Ok(()) }
/// ```
pub struct Consumer {
    shared: Arc<ConsumerShared>,
    rx: mpsc::UnboundedReceiver<Message>,
    done: watch::Receiver<bool>,
}

/// Stops a consumer from another task; see [`Consumer::stop_handle`].
#[derive(Clone)]
pub struct StopHandle {
    shared: Arc<ConsumerShared>,
    done: watch::Receiver<bool>,
}

impl StopHandle {
    /// Graceful stop: CLS to every nsqd, wait for the messages in flight to get their verdict
    /// (up to the stop timeout), then close. Returns when the consumer has stopped.
    pub async fn stop(&self) {
        let _ = self.shared.events.send(Event::Stop);
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
    }
}

/// A message handler for [`Consumer::run`]: `Ok` → FIN, `Err` (or a panic) → REQ with
/// backoff. The future is `'static`: take from the message what it needs (the body is a
/// cheap `Bytes` clone; [`Message::toucher`] for TOUCH).
///
/// Closures `Fn(&Message) -> impl Future<Output = Result<(), E>>` implement it.
pub trait Handler: Send + Sync + 'static {
    type Future: Future<Output = Result<(), HandlerError>> + Send + 'static;
    fn handle(&self, message: &Message) -> Self::Future;
}

/// A handler's error.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

type MapErr<E> = fn(Result<(), E>) -> Result<(), HandlerError>;

impl<F, Fut, E> Handler for F
where
    F: Fn(&Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<HandlerError> + 'static,
{
    type Future = futures_util::future::Map<Fut, MapErr<E>>;
    fn handle(&self, message: &Message) -> Self::Future {
        (self)(message).map(|r| r.map_err(Into::into) as Result<(), HandlerError>)
    }
}

impl Consumer {
    /// A consumer of `topic`/`channel`; add sources with [`Consumer::connect_to_nsqd`] and
    /// [`Consumer::connect_to_lookupd`]. Must be called inside a tokio runtime.
    pub fn new(
        topic: impl Into<String>,
        channel: impl Into<String>,
        config: Config,
    ) -> Result<Consumer, Error> {
        Consumer::with_give_up(topic, channel, config, None)
    }

    /// Like [`Consumer::new`], with a hook for messages given up after `max_attempts`.
    pub fn with_give_up(
        topic: impl Into<String>,
        channel: impl Into<String>,
        config: Config,
        give_up: Option<GiveUpHook>,
    ) -> Result<Consumer, Error> {
        config.validate()?;
        let (topic, channel) = (topic.into(), channel.into());
        if !is_valid_topic_name(topic.as_bytes()) {
            return Err(Error::InvalidName {
                kind: "topic",
                name: topic,
            });
        }
        if !is_valid_channel_name(channel.as_bytes()) {
            return Err(Error::InvalidName {
                kind: "channel",
                name: channel,
            });
        }
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (msg_tx, msg_rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = watch::channel(false);
        let golog = GoLog::consumer(
            config.logger.clone(),
            crate::golog::next_instance(),
            &topic,
            &channel,
        );
        let shared = Arc::new(ConsumerShared {
            golog,
            topic,
            channel,
            stats: Counters::default(),
            events: events_tx,
            backoff_counter: AtomicI32::new(0),
            give_up,
            config,
        });
        let coordinator = Coordinator::new(shared.clone(), msg_tx);
        tokio::spawn(coordinator.run(events_rx, done_tx));
        Ok(Consumer {
            shared,
            rx: msg_rx,
            done: done_rx,
        })
    }

    /// Connects to one nsqd (TCP `host:port`) and returns once it answered SUB, or with the
    /// error of dialing, IDENTIFY or AUTH. A SUB that nsqd refuses is not an error here, as
    /// go-nsq does not wait for SUB's answer: it is logged as a protocol error and the
    /// connection closes. It is reconnected after `lookupd_poll_interval` if it drops (when
    /// no lookupd is configured), as go-nsq does.
    pub async fn connect_to_nsqd(&self, addr: impl Into<String>) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .events
            .send(Event::AddNsqd(addr.into(), Some(tx)))
            .map_err(|_| Error::Stopped)?;
        rx.await.unwrap_or(Err(Error::Stopped))
    }

    /// Connects to several nsqd.
    pub async fn connect_to_nsqds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for a in addrs {
            self.connect_to_nsqd(a).await?;
        }
        Ok(())
    }

    /// Adds an nsqlookupd HTTP address (`host:port` or a URL); the first one starts polling
    /// (a query at once, then every `lookupd_poll_interval` after a random jitter).
    pub fn connect_to_lookupd(&self, addr: impl Into<String>) -> Result<(), Error> {
        self.shared
            .events
            .send(Event::AddLookupd(addr.into()))
            .map_err(|_| Error::Stopped)
    }

    /// The next message; `None` once the consumer has stopped and every message was taken.
    pub async fn next(&mut self) -> Option<Message> {
        self.rx.recv().await
    }

    /// Waits for the next message, then appends it and every other message already queued
    /// (up to `limit` in all) to `buf`; returns how many were appended, 0 once the consumer
    /// has stopped and every message was taken. For tools that act on messages in batches.
    pub async fn next_batch(&mut self, buf: &mut Vec<Message>, limit: usize) -> usize {
        self.rx.recv_many(buf, limit.max(1)).await
    }

    /// Counters and the number of live connections.
    pub fn stats(&self) -> ConsumerStats {
        let s = &self.shared.stats;
        ConsumerStats {
            messages_received: s.received.load(Ordering::Relaxed),
            messages_finished: s.finished.load(Ordering::Relaxed),
            messages_requeued: s.requeued.load(Ordering::Relaxed),
            connections: s.connections.load(Ordering::Relaxed),
        }
    }

    /// Changes max_in_flight and updates every connection's RDY (0 pauses).
    pub fn change_max_in_flight(&self, n: usize) {
        let _ = self.shared.events.send(Event::ChangeMaxInFlight(n));
    }

    /// A handle to stop this consumer from another task.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            shared: self.shared.clone(),
            done: self.done.clone(),
        }
    }

    /// Graceful stop; see [`StopHandle::stop`]. Messages already queued stay readable with
    /// [`Consumer::next`] and count as in flight until they get a verdict, so a stream
    /// consumer should keep reading (from another task, or after a [`StopHandle::stop`]
    /// started elsewhere) until `next` returns `None`; otherwise the stop waits for
    /// `stop_timeout` and nsqd requeues what was left.
    pub async fn stop(&self) {
        self.stop_handle().stop().await
    }

    /// Runs `handler` on every message with `concurrency` handlers at once (1 runs them in
    /// this task, more spawn that many worker tasks), until the consumer is stopped and
    /// drained.
    pub async fn run<H: Handler>(mut self, handler: H, concurrency: usize) {
        let handler = Arc::new(handler);
        let rx = std::mem::replace(&mut self.rx, mpsc::unbounded_channel().1);
        if concurrency <= 1 {
            let mut rx = rx;
            while let Some(msg) = rx.recv().await {
                handle_one(&*handler, msg).await;
            }
        } else {
            let rx = Arc::new(tokio::sync::Mutex::new(rx));
            let mut workers = Vec::with_capacity(concurrency);
            for _ in 0..concurrency {
                let (rx, handler) = (rx.clone(), handler.clone());
                workers.push(tokio::spawn(async move {
                    loop {
                        let msg = rx.lock().await.recv().await;
                        match msg {
                            Some(m) => handle_one(&*handler, m).await,
                            None => break,
                        }
                    }
                }));
            }
            for w in workers {
                let _ = w.await;
            }
        }
    }
}

/// One handler call: FIN on `Ok`, REQ with backoff on `Err` or panic (go-nsq consumer.go,
/// handlerLoop).
async fn handle_one<H: Handler>(handler: &H, msg: Message) {
    let fut = match std::panic::catch_unwind(AssertUnwindSafe(|| handler.handle(&msg))) {
        Ok(f) => f,
        Err(_) => {
            tracing::error!("handler panicked for msg {}", msg.id());
            msg.requeue(None);
            return;
        }
    };
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(Ok(())) => msg.finish(),
        Ok(Err(e)) => {
            tracing::error!("Handler returned error ({e}) for msg {}", msg.id());
            msg.log_handler_error(&e);
            msg.requeue(None);
        }
        Err(_) => {
            tracing::error!("handler panicked for msg {}", msg.id());
            msg.requeue(None);
        }
    }
}

impl futures_core::Stream for Consumer {
    type Item = Message;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.shared.golog.mute();
        let _ = self.shared.events.send(Event::Stop);
    }
}

// ---------------------------------------------------------------------------------------------
// connections

/// Dials, identifies, subscribes and starts the connection task; reports to the coordinator.
async fn dial(shared: Arc<ConsumerShared>, addr: String, id: u64, msg_tx: MsgTx) {
    if let Err(e) = dial_inner(&shared, &addr, id, msg_tx).await {
        tracing::error!("({addr}) error connecting to nsqd - {e}");
        let _ = shared.events.send(Event::ConnectFailed(addr, e));
    }
}

type MsgTx = mpsc::UnboundedSender<Message>;

async fn dial_inner(
    shared: &Arc<ConsumerShared>,
    addr: &str,
    id: u64,
    msg_tx: MsgTx,
) -> Result<(), Error> {
    let mut c = conn::connect(addr, &shared.config, &shared.golog).await?;
    if c.identify.max_rdy_count > 0 && c.identify.max_rdy_count < shared.config.max_in_flight as i64
    {
        tracing::warn!(
            "({addr}) max RDY count {} < consumer max in flight {}, truncation possible",
            c.identify.max_rdy_count,
            shared.config.max_in_flight
        );
        shared.golog.log(LogLevel::Warning, || {
            format!(
                "({addr}) max RDY count {} < consumer max in flight {}, truncation possible",
                c.identify.max_rdy_count, shared.config.max_in_flight
            )
        });
    }
    let mut buf = BytesMut::new();
    command::put_sub(&mut buf, &shared.topic, &shared.channel);
    conn::write_all_timeout(&mut c.writer, &buf, shared.config.write_timeout).await?;
    loop {
        let f = c.reader.next().await?.ok_or(Error::NotConnected)?;
        match FrameType::from_i32(f.frame_type) {
            Some(FrameType::Response) if &f.data[..] == HEARTBEAT => {
                let mut nop = BytesMut::new();
                command::put_nop(&mut nop);
                conn::write_all_timeout(&mut c.writer, &nop, shared.config.write_timeout).await?;
            }
            Some(FrameType::Response) => break,
            Some(FrameType::Error) => {
                sub_refused(shared, addr, &f.data, c.reader).await;
                return Ok(());
            }
            _ => {
                return Err(Error::Protocol(format!(
                    "unexpected frame type {}",
                    f.frame_type
                )))
            }
        }
    }
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let conn = Arc::new(ConnShared {
        addr: addr.to_string(),
        cmd_tx,
        consumer: shared.clone(),
        in_flight: AtomicI64::new(0),
        received: AtomicU64::new(0),
        closing: std::sync::atomic::AtomicBool::new(false),
    });
    let max_rdy = if c.identify.max_rdy_count > 0 {
        c.identify.max_rdy_count
    } else {
        2500
    };
    let _ = shared.events.send(Event::Connected {
        addr: addr.to_string(),
        id,
        conn: conn.clone(),
        max_rdy,
    });
    tokio::spawn(conn_task(conn, c.reader, c.writer, cmd_rx, msg_tx, id));
    Ok(())
}

/// SUB was answered with an error frame. go-nsq's `ConnectToNSQD` writes SUB without waiting
/// for the answer and returns success (consumer.go), so the error reaches the connection's
/// read loop as `protocol error - <frame>` (conn.go, `readLoop`), nsqd closes the connection
/// (every SUB error is fatal to it) and the consumer reconnects as after any close
/// (`onConnClose`): after `lookupd_poll_interval` when the address was given, or through a
/// lookupd query. The caller of `connect_to_nsqd` gets `Ok`, as go-nsq's does.
async fn sub_refused(shared: &Arc<ConsumerShared>, addr: &str, frame: &[u8], mut r: FrameReader) {
    let text = String::from_utf8_lossy(frame);
    tracing::error!("({addr}) protocol error - {text}");
    let golog = &shared.golog;
    golog.conn(LogLevel::Error, addr, &format!("protocol error - {text}"));
    // Whatever nsqd still sends, up to its close (or the read timeout).
    let end = loop {
        match r.next().await {
            Ok(Some(_)) => continue,
            Ok(None) => break "EOF".to_string(),
            Err(e) => break e.to_string(),
        }
    };
    golog.conn(LogLevel::Error, addr, &format!("IO error - {end}"));
    golog.conn_closed(addr, true);
    let _ = shared
        .events
        .send(Event::SubscribeRefused(addr.to_string()));
}

/// One connection: the reader and the writer run as two futures of one task; when either
/// ends, the other is dropped and the coordinator hears `Closed`.
async fn conn_task(
    conn: Arc<ConnShared>,
    reader: FrameReader,
    writer: BoxWrite,
    cmd_rx: mpsc::UnboundedReceiver<ConnCmd>,
    msg_tx: MsgTx,
    id: u64,
) {
    let golog = &conn.consumer.golog;
    tokio::select! {
        r = read_loop(&conn, reader, msg_tx) => {
            match r {
                Err(e) => {
                    tracing::error!("({}) IO error - {e}", conn.addr);
                    golog.conn(LogLevel::Error, &conn.addr, &format!("IO error - {e}"));
                }
                // nsqd hung up without being asked: Go's read fails with io.EOF
                // (conn.go, readLoop).
                Ok(()) if !conn.closing.load(Ordering::Acquire) => {
                    golog.conn(LogLevel::Error, &conn.addr, "IO error - EOF");
                }
                Ok(()) => {}
            }
        }
        r = write_loop(&conn, writer, cmd_rx) => {
            if let Err(e) = r {
                tracing::error!("({}) IO error - {e}", conn.addr);
                golog.conn(LogLevel::Error, &conn.addr, &format!("IO error - {e}"));
            }
        }
    }
    golog.conn_closed(&conn.addr, true);
    let _ = conn.consumer.events.send(Event::Closed {
        addr: conn.addr.clone(),
        id,
    });
}

async fn read_loop(conn: &Arc<ConnShared>, mut r: FrameReader, msg_tx: MsgTx) -> Result<(), Error> {
    let consumer = &*conn.consumer;
    let max_attempts = consumer.config.max_attempts;
    while let Some(frame) = r.next().await? {
        match FrameType::from_i32(frame.frame_type) {
            Some(FrameType::Message) => {
                let m = nsq_protocol::message::decode(frame.data)
                    .map_err(|e| Error::Protocol(e.to_string()))?;
                conn.in_flight.fetch_add(1, Ordering::Relaxed);
                conn.received.fetch_add(1, Ordering::Relaxed);
                consumer.stats.received.fetch_add(1, Ordering::Relaxed);
                let msg = Message::new(m.id, m.attempts, m.timestamp_ns, m.body, conn.clone());
                if max_attempts > 0 && m.attempts > max_attempts {
                    tracing::warn!("msg {} attempted {} times, giving up", m.id, m.attempts);
                    consumer.golog.log(LogLevel::Warning, || {
                        format!("msg {} attempted {} times, giving up", m.id, m.attempts)
                    });
                    if let Some(hook) = &consumer.give_up {
                        hook(&msg);
                    }
                    msg.finish();
                    continue;
                }
                // A closed queue drops (and so requeues) the message.
                let _ = msg_tx.send(msg);
            }
            Some(FrameType::Response) if &frame.data[..] == HEARTBEAT => {
                let _ = conn.cmd_tx.send(ConnCmd::Nop);
            }
            Some(FrameType::Response) if &frame.data[..] == CLOSE_WAIT => {
                tracing::info!("({}) received CLOSE_WAIT from nsqd", conn.addr);
                consumer
                    .golog
                    .conn(LogLevel::Info, &conn.addr, "received CLOSE_WAIT from nsqd");
                conn.closing.store(true, Ordering::Release);
                let _ = conn.cmd_tx.send(ConnCmd::Wake);
            }
            Some(FrameType::Response) => {}
            Some(FrameType::Error) => {
                tracing::error!(
                    "({}) protocol error - {}",
                    conn.addr,
                    String::from_utf8_lossy(&frame.data)
                );
                consumer.golog.conn(
                    LogLevel::Error,
                    &conn.addr,
                    &format!("protocol error - {}", String::from_utf8_lossy(&frame.data)),
                );
            }
            None => {
                return Err(Error::Protocol(format!(
                    "unknown frame type {}",
                    frame.frame_type
                )))
            }
        }
    }
    Ok(())
}

async fn write_loop(
    conn: &Arc<ConnShared>,
    mut w: BoxWrite,
    mut cmd_rx: mpsc::UnboundedReceiver<ConnCmd>,
) -> Result<(), Error> {
    let timeout = conn.consumer.config.write_timeout;
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    let mut buf = BytesMut::with_capacity(16 * 1024);
    while cmd_rx.recv_many(&mut batch, WRITE_BATCH).await > 0 {
        let mut done = 0;
        for cmd in batch.drain(..) {
            match cmd {
                ConnCmd::Fin(id) => {
                    command::put_fin(&mut buf, &id);
                    done += 1;
                }
                ConnCmd::Req(id, ms) => {
                    command::put_req(&mut buf, &id, ms);
                    done += 1;
                }
                ConnCmd::Touch(id) => command::put_touch(&mut buf, &id),
                ConnCmd::Rdy(n) => command::put_rdy(&mut buf, n),
                ConnCmd::Nop => command::put_nop(&mut buf),
                ConnCmd::Cls => command::put_cls(&mut buf),
                ConnCmd::Wake => {}
                ConnCmd::Close => return Ok(()),
            }
        }
        // Decremented before writing, so it is right even if the write fails (go-nsq
        // conn.go, writeLoop).
        let left = conn.in_flight.fetch_sub(done, Ordering::AcqRel) - done;
        if !buf.is_empty() {
            conn::write_all_timeout(&mut w, &buf, timeout).await?;
            buf.clear();
        }
        if left <= 0 && conn.closing.load(Ordering::Acquire) {
            return Ok(());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// the coordinator: RDY, backoff, discovery

struct ConnState {
    id: u64,
    conn: Arc<ConnShared>,
    rdy: i64,
    max_rdy: i64,
    last_rdy_time: Instant,
    last_msg_time: Instant,
    last_received: u64,
    /// A RDY that did not fit, retried at this time with this count.
    retry: Option<(Instant, i64)>,
    closing: bool,
}

struct Coordinator {
    shared: Arc<ConsumerShared>,
    msg_tx: Option<MsgTx>,
    conns: HashMap<String, ConnState>,
    /// Addresses being dialed.
    pending: HashSet<String>,
    /// Addresses given with `connect_to_nsqd` (reconnected when they drop).
    nsqd_addrs: Vec<String>,
    /// Direct addresses waiting to be redialed, and when.
    reconnect_at: HashMap<String, Instant>,
    lookupd_addrs: Vec<String>,
    lookupd_index: usize,
    next_lookup: Option<Instant>,
    lookup_running: bool,
    max_in_flight: i64,
    total_rdy: i64,
    backoff_counter: i32,
    /// When the current backoff timeout ends (go-nsq's backoffDuration > 0).
    backoff_until: Option<Instant>,
    need_redistribute: bool,
    next_redistribute: Instant,
    stopping: bool,
    stop_deadline: Option<Instant>,
    next_id: u64,
    /// Callers of `connect_to_nsqd` waiting for the first dial's result.
    waiting: HashMap<String, oneshot::Sender<Result<(), Error>>>,
    rng: rand::rngs::StdRng,
}

impl Coordinator {
    fn new(shared: Arc<ConsumerShared>, msg_tx: MsgTx) -> Coordinator {
        use rand::SeedableRng;
        let now = Instant::now();
        let max_in_flight = shared.config.max_in_flight as i64;
        let next_redistribute = now + shared.config.rdy_redistribute_interval;
        Coordinator {
            shared,
            msg_tx: Some(msg_tx),
            conns: HashMap::new(),
            pending: HashSet::new(),
            nsqd_addrs: Vec::new(),
            reconnect_at: HashMap::new(),
            lookupd_addrs: Vec::new(),
            lookupd_index: 0,
            next_lookup: None,
            lookup_running: false,
            max_in_flight,
            total_rdy: 0,
            backoff_counter: 0,
            backoff_until: None,
            need_redistribute: false,
            next_redistribute,
            stopping: false,
            stop_deadline: None,
            next_id: 0,
            waiting: HashMap::new(),
            rng: rand::rngs::StdRng::from_entropy(),
        }
    }

    async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>, done: watch::Sender<bool>) {
        loop {
            let wake = self.next_wake();
            let ev = tokio::select! {
                ev = events.recv() => ev,
                _ = tokio::time::sleep_until(wake) => None,
            };
            if let Some(ev) = ev {
                self.on_event(ev);
            }
            self.on_timers();
            if self.finished() {
                break;
            }
        }
        // go-nsq consumer.go: the last connection closed while stopping (or none was open)
        // runs stopHandlers; then exit stops rdyLoop and lookupdLoop. (Logged before the
        // message stream ends: its owner may drop the consumer then, which mutes it.)
        let golog = &self.shared.golog;
        if self.conns.is_empty() {
            golog.log(LogLevel::Info, || "stopping handlers".into());
        }
        golog.log(LogLevel::Info, || "rdyLoop exiting".into());
        if !self.lookupd_addrs.is_empty() {
            golog.log(LogLevel::Info, || "exiting lookupdLoop".into());
        }
        // Force-close what is left (stop timeout): nsqd requeues their in-flight messages.
        for c in self.conns.values() {
            let _ = c.conn.cmd_tx.send(ConnCmd::Close);
        }
        self.msg_tx = None;
        self.shared.stats.connections.store(0, Ordering::Relaxed);
        let _ = done.send(true);
    }

    fn finished(&self) -> bool {
        self.stopping
            && (self.conns.is_empty() && self.pending.is_empty()
                || self.stop_deadline.is_some_and(|d| Instant::now() >= d))
    }

    fn next_wake(&self) -> Instant {
        let mut t = self.next_redistribute;
        let mut consider = |x: Option<Instant>| {
            if let Some(x) = x {
                t = t.min(x);
            }
        };
        consider(self.backoff_until);
        consider(self.next_lookup);
        consider(self.stop_deadline);
        for at in self.reconnect_at.values() {
            consider(Some(*at));
        }
        for c in self.conns.values() {
            consider(c.retry.map(|(at, _)| at));
        }
        t
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::AddNsqd(addr, reply) => {
                if self.stopping {
                    if let Some(r) = reply {
                        let _ = r.send(Err(Error::Stopped));
                    }
                    return;
                }
                if !self.nsqd_addrs.contains(&addr) {
                    self.nsqd_addrs.push(addr.clone());
                }
                if self.conns.contains_key(&addr) || self.pending.contains(&addr) {
                    if let Some(r) = reply {
                        let _ = r.send(Ok(()));
                    }
                    return;
                }
                if let Some(r) = reply {
                    self.waiting.insert(addr.clone(), r);
                }
                self.dial(addr);
            }
            Event::AddLookupd(addr) => {
                if self.stopping || self.lookupd_addrs.contains(&addr) {
                    return;
                }
                self.lookupd_addrs.push(addr);
                if self.lookupd_addrs.len() == 1 {
                    self.query_lookupd();
                }
            }
            Event::Connected {
                addr,
                id,
                conn,
                max_rdy,
            } => {
                self.pending.remove(&addr);
                if let Some(r) = self.waiting.remove(&addr) {
                    let _ = r.send(Ok(()));
                }
                let now = Instant::now();
                self.conns.insert(
                    addr.clone(),
                    ConnState {
                        id,
                        conn,
                        rdy: 0,
                        max_rdy,
                        last_rdy_time: now,
                        last_msg_time: now,
                        last_received: 0,
                        retry: None,
                        closing: false,
                    },
                );
                self.publish_conn_count();
                if self.stopping {
                    self.close_conn(&addr);
                    return;
                }
                // Pre-emptively lower the others' RDY, then give the new one its share
                // (go-nsq consumer.go, ConnectToNSQD).
                let others: Vec<String> =
                    self.conns.keys().filter(|a| **a != addr).cloned().collect();
                for a in others {
                    self.maybe_update_rdy(&a);
                }
                self.maybe_update_rdy(&addr);
            }
            Event::ConnectFailed(addr, e) => {
                self.pending.remove(&addr);
                if let Some(r) = self.waiting.remove(&addr) {
                    // A first connect that fails is the caller's error, not retried
                    // (go-nsq consumer.go, ConnectToNSQD); a failed reconnect is retried.
                    self.nsqd_addrs.retain(|a| *a != addr);
                    let _ = r.send(Err(e));
                } else {
                    // go-nsq consumer.go, queryLookupd / the reconnect loop.
                    self.shared.golog.log(LogLevel::Error, || {
                        format!("({addr}) error connecting to nsqd - {e}")
                    });
                    self.schedule_reconnect(&addr);
                }
            }
            Event::SubscribeRefused(addr) => {
                self.pending.remove(&addr);
                if let Some(r) = self.waiting.remove(&addr) {
                    let _ = r.send(Ok(()));
                }
                // onConnClose for a connection that never had RDY.
                let left = self.conns.len();
                tracing::warn!("there are {left} connections left alive");
                self.shared.golog.log(LogLevel::Warning, || {
                    format!("there are {left} connections left alive")
                });
                self.schedule_reconnect(&addr);
            }
            Event::Closed { addr, id } => self.on_closed(addr, id),
            Event::Verdict { conn, cmd, signal } => {
                self.backoff_signal(signal);
                let _ = conn.cmd_tx.send(cmd);
            }
            Event::Lookup(addrs) => {
                self.lookup_running = false;
                self.on_lookup(addrs);
            }
            Event::LookupFailed => self.lookup_running = false,
            Event::ChangeMaxInFlight(n) => {
                if self.max_in_flight == n as i64 {
                    return;
                }
                self.max_in_flight = n as i64;
                let addrs: Vec<String> = self.conns.keys().cloned().collect();
                for a in addrs {
                    self.maybe_update_rdy(&a);
                }
            }
            Event::Stop => {
                if self.stopping {
                    return;
                }
                tracing::info!("stopping...");
                self.shared
                    .golog
                    .log(LogLevel::Info, || "stopping...".into());
                self.stopping = true;
                self.stop_deadline = Some(Instant::now() + self.shared.config.stop_timeout);
                self.reconnect_at.clear();
                self.next_lookup = None;
                for c in self.conns.values_mut() {
                    c.closing = true;
                    let _ = c.conn.cmd_tx.send(ConnCmd::Cls);
                }
            }
        }
    }

    fn on_timers(&mut self) {
        let now = Instant::now();
        if self.backoff_until.is_some_and(|t| t <= now) {
            self.resume();
        }
        if self.next_redistribute <= now {
            self.next_redistribute = now + self.shared.config.rdy_redistribute_interval;
            self.redistribute_rdy();
        }
        if self.next_lookup.is_some_and(|t| t <= now) {
            self.next_lookup = Some(now + self.shared.config.lookupd_poll_interval);
            self.query_lookupd();
        }
        let due: Vec<String> = self
            .reconnect_at
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(a, _)| a.clone())
            .collect();
        for a in due {
            self.reconnect_at.remove(&a);
            if !self.stopping
                && self.nsqd_addrs.contains(&a)
                && !self.conns.contains_key(&a)
                && !self.pending.contains(&a)
            {
                tracing::info!("({a}) re-connecting");
                self.dial(a);
            }
        }
        let retries: Vec<(String, i64)> = self
            .conns
            .iter()
            .filter_map(|(a, c)| match c.retry {
                Some((at, n)) if at <= now => Some((a.clone(), n)),
                _ => None,
            })
            .collect();
        for (a, n) in retries {
            if let Some(c) = self.conns.get_mut(&a) {
                c.retry = None;
            }
            self.update_rdy(&a, n);
        }
    }

    fn dial(&mut self, addr: String) {
        let Some(msg_tx) = self.msg_tx.clone() else {
            return;
        };
        self.pending.insert(addr.clone());
        self.next_id += 1;
        tracing::info!("({addr}) connecting to nsqd");
        self.shared
            .golog
            .conn(LogLevel::Info, &addr, "connecting to nsqd");
        tokio::spawn(dial(self.shared.clone(), addr, self.next_id, msg_tx));
    }

    fn schedule_reconnect(&mut self, addr: &str) {
        if self.stopping {
            return;
        }
        if !self.lookupd_addrs.is_empty() {
            // Let lookupd decide (go-nsq consumer.go, onConnClose: trigger a lookupd query).
            self.query_lookupd();
        } else if self.nsqd_addrs.iter().any(|a| a == addr) {
            let at = Instant::now() + self.shared.config.lookupd_poll_interval;
            tracing::info!(
                "({addr}) re-connecting in {:?}",
                self.shared.config.lookupd_poll_interval
            );
            self.shared.golog.log(LogLevel::Info, || {
                format!(
                    "({addr}) re-connecting in {}",
                    nsq_go::duration::format(self.shared.config.lookupd_poll_interval)
                )
            });
            self.reconnect_at.insert(addr.to_string(), at);
        }
    }

    fn publish_conn_count(&self) {
        self.shared
            .stats
            .connections
            .store(self.conns.len(), Ordering::Relaxed);
    }

    fn close_conn(&mut self, addr: &str) {
        if let Some(c) = self.conns.get_mut(addr) {
            c.closing = true;
            let _ = c.conn.cmd_tx.send(ConnCmd::Cls);
        }
    }

    fn on_closed(&mut self, addr: String, id: u64) {
        let Some(c) = self.conns.get(&addr) else {
            return;
        };
        if c.id != id {
            return;
        }
        let c = self.conns.remove(&addr).expect("present");
        self.total_rdy -= c.rdy;
        self.publish_conn_count();
        let left = self.conns.len() as i64;
        tracing::warn!("there are {left} connections left alive");
        self.shared.golog.log(LogLevel::Warning, || {
            format!("there are {left} connections left alive")
        });
        if (c.retry.is_some() || c.rdy > 0)
            && (left == self.max_in_flight || self.backoff_counter > 0)
        {
            self.need_redistribute = true;
        }
        if !self.stopping {
            self.schedule_reconnect(&addr);
        }
    }

    // --- RDY (go-nsq consumer.go) ---

    /// `min(max(1, max_in_flight / connections), max_in_flight)` (perConnMaxInFlight).
    fn per_conn_max_in_flight(&self) -> i64 {
        let b = self.max_in_flight as f64;
        let s = b / self.conns.len().max(1) as f64;
        s.max(1.0).min(b) as i64
    }

    fn maybe_update_rdy(&mut self, addr: &str) {
        if self.backoff_counter > 0 || self.backoff_until.is_some() {
            return;
        }
        let count = self.per_conn_max_in_flight();
        self.update_rdy(addr, count);
    }

    /// Returns whether the RDY was applied.
    fn update_rdy(&mut self, addr: &str, count: i64) -> bool {
        let max_in_flight = self.max_in_flight;
        let total = self.total_rdy;
        let Some(c) = self.conns.get_mut(addr) else {
            return false;
        };
        if c.closing {
            return false;
        }
        let mut count = count.min(c.max_rdy);
        c.retry = None;
        // Never exceed the global max_in_flight; truncate if possible.
        let max_possible = max_in_flight - total + c.rdy;
        if max_possible > 0 && max_possible < count {
            count = max_possible;
        }
        if max_possible <= 0 && count > 0 {
            if c.rdy == 0 {
                // Retry later so this connection is not starved forever.
                c.retry = Some((Instant::now() + RDY_RETRY, count));
            }
            return false;
        }
        self.send_rdy(addr, count);
        true
    }

    fn send_rdy(&mut self, addr: &str, count: i64) {
        let Some(c) = self.conns.get_mut(addr) else {
            return;
        };
        if count == 0 && c.rdy == 0 {
            return;
        }
        self.total_rdy += count - c.rdy;
        let last = c.rdy;
        c.rdy = count;
        if count > 0 {
            c.last_rdy_time = Instant::now();
        }
        if count == last {
            return;
        }
        let _ = c.conn.cmd_tx.send(ConnCmd::Rdy(count));
    }

    fn calc_backoff(&self, level: i32) -> Duration {
        // ExponentialStrategy: multiplier × 2^level.
        let factor = 2u32.saturating_pow(level.clamp(0, 31) as u32);
        self.shared
            .config
            .backoff_multiplier
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
    }

    fn set_backoff_counter(&mut self, n: i32) {
        self.backoff_counter = n;
        self.shared.backoff_counter.store(n, Ordering::Relaxed);
    }

    fn backoff_signal(&mut self, signal: BackoffSignal) {
        if self.backoff_until.is_some() {
            return;
        }
        let max = self.shared.config.max_backoff_duration;
        let mut counter = self.backoff_counter;
        let mut updated = false;
        match signal {
            BackoffSignal::Resume => {
                if counter > 0 {
                    counter -= 1;
                    updated = true;
                }
            }
            BackoffSignal::Backoff => {
                if self.calc_backoff(counter + 1) <= max {
                    counter += 1;
                    updated = true;
                }
            }
            BackoffSignal::Continue => {}
        }
        self.set_backoff_counter(counter);
        if counter == 0 && updated {
            let count = self.per_conn_max_in_flight();
            tracing::warn!("exiting backoff, returning all to RDY {count}");
            self.shared.golog.log(LogLevel::Warning, || {
                format!("exiting backoff, returning all to RDY {count}")
            });
            let addrs: Vec<String> = self.conns.keys().cloned().collect();
            for a in addrs {
                self.update_rdy(&a, count);
            }
        } else if counter > 0 {
            let d = self.calc_backoff(counter).min(max);
            tracing::warn!("backing off for {d:?} (backoff level {counter}), setting all to RDY 0");
            self.shared.golog.log(LogLevel::Warning, || {
                format!(
                    "backing off for {} (backoff level {counter}), setting all to RDY 0",
                    nsq_go::duration::format(d)
                )
            });
            let addrs: Vec<String> = self.conns.keys().cloned().collect();
            for a in addrs {
                self.update_rdy(&a, 0);
            }
            self.backoff_until = Some(Instant::now() + d);
        }
    }

    /// The backoff timeout ended: let one message through on a random connection.
    fn resume(&mut self) {
        if self.stopping {
            self.backoff_until = None;
            return;
        }
        let addrs: Vec<String> = self.conns.keys().cloned().collect();
        if addrs.is_empty() {
            tracing::warn!("no connection available to resume; backing off for 1s");
            self.backoff_until = Some(Instant::now() + Duration::from_secs(1));
            return;
        }
        let choice = &addrs[self.rng.gen_range(0..addrs.len())];
        tracing::warn!("({choice}) backoff timeout expired, sending RDY 1");
        self.shared.golog.log(LogLevel::Warning, || {
            format!("({choice}) backoff timeout expired, sending RDY 1")
        });
        self.backoff_until = None;
        if !self.update_rdy(choice, 1) {
            self.backoff_until = Some(Instant::now() + Duration::from_secs(1));
        }
    }

    fn redistribute_rdy(&mut self) {
        if self.backoff_until.is_some() || self.conns.is_empty() {
            return;
        }
        let now = Instant::now();
        // Idle detection from the per-connection receive counters.
        for c in self.conns.values_mut() {
            let r = c.conn.received.load(Ordering::Relaxed);
            if r != c.last_received {
                c.last_received = r;
                c.last_msg_time = now;
            }
        }
        let n = self.conns.len() as i64;
        if n > self.max_in_flight || (self.backoff_counter > 0 && n > 1) {
            self.need_redistribute = true;
        }
        if !std::mem::take(&mut self.need_redistribute) {
            return;
        }
        let cfg = &self.shared.config;
        let (idle, low) = (cfg.low_rdy_idle_timeout, cfg.low_rdy_timeout);
        let mut possible: Vec<String> = Vec::with_capacity(self.conns.len());
        let addrs: Vec<String> = self.conns.keys().cloned().collect();
        for a in addrs {
            let c = &self.conns[&a];
            if c.rdy > 0 {
                if now - c.last_msg_time > idle {
                    tracing::debug!("({a}) idle connection, giving up RDY");
                    self.update_rdy(&a, 0);
                } else if now - c.last_rdy_time > low {
                    tracing::debug!("({a}) RDY timeout, giving up RDY");
                    self.update_rdy(&a, 0);
                }
            }
            possible.push(a);
        }
        let mut available = if self.backoff_counter > 0 {
            1 - self.total_rdy
        } else {
            self.max_in_flight - self.total_rdy
        };
        while !possible.is_empty() && available > 0 {
            available -= 1;
            let i = self.rng.gen_range(0..possible.len());
            let a = possible.swap_remove(i);
            tracing::debug!("({a}) redistributing RDY");
            self.update_rdy(&a, 1);
        }
    }

    // --- discovery ---

    fn query_lookupd(&mut self) {
        if self.lookupd_addrs.is_empty() || self.stopping {
            return;
        }
        if self.next_lookup.is_none() {
            // First query: poll again after a random jitter plus the interval
            // (go-nsq consumer.go, lookupdLoop).
            let cfg = &self.shared.config;
            let jitter = cfg
                .lookupd_poll_interval
                .mul_f64(self.rng.gen::<f64>() * cfg.lookupd_poll_jitter);
            self.next_lookup = Some(Instant::now() + jitter + cfg.lookupd_poll_interval);
        }
        if self.lookup_running {
            return;
        }
        self.lookup_running = true;
        let n = self.lookupd_addrs.len();
        let start = self.lookupd_index % n;
        self.lookupd_index = (start + 1) % n;
        let order: Vec<String> = (0..n)
            .map(|i| self.lookupd_addrs[(start + i) % n].clone())
            .collect();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            // Up to 3 tries, each with the next lookupd (go-nsq consumer.go, queryLookupd).
            for (i, addr) in order.iter().cycle().take(3).enumerate() {
                // go-nsq logs the endpoint: the lookup URL with the topic.
                let endpoint = lookupd::lookup_url(addr, &shared.topic)
                    .map_or_else(|_| addr.clone(), |u| u.to_string());
                shared
                    .golog
                    .log(LogLevel::Info, || format!("querying nsqlookupd {endpoint}"));
                match lookupd::query(addr, &shared.topic, &shared.config).await {
                    Ok(addrs) => {
                        let _ = shared.events.send(Event::Lookup(addrs));
                        return;
                    }
                    Err(e) => {
                        tracing::error!("error querying nsqlookupd ({addr}) - {e}");
                        // go-nsq logs the error of `apiRequestNegotiateV1` as it is.
                        let why = match &e {
                            Error::Lookupd { reason, .. } => reason.clone(),
                            other => other.to_string(),
                        };
                        shared.golog.log(LogLevel::Error, || {
                            format!("error querying nsqlookupd ({endpoint}) - {why}")
                        });
                        if i < 2 {
                            shared
                                .golog
                                .log(LogLevel::Info, || "retrying with next nsqlookupd".into());
                        }
                    }
                }
            }
            let _ = shared.events.send(Event::LookupFailed);
        });
    }

    fn on_lookup(&mut self, addrs: Vec<String>) {
        if self.stopping {
            return;
        }
        for a in &addrs {
            if !self.conns.contains_key(a) && !self.pending.contains(a) {
                self.dial(a.clone());
            }
        }
        // Producers that left: close connections found only through lookupd.
        let gone: Vec<String> = self
            .conns
            .keys()
            .filter(|a| !addrs.contains(a) && !self.nsqd_addrs.contains(a))
            .cloned()
            .collect();
        for a in gone {
            tracing::info!("({a}) no longer in lookupd, closing");
            self.close_conn(&a);
        }
    }
}
