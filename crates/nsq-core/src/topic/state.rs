//! `TopicState`: a topic's queueing decisions as a synchronous state machine — no lock, no
//! I/O, no tokio. Where a publish goes (straight to the channels, the topic's memory queue,
//! its backend), when the pump runs, what it moves next, and the batch a channel refused
//! (kept for a retry). The driver (`Topic` in `mod.rs`) applies these under its lock and
//! carries out the effects: backend writes and reads, fan-out to the channels, the pump task.
//!
//! Generic over the channel handle `C` so the rules can be tested without channels.
//! The reference's counterpart is nsqd/topic.go (`put`, `messagePump`).

use crate::memqueue::MemQueue;
use crate::message::Message;

/// Messages the pump moves per batch.
pub(super) const PUMP_BATCH: usize = 1024;

/// Facts about the topic the driver reads when applying an event.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gate {
    pub(super) paused: bool,
    pub(super) started: bool,
    pub(super) exiting: bool,
    pub(super) has_channels: bool,
}

impl Gate {
    /// Messages may leave the topic.
    fn open(&self) -> bool {
        !self.paused && self.started && !self.exiting && self.has_channels
    }
}

/// A batch on its way to the channels (`todo`: those still to receive it).
pub(super) struct Batch<C> {
    pub(super) msgs: Vec<Message>,
    pub(super) todo: Vec<C>,
}

/// The outcome of [`TopicState::publish`].
pub(super) enum Publish {
    /// Hand the messages to every channel now (no backlog, nothing in the way).
    Direct(Vec<Message>),
    /// Queued in memory (an ephemeral topic's overflow was dropped, as the reference's).
    Memory,
    /// Write `disk` to the backend, then report with [`TopicState::write_done`], handing `mem`
    /// back: it enters memory only if the write succeeded (all or nothing).
    Write {
        mem: Vec<Message>,
        disk: Vec<Message>,
    },
}

/// What the pump does next.
pub(super) enum Pump<C> {
    /// Nothing to do, or nowhere to send it: the pump ends (`pumping` cleared).
    Stop,
    /// Hand this batch to its channels and report with [`TopicState::delivered`].
    Deliver(Batch<C>),
    /// Read up to this many records from the backend and report with
    /// [`TopicState::pump_read`] (only the pump reads, one pump at a time).
    Read(usize),
    /// Go round again.
    Again,
}

/// A topic's state (see the module docs).
pub(super) struct TopicState<C> {
    mem_queue_size: usize,
    /// The backend keeps what it is given; false for an `#ephemeral` topic (overflow dropped).
    durable: bool,
    mem: MemQueue<Message>,
    /// The backend holds messages newer than everything in `mem` (FIFO, as a channel's).
    spill: bool,
    /// Backend writes decided and not yet reported.
    writing: usize,
    /// A pump task is running; new publishes queue behind its work.
    pumping: bool,
    /// A batch a channel refused, kept for the pump's retry.
    stalled: Option<Batch<C>>,
}

impl<C: Clone> TopicState<C> {
    /// A topic over a backend holding `backend_depth` records from a previous run (pumped
    /// before anything new).
    pub(super) fn new(mem_queue_size: usize, durable: bool, backend_depth: i64) -> Self {
        TopicState {
            mem_queue_size,
            durable,
            mem: MemQueue::new(),
            spill: backend_depth > 0,
            writing: 0,
            pumping: false,
            stalled: None,
        }
    }

    /// A publish: straight to the channels when nothing is queued or pumping and messages may
    /// flow; else memory while there is room and `admit` accepts the part that fits (see
    /// [`crate::reserve`]), the rest to the backend (dropped when ephemeral).
    pub(super) fn publish(
        &mut self,
        mut msgs: Vec<Message>,
        gate: Gate,
        admit: &mut dyn FnMut(&[Message]) -> bool,
    ) -> Publish {
        if gate.open() && self.mem.is_empty() && !self.spill && !self.pumping {
            return Publish::Direct(msgs);
        }
        let mut room = if self.spill {
            0
        } else {
            self.mem_queue_size.saturating_sub(self.mem.len())
        };
        let fit = room.min(msgs.len());
        if fit > 0 && self.durable && !admit(&msgs[..fit]) {
            room = 0;
        }
        if msgs.len() <= room {
            self.mem.extend(msgs);
            return Publish::Memory;
        }
        let disk = msgs.split_off(room);
        if !self.durable {
            self.mem.extend(msgs);
            return Publish::Memory;
        }
        self.spill = true;
        self.writing += 1;
        Publish::Write { mem: msgs, disk }
    }

