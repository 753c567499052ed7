//! The model check's takes: a consumer's take with its backend read, and what each take's
//! rule keeps, drops or holds (sampling, and the queue settings' max attempts, dead-letter
//! topic and TTL).

use nsq_protocol::MessageId;
use proptest::prelude::*;

use super::super::state::Verdict;
use super::{World, TIMEOUT};
use crate::message::Message;

impl World {
    pub(super) fn take(
        &mut self,
        client: usize,
        rdy: usize,
        rule: Rule,
    ) -> Result<(), TestCaseError> {
        let held = self.state.in_flight_of(client as u64).len();
        // RDY may shrink below what the consumer holds.
        self.rdy[client] = rdy.max(held);
        if held >= rdy {
            return Ok(());
        }
        let max = rdy - held;
        let now = self.now().mono;
        let mut out = Vec::new();
        // Every message the take looks at, in order, and whether sampling kept it.
        let seen = std::cell::RefCell::new(Vec::new());
        let mut flip = false;
        let wall = self.now().wall;
        let mut keep = |m: &Message| {
            let verdict = match rule {
                Rule::All => Verdict::Deliver,
                Rule::Sample => {
                    flip = !flip;
                    if flip {
                        Verdict::Deliver
                    } else {
                        Verdict::Drop
                    }
                }
                Rule::MaxAttempts(max) if m.attempts >= max => Verdict::Drop,
                Rule::DeadLetter(max) if m.attempts >= max => Verdict::Hold,
                Rule::MaxAttempts(_) | Rule::DeadLetter(_) => Verdict::Deliver,
                Rule::Ttl(ms) if wall.saturating_sub(m.timestamp) > (ms as i64) * 1_000_000 => {
                    Verdict::Drop
                }
                Rule::Ttl(_) => Verdict::Deliver,
            };
            seen.borrow_mut().push((m.id, verdict));
            verdict
        };
        let t = self
            .state
            .take_memory(client as u64, max, now, TIMEOUT, &mut keep, &mut |m| {
                out.push(m.clone())
            });
        prop_assert_eq!(t.n, out.len());
        prop_assert!(t.n <= max);
        let taken: Vec<MessageId> = seen.borrow().iter().map(|(id, _)| *id).collect();
        for id in taken {
            self.dequeued(id)?;
        }
        self.delivered_all(client, out)?;
        if let Some(asked) = t.read {
            self.read(client, asked, &mut keep)?;
        }
        // Sampled out, or dropped by a setting (max attempts, TTL): consumed and dropped, a
        // decision of the consumer or the setting (no longer owed).
        // Held ones stay owed until their dead-letter copy is stored (`DeadLettered`).
        for (id, verdict) in seen.take() {
            if verdict == Verdict::Drop {
                self.must.remove(&id);
            }
        }
        Ok(())
    }

    /// The backend read of a take, reported at once (as the driver does, under its lock).
    pub(super) fn read(
        &mut self,
        client: usize,
        asked: usize,
        keep: &mut dyn FnMut(&Message) -> Verdict,
    ) -> Result<(), TestCaseError> {
        let raw = self.disk.read(asked);
        for (payload, _) in &raw {
            let m = Message::decode(payload.clone())
                .map_err(|e| TestCaseError::fail(format!("bad record: {e}")))?;
            self.dequeued(m.id)?;
        }
        let now = self.now().mono;
        let empty = self.disk.depth() == 0;
        let mut out = Vec::new();
        let got = raw.len();
        let (n, bad) = self.state.take_backend(
            raw,
            asked,
            empty,
            client as u64,
            now,
            TIMEOUT,
            keep,
            &mut |m| out.push(m.clone()),
        );
        prop_assert_eq!(bad, 0);
        prop_assert!(n <= got);
        prop_assert!(n <= asked);
        self.delivered_all(client, out)
    }

    pub(super) fn delivered_all(
        &mut self,
        client: usize,
        out: Vec<Message>,
    ) -> Result<(), TestCaseError> {
        for m in out {
            self.delivered(m)?;
        }
        prop_assert!(
            self.state.in_flight_of(client as u64).len() <= self.rdy[client],
            "more in flight than RDY"
        );
        Ok(())
    }

