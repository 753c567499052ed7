//! The durable-read watermark (`BackendQueue::set_read_watermark`), which holds the persisted
//! read position back to the oldest record the caller has not settled, and the finished data
//! files behind it. go-diskqueue has none: its read position is persisted as soon as a record
//! is read (diskqueue.go, `readOne`).

use std::collections::VecDeque;

use super::State;
use crate::backend::RecordPos;

/// Most record positions remembered for depth accounting behind the watermark; beyond this
/// the persisted depth may undercount (never the read position).
const MAX_TRACKED: usize = 1 << 20;

/// The durable-read watermark of `BackendQueue::set_read_watermark`.
///
/// Records taken by `read_batch_pos` are unsettled until the caller says otherwise: if no
/// watermark is set, the first of them becomes it. While the watermark is set, the persisted
/// read position is the watermark (and the persisted depth counts the records read since), and
/// data files the reader finished at or after the watermark's file are held instead of deleted,
/// until the watermark moves past them. With `None` everything is as go-diskqueue.
#[derive(Default)]
pub(super) struct Watermark {
    pos: Option<RecordPos>,
    /// Start positions of records taken by `read_batch_pos`, ascending, none before `pos`.
    read: VecDeque<RecordPos>,
    /// Finished data files kept for the watermark, ascending.
    held: Vec<i64>,
}

impl Watermark {
    pub(super) fn set(&mut self, pos: Option<RecordPos>) {
        self.pos = pos;
        match pos {
            None => self.read.clear(),
            Some(w) => {
                while self.read.front().is_some_and(|p| *p < w) {
                    self.read.pop_front();
                }
            }
        }
    }

    /// Records taken by `read_batch_pos` (consumed now, unsettled until the caller says).
    pub(super) fn taken(&mut self, positions: &[RecordPos]) {
        let Some(first) = positions.first() else {
            return;
        };
        if self.pos.is_none() {
            self.pos = Some(*first);
        }
        self.read.extend(positions.iter().copied());
        while self.read.len() > MAX_TRACKED {
            self.read.pop_front();
        }
    }

    /// Whether a finished data file must be held rather than deleted.
    /// Keeps finished data file `file_num` for the watermark (instead of deleting it).
    pub(super) fn hold(&mut self, file_num: i64) {
        self.held.push(file_num);
    }

    pub(super) fn holds(&self, file_num: i64) -> bool {
        self.pos.is_some_and(|w| w.file_num <= file_num)
    }

    /// Held files the watermark has moved past: to be deleted now.
    pub(super) fn released(&mut self) -> Vec<i64> {
        let keep_from = self.pos.map_or(i64::MAX, |w| w.file_num);
        let split = self.held.partition_point(|n| *n < keep_from);
        self.held.drain(..split).collect()
    }

    /// The read position to persist and how many consumed records lie between it and the
    /// real read position (added to the persisted depth).
    pub(super) fn persisted_read(&self, st: &State) -> (i64, i64, i64) {
        match self.pos {
            Some(w) if (w.file_num, w.offset) < (st.read_file_num, st.read_pos) => {
                let unsettled = self.read.len() - self.read.partition_point(|p| *p < w);
                (w.file_num, w.offset, unsettled as i64)
            }
            _ => (st.read_file_num, st.read_pos, 0),
        }
    }

    /// The oldest data file still needed (held files and the watermark's come first).
    pub(super) fn oldest_kept_file(&self, read_file_num: i64) -> i64 {
        let mut oldest = read_file_num;
        if let Some(&n) = self.held.first() {
            oldest = oldest.min(n);
        }
        if let Some(w) = self.pos {
            oldest = oldest.min(w.file_num);
        }
        oldest
    }

    pub(super) fn reset(&mut self) {
        *self = Watermark::default();
    }
}