    /// The backend write of a [`Publish::Write`] finished. `backend_empty`: its depth is 0.
    pub(super) fn write_done(&mut self, mem: Vec<Message>, ok: bool, backend_empty: bool) {
        self.writing -= 1;
        if ok {
            self.mem.extend(mem);
        } else if self.writing == 0 && backend_empty {
            // Nothing went to disk: memory may take new puts again.
            self.spill = false;
        }
    }

    /// Whether a pump must start (there is a backlog or a stalled batch and somewhere to send
    /// it); if so it counts as running from now.
    pub(super) fn start_pump(&mut self, gate: Gate) -> bool {
        if self.pumping || !gate.open() {
            return false;
        }
        if self.mem.is_empty() && !self.spill && self.stalled.is_none() {
            return false;
        }
        self.pumping = true;
        true
    }

    /// The pump's next step: a stalled batch first, then memory, then the backend.
    pub(super) fn pump(&mut self, gate: Gate, fanout: &[C]) -> Pump<C> {
        if gate.paused || gate.exiting || !gate.has_channels {
            self.pumping = false;
            return Pump::Stop;
        }
        if let Some(b) = self.stalled.take() {
            return Pump::Deliver(b);
        }
        let n = self.mem.len().min(PUMP_BATCH);
        if n > 0 {
            let mut msgs = Vec::with_capacity(n);
            self.mem.pop_front_into(n, &mut msgs);
            return Pump::Deliver(Batch {
                msgs,
                todo: fanout.to_vec(),
            });
        }
        if !self.spill {
            self.pumping = false;
            return Pump::Stop;
        }
        Pump::Read(PUMP_BATCH)
    }

    /// The backend read of a [`Pump::Read`] returned `got` records (`msgs` decoded from them).
    pub(super) fn pump_read(
        &mut self,
        msgs: Vec<Message>,
        got: usize,
        backend_empty: bool,
        fanout: &[C],
    ) -> Pump<C> {
        if got > 0 {
            return Pump::Deliver(Batch {
                msgs,
                todo: fanout.to_vec(),
            });
        }
        if self.writing == 0 && backend_empty {
            self.spill = false;
            if self.mem.is_empty() {
                self.pumping = false;
                return Pump::Stop;
            }
        }
        Pump::Again
    }

    /// A batch was handed to its channels; `refused` did not take it: kept for a retry.
    /// Returns whether it is stalled.
    pub(super) fn delivered(&mut self, msgs: Vec<Message>, refused: Vec<C>) -> bool {
        if refused.is_empty() {
            return false;
        }
        self.stalled = Some(Batch {
            msgs,
            todo: refused,
        });
        true
    }

    /// Discards the topic's own queue (`/topic/empty`, deletion).
    pub(super) fn clear(&mut self) {
        self.mem.clear();
        self.spill = false;
        self.stalled = None;
    }

    /// Shutdown: the stalled batch and the memory queue.
    pub(super) fn drain(&mut self) -> (Option<Batch<C>>, Vec<Message>) {
        (self.stalled.take(), self.mem.take_all().collect())
    }

    /// The messages queued in memory and the stalled batch (a replication catch-up's
    /// snapshot).
    pub(super) fn queued(&self) -> (impl Iterator<Item = &Message> + '_, Option<&Batch<C>>) {
        (self.mem.iter(), self.stalled.as_ref())
    }

    pub(super) fn mem_len(&self) -> usize {
        self.mem.len()
    }

    /// The memory queue's messages' record sizes (a topic's `max_bytes`).
    pub(super) fn mem_bytes(&self) -> u64 {
        self.mem.queued_bytes()
    }

    /// The memory queue's size from now on (`mem_queue_size`, crate::queue_settings): later
    /// publishes use it; what memory holds stays.
    pub(super) fn set_mem_queue_size(&mut self, n: usize) {
        self.mem_queue_size = n;
    }

    /// Drops the oldest messages of the memory queue until at least `k` of them and `bytes`
    /// of them ([`Message::record_len`]) are dropped (a topic's `overflow=drop_oldest`). A
    /// stalled batch is on its way to the channels and is not touched. Returns them, their
    /// bytes, and whether the backend may hold more when memory ran out first (the driver
    /// reads and drops the rest there).
    pub(super) fn discard_front(&mut self, k: usize, bytes: u64) -> (Vec<Message>, u64, bool) {
        let mut out = Vec::new();
        let mut dropped = 0u64;
        while out.len() < k || dropped < bytes {
            let Some(m) = self.mem.pop_front() else {
                return (out, dropped, self.spill);
            };
            dropped += m.record_len();
            out.push(m);
        }
        (out, dropped, false)
    }

