//! The `BackendQueue` trait: where a topic or channel puts what does not fit in memory.
//!
//! Two engines: [`crate::diskqueue::DiskQueue`] (the go-diskqueue file format) for durable
//! topics/channels, and [`DropSink`] for `#ephemeral` ones, which discards overflow as the
//! reference does.

use bytes::Bytes;

/// Errors a backend reports. `Exiting` renders as the reference's `exiting`.
#[derive(Debug)]
pub enum BackendError {
    /// The queue is closed or being deleted.
    Exiting,
    /// A record outside `[min_msg_size, max_msg_size]`.
    InvalidSize { size: usize, min: usize, max: usize },
    /// An I/O error from the filesystem.
    Io(std::io::Error),
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
    /// `out` (the backend adds the length prefix). The whole batch costs one `write` syscall.
    /// On error nothing of the batch is counted as written.
    fn put_batch(
        &self,
        count: usize,
        encode: &mut dyn FnMut(usize, &mut Vec<u8>),
    ) -> Result<(), BackendError>;

    /// Appends one record.
    fn put(&self, payload: &[u8]) -> Result<(), BackendError> {
        self.put_batch(1, &mut |_, out| out.extend_from_slice(payload))
    }

    /// Takes (consumes) up to `max` records from the front, appending them to `out`; returns
    /// how many were taken. Records taken are gone from the queue. Corrupt data is skipped
    /// as the diskqueue spec says.
    fn read_batch(&self, max: usize, out: &mut Vec<Bytes>) -> usize;

    /// Records written and not yet taken.
    fn depth(&self) -> i64;

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
    ) -> Result<(), BackendError> {
        Ok(())
    }
    fn read_batch(&self, _max: usize, _out: &mut Vec<Bytes>) -> usize {
        0
    }
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
