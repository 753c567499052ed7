//! The compression layers a V2 connection switches to after IDENTIFY negotiates `snappy` or
//! `deflate` (nsqd/protocol_v2.go, IDENTIFY and upgradeSnappy/upgradeDeflate; go-nsq conn.go,
//! the same upgrades on the client side). Both ends use them: nsqd and nsq-client. [`SnappyReader`]/[`SnappyWriter`] speak the snappy framing
//! format and [`DeflateReader`]/[`DeflateWriter`] raw DEFLATE with a sync flush per flush, each
//! wrapping any tokio byte stream (plain TCP or TLS). Writers only buffer in `poll_write` and do
//! all compression output and I/O in `poll_flush`, so a flush is the unit the client can decode
//! at once (the reference's bufio-over-compressor behaves the same). Readers accept any
//! compliant encoder's stream split across reads arbitrarily. Every buffer is allocated once per
//! connection and reused.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The snappy stream identifier chunk: type `0xff`, length 6, `sNaPpY`.
const STREAM_IDENTIFIER: &[u8; 10] = b"\xff\x06\x00\x00sNaPpY";
/// The most uncompressed bytes one snappy data chunk may carry.
const MAX_BLOCK_SIZE: usize = 65536;
/// `snap::raw::max_compress_len(MAX_BLOCK_SIZE)`, the largest compressed block of a data chunk
/// (golang/snappy's `maxEncodedLenOfMaxBlockSize`).
const MAX_COMPRESSED_BLOCK_SIZE: usize = 76490;
/// The largest data chunk body a reader accepts: the CRC plus the largest compressed block.
const MAX_DATA_CHUNK_BODY: usize = 4 + MAX_COMPRESSED_BLOCK_SIZE;
/// Blocks shorter than this can only be encoded as one literal, which never beats the 12.5 %
/// rule below, so (like golang/snappy's `minNonLiteralBlockSize`) they are sent uncompressed
/// without trying.
const MIN_NON_LITERAL_BLOCK_SIZE: usize = 17;
/// The snappy reader's input buffer: room for a whole maximal chunk plus a following header.
const SNAPPY_READ_BUF: usize = 128 * 1024;
/// The deflate reader's input buffer.
const DEFLATE_READ_BUF: usize = 32 * 1024;
/// Output buffers that grew past this during one huge flush are shrunk back afterwards, so an
/// idle connection does not pin the memory of its largest burst.
const KEEP_OUT_CAPACITY: usize = 1024 * 1024;

const CHUNK_COMPRESSED: u8 = 0x00;
const CHUNK_UNCOMPRESSED: u8 = 0x01;
const CHUNK_PADDING: u8 = 0xfe;
const CHUNK_STREAM_IDENTIFIER: u8 = 0xff;

