//! HANDOFF (docs/replication.md, "Takeover"): when another member takes an epoch over, a
//! holder whose copy the taker's may lack sends its copy to the taker — the core's
//! `SendHandoff`, streamed on this node's Out link to the taker as HANDOFF items (each topic,
//! then each unsettled message) and HANDOFF_END — and deletes it only once the taker answers
//! HANDOFF_DONE (the core's `DropBacklog`). The taker spills what arrives to a file
//! (`<data-path>/replica/handoff/`, [`Spill`]), and on the core's `AdoptHandoff` puts every
//! message of it its own takeover did not (those its manifest lists are skipped), adds them
//! to the manifest, and once they are stored as a publish's must be tells the core
//! (`HandoffStored`), which answers HANDOFF_DONE. So the union of the holders is delivered,
//! each message once. NSQ has no counterpart.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nsq_core::message::now_nanos;
use nsq_core::replica::{adopt, manifest};
use nsq_core::replication::Event;
use nsq_protocol::message::MessageId;
use nsq_protocol::replication::{self, Frame, Item};
use tokio::sync::mpsc;

use super::deliver::{create_topics, Putter};
use super::Replication;

/// Bytes of HANDOFF frames per write handed to the link.
const CHUNK: usize = 1 << 20;

fn handoff_dir(repl: &Replication) -> PathBuf {
    repl.data_path.join("replica").join("handoff")
}

fn spill_path(repl: &Replication, from: u64, origin: u64, epoch: u64, ext: &str) -> PathBuf {
    handoff_dir(repl).join(format!("{from:016x}.{origin:016x}.{epoch}.{ext}"))
}

/// A handoff arriving on a served link from holder `from`: its frames appended to a file
/// until HANDOFF_END, then kept whole as `<from>.<origin>.<epoch>.spill` for the adoption.
pub(super) struct Spill {
    from: u64,
    key: (u64, u64),
    part: PathBuf,
    file: BufWriter<File>,
    items: u64,
}

impl Spill {
    /// Appends one HANDOFF frame of `(origin, epoch)` (a new handoff starts a new file).
    pub(super) fn add(
        cur: &mut Option<Spill>,
        repl: &Replication,
        from: u64,
        origin: u64,
        epoch: u64,
        item: Item,
    ) -> Result<(), String> {
        if cur.as_ref().is_none_or(|s| s.key != (origin, epoch)) {
            let dir = handoff_dir(repl);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{} - {e}", dir.display()))?;
            let part = spill_path(repl, from, origin, epoch, "part");
            let file = File::create(&part).map_err(|e| format!("{} - {e}", part.display()))?;
            *cur = Some(Spill {
                from,
                key: (origin, epoch),
                part,
                file: BufWriter::with_capacity(256 << 10, file),
                items: 0,
            });
        }
        let s = cur.as_mut().expect("set above");
        let mut b = BytesMut::new();
        replication::try_encode(
            &Frame::Handoff {
                origin,
                epoch,
                item,
            },
            &mut b,
        )
        .map_err(|e| e.to_string())?;
        s.file.write_all(&b).map_err(|e| e.to_string())?;
        s.items += 1;
        Ok(())
    }

    /// HANDOFF_END of `(origin, epoch)` with `items`: the spill is synced and kept whole.
    /// Blocking. `Err` when it does not match what arrived (the holder sends it again).
    pub(super) fn end(
        self,
        repl: &Replication,
        origin: u64,
        epoch: u64,
        items: u64,
    ) -> Result<(), String> {
        if self.key != (origin, epoch) || self.items != items {
            let _ = std::fs::remove_file(&self.part);
            return Err(format!(
                "HANDOFF_END of {origin:016x} epoch {epoch} says {items} items, {} arrived",
                self.items
            ));
        }
        let file = self.file.into_inner().map_err(|e| e.to_string())?;
        file.sync_all().map_err(|e| e.to_string())?;
        let done = spill_path(repl, self.from, origin, epoch, "spill");
        std::fs::rename(&self.part, &done).map_err(|e| e.to_string())?;
        Ok(())
    }
}

