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

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::FutureExt;
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};
use nsq_protocol::MessageId;
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::Config;
use crate::error::Error;
use crate::golog::GoLog;
use crate::message::Message;

mod connection;
mod coordinator;
mod discovery;

use coordinator::Coordinator;

/// Where connections put the messages they receive: the consumer's queue.
type MsgTx = mpsc::UnboundedSender<Message>;

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
    /// at once, as go-nsq sees it (`connection::dial_inner`).
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