fn invalid(msg: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The masked CRC-32C the snappy framing format puts in every data chunk.
fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Writes `out[*written..]` to `inner`, then forgets it (keeping the allocation, unless it grew
/// past [`KEEP_OUT_CAPACITY`]).
fn poll_drain<W: AsyncWrite + Unpin>(
    inner: &mut W,
    cx: &mut Context<'_>,
    out: &mut Vec<u8>,
    written: &mut usize,
) -> Poll<io::Result<()>> {
    while *written < out.len() {
        let n = ready!(Pin::new(&mut *inner).poll_write(cx, &out[*written..]))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        *written += n;
    }
    out.clear();
    *written = 0;
    if out.capacity() > KEEP_OUT_CAPACITY {
        out.shrink_to(KEEP_OUT_CAPACITY);
    }
    Poll::Ready(Ok(()))
}

// ---------------------------------------------------------------------------------------------
// snappy

/// Reads the snappy framing format from `inner` and yields the uncompressed bytes.
///
/// The stream identifier must come first; data chunks (`0x00` compressed, `0x01` uncompressed)
/// have their masked CRC-32C checked; padding (`0xfe`) and skippable chunks (`0x80`–`0xfd`) are
/// skipped without being buffered; reserved unskippable types (`0x02`–`0x7f`) are an error.
/// Errors are `InvalidData`; a stream cut inside a chunk is `UnexpectedEof`.
pub struct SnappyReader<R> {
    inner: R,
    /// Bytes read from `inner`; `buf[start..end]` are not yet parsed.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The uncompressed bytes of the last data chunk; `out[out_pos..out_len]` not yet returned.
    out: Box<[u8]>,
    out_pos: usize,
    out_len: usize,
    /// Bytes of a padding/skippable chunk still to discard (they may not be read yet).
    skip: usize,
    /// Whether the stream identifier has been seen (it must be the first chunk).
    seen_identifier: bool,
    decoder: snap::raw::Decoder,
}

/// What one parse step over the buffered input achieved.
enum Step {
    /// A chunk was consumed; there may be output.
    Progress,
    /// The next chunk needs this many bytes from `start` in the buffer.
    NeedMore(usize),
}

impl<R> SnappyReader<R> {
    pub fn new(inner: R) -> Self {
        SnappyReader {
            inner,
            buf: vec![0; SNAPPY_READ_BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            out: vec![0; MAX_BLOCK_SIZE].into_boxed_slice(),
            out_pos: 0,
            out_len: 0,
            skip: 0,
            seen_identifier: false,
            decoder: snap::raw::Decoder::new(),
        }
    }

    /// Parses (at most) one chunk from the buffered input, without I/O.
    fn step(&mut self) -> io::Result<Step> {
        if self.skip > 0 {
            let n = self.skip.min(self.end - self.start);
            self.start += n;
            self.skip -= n;
            return Ok(if self.skip > 0 {
                Step::NeedMore(1)
            } else {
                Step::Progress
            });
        }
        let avail = &self.buf[self.start..self.end];
        if avail.len() < 4 {
            return Ok(Step::NeedMore(4));
        }
        let ty = avail[0];
        let len = usize::from(avail[1]) | usize::from(avail[2]) << 8 | usize::from(avail[3]) << 16;
        if !self.seen_identifier && ty != CHUNK_STREAM_IDENTIFIER {
            return Err(invalid(
                "snappy: stream does not start with the stream identifier",
            ));
        }
        match ty {
            CHUNK_STREAM_IDENTIFIER => {
                if len != STREAM_IDENTIFIER.len() - 4 {
                    return Err(invalid("snappy: bad stream identifier length"));
                }
                if avail.len() < STREAM_IDENTIFIER.len() {
                    return Ok(Step::NeedMore(STREAM_IDENTIFIER.len()));
                }
                if avail[..STREAM_IDENTIFIER.len()] != STREAM_IDENTIFIER[..] {
                    return Err(invalid("snappy: bad stream identifier"));
                }
                self.seen_identifier = true;
                self.start += STREAM_IDENTIFIER.len();
            }
            CHUNK_COMPRESSED | CHUNK_UNCOMPRESSED => {
                if len < 4 {
                    return Err(invalid("snappy: data chunk shorter than its checksum"));
                }
                if len > MAX_DATA_CHUNK_BODY
                    || (ty == CHUNK_UNCOMPRESSED && len > 4 + MAX_BLOCK_SIZE)
                {
                    return Err(invalid("snappy: data chunk too large"));
                }
                if avail.len() < 4 + len {
                    return Ok(Step::NeedMore(4 + len));
                }
                let want_crc = u32::from_le_bytes([avail[4], avail[5], avail[6], avail[7]]);
                let body = &avail[8..4 + len];
                let n = if ty == CHUNK_COMPRESSED {
                    let n = snap::raw::decompress_len(body).map_err(invalid)?;
                    if n > MAX_BLOCK_SIZE {
                        return Err(invalid(
                            "snappy: chunk decompresses to more than 65536 bytes",
                        ));
                    }
                    self.decoder
                        .decompress(body, &mut self.out[..n])
                        .map_err(invalid)?
                } else {
                    self.out[..body.len()].copy_from_slice(body);
                    body.len()
                };
                if masked_crc(&self.out[..n]) != want_crc {
                    return Err(invalid("snappy: chunk checksum mismatch"));
                }
                self.out_pos = 0;
                self.out_len = n;
                self.start += 4 + len;
            }
            CHUNK_PADDING | 0x80..=0xfd => {
                self.start += 4;
                self.skip = len;
            }
            _ => {
                return Err(invalid(format!(
                    "snappy: reserved unskippable chunk type {ty:#04x}"
                )))
            }
        }
        Ok(Step::Progress)
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for SnappyReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.out_pos < this.out_len {
                let n = buf.remaining().min(this.out_len - this.out_pos);
                buf.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                return Poll::Ready(Ok(()));
            }
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let need = match this.step()? {
                Step::Progress => continue,
                Step::NeedMore(need) => need,
            };
            if this.start == this.end {
                this.start = 0;
                this.end = 0;
            } else if this.start + need > this.buf.len() {
                this.buf.copy_within(this.start..this.end, 0);
                this.end -= this.start;
                this.start = 0;
            }
            let mut rb = ReadBuf::new(&mut this.buf[this.end..]);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n == 0 {
                if this.start == this.end && this.skip == 0 {
                    return Poll::Ready(Ok(()));
                }
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "snappy: stream ends inside a chunk",
                )));
            }
            this.end += n;
        }
    }
}

