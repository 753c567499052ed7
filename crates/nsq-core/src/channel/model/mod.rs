//! The model check: [`ChannelState`] driven through random interleavings of every event it
//! takes — puts and re-stores whose backend write completes later, journal writes that
//! complete later, takes (with their backend read; sampled, or dropping what a queue setting
//! refuses: a message at its `max_attempts`, or older than the `ttl`), FIN, REQ with and
//! without delay, TOUCH, timeout
//! and deferred ticks, syncs, write failures, memory refusals, a deferred message dropped as
//! taken over by a peer (a returning origin's manifest) — and crashes at any point
//! (a process kill, or a power loss that also drops what was not synced), each followed by
//! recovery from only what the effects made durable.
//!
//! The disk is simulated with the diskqueue's contract ([`crate::backend::BackendQueue`]): a
//! record list, a read cursor, the watermark (set by a read when none is), metadata persisted
//! at a sync as the watermark or else the read cursor; the journal is a list of ADD/DEL
//! entries replayed in order. Invariants, checked as the events run and after a final drain:
//! - nothing is delivered that was not published, and every acknowledged message is FINed at
//!   least once in the end — or dropped by a sample rate or a setting, each a counted
//!   decision — whatever crashes happened (a power loss may drop a publish whose
//!   record was not synced yet: only `--durable` acknowledges after the sync);
//! - the persisted read position never moves back, and once everything is settled and synced
//!   it equals the write position (no data file older than the oldest unsettled record is
//!   kept) and the journal holds nothing live;
//! - a FINed message is FINed again only because of a crash, and over a run such duplicate
//!   FINs never exceed the sum, over the crashes, of the records read past the persisted
//!   read position plus the journal's live entries at that crash (docs/durability.md, "How
//!   many duplicates a crash costs"); without a crash, never;
//! - a take never exceeds its window and a consumer never holds more than its RDY in flight;
//!   a deferred message never comes back before its due time; within a run a message's
//!   attempts never fall; messages leave the queue in publish order, batch by batch (the
//!   channel is FIFO between batches; inside a batch that straddles the memory limit a
//!   consumer may get the disk part first).
//!
//! `cargo test -p nsq-core channel::model` runs a few thousand cases; `bench/model-check.sh`
//! runs millions with a printed seed (`PROPTEST_CASES`, `PROPTEST_RNG_SEED`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nsq_protocol::MessageId;
use proptest::prelude::*;

mod cases;
mod disk;
mod ops;
mod take;

use super::state::{ChannelState, Config, Now, Put, Queued, Requeued, Restore};
use super::DEAD_LETTER_CLIENT;
use crate::backend::{RecordPos, WriteTicket};
use crate::deferred_store::StoreTicket;
use crate::message::Message;
use disk::{index_of, Disk};
use ops::{op, Op};
use take::Rule;

const TIMEOUT: Duration = Duration::from_millis(1000);
const MAX_TIMEOUT: Duration = Duration::from_millis(3000);
const CLIENTS: usize = 3;
fn id_of(n: u32) -> MessageId {
    let mut id = [b'0'; 16];
    id[8..].copy_from_slice(format!("{n:08x}").as_bytes());
    MessageId(id)
}

/// I/O the harness started and will finish later (the driver's work between two events).
enum Io {
    Put {
        put: usize,
        mem: Vec<Queued>,
        disk: Vec<Queued>,
    },
    Restore(Restore),
    JournalAdd {
        due_wall: i64,
        msg: Message,
        pos: Option<RecordPos>,
    },
}

