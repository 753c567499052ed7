//! nsq_to_nsq's engine (nsq's apps/nsq_to_nsq/nsq_to_nsq.go): forwards every message of a
//! source topic to destination nsqd(s), after the JSON filter ([`filter`]), to the destination
//! the selector picks ([`hostpool`]), logging publish timings ([`crate::timer_metrics`]).
//!
//! The reference publishes each message on its own (`PublishAsync`) and answers it when the
//! destination has: FIN on `OK`, REQ with go-nsq's default delay and backoff on an error
//! (`responder`). Here the messages that arrive together are grouped per chosen destination
//! and each group goes out as one `MPUB` (one `PUB` for a single message); when the `MPUB` is
//! answered `OK` every message in it is FINished, when it fails every message is REQueued. So
//! a message is still FINished only after the destination acknowledged it, and nothing is
//! acknowledged at the source that was not published. If nsqd refuses an `MPUB` as such (an
//! error frame, e.g. one body too large), its messages are retried one `PUB` each so that
//! only the offending ones are requeued, as they would be in the reference.
//!
//! A group that cannot be published (no connection: the destination is down) fails as the
//! reference's messages would, each of which its `HandleMessage` publishes on its own:
//!
//! * round-robin: the shared counter gave every message of the group this destination and
//!   nothing is marked, so each of them fails (`Handler returned error`, requeued with go-nsq's
//!   delay and backoff), as each `PublishAsync` to the dead address would; the counter moves
//!   on once per message, never for a retry, so the destinations alternate exactly as in the
//!   reference;
//! * hostpool / epsilon-greedy: go-hostpool marks the host down before the next message, so
//!   the reference fails one message per attempt: the group's first message is requeued, the
//!   host is marked down in the pool, and the rest of the group goes at once to the next host
//!   the pool offers that this group has not tried yet; only when every host has failed for
//!   it is the rest requeued too.
//!
//! A failure to connect is not timed (the reference's `PublishAsync` returns it before the
//! `responder` would time the answer); any other failure is.

pub mod filter;
pub mod hostpool;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use nsq_client::{Consumer, Error, Message, Producer};
use parking_lot::Mutex;

pub use crate::timer_metrics::TimerMetrics;
pub use filter::{JsonFilter, Verdict};
pub use hostpool::{Mode, Selector};

use crate::golog::log;

/// The most body bytes one `MPUB` carries (nsqd's default `--max-body-size` is 5 MiB).
const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// The most messages taken from the consumer at once.
const MAX_TAKE: usize = 4096;

/// The destinations: one producer per address, the selector, and the timing series.
pub struct Publisher {
    /// One per `--destination-nsqd-tcp-address`, in order; a repeated address shares its
    /// producer (the reference keeps them in a map keyed by address).
    producers: Vec<Producer>,
    /// Picks an index into `producers`. A short lock: one pick or mark at a time, no await.
    selector: Mutex<Selector>,
    /// The per-address series of each destination (by address, so repeats share one); only
    /// when there are several destinations, as in the reference.
    per_address: Vec<Arc<TimerMetrics>>,
    /// `[aggregate]:` (each series takes its own short lock per sample).
    aggregate: TimerMetrics,
}

impl Publisher {
    /// `producers[i]` publishes to `addrs[i]`; `status_every` as `--status-every`.
    pub fn new(
        addrs: &[String],
        producers: Vec<Producer>,
        mode: Mode,
        status_every: i64,
    ) -> Publisher {
        let mut per_address: Vec<Arc<TimerMetrics>> = Vec::with_capacity(addrs.len());
        for (i, a) in addrs.iter().enumerate() {
            let first = addrs.iter().position(|x| x == a).unwrap_or(i);
            if first < i {
                per_address.push(per_address[first].clone());
            } else if addrs.len() == 1 {
                // "disable since there is only one address"
                per_address.push(Arc::new(TimerMetrics::new(0, "")));
            } else {
                per_address.push(Arc::new(TimerMetrics::new(status_every, format!("[{a}]:"))));
            }
        }
        Publisher {
            selector: Mutex::new(Selector::new(mode, producers.len())),
            producers,
            per_address,
            aggregate: TimerMetrics::new(status_every, "[aggregate]:"),
        }
    }

    /// Stops every producer.
    pub fn stop(&self) {
        for p in &self.producers {
            p.stop();
        }
    }

