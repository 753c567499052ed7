//! `bench_reader`: subscribes N connections to a channel, FINs every message it receives and
//! reports the consume rate (the Rust counterpart of NSQ's `bench/bench_reader`); `--drain`
//! stops once the channel has gone quiet, to time draining a backlog.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use clap::Parser;
use nsq_bench::report::{log_line, parse_deadline, Summary};
use nsq_bench::{default_connections, go_style_args, godur, net, wire};
use nsq_protocol::frame::{take_frame, FrameType, HEARTBEAT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

const PREFIX: &str = "[bench_reader] ";

/// Capacity of each connection's read buffer; one read can take up to this many bytes.
const READ_BUF: usize = 1 << 20;
/// Grow/compact the read buffer when fewer than this many bytes are free at its end.
const MIN_READ_ROOM: usize = 64 << 10;
/// With `--drain`: stop when no message arrived for this long (after the first one).
const DRAIN_IDLE: Duration = Duration::from_secs(1);
/// How often the main task checks the stop conditions.
const POLL: Duration = Duration::from_millis(20);

/// Consume messages from an nsqd channel, FIN-ing each one, and report the rate.
#[derive(Parser, Debug)]
#[command(name = "bench_reader")]
struct Args {
    /// duration of time to run (Go syntax: 10s, 1m30s, 500ms); an upper bound with --drain
    #[arg(long, default_value = "10s", value_parser = godur::parse)]
    runfor: Duration,
    /// <addr>:<port> to connect to nsqd
    #[arg(long, default_value = "127.0.0.1:4150")]
    nsqd_tcp_address: String,
    /// size of messages (only used for the MiB/s figure)
    #[arg(long, default_value_t = 200)]
    size: u32,
    /// topic to receive messages on
    #[arg(long, default_value = "sub_bench")]
    topic: String,
    /// channel to receive messages on
    #[arg(long, default_value = "ch")]
    channel: String,
    /// deadline to start the benchmark run, "2006-01-02 15:04:05" (UTC)
    #[arg(long)]
    deadline: Option<String>,
    /// RDY count to use on each connection
    #[arg(long, default_value_t = 2500)]
    rdy: u64,
    /// number of subscribed connections [default: one per core]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    connections: Option<u32>,
    /// stop once no message arrived for 1 s after at least one did; the time reported is then
    /// the span from the first to the last message
    #[arg(long)]
    drain: bool,
}

/// Progress shared by all connections. Times are nanoseconds since `Shared::base`.
struct Shared {
    base: Instant,
    msgs: AtomicU64,
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    /// Connection tasks still running.
    alive: AtomicUsize,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn record(&self, got: u64) {
        let t = self.now_ns();
        self.msgs.fetch_add(got, Ordering::Relaxed);
        self.first_ns.fetch_min(t, Ordering::Relaxed);
        self.last_ns.fetch_max(t, Ordering::Relaxed);
    }
}

fn main() -> ExitCode {
    let args = Args::parse_from(go_style_args(std::env::args()));
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{PREFIX}cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", log_line(PREFIX, &format!("error: {e}")));
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let n = args
        .connections
        .map_or_else(default_connections, |c| c as usize);
    let sub = wire::encode_sub(&args.topic, &args.channel);
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let mut stream = net::connect(&args.nsqd_tcp_address).await?;
        stream
            .write_all(&sub)
            .await
            .map_err(|e| format!("write SUB: {e}"))?;
        let mut rbuf = BytesMut::with_capacity(READ_BUF);
        net::expect_ok(&mut stream, &mut rbuf, "SUB").await?;
        conns.push((stream, rbuf));
    }

    if let Some(d) = &args.deadline {
        let t = parse_deadline(d)?;
        let wait = t
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        eprintln!(
            "{}",
            log_line(
                PREFIX,
                &format!("sleeping until {d} ({})", godur::format(wait))
            )
        );
        tokio::time::sleep(wait).await;
    }

    let shared = Arc::new(Shared {
        base: Instant::now(),
        msgs: AtomicU64::new(0),
        first_ns: AtomicU64::new(u64::MAX),
        last_ns: AtomicU64::new(0),
        alive: AtomicUsize::new(n),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let start = Instant::now();
    let rdy = wire::encode_rdy(args.rdy);
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|(stream, rbuf)| {
            let (shared, stop, rdy) = (Arc::clone(&shared), stop_rx.clone(), rdy.clone());
            tokio::spawn(async move {
                let r = consume(stream, rbuf, &rdy, &shared, stop).await;
                shared.alive.fetch_sub(1, Ordering::Relaxed);
                r
            })
        })
        .collect();

    // Wait for: runfor elapsed, or (--drain) the channel went quiet, or every connection ended.
    let end_time = start + args.runfor;
    loop {
        let now = Instant::now();
        if now >= end_time || shared.alive.load(Ordering::Relaxed) == 0 {
            break;
        }
        if args.drain && shared.msgs.load(Ordering::Relaxed) > 0 {
            let idle = shared
                .now_ns()
                .saturating_sub(shared.last_ns.load(Ordering::Relaxed));
            if idle >= DRAIN_IDLE.as_nanos() as u64 {
                break;
            }
        }
        tokio::time::sleep_until((now + POLL).min(end_time).into()).await;
    }
    let _ = stop_tx.send(true);

    let mut first_err = None;
    for t in tasks {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(e) => first_err = first_err.or(Some(format!("subscriber task failed: {e}"))),
        }
    }
    let wall = start.elapsed();
    if let Some(e) = first_err {
        return Err(e);
    }

    let msgs = shared.msgs.load(Ordering::Relaxed);
    let elapsed = if args.drain && msgs > 0 {
        let (first, last) = (
            shared.first_ns.load(Ordering::Relaxed),
            shared.last_ns.load(Ordering::Relaxed),
        );
        // A drain that fits in a single read has no measurable span; fall back to wall time.
        if last > first {
            Duration::from_nanos(last - first)
        } else {
            wall
        }
    } else {
        wall
    };
    let summary = Summary {
        msgs,
        elapsed,
        size: args.size as usize,
    };
    eprintln!("{}", log_line(PREFIX, &summary.go_line()));
    println!("{}", summary.result_line("reader"));
    Ok(())
}

