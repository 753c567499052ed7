//! Redrive (ours; README "Beyond NSQ: queue settings"): moves a channel's queued messages —
//! typically a dead-letter topic's — back to where they came from, or to a topic named.
//!
//! A redrive is a consumer: it takes messages as a client with RDY would (in flight for
//! [`REDRIVE_CLIENT`], attempts counted, `REDRIVE_TIMEOUT` to finish), stores each where it
//! goes, and FINs it only once that store is done (synced with `--durable`). A crash or a
//! refused store leaves the message to time out and come back: a duplicate at worst, never a
//! loss. SQS's "start message move task" and RabbitMQ's shovel of a dead-letter queue do the
//! same job; NSQ has neither (its dead letters are a client's concern, go-nsq's
//! `LogFailedMessage`).
//!
//! Where a message goes: with `to`, a publish to that topic (every channel of it gets it, as
//! any publish). Without, the channel it was dead-lettered from, as known by the topic that
//! holds it (`nsq_core::topic::dead_letters`): straight into that channel (the topic's
//! other channels already had it), as a new message — a new ID, timestamp now, attempts 0.
//! A message whose origin is not known (a restart forgot it, or it was published there by a
//! client), or whose channel no longer exists, is put back and counted as skipped.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use nsq_core::channel::REDRIVE_CLIENT;
use nsq_core::message::Message;
use nsq_core::receipt::PutReceipt;
use nsq_core::{Channel, Engine, Topic};
use nsq_protocol::MessageId;

/// How long a message may stay in flight for a redrive before it comes back by itself.
pub const REDRIVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Messages taken per step.
const BATCH: usize = 1000;

/// What a redrive did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Stored where they went and finished here.
    pub moved: u64,
    /// Put back: no known origin (and no `to`), or the origin's topic or channel is gone.
    pub skipped: u64,
    /// Put back: the store where they went failed (refused, a full disk).
    pub failed: u64,
}

/// Where a group of messages goes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    /// A publish to the topic.
    Topic(String),
    /// Into this channel of this topic only.
    Channel(String, String),
}

/// Moves up to `n` of `ch`'s queued messages (of topic `topic`) as the module says.
pub async fn redrive(
    engine: &Arc<Engine>,
    topic: &Arc<Topic>,
    ch: &Arc<Channel>,
    n: usize,
    to: Option<&str>,
) -> Report {
    let mut report = Report::default();
    let mut left = n;
    // Put back, so queued again: taken again, they end the redrive (it went round).
    let mut put_back_ids: HashSet<MessageId> = HashSet::new();
    let mut round = false;
    while left > 0 && !round {
        let mut taken = Vec::new();
        let got = ch.take(
            REDRIVE_CLIENT,
            left.min(BATCH),
            REDRIVE_TIMEOUT,
            0,
            &mut taken,
        );
        if got == 0 {
            break;
        }
        left = left.saturating_sub(got);
        let mut groups: BTreeMap<Target, Vec<Message>> = BTreeMap::new();
        for m in taken {
            if put_back_ids.contains(&m.id) {
                put_back(ch, &[m.id]);
                round = true;
                continue;
            }
            let target = match to {
                Some(t) => Some(Target::Topic(t.to_string())),
                None => topic
                    .dead_letter_origin(&m.id)
                    .map(|o| Target::Channel(o.topic, o.channel)),
            };
            match target {
                Some(t) => groups.entry(t).or_default().push(m),
                None => {
                    put_back(ch, &[m.id]);
                    put_back_ids.insert(m.id);
                    report.skipped += 1;
                }
            }
        }
        for (target, msgs) in groups {
            let ids: Vec<MessageId> = msgs.iter().map(|m| m.id).collect();
            match store(engine, &target, msgs).await {
                Stored::Yes => {
                    for id in &ids {
                        // Timed out meanwhile (over a minute to store): it comes back and
                        // is moved again by a later redrive, a duplicate where it went.
                        if ch.finish(REDRIVE_CLIENT, id).is_ok() {
                            topic.forget_dead_letter_origin(id);
                        }
                    }
                    report.moved += ids.len() as u64;
                    tracing::info!(
                        "CHANNEL({}:{}): redrove {} messages to {}",
                        topic.name(),
                        ch.name(),
                        ids.len(),
                        target.describe()
                    );
                }
                Stored::Gone => {
                    put_back(ch, &ids);
                    put_back_ids.extend(ids.iter().copied());
                    report.skipped += ids.len() as u64;
                }
                Stored::Failed(e) => {
                    put_back(ch, &ids);
                    put_back_ids.extend(ids.iter().copied());
                    report.failed += ids.len() as u64;
                    tracing::warn!(
                        "CHANNEL({}:{}): failed to redrive {} messages to {} - {e}",
                        topic.name(),
                        ch.name(),
                        ids.len(),
                        target.describe()
                    );
                }
            }
        }
    }
    report
}

impl Target {
    fn describe(&self) -> String {
        match self {
            Target::Topic(t) => format!("topic {t}"),
            Target::Channel(t, c) => format!("channel {t}:{c}"),
        }
    }
}

enum Stored {
    Yes,
    /// The origin's topic or channel no longer exists.
    Gone,
    Failed(String),
}

async fn store(engine: &Arc<Engine>, target: &Target, msgs: Vec<Message>) -> Stored {
    let bodies = msgs.into_iter().map(|m| m.body);
    let receipt: PutReceipt = match target {
        Target::Topic(name) => {
            let topic = match engine.get_or_create_topic(name) {
                Ok((t, _)) => t,
                Err(e) => return Stored::Failed(e.to_string()),
            };
            match topic.put_many(bodies, Duration::ZERO) {
                Ok(r) => r,
                Err(e) => return Stored::Failed(e.to_string()),
            }
        }
        Target::Channel(t, c) => {
            let Some(topic) = engine.get_topic(t) else {
                return Stored::Gone;
            };
            if topic.get_channel(c).is_none() {
                return Stored::Gone;
            }
            let msgs = topic.mint(bodies, 0);
            match topic.adopt(Some(c), msgs) {
                Ok(r) => r,
                Err(e) => return Stored::Failed(e.to_string()),
            }
        }
    };
    match receipt.durable().await {
        Ok(()) => Stored::Yes,
        Err(e) => Stored::Failed(e.to_string()),
    }
}

/// Puts taken messages back at once (a requeue without delay).
fn put_back(ch: &Channel, ids: &[MessageId]) {
    for id in ids {
        let _ = ch.requeue(REDRIVE_CLIENT, id, Duration::ZERO);
    }
}