/// The output side of [`SnappyWriter`]: turns blocks of at most 64 KiB into framed chunks.
struct SnappyFramer {
    /// Framed bytes not yet written to the inner writer; `out[written..]`.
    out: Vec<u8>,
    written: usize,
    /// Where the encoder compresses a block before it is known to be worth sending compressed.
    scratch: Vec<u8>,
    encoder: snap::raw::Encoder,
    /// The stream identifier goes out once, just before the first data chunk.
    wrote_identifier: bool,
}

impl SnappyFramer {
    /// Appends one data chunk for `block` (1..=65536 bytes) to `out`, compressed when that saves
    /// at least 12.5 % (golang/snappy's rule, so short frames like the first `OK` go out
    /// uncompressed exactly as the reference sends them).
    fn frame(&mut self, block: &[u8]) -> io::Result<()> {
        debug_assert!(!block.is_empty() && block.len() <= MAX_BLOCK_SIZE);
        if !self.wrote_identifier {
            self.out.extend_from_slice(STREAM_IDENTIFIER);
            self.wrote_identifier = true;
        }
        let crc = masked_crc(block).to_le_bytes();
        let mut compressed_len = None;
        if block.len() >= MIN_NON_LITERAL_BLOCK_SIZE {
            if self.scratch.is_empty() {
                self.scratch = vec![0; MAX_COMPRESSED_BLOCK_SIZE];
            }
            let n = self
                .encoder
                .compress(block, &mut self.scratch)
                .map_err(io::Error::other)?;
            if n < block.len() - block.len() / 8 {
                compressed_len = Some(n);
            }
        }
        let (ty, body) = match compressed_len {
            Some(n) => (CHUNK_COMPRESSED, &self.scratch[..n]),
            None => (CHUNK_UNCOMPRESSED, block),
        };
        let len = (4 + body.len()) as u32;
        self.out.push(ty);
        self.out.extend_from_slice(&len.to_le_bytes()[..3]);
        self.out.extend_from_slice(&crc);
        self.out.extend_from_slice(body);
        Ok(())
    }
}

/// Writes the snappy framing format to `inner`.
///
/// `poll_write` only buffers (full 64 KiB blocks are framed into the output buffer as they
/// fill; nothing is written to `inner`); `poll_flush` frames the rest, writes everything and
/// flushes `inner`. A flush with nothing buffered writes nothing, not even the identifier.
pub struct SnappyWriter<W> {
    inner: W,
    /// Uncompressed bytes of a block not yet full (always shorter than 64 KiB).
    pending: Vec<u8>,
    framer: SnappyFramer,
}

