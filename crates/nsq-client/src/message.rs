//! A message received by a consumer, and its verdict: FIN, REQ or TOUCH go to the connection it
//! came from (go-nsq message.go). A message dropped without a verdict is requeued at once,
//! without backoff, so no message is left in flight until nsqd's timeout.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::MessageId;

use crate::consumer::{BackoffSignal, ConnCmd, ConnShared};

/// One delivery of a message. Give it a verdict with [`Message::finish`] or
/// [`Message::requeue`]; dropping it requeues it.
pub struct Message {
    id: MessageId,
    attempts: u16,
    timestamp_ns: i64,
    body: Bytes,
    conn: Arc<ConnShared>,
    /// Set once a verdict was sent (so `Drop` does nothing).
    responded: bool,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.id)
            .field("attempts", &self.attempts)
            .field("timestamp_ns", &self.timestamp_ns)
            .field("body_len", &self.body.len())
            .field("nsqd", &self.conn.addr)
            .finish()
    }
}

impl Message {
    pub(crate) fn new(
        id: MessageId,
        attempts: u16,
        timestamp_ns: i64,
        body: Bytes,
        conn: Arc<ConnShared>,
    ) -> Message {
        Message {
            id,
            attempts,
            timestamp_ns,
            body,
            conn,
            responded: false,
        }
    }

    /// go-nsq's `Handler returned error (<err>) for msg <id>` line (consumer.go,
    /// `handlerLoop`) through the consumer's [`Config::logger`](crate::Config::logger), for
    /// code that takes messages from the stream and fails one as a go-nsq handler would.
    pub fn log_handler_error(&self, err: &dyn std::fmt::Display) {
        self.conn
            .consumer
            .golog
            .log(crate::golog::LogLevel::Error, || {
                format!("Handler returned error ({err}) for msg {}", self.id)
            });
    }

    /// The 16-character hex ID nsqd assigned.
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// How many times nsqd has delivered this message (1 the first time).
    pub fn attempts(&self) -> u16 {
        self.attempts
    }

    /// When the message was published, in nanoseconds since the Unix epoch.
    pub fn timestamp_ns(&self) -> i64 {
        self.timestamp_ns
    }

    /// The body (a slice of the connection's read buffer; cloning it is cheap).
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The address of the nsqd this message came from.
    pub fn nsqd_address(&self) -> &str {
        &self.conn.addr
    }

    /// FIN: the message is done.
    pub fn finish(mut self) {
        self.respond(Verdict::Finish);
    }

    /// REQ with backoff. `None` is go-nsq's default: `default_requeue_delay × attempts`,
    /// capped at `max_requeue_delay`.
    pub fn requeue(mut self, delay: Option<Duration>) {
        self.respond(Verdict::Requeue {
            delay,
            backoff: true,
        });
    }

    /// REQ without entering backoff.
    pub fn requeue_without_backoff(mut self, delay: Option<Duration>) {
        self.respond(Verdict::Requeue {
            delay,
            backoff: false,
        });
    }

    /// TOUCH: resets nsqd's timeout for this message.
    pub fn touch(&self) {
        let _ = self.conn.cmd_tx.send(ConnCmd::Touch(self.id));
    }

    /// A handle that can TOUCH this message from elsewhere (e.g. a handler's future).
    pub fn toucher(&self) -> Toucher {
        Toucher {
            id: self.id,
            conn: self.conn.clone(),
        }
    }

    pub(crate) fn respond(&mut self, verdict: Verdict) {
        if std::mem::replace(&mut self.responded, true) {
            return;
        }
        let conn = &*self.conn;
        let consumer = &*conn.consumer;
        // go-nsq conn.go, `writeLoop`: the backoff signal (and the RDY it sends) goes before
        // the FIN/REQ itself; outside backoff a FIN changes nothing and is written directly.
        match verdict {
            Verdict::Finish => {
                consumer.stats.finished.fetch_add(1, Ordering::Relaxed);
                let cmd = ConnCmd::Fin(self.id);
                if consumer.in_backoff() {
                    consumer.verdict(&self.conn, cmd, BackoffSignal::Resume);
                } else {
                    let _ = conn.cmd_tx.send(cmd);
                }
            }
            Verdict::Requeue { delay, backoff } => {
                let cfg = &consumer.config;
                let delay = delay.unwrap_or_else(|| {
                    (cfg.default_requeue_delay * u32::from(self.attempts))
                        .min(cfg.max_requeue_delay)
                });
                let ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
                consumer.stats.requeued.fetch_add(1, Ordering::Relaxed);
                let cmd = ConnCmd::Req(self.id, ms);
                if backoff {
                    consumer.verdict(&self.conn, cmd, BackoffSignal::Backoff);
                } else if consumer.in_backoff() {
                    consumer.verdict(&self.conn, cmd, BackoffSignal::Continue);
                } else {
                    let _ = conn.cmd_tx.send(cmd);
                }
            }
        }
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if !self.responded {
            self.respond(Verdict::Requeue {
                delay: Some(Duration::ZERO),
                backoff: false,
            });
        }
    }
}

/// The verdicts a message can get.
pub(crate) enum Verdict {
    Finish,
    Requeue {
        delay: Option<Duration>,
        backoff: bool,
    },
}

/// TOUCHes one message; see [`Message::toucher`].
#[derive(Clone)]
pub struct Toucher {
    id: MessageId,
    conn: Arc<ConnShared>,
}

impl Toucher {
    /// Sends TOUCH for the message.
    pub fn touch(&self) {
        let _ = self.conn.cmd_tx.send(ConnCmd::Touch(self.id));
    }
}