impl Replication {
    /// Sends this node's copy of `(origin, epoch)` to `to` on the Out link (`bulk`), unless
    /// a handoff of it is on its way.
    pub(super) fn send_handoff(
        self: &Arc<Self>,
        to: u64,
        origin: u64,
        epoch: u64,
        bulk: mpsc::Sender<Bytes>,
    ) {
        if !self.handing.lock().insert((origin, epoch)) {
            return;
        }
        let Some(b) = self.backlogs.lock().get(&(origin, epoch)).cloned() else {
            self.handing.lock().remove(&(origin, epoch));
            return;
        };
        let r = self.clone();
        tokio::task::spawn_blocking(move || {
            let store = b.store.lock();
            let mut out = BytesMut::with_capacity(CHUNK + (64 << 10));
            let mut items = 0u64;
            let mut failed = None;
            let send = |out: &mut BytesMut, failed: &mut Option<String>| {
                if failed.is_none() && bulk.blocking_send(out.split().freeze()).is_err() {
                    *failed = Some("the link ended".to_string());
                }
            };
            let mut frame = |item: Item, out: &mut BytesMut, failed: &mut Option<String>| {
                if failed.is_some() {
                    return;
                }
                let f = Frame::Handoff {
                    origin,
                    epoch,
                    item,
                };
                if let Err(e) = replication::try_encode(&f, out) {
                    *failed = Some(format!("item not encodable - {e}"));
                    return;
                }
                items += 1;
                if out.len() >= CHUNK {
                    send(out, failed);
                }
            };
            for t in store.topics() {
                frame(Item::Topic(t), &mut out, &mut failed);
            }
            let read = store.for_each_unsettled(|m| frame(Item::Message(m), &mut out, &mut failed));
            drop(store);
            if let Err(e) = read {
                failed.get_or_insert(format!("failed to read the backlog - {e}"));
            }
            if failed.is_none() {
                replication::encode(
                    &Frame::HandoffEnd {
                        origin,
                        epoch,
                        items,
                    },
                    &mut out,
                );
                send(&mut out, &mut failed);
            }
            r.handing.lock().remove(&(origin, epoch));
            match failed {
                None => tracing::info!(
                    "REPLICATION: {to:016x} takes {origin:016x} epoch {epoch} over: sent it this copy ({items} items)"
                ),
                // The core sends it again after its retry interval.
                Some(e) => tracing::warn!(
                    "REPLICATION: handoff of {origin:016x} epoch {epoch} to {to:016x} failed - {e}"
                ),
            }
        });
    }