    /// What memory holds that is on disk nowhere else (see [`crate::reserve`]).
    pub(super) fn held_bytes(&self) -> u64 {
        if self.durable {
            self.mem.bytes()
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use nsq_protocol::MessageId;

    fn msgs(r: std::ops::Range<u8>) -> Vec<Message> {
        r.map(|n| {
            let mut id = [b'0'; 16];
            id[15] = n;
            Message::new(MessageId(id), Bytes::from(vec![n]))
        })
        .collect()
    }

    const OPEN: Gate = Gate {
        paused: false,
        started: true,
        exiting: false,
        has_channels: true,
    };

    #[test]
    fn direct_until_a_backlog_then_memory_then_disk_in_order() {
        let mut t: TopicState<u8> = TopicState::new(3, true, 0);
        assert!(
            matches!(t.publish(msgs(0..2), OPEN, &mut |_| true), Publish::Direct(m) if m.len() == 2)
        );
        let paused = Gate {
            paused: true,
            ..OPEN
        };
        assert!(matches!(
            t.publish(msgs(2..4), paused, &mut |_| true),
            Publish::Memory
        ));
        // One room left: one to memory once the other three are written.
        let Publish::Write { mem, disk } = t.publish(msgs(4..8), paused, &mut |_| true) else {
            panic!("expected a write");
        };
        assert_eq!((mem.len(), disk.len()), (1, 3));
        // While the write is outstanding a publish goes to disk too, behind it.
        assert!(
            matches!(t.publish(msgs(8..9), OPEN, &mut |_| true), Publish::Write { mem, .. } if mem.is_empty())
        );
        t.write_done(mem, true, false);
        assert_eq!(t.mem_len(), 3);
        assert!(t.start_pump(OPEN));
        assert!(!t.start_pump(OPEN), "one pump at a time");
        let Pump::Deliver(b) = t.pump(OPEN, &[1u8, 2]) else {
            panic!("memory first");
        };
        assert_eq!((b.msgs.len(), b.todo.len()), (3, 2));
        assert!(t.delivered(b.msgs, vec![2]), "channel 2 refused: stalled");
        assert!(
            matches!(t.pump(OPEN, &[1, 2]), Pump::Deliver(b) if b.todo == vec![2]),
            "the stalled batch is retried first"
        );
        assert!(
            matches!(t.pump(OPEN, &[1, 2]), Pump::Read(_)),
            "then the backend"
        );
        // The second write has not reported: an empty read keeps the spill.
        assert!(matches!(
            t.pump_read(Vec::new(), 0, true, &[1, 2]),
            Pump::Again
        ));
        t.write_done(Vec::new(), true, false);
        assert!(matches!(
            t.pump_read(Vec::new(), 0, true, &[1, 2]),
            Pump::Stop
        ));
        assert!(matches!(
            t.publish(msgs(9..10), OPEN, &mut |_| true),
            Publish::Direct(_)
        ));
    }

    #[test]
    fn discard_front_drops_the_oldest_by_count_and_bytes_and_a_new_size_applies_later() {
        let mut t: TopicState<u8> = TopicState::new(4, true, 0);
        let closed = Gate {
            has_channels: false,
            ..OPEN
        };
        assert!(matches!(
            t.publish(msgs(0..4), closed, &mut |_| true),
            Publish::Memory
        ));
        // Each message is 4 + 26 + 1 bytes.
        assert_eq!(t.mem_bytes(), 4 * 31);
        let (gone, bytes, more) = t.discard_front(1, 40);
        assert_eq!((gone.len(), bytes, more), (2, 62, false));
        assert_eq!(gone[0].body[0], 0);
        assert_eq!((t.mem_len(), t.mem_bytes()), (2, 62));
        // A memory queue of 0 from now on: the next publish goes to disk, memory stays.
        t.set_mem_queue_size(0);
        let Publish::Write { mem, disk } = t.publish(msgs(4..5), closed, &mut |_| true) else {
            panic!("expected a write");
        };
        assert_eq!((mem.len(), disk.len()), (0, 1));
        t.write_done(mem, true, false);
        assert_eq!(t.mem_len(), 2);
        // Memory runs out first: the backend may hold more.
        let (gone, _, more) = t.discard_front(5, 0);
        assert_eq!((gone.len(), more), (2, true));
    }

    #[test]
    fn ephemeral_overflow_is_dropped_and_a_refused_reserve_sends_all_to_disk() {
        let mut e: TopicState<u8> = TopicState::new(2, false, 0);
        let closed = Gate {
            has_channels: false,
            ..OPEN
        };
        assert!(matches!(
            e.publish(msgs(0..5), closed, &mut |_| false),
            Publish::Memory
        ));
        assert_eq!(e.mem_len(), 2);
        let mut d: TopicState<u8> = TopicState::new(2, true, 0);
        assert!(
            matches!(d.publish(msgs(0..1), closed, &mut |_| false), Publish::Write { mem, disk } if mem.is_empty() && disk.len() == 1)
        );
    }
}
