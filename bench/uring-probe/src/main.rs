//! The io_uring experiment of issue 32: what would io_uring buy nsqd's synchronous publishers?
//!
//! A synchronous publisher (go-nsq `Producer.Publish`, one message per round trip) costs nsqd
//! one `recvfrom` and one `sendto` per message, three quarters of its CPU in the kernel
//! (bench/README.md, "Where the missed targets go"). io_uring could put the reads and writes of
//! every ready connection into one `io_uring_enter` per event-loop turn instead of one system
//! call each. Whether that pays is a property of the kernel's socket path, not of nsqd's own
//! work, so it is measured here on the smallest server that go-nsq publishers accept: the V2
//! magic, `IDENTIFY` (answered with nsqd's JSON capabilities), `PUB`/`MPUB`
//! (answered `OK`, the body dropped), `NOP`. Both back ends share that protocol code
//! ([`Session`]) and differ only in how bytes move:
//!
//! * `--backend epoll`: a tokio multi-thread runtime (nsqd's), a task per connection reading
//!   into a buffer and writing every reply a read produced in one write. tokio's `read`
//!   clears readiness after a short read, as nsqd's transport does, so a synchronous PUB costs
//!   one `recvfrom` + one `sendto` (+ the `epoll_wait`s of idle workers).
//! * `--backend uring`: one tokio-uring runtime (a ring) per thread, each accepting from the
//!   same listening socket, a task per connection doing the same with ring reads and writes;
//!   tokio-uring submits what a turn queued in one `io_uring_enter` when the thread parks.
//! * `--backend ring`: one thread, one ring, no epoll and no runtime: the loop submits every
//!   receive and send queued while handling the last batch of completions and waits for the
//!   next in the same `io_uring_enter` (the "ring per worker" of the issue; one thread, as
//!   nsqd runs one worker on two cores). Its `unsafe` is the ring's contract (the kernel uses
//!   the buffers and descriptors until the operation completes), proved at each use.
//!
//! The server runs until killed; `bench/uring-probe/run.sh` drives it with go-nsq publishers
//! (bench/gonsq) and reads its CPU time from /proc. The numbers and the conclusion are in
//! bench/README.md ("io_uring").

use std::io;
use std::net::SocketAddr;

/// An `OK` response frame: size 6, frame type 0 (response), "OK".
const OK: &[u8] = b"\x00\x00\x00\x06\x00\x00\x00\x00OK";
/// The answer to `IDENTIFY`: capabilities as JSON, as nsqd gives them to a client that asks
/// for feature negotiation (go-nsq always does). It matters: go-nsq buffers its writes only
/// after a JSON answer (conn.go, `identify`); after a plain `OK` it writes each part of a
/// command (name, space, topic, newline, size, body) as its own TCP segment.
const IDENTIFY_JSON: &[u8] = br#"{"max_rdy_count":2500,"version":"uring-probe","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":0,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}"#;
/// `CLOSE_WAIT`, the answer to `CLS`.
const CLOSE_WAIT: &[u8] = b"\x00\x00\x00\x0e\x00\x00\x00\x00CLOSE_WAIT";
/// The protocol magic a V2 client sends first.
const MAGIC: &[u8] = b"  V2";
/// A body larger than this closes the connection (nsqd's default `--max-msg-size` × a bit).
const MAX_BODY: usize = 5 * 1024 * 1024;

/// One connection's protocol state, free of I/O: bytes in, replies out.
#[derive(Default)]
struct Session {
    magic_seen: bool,
    /// Bytes received and not yet consumed (a partial command).
    pending: Vec<u8>,
}

impl Session {
    /// Takes the bytes of one read; appends the replies of every command they complete to
    /// `out`. `Err` closes the connection.
    fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        self.pending.extend_from_slice(data);
        let mut at = 0;
        if !self.magic_seen {
            if self.pending.len() < MAGIC.len() {
                return Ok(());
            }
            if &self.pending[..MAGIC.len()] != MAGIC {
                return Err(bad("bad magic"));
            }
            self.magic_seen = true;
            at = MAGIC.len();
        }
        while let Some(used) = command(&self.pending[at..], out)? {
            at += used;
        }
        self.pending.drain(..at);
        Ok(())
    }
}

