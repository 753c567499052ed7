//! Which backend records a channel has read and not yet settled, and the read watermark that
//! follows from them (see [`crate::backend::BackendQueue::set_read_watermark`]).
//!
//! A record taken from the backend is *unsettled* until its message is finished or stored
//! again durably (a requeue written back to the backend and synced, a deferral journaled and
//! synced). The watermark is the oldest unsettled record: the diskqueue never persists a read
//! position past it, so after a crash reading resumes there.

use std::collections::VecDeque;

use crate::backend::RecordPos;

/// The unsettled records as a window.
///
/// The backend hands records out in position order, so the set is a deque of
/// `(position, live copies)` in ascending order whose front is the oldest unsettled record.
/// Settling finds its entry by binary search and zeroes it; zeroed entries at the front are
/// dropped. Memory is the span between the oldest unsettled record and the newest read
/// (normally about the in-flight window), and a read or settle allocates nothing in the steady
/// state — a `BTreeMap` here cost a node allocation and free per message.
#[derive(Default)]
pub(super) struct ReadTracker {
    /// Ascending positions with the number of live copies referring to each (normally 1; 0
    /// for a settled record not yet at the front).
    window: VecDeque<(RecordPos, u32)>,
    /// The value last handed to the backend.
    published: Option<RecordPos>,
}

impl ReadTracker {
    /// A record was read (one more live copy of it).
    pub(super) fn read(&mut self, pos: RecordPos) {
        match self.window.back_mut() {
            Some((p, n)) if *p == pos => *n += 1,
            Some((p, _)) if *p > pos => {
                // Out of order (not seen from a diskqueue): keep the window sorted.
                match self.window.binary_search_by(|(q, _)| q.cmp(&pos)) {
                    Ok(i) => self.window[i].1 += 1,
                    Err(i) => self.window.insert(i, (pos, 1)),
                }
            }
            _ => self.window.push_back((pos, 1)),
        }
    }

    /// One copy of the record is settled.
    pub(super) fn settle(&mut self, pos: RecordPos) {
        // Settles come mostly in read order: try the front first.
        let i = match self.window.front() {
            Some((p, _)) if *p == pos => 0,
            _ => match self.window.binary_search_by(|(q, _)| q.cmp(&pos)) {
                Ok(i) => i,
                Err(_) => return,
            },
        };
        let n = &mut self.window[i].1;
        *n = n.saturating_sub(1);
        while self.window.front().is_some_and(|(_, n)| *n == 0) {
            self.window.pop_front();
        }
    }

    /// A backend read returned records starting at `first`: the diskqueue set its watermark
    /// there if none was set (`read_batch_pos`'s contract), so the published value follows.
    pub(super) fn backend_set(&mut self, first: RecordPos) {
        if self.published.is_none() {
            self.published = Some(first);
        }
    }

    /// The watermark the backend should have.
    fn watermark(&self) -> Option<RecordPos> {
        self.window.front().map(|(p, _)| *p)
    }

    /// The watermark to hand to the backend now, if it differs from the last one handed;
    /// recorded as handed.
    pub(super) fn watermark_change(&mut self) -> Option<Option<RecordPos>> {
        let wm = self.watermark();
        if wm == self.published {
            return None;
        }
        self.published = wm;
        Some(wm)
    }

    /// Forgets every record (the channel was emptied or flushed whole).
    pub(super) fn clear(&mut self) {
        self.window.clear();
    }

    /// Number of unsettled records.
    #[cfg(test)]
    pub(super) fn unsettled(&self) -> usize {
        self.window.iter().filter(|(_, n)| *n > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The window behaves as the map of unsettled records it replaced: same watermark
        /// after any sequence of in-order reads and settles in any order.
        #[test]
        fn read_tracker_matches_a_map(ops in proptest::collection::vec((proptest::bool::ANY, 0usize..64), 1..400)) {
            let mut t = ReadTracker::default();
            let mut model: std::collections::BTreeMap<RecordPos, u32> = Default::default();
            let mut next = 0i64;
            for (is_read, k) in ops {
                if is_read {
                    let p = RecordPos { file_num: next / 10, offset: next % 10 };
                    next += 1;
                    t.read(p);
                    *model.entry(p).or_insert(0) += 1;
                } else if !model.is_empty() {
                    let p = *model.keys().nth(k % model.len()).unwrap();
                    t.settle(p);
                    let n = model.get_mut(&p).unwrap();
                    *n -= 1;
                    if *n == 0 {
                        model.remove(&p);
                    }
                }
                let expect = model.keys().next().copied();
                proptest::prop_assert_eq!(t.watermark(), expect);
                proptest::prop_assert!(t.window.len() <= (next as usize).max(1));
            }
        }
    }
}