/// The harness: one channel state, its simulated disk, and the reference model.
struct World {
    cfg: Config,
    disk: Disk,
    state: ChannelState,
    io: Vec<Io>,
    base: Instant,
    base_wall: i64,
    clock_ms: u64,
    admit: bool,
    next_id: u32,
    /// Every published message by ID: its body and publish sequence number.
    published: HashMap<MessageId, (Bytes, u32)>,
    /// Acknowledged and not lost legitimately: must be FINed in the end.
    must: HashSet<MessageId>,
    /// Where each acknowledged message was first stored: record index, or journal index.
    stored_at: HashMap<MessageId, Stored>,
    fined: HashSet<MessageId>,
    /// Every put of non-deferred messages, for the FIFO check.
    puts: Vec<PutRecord>,
    /// Events run so far.
    step: usize,
    delivered: HashSet<MessageId>,
    /// Messages that left the queue at least once (FIFO check).
    dequeued: HashSet<MessageId>,
    /// This run (since the last crash): earliest delivery time of deferred messages, last
    /// attempts seen, messages published in it.
    not_before: HashMap<MessageId, u64>,
    attempts: HashMap<MessageId, u16>,
    fresh: HashSet<MessageId>,
    /// Per client: RDY given with its last take.
    rdy: [usize; CLIENTS],
    /// Deliveries of messages FINed earlier (duplicates), and their bound: the sum over the
    /// crashes so far of what each left to be read again (records read past the persisted
    /// read position, live journal entries). A copy a crash left behind (a re-stored message
    /// whose old record came back too) is charged to that crash.
    /// FINs of messages FINed before (duplicates, as the crash harness counts them).
    dups: usize,
    dup_bound: usize,
}

struct PutRecord {
    ids: Vec<MessageId>,
    /// The event that decided it, and the one that completed its write (acknowledged).
    decided: usize,
    completed: Option<usize>,
}

#[derive(Clone, Copy)]
enum Stored {
    /// Record index.
    Record(usize),
    /// Journal ticket of its ADD.
    Journal(u64),
}

impl World {
    fn new(mem_queue_size: usize) -> Self {
        let cfg = Config {
            mem_queue_size,
            durable: true,
            journaled: mem_queue_size == 0,
            max_msg_timeout: MAX_TIMEOUT,
        };
        let base = Instant::now();
        let base_wall = 1_700_000_000_000_000_000;
        let state = ChannelState::recover(
            cfg.clone(),
            0,
            Vec::new(),
            Now {
                mono: base,
                wall: base_wall,
            },
        );
        World {
            cfg,
            disk: Disk::default(),
            state,
            io: Vec::new(),
            base,
            base_wall,
            clock_ms: 0,
            admit: true,
            next_id: 0,
            published: HashMap::new(),
            must: HashSet::new(),
            stored_at: HashMap::new(),
            fined: HashSet::new(),
            puts: Vec::new(),
            step: 0,
            delivered: HashSet::new(),
            dequeued: HashSet::new(),
            not_before: HashMap::new(),
            attempts: HashMap::new(),
            fresh: HashSet::new(),
            rdy: [0; CLIENTS],
            dups: 0,
            dup_bound: 0,
        }
    }

    fn now(&self) -> Now {
        let d = Duration::from_millis(self.clock_ms);
        Now {
            mono: self.base + d,
            wall: self.base_wall + d.as_nanos() as i64,
        }
    }

    /// The state's effect that must be carried out before anything else happens.
    fn watermark(&mut self) {
        if let Some(wm) = self.state.watermark_change() {
            self.disk.watermark = wm.map(index_of);
        }
    }