    /// Adopts the handoff `from` sent of `(origin, epoch)` (see the module docs); the core
    /// hears `HandoffStored` once its messages are stored.
    pub(super) fn adopt_handoff(self: &Arc<Self>, from: u64, origin: u64, epoch: u64) {
        let r = self.clone();
        tokio::spawn(async move {
            // After this node's own takeover of it put its messages (the manifest says what
            // it holds).
            while r.taking_over(origin, epoch) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let g = r.takeover_lock.lock().await;
            let r2 = r.clone();
            let adopted =
                tokio::task::spawn_blocking(move || r2.adopt_spill(from, origin, epoch)).await;
            drop(g);
            let (receipt, n) = match adopted {
                Ok(Ok(Some(x))) => x,
                Ok(Ok(None)) => return,
                Ok(Err(e)) => {
                    tracing::error!(
                        "REPLICATION: handoff of {origin:016x} epoch {epoch} from {from:016x} not adopted - {e}"
                    );
                    return;
                }
                Err(e) => {
                    tracing::error!("REPLICATION: handoff adoption failed - {e}");
                    return;
                }
            };
            let seq = receipt.replication_seq();
            let mut stop = r.stopping();
            loop {
                let ok = tokio::select! {
                    c = r.confirmed(&receipt, seq) => c,
                    _ = async { stop.wait_for(|s| *s).await.is_ok() } => return,
                };
                match ok {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(
                            "REPLICATION: handoff of {origin:016x} epoch {epoch}: adopted messages {e}; trying again"
                        );
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
            let spill = spill_path(&r, from, origin, epoch, "spill");
            let _ = std::fs::remove_file(spill);
            tracing::info!(
                "REPLICATION: adopted the handoff of {origin:016x} epoch {epoch} from {from:016x}: {n} messages it lacked"
            );
            r.core_event(Event::HandoffStored {
                from,
                origin,
                epoch,
            });
        });
    }

    /// The blocking part of an adoption: the spill's topics created, its messages not in the
    /// manifest put and added to it. `None`: no spill (adopted already).
    fn adopt_spill(
        &self,
        from: u64,
        origin: u64,
        epoch: u64,
    ) -> Result<Option<(nsq_core::receipt::PutReceipt, u64)>, String> {
        let engine = self.engine().ok_or("no engine")?.clone();
        let spill = spill_path(self, from, origin, epoch, "spill");
        let mut data = Vec::new();
        match File::open(&spill) {
            Ok(mut f) => f.read_to_end(&mut data).map_err(|e| e.to_string())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{} - {e}", spill.display())),
        };
        let path = manifest::manifest_path(&self.data_path, origin, epoch);
        let listed = match manifest::read(&path, epoch) {
            Ok(m) => Some(m),
            Err(manifest::ManifestError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("{} - {e}", path.display())),
        };
        let mut have: HashSet<(String, String, MessageId)> = HashSet::new();
        for m in listed.iter().flatten() {
            for id in &m.ids {
                have.insert((m.topic.clone(), m.channel.clone(), *id));
            }
        }
        let mut buf = BytesMut::from(&data[..]);
        let (mut topics, mut messages) = (Vec::new(), Vec::new());
        loop {
            match replication::decode(&mut buf, u32::MAX) {
                Ok(Some(Frame::Handoff {
                    item: Item::Topic(t),
                    ..
                })) => topics.push(t),
                Ok(Some(Frame::Handoff {
                    item: Item::Message(m),
                    ..
                })) => messages.push(m),
                Ok(Some(_)) => return Err("unexpected frame in the spill".into()),
                Ok(None) => break,
                Err(e) => return Err(format!("damaged spill - {e}")),
            }
        }
        create_topics(&engine, &topics)?;
        let now = now_nanos();
        let mut added = adopt::Manifest::default();
        let mut putter = Putter::new(&engine);
        let mut n = 0u64;
        for item in messages {
            let mut scratch = adopt::Manifest::default();
            let mut any = false;
            for put in adopt::puts(item, now, &mut scratch) {
                let (topic, channel, id) = match &put {
                    adopt::Put::Channel {
                        topic,
                        channel,
                        message,
                    } => (topic.clone(), channel.clone(), message.id),
                    adopt::Put::Topic { topic, message } => {
                        (topic.clone(), String::new(), message.id)
                    }
                };
                if have.contains(&(topic.clone(), channel.clone(), id)) {
                    continue;
                }
                any = true;
                added.add(&topic, &channel, id);
                putter.put(put);
            }
            n += u64::from(any);
        }
        let receipt = putter.finish()?;
        // What was put came here now: the take point moves on (`deliver::Taken::at`).
        if let Some(mut t) = super::deliver::Taken::read(&path) {
            t.at = t.at.max((self.epoch(), receipt.replication_seq()));
            if let Err(e) = t.write(&path) {
                tracing::warn!("REPLICATION: failed to record a take point - {e}");
            }
        }
        if let Some(listed) = listed {
            if !added.is_empty() {
                let entries = listed
                    .into_iter()
                    .map(|m| (m.topic, m.channel, m.ids))
                    .chain(added.into_entries());
                manifest::write(&path, epoch, entries)
                    .map_err(|e| format!("{} - {e}", path.display()))?;
            }
        }
        Ok(Some((receipt, n)))
    }
}
