//! The blocking part of a takeover (docs/replication.md, "Takeover"): the manifest written,
//! every topic and channel of the backlog created, every unsettled message put with its
//! original ID; and the same puts for a handoff (`handoff.rs`). The core decides when
//! (`driver.rs`); `takeover.rs` runs it.

use std::path::Path;
use std::sync::Arc;

use nsq_core::message::{now_nanos, Message};
use nsq_core::queue_settings::{QueueSettings, Scope};
use nsq_core::receipt::PutReceipt;
use nsq_core::replica::adopt::{self, Put};
use nsq_core::replica::manifest;
use nsq_core::Engine;

use super::Backlog;

/// Messages put into one queue per `Topic::adopt` call.
const ADOPT_BATCH: usize = 256;

/// What [`deliver`] did.
pub(super) struct Delivered {
    pub(super) receipt: PutReceipt,
    pub(super) messages: u64,
    /// Manifest entries (puts).
    pub(super) ids: u64,
    pub(super) topics: usize,
    pub(super) unreadable: u64,
}

/// The copy a takeover took: up to which seq of the origin's log, and whether its catch-up
/// had ended. TAKEN_OVER and STATUS carry it, so it is kept beside the manifest
/// ([`Taken::path`]) for as long as the manifest is — and, with `at`, for the retire period
/// after its origin applied it (`takeover.rs`, [`Replication::retire_applied`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Taken {
    pub(crate) last_seq: u64,
    pub(crate) complete: bool,
    /// This node's take point of the adopted messages: its epoch and the log seq of the last
    /// put (of the takeover, or of a later handoff adopted into the same manifest). A
    /// manifest of this node's own epoch `e` up to seq `s` that lists one of them does not
    /// take it back when this point is after `(e, s)`: the message came back here after the
    /// taker's copy was taken (docs/replication.md, "Return", take points). `(0, 0)`: not
    /// known (a record written before the puts).
    #[serde(default)]
    pub(crate) at: (u64, u64),
}

impl Taken {
    /// Beside the manifest at `manifest`: `<origin>.<epoch>.taken`.
    pub(crate) fn path(manifest: &Path) -> std::path::PathBuf {
        manifest.with_extension("taken")
    }

    /// Reads the record beside the manifest at `manifest` (`None`: absent or unreadable,
    /// then nothing is known of the copy).
    pub(crate) fn read(manifest: &Path) -> Option<Taken> {
        let bytes = std::fs::read(Taken::path(manifest)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes the record beside the manifest at `manifest` (before the manifest: a manifest
    /// found without it is of a copy nothing is known of).
    pub(crate) fn write(&self, manifest: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        std::fs::write(Taken::path(manifest), json)
    }

    /// Deletes the record beside the manifest at `manifest` (with the manifest).
    pub(crate) fn remove(manifest: &Path) {
        match std::fs::remove_file(Taken::path(manifest)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::error!("REPLICATION: failed to delete a takeover record - {e}");
            }
            _ => {}
        }
    }
}

/// Messages for one queue: `(topic, channel)` (no channel: the topic) and the messages.
type Batch = ((String, Option<String>), Vec<Message>);

/// Creates every topic and channel of `topics` here (pause flags kept), with the copy's
/// queue settings where the queue here has none of its own.
pub(super) fn create_topics(
    engine: &Arc<Engine>,
    topics: &[nsq_protocol::replication::TopicItem],
) -> Result<(), String> {
    let mut settings_changed = false;
    for t in topics {
        let (topic, _) = engine
            .get_or_create_topic(&t.topic)
            .map_err(|e| format!("failed to create topic {} - {e}", t.topic))?;
        if t.paused {
            topic.pause();
        }
        let what = format!("topic {}", t.topic);
        if let Some(s) = copy_settings(
            &what,
            Scope::Topic,
            &t.topic,
            &topic.settings(),
            &t.settings,
        ) {
            topic.set_settings(s);
            settings_changed = true;
        }
        for c in &t.channels {
            let (ch, _) = topic
                .get_or_create_channel(&c.name)
                .map_err(|e| format!("failed to create channel {}:{} - {e}", t.topic, c.name))?;
            if c.paused {
                ch.pause();
            }
            let what = format!("channel {}:{}", t.topic, c.name);
            let scope = Scope::Channel;
            if let Some(s) = copy_settings(&what, scope, &t.topic, &ch.settings(), &c.settings) {
                ch.set_settings(s);
                topic.refresh_settings();
                settings_changed = true;
            }
        }
    }
    if settings_changed {
        engine.metadata_changed();
    }
    Ok(())
}

/// The settings a taken-over copy gives a queue here (`what`), if any: only to a queue with
/// none of its own — one set here (an admin sets each node through its own API) stays. Pairs
/// that do not hold are left out and logged.
fn copy_settings(
    what: &str,
    scope: Scope,
    topic: &str,
    here: &QueueSettings,
    pairs: &nsq_protocol::replication::Settings,
) -> Option<QueueSettings> {
    if pairs.is_empty() {
        return None;
    }
    let (copy, bad) = QueueSettings::from_pairs(scope, topic, pairs);
    if !bad.is_empty() {
        tracing::warn!("REPLICATION: {what}: left out the copy's settings {bad:?}");
    }
    if !here.is_empty() {
        if *here != copy {
            tracing::info!("REPLICATION: {what} keeps its own settings, not the copy's");
        }
        return None;
    }
    Some(copy).filter(|c| !c.is_empty())
}

/// Puts adopted messages into their queues in batches of [`ADOPT_BATCH`] (`Topic::adopt`),
/// gathering the receipt; the first failure stops it (what was put stays: duplicates if the
/// adoption is repeated, never loss).
pub(super) struct Putter<'a> {
    engine: &'a Arc<Engine>,
    pub(super) receipt: PutReceipt,
    batch: Option<Batch>,
    failed: Option<String>,
}

impl<'a> Putter<'a> {
    pub(super) fn new(engine: &'a Arc<Engine>) -> Self {
        Putter {
            engine,
            receipt: PutReceipt::default(),
            batch: None,
            failed: None,
        }
    }