    pub(super) fn delivered(&mut self, m: Message) -> Result<(), TestCaseError> {
        let Some((body, _)) = self.published.get(&m.id) else {
            return Err(TestCaseError::fail("delivered a message never published"));
        };
        prop_assert_eq!(&m.body, body);
        // Messages published since the last crash have one copy (a crash can leave two: the
        // record read again and its re-stored copy); those are checked for time and attempts.
        let due = self.not_before.remove(&m.id);
        if self.fresh.contains(&m.id) {
            if let Some(due) = due {
                prop_assert!(
                    self.clock_ms >= due,
                    "deferred message delivered before its due time"
                );
            }
            let last = self.attempts.insert(m.id, m.attempts).unwrap_or(0);
            prop_assert!(m.attempts > last, "attempts fell: {last} -> {}", m.attempts);
        }
        self.dequeued(m.id)?;
        self.delivered.insert(m.id);
        Ok(())
    }

    /// FIFO: when `id` first leaves the queue (taken from memory, or read from the backend —
    /// two consumers' deliveries after that have no order), every acknowledged message of a
    /// put that was complete before `id`'s put was decided has left it (puts whose writes
    /// overlap are concurrent publishers: no order between them).
    pub(super) fn dequeued(&mut self, id: MessageId) -> Result<(), TestCaseError> {
        if !self.dequeued.insert(id) {
            return Ok(());
        }
        let Some(mine) = self.puts.iter().find(|p| p.ids.contains(&id)) else {
            return Ok(()); // DPUB
        };
        for p in &self.puts {
            if p.completed.is_some_and(|c| c < mine.decided) {
                for other in &p.ids {
                    prop_assert!(
                        self.dequeued.contains(other) || !self.must.contains(other),
                        "FIFO broken: {id} left the queue before the older {other}"
                    );
                }
            }
        }
        Ok(())
    }

    /// `overflow=drop_oldest`: the oldest queued messages are dropped until at least `k` of
    /// them and `bytes` of them are, as the channel's `trim_to_bound` does (memory first,
    /// then reads of the disk that drop all they read: by count in one read, by bytes one
    /// record at a time): a counted decision of the setting, no longer owed.
    pub(super) fn drop_oldest(&mut self, k: usize, bytes: u64) -> Result<(), TestCaseError> {
        let mem_before = self.state.mem_len();
        let (ids, mut dropped_b, mut more) = self.state.discard_front(k, bytes);
        let enough = |n: usize, b: u64| n >= k && b >= bytes;
        // Memory gave what it had, or enough.
        prop_assert!(enough(ids.len(), dropped_b) || ids.len() == mem_before);
        prop_assert!(!more || ids.len() == mem_before);
        for id in &ids {
            self.dequeued(*id)?;
            self.must.remove(id);
        }
        let mut count = ids.len();
        while more && !enough(count, dropped_b) {
            let asked = if dropped_b < bytes { 1 } else { k - count };
            let dropped = std::cell::RefCell::new(Vec::new());
            let mut keep = |m: &Message| {
                dropped.borrow_mut().push((m.id, m.record_len()));
                Verdict::Drop
            };
            self.read(0, asked, &mut keep)?;
            let dropped = dropped.take();
            more = dropped.len() == asked;
            for (id, len) in dropped {
                self.must.remove(&id);
                dropped_b += len;
                count += 1;
            }
        }
        Ok(())
    }
}

/// Which messages a take keeps (the others are consumed and dropped).
#[derive(Debug, Clone, Copy)]
pub(super) enum Rule {
    All,
    /// Every other one (a consumer's sample rate).
    Sample,
    /// Those delivered fewer times than this (`max_attempts`).
    MaxAttempts(u16),
    /// The same, the others held for a dead-letter topic (`max_attempts` with
    /// `dead_letter_topic`).
    DeadLetter(u16),
    /// Those published at most this many milliseconds ago (`ttl`).
    Ttl(u64),
}