/// Handles the first command of `buf` if it is complete: `Some(bytes consumed)`, `None` when
/// more bytes are needed.
fn command(buf: &[u8], out: &mut Vec<u8>) -> io::Result<Option<usize>> {
    let Some(eol) = buf.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let line = &buf[..eol];
    let name = line.split(|&b| b == b' ').next().unwrap_or_default();
    match name {
        b"NOP" => Ok(Some(eol + 1)),
        b"CLS" => {
            out.extend_from_slice(CLOSE_WAIT);
            Ok(Some(eol + 1))
        }
        b"IDENTIFY" | b"PUB" | b"MPUB" | b"DPUB" => {
            let body = &buf[eol + 1..];
            let Some(size) = body.get(..4) else {
                return Ok(None);
            };
            let size = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
            if size > MAX_BODY {
                return Err(bad("body too large"));
            }
            if body.len() < 4 + size {
                return Ok(None);
            }
            if name == b"IDENTIFY" {
                out.extend_from_slice(&(IDENTIFY_JSON.len() as u32 + 4).to_be_bytes());
                out.extend_from_slice(&[0; 4]);
                out.extend_from_slice(IDENTIFY_JSON);
            } else {
                out.extend_from_slice(OK);
            }
            Ok(Some(eol + 1 + 4 + size))
        }
        _ => Err(bad("unknown command")),
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// The listening socket, shared by every thread of either back end.
fn listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

mod epoll {
    use super::Session;
    use std::io::{self, Read, Write};
    use tokio::io::Interest;
    use tokio::net::TcpStream;

    pub(crate) fn run(l: std::net::TcpListener, threads: usize) -> io::Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_io()
            .build()?;
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l)?;
            loop {
                let (s, _) = l.accept().await?;
                s.set_nodelay(true)?;
                tokio::spawn(async move {
                    if let Err(e) = conn(s).await {
                        eprintln!("connection: {e}");
                    }
                });
            }
        })
    }

    async fn conn(s: TcpStream) -> io::Result<()> {
        let mut session = Session::default();
        let mut buf = vec![0u8; 64 * 1024];
        let mut out = Vec::with_capacity(4096);
        loop {
            let n = transfer(&s, Interest::READABLE, buf.len(), |s| (&*s).read(&mut buf)).await?;
            if n == 0 {
                return Ok(());
            }
            session.feed(&buf[..n], &mut out)?;
            let mut at = 0;
            while at < out.len() {
                at += transfer(&s, Interest::WRITABLE, out.len() - at, |s| {
                    (&*s).write(&out[at..])
                })
                .await?;
            }
            out.clear();
        }
    }

    /// One system call when the socket is ready, as nsqd's transport does it
    /// (crates/nsqd/src/transport.rs, `transfer`): a call that moved fewer bytes than asked
    /// emptied the receive queue (or filled the send buffer), so the readiness is cleared and
    /// the next call waits for epoll's next edge instead of paying a call that returns EAGAIN.
    async fn transfer(
        s: &TcpStream,
        interest: Interest,
        want: usize,
        mut io: impl FnMut(socket2::SockRef<'_>) -> io::Result<usize>,
    ) -> io::Result<usize> {
        loop {
            s.ready(interest).await?;
            let mut done = None;
            let r = s.try_io(interest, || {
                let n = io(socket2::SockRef::from(s))?;
                done = Some(n);
                if n > 0 && n < want {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(n)
                }
            });
            match (done, r) {
                (Some(n), _) => return Ok(n),
                (None, Err(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
                (None, r) => return r,
            }
        }
    }
}

mod uring {
    use super::Session;
    use std::io;

    pub(crate) fn run(l: std::net::TcpListener, threads: usize) -> io::Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let l = l.try_clone()?;
                Ok(std::thread::spawn(move || {
                    tokio_uring::start(async move {
                        let l = tokio_uring::net::TcpListener::from_std(l);
                        loop {
                            let (s, _) = l.accept().await?;
                            s.set_nodelay(true)?;
                            tokio_uring::spawn(async move {
                                if let Err(e) = conn(s).await {
                                    eprintln!("connection: {e}");
                                }
                            });
                        }
                    })
                }))
            })
            .collect::<io::Result<_>>()?;
        for h in handles {
            let r: io::Result<()> = h.join().expect("ring thread panicked");
            r?;
        }
        Ok(())
    }

    async fn conn(s: tokio_uring::net::TcpStream) -> io::Result<()> {
        let mut session = Session::default();
        let mut buf = vec![0u8; 64 * 1024];
        let mut out = Vec::with_capacity(4096);
        loop {
            let (r, b) = s.read(buf).await;
            buf = b;
            let n = r?;
            if n == 0 {
                return Ok(());
            }
            session.feed(&buf[..n], &mut out)?;
            if !out.is_empty() {
                let (r, o) = s.write_all(out).await;
                out = o;
                r?;
                out.clear();
            }
        }
    }
}