impl<W> SnappyWriter<W> {
    pub fn new(inner: W) -> Self {
        SnappyWriter {
            inner,
            pending: Vec::with_capacity(MAX_BLOCK_SIZE),
            framer: SnappyFramer {
                out: Vec::new(),
                written: 0,
                scratch: Vec::new(),
                encoder: snap::raw::Encoder::new(),
                wrote_identifier: false,
            },
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for SnappyWriter<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut rest = buf;
        if !this.pending.is_empty() {
            let n = rest.len().min(MAX_BLOCK_SIZE - this.pending.len());
            this.pending.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if this.pending.len() == MAX_BLOCK_SIZE {
                this.framer.frame(&this.pending)?;
                this.pending.clear();
            }
        }
        // Whole blocks straight from the caller's slice, without copying them into `pending`.
        while rest.len() >= MAX_BLOCK_SIZE {
            this.framer.frame(&rest[..MAX_BLOCK_SIZE])?;
            rest = &rest[MAX_BLOCK_SIZE..];
        }
        this.pending.extend_from_slice(rest);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.pending.is_empty() {
            this.framer.frame(&this.pending)?;
            this.pending.clear();
        }
        ready!(poll_drain(
            &mut this.inner,
            cx,
            &mut this.framer.out,
            &mut this.framer.written
        ))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

// ---------------------------------------------------------------------------------------------
// deflate

/// Inflates a raw DEFLATE (RFC 1951, no zlib header) stream from `inner`.
///
/// Output is produced as soon as the input holds it: a peer that sync-flushes after each
/// command has that command readable without sending anything more. After the final block the
/// reader reports end of stream. A stream that simply stops (the usual way a sync-flushing peer
/// hangs up) is a normal end of stream; a frame cut short is caught by the framing above.
/// Corrupt input is `InvalidData`.
pub struct DeflateReader<R> {
    inner: R,
    decompress: Decompress,
    /// Bytes read from `inner`; `buf[start..end]` are not yet given to the inflater.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The final block has been inflated, or `inner` reached its end and the inflater has
    /// given out everything it held.
    done: bool,
    /// `inner` reached its end; the inflater may still hold output for the caller.
    eof: bool,
}

impl<R> DeflateReader<R> {
    pub fn new(inner: R) -> Self {
        DeflateReader {
            inner,
            decompress: Decompress::new(false),
            buf: vec![0; DEFLATE_READ_BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            done: false,
            eof: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for DeflateReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.done || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            // Always try the inflater first, even with no new input: it may hold output that did
            // not fit the caller's buffer last time.
            let (in_before, out_before) = (this.decompress.total_in(), this.decompress.total_out());
            // After the end of input, ask the inflater to give out all it holds.
            let flush = if this.eof {
                FlushDecompress::Sync
            } else {
                FlushDecompress::None
            };
            let status = this
                .decompress
                .decompress(
                    &this.buf[this.start..this.end],
                    buf.initialize_unfilled(),
                    flush,
                )
                .map_err(invalid)?;
            let consumed = (this.decompress.total_in() - in_before) as usize;
            let produced = (this.decompress.total_out() - out_before) as usize;
            this.start += consumed;
            buf.advance(produced);
            if status == Status::StreamEnd {
                this.done = true;
            }
            if produced > 0 || this.done {
                return Poll::Ready(Ok(()));
            }
            if consumed > 0 {
                continue;
            }
            if this.eof {
                this.done = true;
                return Poll::Ready(Ok(()));
            }
            if this.start == this.end {
                this.start = 0;
                this.end = 0;
            } else if this.end == this.buf.len() {
                if this.start == 0 {
                    return Poll::Ready(Err(invalid(
                        "deflate: no progress on a full input buffer",
                    )));
                }
                this.buf.copy_within(this.start..this.end, 0);
                this.end -= this.start;
                this.start = 0;
            }
            let mut rb = ReadBuf::new(&mut this.buf[this.end..]);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n == 0 {
                this.eof = true;
                continue;
            }
            this.end += n;
        }
    }
}

/// Writes raw DEFLATE (RFC 1951, no zlib header) at the given level to `inner`.
///
/// `poll_write` compresses into the output buffer without any I/O; `poll_flush` ends the data
/// so far with a sync flush (the empty stored block `00 00 ff ff`), so the peer can inflate
/// everything at once, writes it all and flushes `inner`. Like Go's `flate.Writer.Flush`, a
/// flush with nothing written still emits the 5-byte empty stored block `00 00 00 ff ff`.
pub struct DeflateWriter<W> {
    inner: W,
    compress: Compress,
    /// Compressed bytes not yet written to `inner`; `out[written..]`.
    out: Vec<u8>,
    written: usize,
    /// Bytes were compressed since the last sync flush.
    dirty: bool,
    /// A flush has emitted its sync block but has not finished writing it out.
    flushing: bool,
}

impl<W> DeflateWriter<W> {
    /// `level` is the negotiated `deflate_level` (1–9; larger values are clamped to 9).
    pub fn new(inner: W, level: u32) -> Self {
        DeflateWriter {
            inner,
            compress: Compress::new(Compression::new(level.min(9)), false),
            out: Vec::with_capacity(8 * 1024),
            written: 0,
            dirty: false,
            flushing: false,
        }
    }

    /// Runs the compressor over `input` (all of it) with `flush`, appending to `out`. For a sync
    /// flush, keeps going until the compressor stops filling the space it is given.
    fn run(&mut self, mut input: &[u8], flush: FlushCompress) -> io::Result<()> {
        // zlib semantics: a call that filled the output space must be repeated with the same
        // flush mode until it leaves space free (only then is a sync flush complete).
        loop {
            if self.out.capacity() - self.out.len() < 1024 {
                self.out.reserve(input.len().clamp(4096, 64 * 1024));
            }
            let in_before = self.compress.total_in();
            self.compress
                .compress_vec(input, &mut self.out, flush)
                .map_err(io::Error::other)?;
            input = &input[(self.compress.total_in() - in_before) as usize..];
            if input.is_empty() && self.out.len() < self.out.capacity() {
                return Ok(());
            }
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for DeflateWriter<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !buf.is_empty() {
            this.run(buf, FlushCompress::None)?;
            this.dirty = true;
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A new flush, or data written while an earlier flush was waiting on `inner`.
        if this.dirty || !this.flushing {
            this.run(&[], FlushCompress::Sync)?;
            this.dirty = false;
            this.flushing = true;
        }
        ready!(poll_drain(
            &mut this.inner,
            cx,
            &mut this.out,
            &mut this.written
        ))?;
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        this.flushing = false;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
