//! The `BackendQueue` trait: where a topic or channel puts what does not fit in memory.
//!
//! Two engines: [`crate::diskqueue::DiskQueue`] (the go-diskqueue file format) for durable
//! topics/channels, and [`DropSink`] for `#ephemeral` ones, which discards overflow as the
//! reference does.

use bytes::Bytes;

/// Where a record starts in a backend; ordered as the queue is (file number, then byte offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RecordPos {
    /// Data file number (`<name>.diskqueue.%06d.dat`).
    pub file_num: i64,
    /// Byte offset of the record's length prefix in that file.
    pub offset: i64,
}

/// Returned by a successful put: identifies how far the writer got, for durability waits.
/// Tickets of one backend only grow; comparing tickets of different backends means nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct WriteTicket(pub u64);

/// A future that completes when the records behind a ticket are on stable storage.
pub type DurableWait =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), BackendError>> + Send>>;

/// Where a [`BackendQueue::scan_step`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanStep {
    /// Where the next step starts (the `from` to pass).
    pub next: RecordPos,
    /// The write position was reached: everything written was handed over.
    pub done: bool,
}

/// Errors a backend reports. `Exiting` renders as the reference's `exiting`.
#[derive(Debug)]
pub enum BackendError {
    /// The queue is closed or being deleted.
    Exiting,
    /// A record outside `[min_msg_size, max_msg_size]`.
    InvalidSize { size: usize, min: usize, max: usize },
    /// An I/O error from the filesystem.
    Io(std::io::Error),
    /// The publish would pass the `max_depth` of topic `0` or of one of its channels, whose
    /// overflow is `refuse` (crate::queue_settings): nothing of it was stored.
    Full(String),
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendError::Exiting => f.write_str("exiting"),
            BackendError::InvalidSize { size, min, max } => {
                write!(
                    f,
                    "invalid message write size ({size}) minMsgSize={min} maxMsgSize={max}"
                )
            }
            BackendError::Io(e) => write!(f, "{e}"),
            BackendError::Full(topic) => write!(f, "topic {topic} is full"),
        }
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BackendError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for BackendError {
    fn from(e: std::io::Error) -> Self {
        BackendError::Io(e)
    }
}