#[allow(unsafe_code)]
mod ring {
    use super::Session;
    use io_uring::{opcode, squeue, types, IoUring};
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd};

    const ACCEPT: u64 = 0;
    const RECV: u64 = 1;
    const SEND: u64 = 2;
    const RECV_BUF: usize = 64 * 1024;

    struct Conn {
        stream: std::net::TcpStream,
        session: Session,
        /// The receive buffer; the kernel writes into it while a RECV is outstanding.
        rbuf: Box<[u8]>,
        /// The bytes of the outstanding SEND (not touched until it completes) and how many of
        /// them went out.
        out: Vec<u8>,
        sent: usize,
        sending: bool,
        /// Replies produced while a SEND is outstanding.
        next: Vec<u8>,
        /// Operations the kernel still holds (the connection is freed at 0 once closed).
        ops: u32,
        closed: bool,
    }

    /// Queues an entry, submitting what is queued first if the submission queue is full.
    ///
    /// # Safety
    /// The buffers and descriptor `e` names must stay valid until its completion is reaped.
    unsafe fn push(ring: &mut IoUring, e: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: passed on from the caller.
            if unsafe { ring.submission().push(e) }.is_ok() {
                return Ok(());
            }
            ring.submit()?;
        }
    }

    fn recv(ring: &mut IoUring, i: usize, c: &mut Conn) -> io::Result<()> {
        let e = opcode::Recv::new(
            types::Fd(c.stream.as_raw_fd()),
            c.rbuf.as_mut_ptr(),
            RECV_BUF as u32,
        )
        .build()
        .user_data(((i as u64) << 8) | RECV);
        c.ops += 1;
        // SAFETY: `rbuf` and `stream` belong to the connection, which is freed only when
        // `ops` is back at 0, i.e. after this receive's completion was reaped; nothing else
        // reads or writes `rbuf` until then (the completion handler reads it after).
        unsafe { push(ring, &e) }
    }

    fn send(ring: &mut IoUring, i: usize, c: &mut Conn) -> io::Result<()> {
        let rest = &c.out[c.sent..];
        let e = opcode::Send::new(
            types::Fd(c.stream.as_raw_fd()),
            rest.as_ptr(),
            rest.len() as u32,
        )
        .build()
        .user_data(((i as u64) << 8) | SEND);
        c.ops += 1;
        c.sending = true;
        // SAFETY: `out` is neither written, resized nor dropped while `sending` (replies go to
        // `next`), and the connection outlives the operation (`ops`), as for `recv`.
        unsafe { push(ring, &e) }
    }

    pub(crate) fn run(l: std::net::TcpListener) -> io::Result<()> {
        let mut ring = IoUring::new(4096)?;
        let lfd = l.as_raw_fd();
        let accept =
            opcode::Accept::new(types::Fd(lfd), std::ptr::null_mut(), std::ptr::null_mut())
                .build()
                .user_data(ACCEPT);
        // SAFETY: the listener lives until `run` returns (it never does but with an error, and
        // then the ring is dropped first: declared after `l`); no address buffers are given.
        unsafe { push(&mut ring, &accept)? };
        let mut conns: Vec<Option<Conn>> = Vec::new();
        let mut done = Vec::new();
        loop {
            ring.submit_and_wait(1)?;
            done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
            for (data, res) in done.drain(..) {
                let (i, op) = ((data >> 8) as usize, data & 0xff);
                if op == ACCEPT {
                    // SAFETY (of the push): as above.
                    unsafe { push(&mut ring, &accept)? };
                    if res < 0 {
                        continue;
                    }
                    // SAFETY: a completed accept's result is a new descriptor nobody owns.
                    let stream = unsafe { std::net::TcpStream::from_raw_fd(res) };
                    stream.set_nodelay(true)?;
                    let i = conns
                        .iter()
                        .position(Option::is_none)
                        .unwrap_or(conns.len());
                    if i == conns.len() {
                        conns.push(None);
                    }
                    let c = conns[i].insert(Conn {
                        stream,
                        session: Session::default(),
                        rbuf: vec![0; RECV_BUF].into_boxed_slice(),
                        out: Vec::with_capacity(4096),
                        sent: 0,
                        sending: false,
                        next: Vec::with_capacity(4096),
                        ops: 0,
                        closed: false,
                    });
                    recv(&mut ring, i, c)?;
                    continue;
                }
                let Some(c) = conns[i].as_mut() else { continue };
                c.ops -= 1;
                if op == RECV {
                    let n = res.max(0) as usize;
                    if res <= 0 || c.closed || c.session.feed(&c.rbuf[..n], &mut c.next).is_err() {
                        c.closed = true;
                    } else {
                        if !c.sending && !c.next.is_empty() {
                            std::mem::swap(&mut c.out, &mut c.next);
                            c.sent = 0;
                            send(&mut ring, i, c)?;
                        }
                        recv(&mut ring, i, c)?;
                    }
                } else {
                    c.sending = false;
                    if res < 0 {
                        c.closed = true;
                    } else if !c.closed {
                        c.sent += res as usize;
                        if c.sent < c.out.len() {
                            send(&mut ring, i, c)?;
                        } else {
                            c.out.clear();
                            if !c.next.is_empty() {
                                std::mem::swap(&mut c.out, &mut c.next);
                                c.sent = 0;
                                send(&mut ring, i, c)?;
                            }
                        }
                    }
                }
                if c.closed && c.ops == 0 {
                    conns[i] = None;
                }
            }
        }
    }
}