    fn run(&mut self, op: Op) -> Result<(), TestCaseError> {
        self.step += 1;
        match op {
            Op::Publish { n, defer_ms } => self.publish(n, defer_ms)?,
            Op::Take { client, rdy } => self.take(client, rdy, Rule::All)?,
            Op::Sample { client, rdy } => self.take(client, rdy, Rule::Sample)?,
            Op::Limited {
                client,
                rdy,
                max_attempts,
                dead_letter,
            } => {
                let rule = if dead_letter {
                    Rule::DeadLetter(max_attempts)
                } else {
                    Rule::MaxAttempts(max_attempts)
                };
                self.take(client, rdy, rule)?
            }
            Op::DropOldest { k, bytes } => self.drop_oldest(k, bytes)?,
            Op::MemQueueSize(n) => {
                if !self.cfg.journaled {
                    self.state.set_mem_queue_size(n);
                }
            }
            Op::DeadLettered(k) => {
                let held = self.state.in_flight_of(DEAD_LETTER_CLIENT);
                if let Some(id) = held.get(k % held.len().max(1)).copied() {
                    prop_assert!(self.state.finish(DEAD_LETTER_CLIENT, &id).is_ok());
                    // Stored in the dead-letter topic: settled as a FIN settles it.
                    self.fin(id)?;
                }
            }
            Op::Expiring {
                client,
                rdy,
                ttl_ms,
            } => self.take(client, rdy, Rule::Ttl(ttl_ms))?,
            Op::Advance(i) => {
                if !self.io.is_empty() {
                    let io = self.io.remove(i % self.io.len());
                    self.advance(io)?;
                }
            }
            Op::Fin { client, k } => {
                let ids = self.state.in_flight_of(client as u64);
                let id = ids.get(k).copied().unwrap_or(id_of(u32::MAX));
                if self.state.finish(client as u64, &id).is_ok() {
                    prop_assert!(ids.contains(&id));
                    self.fin(id)?;
                } else {
                    prop_assert!(
                        !ids.contains(&id),
                        "FIN of an owned in-flight message failed"
                    );
                }
            }
            Op::Req {
                client,
                k,
                delay_ms,
            } => {
                let ids = self.state.in_flight_of(client as u64);
                let Some(id) = ids.get(k).copied() else {
                    return Ok(());
                };
                let now = self.now();
                let r =
                    self.state
                        .requeue(client as u64, &id, Duration::from_millis(delay_ms), now);
                let r = r.map_err(|e| TestCaseError::fail(format!("REQ failed: {e}")))?;
                match r {
                    Requeued::Restore(r) => self.restore(r),
                    Requeued::Deferred { journal, pos } => {
                        self.not_before.insert(id, self.clock_ms + delay_ms);
                        if let Some((due_wall, msg)) = journal {
                            self.io.push(Io::JournalAdd { due_wall, msg, pos });
                        }
                    }
                }
            }
            Op::Touch { client, k } => {
                let ids = self.state.in_flight_of(client as u64);
                if let Some(id) = ids.get(k) {
                    let now = self.now().mono;
                    prop_assert!(self.state.touch(client as u64, id, now, TIMEOUT).is_ok());
                }
            }
            Op::Tick(ms) => self.tick(ms),
            Op::DropDeferred(k) => {
                let mut ids: Vec<MessageId> =
                    self.state.deferred_messages().map(|(_, m)| m.id).collect();
                ids.sort();
                if let Some(id) = ids.get(k % ids.len().max(1)).copied() {
                    let del = self.state.drop_deferred(&id);
                    prop_assert!(del.is_some(), "a deferred message could not be dropped");
                    self.disk.journal_del(del.unwrap_or_default());
                    prop_assert!(!self.state.is_deferred(&id));
                    // Taken over by a peer: no longer owed by this channel.
                    self.must.remove(&id);
                    self.not_before.remove(&id);
                } else {
                    prop_assert!(self.state.drop_deferred(&id_of(u32::MAX)).is_none());
                }
            }
            Op::DiskSync => self.disk.sync()?,
            Op::Settle => {
                let (b, j) = self.state.awaited();
                let b = b.map(|t| t.min(WriteTicket(self.disk.synced as u64)));
                let j = j.map(|t| t.min(StoreTicket(self.disk.journal_synced_ticket)));
                let del = self.state.synced(true, b, j);
                self.disk.journal_del(del);
            }
            Op::Compact => {
                // The driver rewrites the journal from the state's view of what it must hold.
                let now = self.now();
                let live = self
                    .state
                    .journal_live(now.mono)
                    .into_iter()
                    .map(|(due, m)| {
                        let wait = due.saturating_duration_since(now.mono).as_nanos() as i64;
                        (now.wall + wait, m)
                    })
                    .collect();
                if self.cfg.journaled {
                    self.disk.journal_compact(live);
                }
            }
            Op::FailWrites(f) => self.disk.fail_writes = f,
            Op::Admit(a) => self.admit = a,
            Op::Crash { power } => self.crash(power)?,
        }
        self.watermark();
        Ok(())
    }

