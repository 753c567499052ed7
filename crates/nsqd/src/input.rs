//! A connection's read side and its read buffer (the reader of `protocol_v2.rs` owns one):
//! reads into a buffer that exists only while bytes are there, sized by what the connection
//! sends, and parked reads (`park.rs`) on a plain TCP socket.

use std::io;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;

use crate::park::ParkPolicy;
use crate::transport::ReadSide;

/// A connection's first read buffer (allocated when bytes arrive).
const READ_BUF_MIN: usize = 4 * 1024;
/// Read buffers grow to this when a read leaves less than 4 KiB free.
const READ_BUF_MAX: usize = 64 * 1024;

/// The connection's read side and its buffer.
pub(crate) struct Input {
    pub(crate) rd: ReadSide,
    /// Allocated when bytes arrive and released whenever it is empty while waiting for more
    /// on a plain TCP socket (see [`Input::fill`]): an idle connection holds no read buffer.
    pub(crate) buf: BytesMut,
    /// The capacity to allocate next time: twice the most this buffer held (between
    /// [`READ_BUF_MIN`] and [`READ_BUF_MAX`]), so a connection sending large commands reads
    /// each in one or two calls and one sending small ones keeps a small buffer.
    next_size: usize,
    /// The most bytes the current buffer held.
    peak: usize,
}

impl Input {
    pub(crate) fn plain_tcp(&self) -> bool {
        matches!(self.rd, ReadSide::Tcp(_))
    }

    pub(crate) fn new(rd: ReadSide) -> Self {
        Input {
            rd,
            buf: BytesMut::new(),
            next_size: READ_BUF_MIN,
            peak: 0,
        }
    }

    /// Gives the empty buffer back (it is allocated again, at `next_size`, when bytes come).
    fn release(&mut self) {
        if self.buf.capacity() > 0 {
            self.next_size = (self.peak * 2).clamp(READ_BUF_MIN, READ_BUF_MAX);
            self.peak = 0;
            self.buf = BytesMut::new();
        }
    }

    /// Reads more bytes into the buffer: if `park`, after a parked period (crate::park; a
    /// period without bytes falls through to waiting as usual), else when they arrive.
    /// `Ok(0)` at end of stream.
    pub(crate) async fn fill(&mut self, park: bool) -> io::Result<usize> {
        let n = self.read(park).await?;
        self.peak = self.peak.max(self.buf.len());
        Ok(n)
    }

    async fn read(&mut self, park: bool) -> io::Result<usize> {
        // Plain TCP idle (nothing partial buffered): give the buffer back and wait for
        // readability without one.
        if self.plain_tcp() && self.buf.is_empty() {
            self.release();
        }
        let ReadSide::Tcp(r) = &mut self.rd else {
            // Upgraded streams (TLS, snappy, deflate) may hold decoded bytes internally, so
            // they always read into a buffer.
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(READ_BUF_MAX);
            }
            return self.rd.read_buf(&mut self.buf).await;
        };
        if park {
            r.park();
            tokio::time::sleep(ParkPolicy::POLL).await;
            if let Some(n) = r.read_parked(&mut self.buf, ParkPolicy::MAX_READ)? {
                return Ok(n);
            }
        }
        loop {
            r.readable().await?;
            let free = self.buf.capacity() - self.buf.len();
            if self.buf.is_empty() {
                self.buf.reserve(self.next_size);
            } else if free < 4096 {
                self.buf.reserve(READ_BUF_MAX);
            }
            // Into the spare capacity as it is (no zeroing, unlike `AsyncRead`'s `ReadBuf`).
            match r.try_read_buf(&mut self.buf) {
                Ok(n) => return Ok(n),
                // Stale readiness (e.g. left by the magic's read): give an empty buffer
                // back before waiting, or every idle connection would hold one.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.buf.is_empty() {
                        self.buf = BytesMut::new();
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}