fn main() -> io::Result<()> {
    let mut backend = String::from("epoll");
    let mut addr: SocketAddr = "127.0.0.1:4150".parse().expect("literal address");
    let mut threads = 1;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| bad("missing value"));
        match a.as_str() {
            "--backend" => backend = value()?,
            "--addr" => addr = value()?.parse().map_err(|_| bad("bad --addr"))?,
            "--threads" => threads = value()?.parse().map_err(|_| bad("bad --threads"))?,
            _ => {
                return Err(bad(
                    "usage: uring-probe [--backend epoll|uring|ring] [--addr A] [--threads N]",
                ))
            }
        }
    }
    let l = listener(addr)?;
    match backend.as_str() {
        "epoll" => epoll::run(l, threads),
        "uring" => uring::run(l, threads),
        "ring" => ring::run(l),
        _ => Err(bad("--backend is epoll, uring or ring")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(parts: &[&[u8]]) -> io::Result<Vec<u8>> {
        let mut s = Session::default();
        let mut out = Vec::new();
        for p in parts {
            s.feed(p, &mut out)?;
        }
        Ok(out)
    }

    #[test]
    fn answers_identify_and_each_publish_once_whatever_the_split() {
        let mut wire = MAGIC.to_vec();
        wire.extend_from_slice(b"IDENTIFY\n\x00\x00\x00\x02{}");
        for _ in 0..3 {
            wire.extend_from_slice(b"PUB t\n\x00\x00\x00\x03abc");
        }
        wire.extend_from_slice(b"NOP\n");
        let whole = feed_all(&[&wire]).unwrap();
        let (identify, oks) = whole.split_at(whole.len() - 3 * OK.len());
        assert_eq!(oks, OK.repeat(3));
        assert_eq!(
            &identify[..4],
            &(IDENTIFY_JSON.len() as u32 + 4).to_be_bytes()
        );
        assert_eq!(&identify[8..], IDENTIFY_JSON);
        let bytewise: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(feed_all(&bytewise).unwrap(), whole);
    }

    #[test]
    fn bad_input_closes() {
        assert!(feed_all(&[b"  V1"]).is_err());
        assert!(feed_all(&[b"  V2FOO\n"]).is_err());
        assert!(feed_all(&[b"  V2PUB t\n\xff\xff\xff\xff"]).is_err());
    }
}