/// A FIFO of opaque records that outlives the memory queue.
///
/// Every method takes `&self`: implementations keep their own short lock, so a topic or
/// channel never holds its own lock while the backend does I/O.
pub trait BackendQueue: Send + Sync + 'static {
    /// Appends `count` records in order. `encode(i, out)` appends record `i`'s payload to
    /// `out` (the backend adds the length prefix). The whole batch costs one `write` syscall
    /// and never waits for the disk to sync. On error (e.g. ENOSPC) nothing of the batch
    /// counts as written, the queue stays consistent, and a later put succeeds once the cause
    /// is gone. The ticket is for [`BackendQueue::wait_durable`].
    fn put_batch(
        &self,
        count: usize,
        encode: &mut dyn FnMut(usize, &mut Vec<u8>),
    ) -> Result<WriteTicket, BackendError>;

    /// Appends one record.
    fn put(&self, payload: &[u8]) -> Result<WriteTicket, BackendError> {
        self.put_batch(1, &mut |_, out| out.extend_from_slice(payload))
    }

    /// Completes once every record written up to and including `ticket` is fdatasync'd.
    /// Group commit: one sync serves every waiter whose writes it covers, and a waiter makes
    /// a sync start promptly (it does not wait for `sync_every` or `sync_timeout`). `Err` if
    /// the sync covering the ticket failed (the records must not be acknowledged) or the
    /// queue was deleted first.
    fn wait_durable(&self, ticket: WriteTicket) -> DurableWait;

    /// Takes (consumes) up to `max` records from the front, appending them to `out`; returns
    /// how many were taken. Records taken are gone from the queue. Corrupt data is skipped
    /// as the diskqueue spec says.
    fn read_batch(&self, max: usize, out: &mut Vec<Bytes>) -> usize;

    /// Like [`BackendQueue::read_batch`], also giving each record's start position (for
    /// [`BackendQueue::set_read_watermark`]). Records taken this way are unsettled until the
    /// caller says otherwise: with no watermark set, the first of them becomes the watermark,
    /// so a caller of this method must call `set_read_watermark` after it (`None` once
    /// everything is settled), or finished data files are kept.
    fn read_batch_pos(&self, max: usize, out: &mut Vec<(Bytes, RecordPos)>) -> usize;

    /// The durable-read watermark: `Some(pos)` = the oldest record the caller has read but not
    /// yet settled (FINed, or stored durably elsewhere). The read position persisted in the
    /// metadata (and the depth persisted with it) is never past it, and data files from the
    /// watermark's file on are kept, so after a crash reading resumes at the watermark.
    /// `None` = everything read is settled (go-diskqueue's behaviour). Cheap: no I/O.
    fn set_read_watermark(&self, pos: Option<RecordPos>);

    /// Records written and not yet taken.
    fn depth(&self) -> i64;

    /// Bytes written and not yet taken: the records' length prefixes and payloads from the
    /// read position to the write position (a queue's `max_bytes`, crate::queue_settings).
    /// Cheap: no I/O. A backend that keeps nothing holds nothing (the default).
    fn unread_bytes(&self) -> u64 {
        0
    }

    /// Hands every record written and not yet taken to `f`, in order, without taking them:
    /// a returning origin's skip set (`Channel::apply_skips`, `Topic::pending_ids`). The
    /// caller keeps other readers out meanwhile. A backend that keeps nothing has nothing to show (the default).
    fn scan_unread(&self, _f: &mut dyn FnMut(Bytes)) -> Result<(), BackendError> {
        Ok(())
    }

    /// One step of a chunked, non-consuming read of what is written and not yet taken (a
    /// replication catch-up, crate::replicator): hands the records from `from` on — from the
    /// read position when `from` is `None` or before it — to `f`, in order, without taking
    /// them, until about `max_bytes` of payload (at least one record) or the write position.
    /// The caller keeps other readers out during the call (not between calls). A record the
    /// reader would skip as corrupt ends the scan of its file, as it ends the reader's; a
    /// data file that cannot be read is an error. A backend that keeps nothing has nothing
    /// to show (the default).
    fn scan_step(
        &self,
        _from: Option<RecordPos>,
        _max_bytes: usize,
        _f: &mut dyn FnMut(Bytes),
    ) -> Result<ScanStep, BackendError> {
        Ok(ScanStep {
            next: RecordPos::default(),
            done: true,
        })
    }

    /// Discards everything (files removed, file number bumped).
    fn empty(&self) -> Result<(), BackendError>;

    /// Flushes and persists metadata; afterwards puts fail with `Exiting`.
    fn close(&self) -> Result<(), BackendError>;

    /// Stops without persisting metadata (callers `empty` first).
    fn delete(&self) -> Result<(), BackendError>;
}

/// The backend of `#ephemeral` topics and channels: accepts and drops everything.
#[derive(Debug, Default)]
pub struct DropSink;

impl BackendQueue for DropSink {
    fn put_batch(
        &self,
        _count: usize,
        _encode: &mut dyn FnMut(usize, &mut Vec<u8>),
    ) -> Result<WriteTicket, BackendError> {
        Ok(WriteTicket::default())
    }
    fn wait_durable(&self, _ticket: WriteTicket) -> DurableWait {
        Box::pin(std::future::ready(Ok(())))
    }
    fn read_batch(&self, _max: usize, _out: &mut Vec<Bytes>) -> usize {
        0
    }
    fn read_batch_pos(&self, _max: usize, _out: &mut Vec<(Bytes, RecordPos)>) -> usize {
        0
    }
    fn set_read_watermark(&self, _pos: Option<RecordPos>) {}
    fn depth(&self) -> i64 {
        0
    }
    fn empty(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn close(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn delete(&self) -> Result<(), BackendError> {
        Ok(())
    }
}