    /// Publishes one group to destination `host`, then FINs or REQs its messages; a failed
    /// attempt costs one message and moves the rest to another host (see the module doc).
    async fn publish_batch(
        self: Arc<Self>,
        mut host: usize,
        topic: Arc<str>,
        mut batch: Vec<(Message, Bytes)>,
        mut start: Instant,
    ) {
        let mut tried: Vec<usize> = Vec::new();
        loop {
            let producer = &self.producers[host];
            let result = if batch.len() == 1 {
                producer.publish(&topic, &batch[0].1).await
            } else {
                producer
                    .multi_publish(&topic, batch.iter().map(|(_, b)| b))
                    .await
            };
            match result {
                Ok(()) => {
                    self.answered(host, true, start, batch.len(), true);
                    for (m, _) in batch {
                        m.finish();
                    }
                    return;
                }
                Err(Error::Server(e)) if batch.len() > 1 => {
                    log(&format!(
                        "ERROR: MPUB of {} messages to {} failed - {e}; publishing them one by one",
                        batch.len(),
                        producer.addr()
                    ));
                    for (m, body) in batch {
                        let start = Instant::now();
                        let ok = producer.publish(&topic, &body).await.is_ok();
                        self.answered(host, ok, start, 1, true);
                        if ok {
                            m.finish();
                        } else {
                            m.requeue(None);
                        }
                    }
                    return;
                }
                Err(e) => {
                    // nsq_to_nsq.go, `HandleMessage`: a `PublishAsync` that cannot connect
                    // returns the error at once, untimed; its message's handler returns it,
                    // which go-nsq logs and requeues with backoff.
                    let timed = !connect_failure(&e);
                    if !self.selector.lock().is_pool() {
                        // Round-robin: every message of the group was counted for this host.
                        self.answered(host, false, start, batch.len(), timed);
                        for (m, _) in batch {
                            m.log_handler_error(&e);
                            m.requeue(None);
                        }
                        return;
                    }
                    // Host pool: `hostPoolResponse.Mark(err)` before the next message.
                    self.answered(host, false, start, 1, timed);
                    tried.push(host);
                    let (m, _) = batch.remove(0);
                    m.log_handler_error(&e);
                    m.requeue(None);
                    if batch.is_empty() {
                        return;
                    }
                    match self.untried_host(&tried) {
                        Some(next) => {
                            host = next;
                            start = Instant::now();
                        }
                        None => {
                            // Every destination failed for this group.
                            self.answered(host, false, start, batch.len(), timed);
                            for (m, _) in batch {
                                m.log_handler_error(&e);
                                m.requeue(None);
                            }
                            return;
                        }
                    }
                }
            }
        }
    }

    /// The next host the selector offers that is not in `tried` (a few picks: hostpool skips
    /// the hosts marked down, round-robin cycles through all), or `None`.
    fn untried_host(&self, tried: &[usize]) -> Option<usize> {
        let now = Instant::now();
        let mut selector = self.selector.lock();
        (0..2 * self.producers.len().max(1))
            .map(|_| selector.pick(now))
            .find(|h| !tried.contains(h))
    }

    /// Informs the selector and, when `timed`, records `n` timings (the reference's
    /// `responder`).
    fn answered(&self, host: usize, ok: bool, start: Instant, n: usize, timed: bool) {
        let now = Instant::now();
        let took = now.saturating_duration_since(start);
        self.selector.lock().mark(host, ok, took, now);
        if !timed {
            return;
        }
        for _ in 0..n {
            for stats in [
                self.per_address[host].record(took),
                self.aggregate.record(took),
            ]
            .into_iter()
            .flatten()
            {
                log(&stats.to_string());
            }
        }
    }
}

/// A publish that failed in go-nsq's `Producer.connect` (dial, IDENTIFY, AUTH, TLS), which
/// `PublishAsync` returns to the caller instead of answering through the response channel.
fn connect_failure(e: &Error) -> bool {
    matches!(
        e,
        Error::Dial { .. }
            | Error::Identify(_)
            | Error::Auth(_)
            | Error::AuthRequired
            | Error::Tls(_)
    )
}

/// Forwards `consumer`'s messages to `dest_topic` until the consumer has stopped and every
/// message it delivered was handed on. Publishes run as their own tasks, so the next
/// messages are read while earlier groups wait for their answers.
pub async fn forward(
    mut consumer: Consumer,
    dest_topic: String,
    filter: Arc<JsonFilter>,
    publisher: Arc<Publisher>,
    max_take: usize,
) {
    let topic: Arc<str> = Arc::from(dest_topic);
    let hosts = publisher.producers.len();
    let mut taken = Vec::with_capacity(max_take.clamp(1, MAX_TAKE));
    let mut passed = Vec::with_capacity(max_take.clamp(1, MAX_TAKE));
    let mut groups: Vec<Vec<(Message, Bytes)>> = (0..hosts).map(|_| Vec::new()).collect();
    let mut sizes = vec![0usize; hosts];
    while consumer
        .next_batch(&mut taken, max_take.clamp(1, MAX_TAKE))
        .await
        > 0
    {
        let start = Instant::now();
        for m in taken.drain(..) {
            match filter.apply(m.body()) {
                Verdict::Drop => m.finish(),
                Verdict::Backoff => {
                    // The reference's handler returns `errors.New("backoff")`, which go-nsq
                    // logs and requeues (nsq_to_nsq.go, `HandleMessage`).
                    m.log_handler_error(&"backoff");
                    m.requeue(None);
                }
                Verdict::Pass(body) => passed.push((m, body)),
            }
        }
        {
            let mut selector = publisher.selector.lock();
            for (m, body) in passed.drain(..) {
                let host = selector.pick(start);
                sizes[host] += body.len();
                groups[host].push((m, body));
            }
        }
        for host in 0..hosts {
            if groups[host].is_empty() {
                continue;
            }
            let mut group = std::mem::take(&mut groups[host]);
            if sizes[host] > MAX_BATCH_BYTES {
                // Split into MPUBs of at most MAX_BATCH_BYTES (a larger single body alone).
                let mut chunk = Vec::new();
                let mut bytes = 0;
                for item in group.drain(..) {
                    if !chunk.is_empty() && bytes + item.1.len() > MAX_BATCH_BYTES {
                        spawn_batch(&publisher, host, &topic, std::mem::take(&mut chunk), start);
                        bytes = 0;
                    }
                    bytes += item.1.len();
                    chunk.push(item);
                }
                group = chunk;
            }
            sizes[host] = 0;
            spawn_batch(&publisher, host, &topic, group, start);
        }
    }
}

fn spawn_batch(
    publisher: &Arc<Publisher>,
    host: usize,
    topic: &Arc<str>,
    batch: Vec<(Message, Bytes)>,
    start: Instant,
) {
    if batch.is_empty() {
        return;
    }
    tokio::spawn(
        publisher
            .clone()
            .publish_batch(host, topic.clone(), batch, start),
    );
}
