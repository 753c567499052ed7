//! The snappy and deflate connection layers (nsqd/client_v2.go, `UpgradeSnappy`, `UpgradeDeflate`): the exact first bytes the
//! reference sends after the upgrade, round trips with arbitrary write/flush/read boundaries,
//! interop with the `snap` and `flate2` crates' own stream codecs, and corrupt-input errors.

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use nsq_compress::{DeflateReader, DeflateWriter, SnappyReader, SnappyWriter};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// The `OK` response frame: size 6, frame type 0 (response), `OK`.
const OK_FRAME: [u8; 10] = [0, 0, 0, 6, 0, 0, 0, 0, b'O', b'K'];

/// `UpgradeSnappy`: what the reference sends after switching to snappy.
const SNAPPY_FIRST_BYTES: [u8; 28] = [
    0xff, 0x06, 0x00, 0x00, 0x73, 0x4e, 0x61, 0x50, 0x70, 0x59, // stream identifier
    0x01, 0x0e, 0x00, 0x00, 0x26, 0x98, 0x2b, 0xcf, // uncompressed chunk, len 14, CRC
    0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x4f, 0x4b, // the OK frame
];

/// `UpgradeDeflate`: what the reference (Go's compress/flate, level 6) sends after switching to deflate:
/// an empty sync flush, then the `OK` frame and a sync flush.
const GO_DEFLATE_FIRST_BYTES: [u8; 21] = [
    0x00, 0x00, 0x00, 0xff, 0xff, 0x62, 0x60, 0x60, 0x60, 0x63, 0x60, 0x60, 0x60, 0xf0, 0xf7, 0x06,
    0x00, 0x00, 0x00, 0xff, 0xff,
];

/// An `AsyncWrite` that records everything written to it, so tests can see when bytes reach
/// the inner writer.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<u8>>>);

impl Recorder {
    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}