    pub(super) fn put(&mut self, put: Put) {
        let (key, msg) = match put {
            Put::Channel {
                topic,
                channel,
                message,
            } => ((topic, Some(channel)), message),
            Put::Topic { topic, message } => ((topic, None), message),
        };
        if self
            .batch
            .as_ref()
            .is_some_and(|(k, v)| *k != key || v.len() >= ADOPT_BATCH)
        {
            self.flush();
        }
        self.batch
            .get_or_insert_with(|| (key, Vec::new()))
            .1
            .push(msg);
    }

    fn flush(&mut self) {
        let Some(((topic, channel), msgs)) = self.batch.take() else {
            return;
        };
        if self.failed.is_some() {
            return;
        }
        let r = self
            .engine
            .get_or_create_topic(&topic)
            .and_then(|(t, _)| t.adopt(channel.as_deref(), msgs));
        match r {
            Ok(mut r) => self.receipt.absorb(&mut r),
            Err(e) => {
                self.failed = Some(format!(
                    "failed to put into {topic}:{} - {e}",
                    channel.as_deref().unwrap_or("")
                ))
            }
        }
    }

    /// The receipt of everything put, or the first failure.
    pub(super) fn finish(mut self) -> Result<PutReceipt, String> {
        self.flush();
        match self.failed {
            Some(e) => Err(e),
            None => Ok(self.receipt),
        }
    }
}

/// The blocking part of a takeover: manifest, topics and channels, puts.
pub(super) fn deliver(
    engine: &Arc<Engine>,
    b: &Backlog,
    path: &Path,
    taken: Taken,
) -> Result<Delivered, String> {
    let store = b.store.lock();
    let now = now_nanos();
    let mut m = adopt::Manifest::default();
    for (_, item) in store.index().unsettled() {
        adopt::puts(item, now, &mut m);
    }
    let ids = m.len() as u64;
    taken
        .write(path)
        .map_err(|e| format!("failed to write {} - {e}", Taken::path(path).display()))?;
    let undo = |e: String| {
        let _ = std::fs::remove_file(path);
        Taken::remove(path);
        e
    };
    manifest::write(path, b.epoch, m.into_entries())
        .map_err(|e| undo(format!("failed to write {} - {e}", path.display())))?;
    let topics = store.topics();
    create_topics(engine, &topics).map_err(undo)?;
    let mut putter = Putter::new(engine);
    let mut messages = 0u64;
    let mut scratch = adopt::Manifest::default();
    let unreadable = store
        .for_each_unsettled(|item| {
            messages += 1;
            for put in adopt::puts(item, now, &mut scratch) {
                putter.put(put);
            }
        })
        .map_err(|e| undo(format!("failed to read the backlog - {e}")))?;
    let receipt = putter.finish().map_err(undo)?;
    Ok(Delivered {
        receipt,
        messages,
        ids,
        topics: topics.len(),
        unreadable,
    })
}
