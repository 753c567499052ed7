//! The events' and effects' types of [`super::ChannelState`].

use std::time::{Duration, Instant};

use super::super::journal::JournalRef;
use crate::backend::{RecordPos, WriteTicket};
use crate::deferred_store::StoreTicket;
use crate::memqueue::Weigh;
use crate::message::Message;

/// A message waiting in the memory queue, with the backend record it was read from while that
/// record is unsettled (a requeued or timed-out message keeps its record until re-stored).
pub(in crate::channel) struct Queued {
    pub(in crate::channel) msg: Message,
    pub(in crate::channel) pos: Option<RecordPos>,
}

impl Queued {
    pub(in crate::channel) fn new(msg: Message) -> Self {
        Queued { msg, pos: None }
    }
}

impl Weigh for Queued {
    /// Only a message with no record on disk needs room at shutdown.
    fn weight(&self) -> u64 {
        if self.pos.is_none() {
            self.msg.record_len()
        } else {
            0
        }
    }

    /// Counted for `max_bytes` whether its record is on disk or not: a record read from the
    /// backend is no longer among the backend's unread bytes.
    fn queued_bytes(&self) -> u64 {
        self.msg.record_len()
    }
}

/// What does not change over a channel's life.
#[derive(Debug, Clone)]
pub(in crate::channel) struct Config {
    /// `--mem-queue-size`.
    pub(in crate::channel) mem_queue_size: usize,
    /// The backend keeps what it is given (a diskqueue); false for the drop sink of an
    /// `#ephemeral` channel, where overflow is discarded and the FIFO spill never engages.
    pub(in crate::channel) durable: bool,
    /// Deferred messages are journaled (`--mem-queue-size=0` or `--durable`): a record's
    /// settlement then waits until its new copy is synced.
    pub(in crate::channel) journaled: bool,
    /// `--max-msg-timeout`: TOUCH never extends past delivery + this.
    pub(in crate::channel) max_msg_timeout: Duration,
}

/// A write whose sync a settlement waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::channel) enum After {
    Backend(WriteTicket),
    Journal(StoreTicket),
}

/// Records to settle (and journal entries to delete) once a write is synced.
pub(in crate::channel) struct Awaiting {
    pub(in crate::channel) after: After,
    pub(in crate::channel) positions: Vec<RecordPos>,
    pub(in crate::channel) journal_del: Vec<JournalRef>,
}

/// The outcome of [`ChannelState::put`].
pub(in crate::channel) enum Put {
    /// Everything went to the memory queue.
    Memory,
    /// The channel is closing: nothing was taken.
    Exiting,
    /// Write `disk` to the backend, then report with [`ChannelState::put_done`], handing
    /// `mem` back (it enters memory only if the write succeeded).
    Write { mem: Vec<Queued>, disk: Vec<Queued> },
}

/// Messages that already belong to the channel going back to its queue (requeued, timed out,
/// due): write `write` to the backend (when not empty) and report with
/// [`ChannelState::restore_done`]. `journal_del`: the journal entries of released deferred
/// messages, for the state (it decides when their DELs are written).
pub(in crate::channel) struct Restore {
    pub(in crate::channel) write: Vec<Queued>,
    pub(in crate::channel) journal_del: Vec<JournalRef>,
}

/// The outcome of a REQ.
pub(in crate::channel) enum Requeued {
    /// Back to the queue.
    Restore(Restore),
    /// Into the deferred set; when journaled, add `(due_wall, msg)` to the journal and report
    /// with [`ChannelState::journal_added`], handing `pos` back.
    Deferred {
        journal: Option<(i64, Message)>,
        pos: Option<RecordPos>,
    },
}

/// The outcome of [`ChannelState::take_memory`].
pub(in crate::channel) struct Taken {
    /// Messages handed to `emit`.
    pub(in crate::channel) n: usize,
    /// Read up to this many records from the backend and report them with
    /// [`ChannelState::take_backend`], with no other event in between (see the module docs).
    pub(in crate::channel) read: Option<usize>,
}

/// `now` for deadlines and due times, `wall` (Unix nanoseconds) for the journal.
#[derive(Debug, Clone, Copy)]
pub(in crate::channel) struct Now {
    pub(in crate::channel) mono: Instant,
    pub(in crate::channel) wall: i64,
}

/// What a take does with one message it looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::channel) enum Verdict {
    /// Delivered to the consumer: attempts incremented, in flight.
    Deliver,
    /// Consumed and dropped: its record settled (sampled out, taken over, expired, at its max
    /// attempts without a dead-letter topic).
    Drop,
    /// Not delivered: in flight for [`super::super::DEAD_LETTER_CLIENT`] (attempts unchanged)
    /// until its copy in the dead-letter topic is stored and it is FINed — or its timeout
    /// brings it back to the queue.
    Hold,
}