    fn publish(&mut self, n: usize, defer_ms: u32) -> Result<(), TestCaseError> {
        let msgs: Vec<Message> = (0..n)
            .map(|_| {
                let seq = self.next_id;
                self.next_id += 1;
                let body = Bytes::from(format!("m{seq}"));
                let mut m = Message::new(id_of(seq), body.clone());
                m.timestamp = self.now().wall;
                self.published.insert(m.id, (body, seq));
                self.fresh.insert(m.id);
                m
            })
            .collect();
        if defer_ms > 0 {
            // DPUB: journaled first, then deferred (the driver's receive_deferred).
            let now = self.now();
            let due = Duration::from_millis(u64::from(defer_ms));
            for m in msgs {
                if self.cfg.journaled {
                    self.disk.journal_add(now.wall + due.as_nanos() as i64, &m);
                    self.stored_at
                        .insert(m.id, Stored::Journal(self.disk.journal_ticket));
                }
                // (The memory-queue mode runs without crashes: memory copies count too.)
                self.must.insert(m.id);
                self.not_before
                    .insert(m.id, self.clock_ms + u64::from(defer_ms));
                prop_assert!(self.state.defer_new(now.mono + due, m));
            }
            return Ok(());
        }
        let bytes = msgs.iter().map(Message::record_len).sum();
        let admit = self.admit;
        let ids: Vec<MessageId> = msgs.iter().map(|m| m.id).collect();
        match self
            .state
            .put(msgs.into_iter().map(Queued::new), bytes, &mut |_| admit)
        {
            Put::Memory => {
                self.must.extend(ids.iter().copied());
                self.puts.push(PutRecord {
                    ids,
                    decided: self.step,
                    completed: Some(self.step),
                });
            }
            Put::Exiting => prop_assert!(false, "not closing"),
            Put::Write { mem, disk } => {
                self.io.push(Io::Put {
                    put: self.puts.len(),
                    mem,
                    disk,
                });
                self.puts.push(PutRecord {
                    ids,
                    decided: self.step,
                    completed: None,
                });
            }
        }
        Ok(())
    }

    /// A FIN succeeded: a second FIN of a message is a duplicate, which only a crash may
    /// cause, within the crashes' bound.
    fn fin(&mut self, id: MessageId) -> Result<(), TestCaseError> {
        if !self.fined.insert(id) {
            self.dups += 1;
            prop_assert!(
                self.dups <= self.dup_bound,
                "{} duplicate FINs, bound {} (from the crashes so far)",
                self.dups,
                self.dup_bound
            );
        }
        Ok(())
    }

    fn restore(&mut self, r: Restore) {
        if !r.write.is_empty() {
            self.io.push(Io::Restore(r));
        }
    }

    fn advance(&mut self, io: Io) -> Result<(), TestCaseError> {
        match io {
            Io::Put { put, mem, disk } => {
                let first = self.disk.records.len();
                let t = self.disk.write(&disk);
                if t.is_some() {
                    // Acknowledged: its records must survive.
                    for (i, q) in disk.iter().enumerate() {
                        self.stored_at.insert(q.msg.id, Stored::Record(first + i));
                        self.must.insert(q.msg.id);
                    }
                    self.must.extend(mem.iter().map(|q| q.msg.id));
                    self.puts[put].completed = Some(self.step);
                }
                let empty = self.disk.depth() == 0;
                self.state.put_done(mem, t.is_some(), empty);
            }
            Io::Restore(r) => {
                let t = self.disk.write(&r.write);
                let now = self.now().mono;
                let del = self.state.restore_done(r.write, t, r.journal_del, now);
                self.disk.journal_del(del);
            }
            Io::JournalAdd { due_wall, msg, pos } => {
                let t = self.disk.journal_add(due_wall, &msg);
                let del = self.state.journal_added(msg.id, Some(t), pos);
                self.disk.journal_del(del);
            }
        }
        Ok(())
    }

    fn tick(&mut self, ms: u64) {
        self.clock_ms += ms;
        let now = self.now().mono;
        if let Some((_, r)) = self.state.expire(now) {
            self.restore(r);
        }
        self.watermark();
        if let Some(r) = self.state.release_due(now) {
            self.restore(r);
        }
    }