impl AsyncWrite for Recorder {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// An `AsyncRead` that hands out its inner reader's bytes at most `sizes[i]` at a time (cycling),
/// to split compressed input at arbitrary points.
struct Chunky<R> {
    inner: R,
    sizes: Vec<usize>,
    next: usize,
}

impl<R> Chunky<R> {
    fn new(inner: R, sizes: Vec<usize>) -> Self {
        assert!(!sizes.is_empty() && sizes.iter().all(|&s| s > 0));
        Chunky {
            inner,
            sizes,
            next: 0,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Chunky<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let limit = this.sizes[this.next % this.sizes.len()].min(buf.remaining());
        let mut small = ReadBuf::new(&mut buf.initialize_unfilled()[..limit]);
        let res = Pin::new(&mut this.inner).poll_read(cx, &mut small);
        if res.is_ready() {
            this.next += 1;
        }
        let n = small.filled().len();
        buf.advance(n);
        res
    }
}

/// Reads everything from `r`, `sizes[i]` bytes at most per read (cycling).
async fn read_all_chunked<R: AsyncRead + Unpin>(mut r: R, sizes: &[usize]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; *sizes.iter().max().unwrap()];
    for i in 0.. {
        let want = sizes[i % sizes.len()];
        let n = r.read(&mut buf[..want]).await?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    Ok(out)
}

/// Inflates a raw-deflate byte string that may lack a final block (flate2's reader calls that
/// `UnexpectedEof` after returning everything).
fn inflate(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match flate2::read::DeflateDecoder::new(data).read_to_end(&mut out) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {}
        Err(e) => panic!("inflate: {e}"),
    }
    out
}

fn data_of_kind(kind: u8, len: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    match kind {
        // Incompressible.
        0 => (0..len).map(|_| rng.gen()).collect(),
        // Highly compressible: a short pattern repeated.
        1 => {
            let pat: Vec<u8> = (0..rng.gen_range(1..8)).map(|_| rng.gen()).collect();
            pat.iter().copied().cycle().take(len).collect()
        }
        // Text-like: a small alphabet.
        2 => (0..len)
            .map(|_| b"NSQ message body, "[rng.gen_range(0..18)])
            .collect(),
        // Runs of random bytes and of zeros.
        _ => {
            let mut v = Vec::with_capacity(len);
            while v.len() < len {
                let run = rng.gen_range(1..5000).min(len - v.len());
                if rng.gen() {
                    v.extend((0..run).map(|_| rng.gen::<u8>()));
                } else {
                    v.resize(v.len() + run, 0);
                }
            }
            v
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Codec {
    Snappy,
    Deflate(u32),
}

/// Writes `data` through the codec's writer in `pieces` (flushing where told), over a duplex
/// pipe of the given capacity, and reads it back through the codec's reader with the inner
/// stream split by `inner_reads` and the reads by `reads`.
async fn round_trip(
    codec: Codec,
    data: &[u8],
    pieces: &[(usize, bool)],
    pipe: usize,
    inner_reads: Vec<usize>,
    reads: &[usize],
) -> Vec<u8> {
    let (a, b) = tokio::io::duplex(pipe);
    let mut w: Box<dyn AsyncWrite + Unpin + Send> = match codec {
        Codec::Snappy => Box::new(SnappyWriter::new(a)),
        Codec::Deflate(level) => Box::new(DeflateWriter::new(a, level)),
    };
    let r: Box<dyn AsyncRead + Unpin + Send> = match codec {
        Codec::Snappy => Box::new(SnappyReader::new(Chunky::new(b, inner_reads))),
        Codec::Deflate(_) => Box::new(DeflateReader::new(Chunky::new(b, inner_reads))),
    };
    let data = data.to_vec();
    let pieces = pieces.to_vec();
    let writer = tokio::spawn(async move {
        let mut rest = &data[..];
        let mut i = 0;
        while !rest.is_empty() {
            let (size, flush) = pieces[i % pieces.len()];
            let n = size.min(rest.len());
            w.write_all(&rest[..n]).await.unwrap();
            if flush {
                w.flush().await.unwrap();
            }
            rest = &rest[n..];
            i += 1;
        }
        w.shutdown().await.unwrap();
    });
    let out = read_all_chunked(r, reads).await.unwrap();
    writer.await.unwrap();
    out
}

// ---------------------------------------------------------------------------------------------
// exact bytes

#[tokio::test]
async fn snappy_first_bytes_match_the_reference() {
    let (a, mut b) = tokio::io::duplex(1024);
    let mut w = SnappyWriter::new(a);
    w.write_all(&OK_FRAME).await.unwrap();
    w.flush().await.unwrap();
    let mut got = [0u8; SNAPPY_FIRST_BYTES.len()];
    b.read_exact(&mut got).await.unwrap();
    assert_eq!(got, SNAPPY_FIRST_BYTES);

    // A second frame gets no second stream identifier.
    w.write_all(&OK_FRAME).await.unwrap();
    w.flush().await.unwrap();
    let mut got = [0u8; 18];
    b.read_exact(&mut got).await.unwrap();
    assert_eq!(got, SNAPPY_FIRST_BYTES[10..]);
}

#[tokio::test]
async fn snappy_reader_decodes_the_reference_bytes() {
    let mut r = SnappyReader::new(&SNAPPY_FIRST_BYTES[..]);
    let mut out = Vec::new();
    r.read_to_end(&mut out).await.unwrap();
    assert_eq!(out, OK_FRAME);
}

#[tokio::test]
async fn deflate_first_bytes_inflate_like_the_reference() {
    let rec = Recorder::default();
    let mut w = DeflateWriter::new(rec.clone(), 6);
    // The reference's first flush happens before the OK is written (its message pump flushes
    // an idle client): an empty sync block, byte-identical to Go's.
    w.flush().await.unwrap();
    assert_eq!(rec.bytes(), GO_DEFLATE_FIRST_BYTES[..5]);
    w.write_all(&OK_FRAME).await.unwrap();
    w.flush().await.unwrap();
    let got = rec.bytes();
    // With the zlib-rs backend the bytes are exactly the reference's (`UpgradeDeflate`).
    assert_eq!(got, GO_DEFLATE_FIRST_BYTES);
    assert!(got.ends_with(&[0x00, 0x00, 0xff, 0xff]));
    assert_eq!(inflate(&got), OK_FRAME);
    assert_eq!(inflate(&GO_DEFLATE_FIRST_BYTES), OK_FRAME);
}

#[tokio::test]
async fn deflate_reader_decodes_the_reference_bytes() {
    let mut r = DeflateReader::new(&GO_DEFLATE_FIRST_BYTES[..]);
    let mut out = Vec::new();
    r.read_to_end(&mut out).await.unwrap();
    assert_eq!(out, OK_FRAME);
}

// ---------------------------------------------------------------------------------------------
// writer buffering

#[tokio::test]
async fn writers_only_write_on_flush() {
    let rec = Recorder::default();
    let mut w = SnappyWriter::new(rec.clone());
    w.flush().await.unwrap();
    assert!(
        rec.bytes().is_empty(),
        "an empty snappy flush writes nothing"
    );
    w.write_all(&[7u8; 200_000]).await.unwrap();
    assert!(rec.bytes().is_empty());
    w.flush().await.unwrap();
    let mut out = Vec::new();
    snap::read::FrameDecoder::new(&rec.bytes()[..])
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out, vec![7u8; 200_000]);

    let rec = Recorder::default();
    let mut w = DeflateWriter::new(rec.clone(), 9);
    w.write_all(&[7u8; 200_000]).await.unwrap();
    assert!(rec.bytes().is_empty());
    w.flush().await.unwrap();
    assert_eq!(inflate(&rec.bytes()), vec![7u8; 200_000]);
    let len = rec.bytes().len();
    w.flush().await.unwrap();
    // zlib emits nothing for a sync flush right after another one (Go would send one more
    // empty stored block); either way the peer has everything.
    assert!(rec.bytes()[len..].is_empty() || rec.bytes()[len..] == [0x00, 0x00, 0x00, 0xff, 0xff]);
}

#[tokio::test]
async fn snappy_writer_chunks_at_64k_and_skips_compression_that_does_not_pay() {
    let rec = Recorder::default();
    let mut w = SnappyWriter::new(rec.clone());
    let random = data_of_kind(0, 65536 + 100, 1);
    w.write_all(&random).await.unwrap();
    w.write_all(&[0u8; 65536]).await.unwrap();
    w.flush().await.unwrap();
    let bytes = rec.bytes();
    let mut chunks = Vec::new();
    let mut p = 10;
    while p < bytes.len() {
        let len =
            bytes[p + 1] as usize | (bytes[p + 2] as usize) << 8 | (bytes[p + 3] as usize) << 16;
        chunks.push((bytes[p], len));
        p += 4 + len;
    }
    assert_eq!(p, bytes.len());
    // Random data goes out uncompressed in 64 KiB chunks; zeros compress.
    assert_eq!(chunks[0], (0x01, 4 + 65536));
    assert_eq!(chunks[1].0, 0x00, "100 random bytes + zeros compress");
    assert_eq!(chunks[2].0, 0x00);
    assert_eq!(chunks.len(), 3);
    let mut out = Vec::new();
    snap::read::FrameDecoder::new(&bytes[..])
        .read_to_end(&mut out)
        .unwrap();
    let mut want = random;
    want.extend_from_slice(&[0u8; 65536]);
    assert_eq!(out, want);
}

// ---------------------------------------------------------------------------------------------
// readers do not wait for more input than a flushed command

#[tokio::test]
async fn readers_return_a_flushed_command_without_more_input() {
    let cmd = |i: usize| format!("PUB topic_{i}\n{}", "x".repeat(i * 37)).into_bytes();

    let (mut a, b) = tokio::io::duplex(1 << 20);
    let mut r = SnappyReader::new(b);
    let mut e = snap::write::FrameEncoder::new(Vec::new());
    for i in 0..50 {
        let cmd = cmd(i);
        e.write_all(&cmd).unwrap();
        e.flush().unwrap();
        a.write_all(&std::mem::take(e.get_mut())).await.unwrap();
        let mut got = vec![0u8; cmd.len()];
        tokio::time::timeout(Duration::from_secs(5), r.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, cmd);
    }

    for level in [0, 1, 6, 9] {
        let (mut a, b) = tokio::io::duplex(1 << 20);
        let mut r = DeflateReader::new(b);
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(level));
        for i in 0..50 {
            let cmd = cmd(i);
            e.write_all(&cmd).unwrap();
            e.flush().unwrap(); // a sync flush
            a.write_all(&std::mem::take(e.get_mut())).await.unwrap();
            let mut got = vec![0u8; cmd.len()];
            tokio::time::timeout(Duration::from_secs(5), r.read_exact(&mut got))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(got, cmd, "level {level}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// interop with the crates' own stream codecs

#[tokio::test]
async fn snappy_reader_decodes_snap_frame_encoder_output() {
    for (kind, len) in [
        (0u8, 200_000usize),
        (1, 300_000),
        (2, 70_000),
        (3, 150_000),
        (2, 5),
    ] {
        let data = data_of_kind(kind, len, kind as u64 * 7 + len as u64);
        let mut e = snap::write::FrameEncoder::new(Vec::new());
        // Uneven writes with flushes in between.
        for piece in data.chunks(33_333) {
            e.write_all(piece).unwrap();
            e.flush().unwrap();
        }
        let encoded = e.into_inner().unwrap();
        for sizes in [vec![1], vec![3, 7, 1000], vec![1 << 20]] {
            let r = SnappyReader::new(Chunky::new(&encoded[..], sizes));
            assert_eq!(
                read_all_chunked(r, &[4096, 1, 100_000]).await.unwrap(),
                data
            );
        }
    }
}

#[tokio::test]
async fn snap_frame_decoder_decodes_snappy_writer_output() {
    for (kind, len) in [
        (0u8, 200_000usize),
        (1, 300_000),
        (2, 70_000),
        (3, 150_000),
        (2, 5),
    ] {
        let data = data_of_kind(kind, len, len as u64);
        let rec = Recorder::default();
        let mut w = SnappyWriter::new(rec.clone());
        for (i, piece) in data.chunks(10_007).enumerate() {
            w.write_all(piece).await.unwrap();
            if i % 3 == 0 {
                w.flush().await.unwrap();
            }
        }
        w.flush().await.unwrap();
        w.write_all(b"tail").await.unwrap();
        w.shutdown().await.unwrap();
        let mut out = Vec::new();
        snap::read::FrameDecoder::new(&rec.bytes()[..])
            .read_to_end(&mut out)
            .unwrap();
        let mut want = data.clone();
        want.extend_from_slice(b"tail");
        assert_eq!(out, want);
    }
}

#[tokio::test]
async fn deflate_reader_decodes_flate2_encoder_output() {
    for level in [0u32, 1, 6, 9] {
        let data = data_of_kind(3, 250_000, level as u64);
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(level));
        for piece in data.chunks(12_345) {
            e.write_all(piece).unwrap();
            e.flush().unwrap();
        }
        // Without a final block (how clients leave it) ...
        let open = e.get_ref().clone();
        // ... and with one, after which the reader reports the end even if bytes follow.
        let mut finished = e.finish().unwrap();
        finished.extend_from_slice(b"trailing garbage");
        for stream in [&open, &finished] {
            for sizes in [vec![1], vec![2, 5, 700], vec![1 << 20]] {
                let r = DeflateReader::new(Chunky::new(&stream[..], sizes));
                assert_eq!(
                    read_all_chunked(r, &[1, 8192, 65536]).await.unwrap(),
                    data,
                    "level {level}"
                );
            }
        }
    }
}

#[tokio::test]
async fn flate2_decoder_reads_deflate_writer_output() {
    for level in [1u32, 6, 9] {
        let data = data_of_kind(2, 250_000, level as u64);
        let rec = Recorder::default();
        let mut w = DeflateWriter::new(rec.clone(), level);
        for piece in data.chunks(9_999) {
            w.write_all(piece).await.unwrap();
            w.flush().await.unwrap();
            assert!(rec.bytes().ends_with(&[0x00, 0x00, 0xff, 0xff]));
        }
        w.shutdown().await.unwrap();
        // The stream has no final block, so read exactly the data, then see nothing more.
        let bytes = rec.bytes();
        let mut d = flate2::read::DeflateDecoder::new(&bytes[..]);
        let mut out = vec![0u8; data.len()];
        d.read_exact(&mut out).unwrap();
        assert_eq!(out, data, "level {level}");
        assert_eq!(
            d.read(&mut [0u8; 16]).map_err(|e| e.kind()),
            Err(io::ErrorKind::UnexpectedEof)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// errors

async fn snappy_read_err(stream: &[u8]) -> io::Error {
    let mut out = Vec::new();
    SnappyReader::new(stream)
        .read_to_end(&mut out)
        .await
        .unwrap_err()
}

#[tokio::test]
async fn snappy_bad_crc_is_invalid_data() {
    let mut bad = SNAPPY_FIRST_BYTES;
    bad[14] ^= 1;
    assert_eq!(
        snappy_read_err(&bad).await.kind(),
        io::ErrorKind::InvalidData
    );
    // A compressed chunk with a bad CRC too.
    let mut e = snap::write::FrameEncoder::new(Vec::new());
    e.write_all(&[b'a'; 1000]).unwrap();
    let mut bad = e.into_inner().unwrap();
    assert_eq!(bad[10], 0x00);
    bad[15] ^= 0x80;
    assert_eq!(
        snappy_read_err(&bad).await.kind(),
        io::ErrorKind::InvalidData
    );
}

#[tokio::test]
async fn snappy_missing_stream_identifier_is_invalid_data() {
    let err = snappy_read_err(&SNAPPY_FIRST_BYTES[10..]).await;
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    // Padding before the identifier is not allowed either.
    let err = snappy_read_err(&[0xfe, 0x01, 0x00, 0x00, 0x00]).await;
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    // Nor a damaged identifier.
    let mut bad = SNAPPY_FIRST_BYTES;
    bad[5] = b'n';
    assert_eq!(
        snappy_read_err(&bad).await.kind(),
        io::ErrorKind::InvalidData
    );
}

#[tokio::test]
async fn snappy_reserved_chunk_types_are_invalid_data() {
    for ty in [0x02u8, 0x40, 0x7f] {
        let mut s = SNAPPY_FIRST_BYTES[..10].to_vec();
        s.extend_from_slice(&[ty, 0x01, 0x00, 0x00, 0xaa]);
        s.extend_from_slice(&SNAPPY_FIRST_BYTES[10..]);
        assert_eq!(
            snappy_read_err(&s).await.kind(),
            io::ErrorKind::InvalidData,
            "type {ty:#x}"
        );
    }
}

#[tokio::test]
async fn snappy_skippable_and_padding_chunks_are_skipped() {
    let mut s = SNAPPY_FIRST_BYTES[..10].to_vec();
    s.extend_from_slice(&[0xfe, 0x03, 0x00, 0x00, 0, 0, 0]);
    s.extend_from_slice(&[0x80, 0x00, 0x00, 0x00]);
    // A skippable chunk larger than the reader's buffer.
    s.extend_from_slice(&[0xfd, 0x00, 0x00, 0x03]);
    s.extend(std::iter::repeat_n(0x5a, 0x03_0000));
    s.extend_from_slice(&SNAPPY_FIRST_BYTES[10..]);
    s.extend_from_slice(&SNAPPY_FIRST_BYTES); // a repeated identifier is fine
    for sizes in [vec![1], vec![5, 9], vec![1 << 20]] {
        let r = SnappyReader::new(Chunky::new(&s[..], sizes));
        let mut want = OK_FRAME.to_vec();
        want.extend_from_slice(&OK_FRAME);
        assert_eq!(read_all_chunked(r, &[3, 100]).await.unwrap(), want);
    }
}

#[tokio::test]
async fn snappy_truncated_and_oversized_chunks_are_errors() {
    let err = snappy_read_err(&SNAPPY_FIRST_BYTES[..20]).await;
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    // Data chunk shorter than its checksum.
    let mut s = SNAPPY_FIRST_BYTES[..10].to_vec();
    s.extend_from_slice(&[0x01, 0x03, 0x00, 0x00, 0, 0, 0]);
    assert_eq!(snappy_read_err(&s).await.kind(), io::ErrorKind::InvalidData);
    // Uncompressed chunk with more than 65536 bytes.
    let mut s = SNAPPY_FIRST_BYTES[..10].to_vec();
    s.extend_from_slice(&[0x01, 0x05, 0x00, 0x01]);
    assert_eq!(snappy_read_err(&s).await.kind(), io::ErrorKind::InvalidData);
    // An empty stream is a clean end.
    let mut out = Vec::new();
    SnappyReader::new(&[][..])
        .read_to_end(&mut out)
        .await
        .unwrap();
    assert!(out.is_empty());
}

#[tokio::test]
async fn deflate_corrupt_input_is_invalid_data() {
    // BFINAL=1, BTYPE=11 (reserved).
    let mut out = Vec::new();
    let err = DeflateReader::new(&[0x07u8, 0x00, 0x00][..])
        .read_to_end(&mut out)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    // A stored block whose NLEN is not the complement of LEN.
    let err = DeflateReader::new(&[0x00u8, 0x05, 0x00, 0x00, 0x00, 1, 2, 3, 4, 5][..])
        .read_to_end(&mut out)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
}

// ---------------------------------------------------------------------------------------------
// property: round trips with arbitrary boundaries

/// One round trip: what data, how it is written and flushed, and how it is split on the way.
#[derive(Debug, Clone)]
struct Case {
    /// Which [`data_of_kind`] generator, its length and seed.
    kind: u8,
    len: usize,
    seed: u64,
    /// Write sizes, each followed by a flush or not (cycling).
    pieces: Vec<(usize, bool)>,
    /// The duplex pipe's capacity (small values force partial inner writes).
    pipe: usize,
    /// How the compressed stream is split into inner reads (cycling).
    inner_reads: Vec<usize>,
    /// The caller's read sizes (cycling).
    reads: Vec<usize>,
}

fn round_trip_case() -> impl Strategy<Value = Case> {
    let sizes = || prop::collection::vec(prop_oneof![1usize..20, 1usize..100_000], 1..6);
    (
        0u8..4,
        prop_oneof![0usize..300, 0usize..70_000, 60_000usize..300_000],
        any::<u64>(),
        prop::collection::vec(
            (
                prop_oneof![1usize..50, 1usize..5000, 1usize..140_000],
                any::<bool>(),
            ),
            1..8,
        ),
        prop_oneof![Just(1usize), 2usize..100, 1000usize..200_000],
        sizes(),
        sizes(),
    )
        .prop_map(|(kind, len, seed, pieces, pipe, inner_reads, reads)| Case {
            kind,
            len,
            seed,
            pieces,
            pipe,
            inner_reads,
            reads,
        })
}

fn run_round_trip(codec: Codec, case: Case) -> Result<(), TestCaseError> {
    let data = data_of_kind(case.kind, case.len, case.seed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt.block_on(round_trip(
        codec,
        &data,
        &case.pieces,
        case.pipe,
        case.inner_reads,
        &case.reads,
    ));
    prop_assert_eq!(out.len(), data.len());
    prop_assert!(out == data);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn snappy_round_trip(case in round_trip_case()) {
        run_round_trip(Codec::Snappy, case)?;
    }

    #[test]
    fn deflate_round_trip(case in round_trip_case(), level in 0u32..10) {
        run_round_trip(Codec::Deflate(level), case)?;
    }
}

/// The proptest case that found a lost tail (1-byte writes, a 1-byte pipe, 1-byte reads).
#[tokio::test]
async fn deflate_one_byte_everything_regression() {
    let data = data_of_kind(0, 58251, 2660242706079764590);
    let out = round_trip(Codec::Deflate(1), &data, &[(1, false)], 1, vec![1], &[1]).await;
    assert_eq!(out.len(), data.len());
    assert!(out == data);
}
