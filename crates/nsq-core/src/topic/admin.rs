//! A topic's channels (create, look up, delete), its administration (pause, empty, delete,
//! shutdown) and its stats.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use nsq_protocol::replication::AdminOp;

use super::{Topic, TopicStats};
use crate::backend::BackendError;
use crate::channel::{Channel, Parent};
use crate::receipt::PutReceipt;

impl Topic {
    // ---- channels -----------------------------------------------------------------------

    /// Gets or creates a channel; `true` when it was created by this call.
    pub fn get_or_create_channel(
        self: &Arc<Self>,
        name: &str,
    ) -> Result<(Arc<Channel>, bool), BackendError> {
        let mut st = self.state.lock();
        if let Some(c) = st.channels.get(name) {
            return Ok((c.clone(), false));
        }
        if self.is_exiting() {
            return Err(BackendError::Exiting);
        }
        let engine = self.engine.upgrade().ok_or(BackendError::Exiting)?;
        let queue_name = format!("{}:{}", self.name, name);
        let durable = !nsq_protocol::names::is_ephemeral(name);
        let backend = engine.make_backend(&queue_name, durable)?;
        let repl = self.repl.clone().filter(|_| durable);
        let me = Arc::downgrade(self);
        let parent = Parent {
            delete: Box::new(move |ch: &Channel| {
                if let Some(topic) = me.upgrade() {
                    topic.delete_channel_if(ch.name(), ch);
                }
            }),
            pump_lock: self.pump_lock.clone(),
            returning: Some(engine.returning().clone()),
            publish: {
                let engine = self.engine.clone();
                Box::new(move |topic: &str, items| {
                    let engine = engine.upgrade().ok_or(BackendError::Exiting)?;
                    let (t, _) = engine.get_or_create_topic(topic)?;
                    t.put_dead_letters(items)
                })
            },
        };
        let ch = Channel::new(
            parent,
            &self.name,
            name,
            self.opts.clone(),
            self.health.clone(),
            backend,
            self.reserve.clone(),
            repl,
        );
        // Before anyone can take from it: its TTL and the rest from the topic or the node.
        self.apply_channel_settings(&ch);
        st.channels.insert(name.to_string(), ch.clone());
        st.fanout = st.channels.values().cloned().collect();
        if let (Some(r), true) = (&self.repl, durable) {
            // Under the lock: before any PUB that lists the channel.
            r.admin(AdminOp::Create, &self.name, name);
        }
        drop(st);
        engine.channels_changed();
        engine.hooks().channel_created(&self.name, name);
        self.ensure_pump();
        Ok((ch, true))
    }

    pub fn get_channel(&self, name: &str) -> Option<Arc<Channel>> {
        self.state.lock().channels.get(name).cloned()
    }

    pub fn channels(&self) -> Vec<Arc<Channel>> {
        self.state.lock().channels.values().cloned().collect()
    }

    /// Deletes a channel (closing its consumers and removing its files). `false` if unknown.
    pub fn delete_channel(&self, name: &str) -> bool {
        self.delete_channel_matching(name, None)
    }

    /// Ephemeral self-deletion: only if `name` still maps to this very channel.
    pub(crate) fn delete_channel_if(&self, name: &str, ch: &Channel) {
        self.delete_channel_matching(name, Some(ch));
    }

    fn delete_channel_matching(&self, name: &str, only: Option<&Channel>) -> bool {
        let (ch, now_empty) = {
            let mut st = self.state.lock();
            match st.channels.get(name) {
                None => return false,
                Some(c) if only.is_some_and(|o| !std::ptr::eq(Arc::as_ptr(c), o)) => return false,
                Some(_) => {}
            }
            let ch = st.channels.remove(name).expect("checked above");
            st.fanout = st.channels.values().cloned().collect();
            if let (Some(r), false) = (&self.repl, ch.is_ephemeral()) {
                r.admin(AdminOp::Delete, &self.name, name);
            }
            (ch, st.channels.is_empty())
        };
        ch.delete();
        let engine = self.engine.upgrade();
        if let Some(e) = &engine {
            e.channels_changed();
            e.hooks().channel_deleted(&self.name, name);
        }
        if now_empty && self.ephemeral {
            if let Some(e) = engine {
                e.delete_topic_if(&self.name, self);
            }
        }
        true
    }

    // ---- administration -----------------------------------------------------------------

    pub fn pause(&self) {
        self.paused.store(true, Ordering::Release);
        if let Some(r) = &self.repl {
            r.admin(AdminOp::Pause, &self.name, "");
        }
    }