    fn crash(&mut self, power: bool) -> Result<(), TestCaseError> {
        self.io.clear();
        self.disk.crash(power);
        // Re-read after the restart: what any run read past the persisted read position.
        let bound_records = self
            .disk
            .read_high
            .min(self.disk.records.len())
            .saturating_sub(self.disk.persisted_read);
        if power {
            // Acknowledged before its record or journal entry was synced: `--durable` would
            // not have acknowledged it; the mode without it may lose it to a power loss.
            let (synced, jsynced) = (self.disk.records.len(), self.disk.journal_synced_ticket);
            let lost: Vec<MessageId> = self
                .must
                .iter()
                .filter(|id| match self.stored_at[*id] {
                    Stored::Record(i) => i >= synced,
                    Stored::Journal(t) => t > jsynced,
                })
                .copied()
                .collect();
            for id in lost {
                self.must.remove(&id);
            }
        }
        let replayed: Vec<(i64, Message)> = self.disk.journal_live().into_values().collect();
        self.dup_bound += bound_records + replayed.len();
        self.not_before.clear();
        self.attempts.clear();
        self.fresh.clear();
        self.rdy = [0; CLIENTS];
        let now = self.now();
        self.state =
            ChannelState::recover(self.cfg.clone(), self.disk.depth() as i64, replayed, now);
        Ok(())
    }

    /// Everything finishes: I/O completes, time passes, every consumer FINs all it holds.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        self.disk.fail_writes = false;
        self.admit = true;
        for round in 0.. {
            prop_assert!(round < 10_000, "the channel never drained");
            while let Some(io) = self.io.pop() {
                self.advance(io)?;
                self.watermark();
            }
            // Held messages' dead-letter copies are stored.
            for id in self.state.in_flight_of(DEAD_LETTER_CLIENT) {
                prop_assert!(self.state.finish(DEAD_LETTER_CLIENT, &id).is_ok());
                self.fin(id)?;
            }
            for c in 0..CLIENTS {
                self.take(c, 50, Rule::All)?;
                self.watermark();
                for id in self.state.in_flight_of(c as u64) {
                    prop_assert!(self.state.finish(c as u64, &id).is_ok());
                    self.fin(id)?;
                }
                self.watermark();
            }
            self.disk.sync()?;
            self.run(Op::Settle)?;
            self.disk.sync()?;
            let idle = self.io.is_empty()
                && self.state.mem_len() == 0
                && self.state.in_flight_len() == 0
                && self.disk.depth() == 0;
            if idle && self.state.deferred_len() == 0 && self.state.awaited() == (None, None) {
                break;
            }
            if idle {
                self.tick(MAX_TIMEOUT.as_millis() as u64);
            }
        }
        Ok(())
    }

    fn check_end(&self) -> Result<(), TestCaseError> {
        let missing: Vec<_> = self.must.difference(&self.fined).collect();
        prop_assert!(
            missing.is_empty(),
            "{} acknowledged messages never FINed",
            missing.len()
        );
        prop_assert_eq!(self.state.unsettled(), 0);
        prop_assert_eq!(
            self.disk.persisted_read,
            self.disk.records.len(),
            "the persisted read position did not reach the write position"
        );
        prop_assert!(self.disk.journal_live().is_empty(), "journal entries left");
        Ok(())
    }
}

fn check(mem_queue_size: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut w = World::new(mem_queue_size);
    for op in ops {
        w.run(op)?;
    }
    w.drain()?;
    w.check_end()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(1500),
        max_shrink_iters: 20_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// `--mem-queue-size=0` (and `--durable`): everything on disk, deferrals journaled, crashes
    /// of both kinds.
    #[test]
    fn model_check_disk_with_crashes(ops in proptest::collection::vec(op(true), 1..120)) {
        check(0, ops)?;
    }

    /// A memory queue of 3 overflowing to disk, no crashes (memory is lost by one, as in the
    /// reference): delivery, FIFO, RDY, deferral, settlement.
    #[test]
    fn model_check_memory_and_disk(ops in proptest::collection::vec(op(false), 1..120)) {
        check(3, ops)?;
    }
}