/// One connection's loop: `RDY`, then read as much as the socket has, FIN every message parsed
/// from it with one write, answer heartbeats, until told to stop or the connection closes.
async fn consume(
    mut stream: TcpStream,
    mut rbuf: BytesMut,
    rdy: &[u8],
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    stream
        .write_all(rdy)
        .await
        .map_err(|e| format!("write RDY: {e}"))?;
    let mut wbuf: Vec<u8> = Vec::with_capacity(64 << 10);
    loop {
        if rbuf.capacity() - rbuf.len() < MIN_READ_ROOM {
            // All frames taken from the buffer have been dropped, so this reclaims the space
            // in front of the unparsed tail instead of allocating (unless a frame is huge).
            rbuf.reserve(READ_BUF / 2);
        }
        let n = tokio::select! {
            biased;
            _ = stop.changed() => return Ok(()),
            r = stream.read_buf(&mut rbuf) => r.map_err(|e| format!("read: {e}"))?,
        };
        if n == 0 {
            // nsqd closed the connection (it logs why); what we counted so far stands.
            eprintln!("{}", log_line(PREFIX, "connection closed by nsqd"));
            return Ok(());
        }
        let mut got = 0u64;
        while let Some(frame) = take_frame(&mut rbuf)? {
            match FrameType::from_i32(frame.frame_type) {
                Some(FrameType::Message) => {
                    let id = wire::message_id(&frame.data).ok_or_else(|| {
                        format!("short message frame ({} bytes)", frame.data.len())
                    })?;
                    wire::put_fin(&mut wbuf, id);
                    got += 1;
                }
                Some(FrameType::Response) if frame.data[..] == *HEARTBEAT => {
                    wbuf.extend_from_slice(wire::NOP)
                }
                Some(FrameType::Response) => {}
                Some(FrameType::Error) => {
                    let text = String::from_utf8_lossy(&frame.data);
                    eprintln!("{}", log_line(PREFIX, &text));
                }
                None => return Err(format!("unknown frame type {}", frame.frame_type)),
            }
        }
        if got > 0 {
            shared.record(got);
        }
        if !wbuf.is_empty() {
            stream
                .write_all(&wbuf)
                .await
                .map_err(|e| format!("write FIN: {e}"))?;
            wbuf.clear();
        }
    }
}