    pub fn unpause(self: &Arc<Self>) {
        self.paused.store(false, Ordering::Release);
        if let Some(r) = &self.repl {
            r.admin(AdminOp::Unpause, &self.name, "");
        }
        self.ensure_pump();
    }

    /// Discards the topic's own queue (channels keep theirs).
    pub fn empty(&self) -> Result<(), BackendError> {
        let _guard = self.pump_lock.write();
        {
            let mut st = self.state.lock();
            st.queue.clear();
            if let Some(r) = &self.repl {
                r.admin(AdminOp::Empty, &self.name, "");
            }
        }
        self.backend.set_read_watermark(None);
        self.backend.empty()
    }

    /// Deletion: refuse puts, delete every channel, discard the queue and its files.
    pub(crate) fn delete(&self) {
        self.exiting.store(true, Ordering::Release);
        let _guard = self.pump_lock.write();
        if let Some(r) = &self.repl {
            r.admin(AdminOp::Delete, &self.name, "");
        }
        let channels: Vec<Arc<Channel>> = {
            let mut st = self.state.lock();
            st.fanout = Arc::from(Vec::new());
            std::mem::take(&mut st.channels).into_values().collect()
        };
        let engine = self.engine.upgrade();
        for ch in channels {
            ch.delete();
            if let Some(e) = &engine {
                e.hooks().channel_deleted(&self.name, ch.name());
            }
        }
        self.state.lock().queue.clear();
        self.backend.set_read_watermark(None);
        if let Err(e) = self.backend.empty() {
            tracing::error!(topic = %self.name, "failed to empty topic backend - {e}");
        }
        if let Err(e) = self.backend.delete() {
            tracing::error!(topic = %self.name, "failed to delete topic backend - {e}");
        }
    }

    /// Shutdown: hand a stalled batch to its channels, close every channel (flushing them to
    /// disk), then flush the topic's memory queue to its backend and close it. The read
    /// watermark is cleared (the data dir is then what the reference leaves) unless a stalled
    /// batch could not be stored, in which case it is read again after the restart.
    pub(crate) fn close(&self) -> Result<(), BackendError> {
        self.exiting.store(true, Ordering::Release);
        let _guard = self.pump_lock.write();
        let mut settled = true;
        let (stalled, msgs, channels) = {
            let mut st = self.state.lock();
            let (stalled, msgs) = st.queue.drain();
            (
                stalled,
                msgs,
                st.channels.values().cloned().collect::<Vec<_>>(),
            )
        };
        if let Some(b) = stalled {
            for ch in &b.todo {
                if let Err(e) = ch.receive(&b.msgs, &mut PutReceipt::default()) {
                    tracing::error!(topic = %self.name, channel = %ch.name(), "failed to put message to channel - {e}");
                    settled = false;
                }
            }
        }
        for ch in channels {
            if let Err(e) = ch.close() {
                tracing::error!(topic = %self.name, channel = %ch.name(), "failed to close channel - {e}");
            }
        }
        let r = if msgs.is_empty() || self.ephemeral {
            Ok(())
        } else {
            self.backend
                .put_batch(msgs.len(), &mut |i, out| msgs[i].encode_into(out))
                .map(drop)
        };
        if settled {
            self.backend.set_read_watermark(None);
        }
        self.backend.close()?;
        r
    }

    /// What a shutdown would have to write for this topic and its channels that is on disk
    /// nowhere else (see [`crate::reserve`]).
    pub(crate) fn held_bytes(&self) -> u64 {
        let (mine, channels) = {
            let st = self.state.lock();
            (st.queue.held_bytes(), st.fanout.clone())
        };
        mine + channels.iter().map(|c| c.held_bytes()).sum::<u64>()
    }

    // ---- stats --------------------------------------------------------------------------

    pub fn depth(&self) -> i64 {
        self.state.lock().queue.mem_len() as i64 + self.backend.depth()
    }

    pub fn stats(&self) -> TopicStats {
        let (mem, channels) = {
            let st = self.state.lock();
            (st.queue.mem_len(), st.channels.values().cloned().collect())
        };
        let backend_depth = self.backend.depth();
        TopicStats {
            name: self.name.clone(),
            depth: mem as i64 + backend_depth,
            backend_depth,
            message_count: self.message_count.load(Ordering::Relaxed),
            message_bytes: self.message_bytes.load(Ordering::Relaxed),
            paused: self.is_paused(),
            dropped_count: self.dropped_count(),
            channels,
        }
    }
}
