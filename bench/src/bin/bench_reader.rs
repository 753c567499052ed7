//! `bench_reader`: subscribes N connections to a channel, FINs every message it receives and
//! reports the consume rate (the Rust counterpart of NSQ's `bench/bench_reader`); `--drain`
//! stops once the channel has gone quiet, to time draining a backlog.
//!
//! How FINs reach the socket decides what the daemon sees, so `--fin-mode` models real clients:
//!
//! * `go` (default): like a go-nsq `Consumer`, which hands every finished message to its
//!   connection's write loop, and that loop writes and flushes each `FIN` on its own (go-nsq
//!   conn.go, `writeLoop` / `WriteCommand`): one write syscall per FIN, from a task separate
//!   from the one reading.
//! * `nsq`: like NSQ's own bench/bench_reader/bench_reader.go: FINs go into a 4 KiB buffered
//!   writer that is flushed when full, after every FIN in the last quarter of each RDY window
//!   (`msgCount % rdy > rdy * 0.75`), and once a second.
//! * `batch`: every FIN parsed from one socket read goes out in a single write.
//!
//! `--channels N` subscribes connection i to channel `<channel><i mod N>` (fan-out), and
//! `--latency` reads the send time a `bench_writer --rate` producer stamped into each body and
//! reports end-to-end latency percentiles from an HDR histogram.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use nsq_bench::report::{log_line, parse_deadline, Summary};
use nsq_bench::{default_connections, go_style_args, godur, net, wire};
use nsq_protocol::frame::{take_frame, FrameType, HEARTBEAT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

const PREFIX: &str = "[bench_reader] ";

/// Capacity of each connection's read buffer; one read can take up to this many bytes.
const READ_BUF: usize = 1 << 20;
/// Grow/compact the read buffer when fewer than this many bytes are free at its end.
const MIN_READ_ROOM: usize = 64 << 10;
/// With `--drain`: stop when no message arrived for this long (after the first one).
const DRAIN_IDLE: Duration = Duration::from_secs(1);
/// With `--drain`: stop when no message at all arrived for this long (nothing to drain; else
/// the in-flight messages an earlier reader left would arrive at their timeout and be timed
/// as a drain).
const DRAIN_NOTHING: Duration = Duration::from_secs(5);
/// How often the main task checks the stop conditions.
const POLL: Duration = Duration::from_millis(20);
/// `--fin-mode nsq`: the size of Go's default `bufio.Writer`.
const GO_BUFIO: usize = 4096;
/// Latencies above this (ns) are clamped into the histogram's top bucket.
const MAX_LATENCY_NS: u64 = 60_000_000_000;

/// How FIN commands are written (see the crate docs).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum FinMode {
    /// one write per FIN from a separate writer task, like go-nsq
    Go,
    /// NSQ's bench_reader: 4 KiB buffer, flushed per FIN in the last quarter of each RDY window
    Nsq,
    /// all FINs parsed from one read in one write
    Batch,
}

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
    /// RDY count to use on each connection (go-nsq's MaxInFlight with one nsqd)
    #[arg(long, default_value_t = 2500)]
    rdy: u64,
    /// number of subscribed connections [default: one per channel with --fin-mode go (a
    /// go-nsq Consumer has one connection per nsqd), else one per core, at least --channels]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    connections: Option<u32>,
    /// how FINs are written: go (one write per FIN), nsq (NSQ's bench_reader), batch
    #[arg(long, value_enum, default_value_t = FinMode::Go)]
    fin_mode: FinMode,
    /// subscribe to this many channels (<channel>0, <channel>1, ...; 1 = just <channel>)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    channels: u32,
    /// record end-to-end latency from the send time stamped in each body (bench_writer --rate)
    #[arg(long)]
    latency: bool,
    /// stop once no message arrived for 1 s after at least one did; the time reported is then
    /// the span from the first to the last message
    #[arg(long)]
    drain: bool,
    /// go mode: busy-wait this many microseconds before each FIN write, modelling the
    /// per-message work of a real consumer (go-nsq's handler goroutines and its channel
    /// hand-offs spread the FINs out; the daemon then wakes for nearly every one)
    #[arg(long, default_value_t = 0)]
    handler_us: u64,
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
    let channels = args.channels as usize;
    let n = args.connections.map_or_else(
        || match args.fin_mode {
            FinMode::Go => channels,
            _ => default_connections().max(channels),
        },
        |c| c as usize,
    );
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let sub = if channels == 1 {
            wire::encode_sub(&args.topic, &args.channel)
        } else {
            wire::encode_sub(&args.topic, &format!("{}{}", args.channel, i % channels))
        };
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
            let conf = Conf {
                mode: args.fin_mode,
                rdy: args.rdy,
                latency: args.latency,
                handler: Duration::from_micros(args.handler_us),
            };
            tokio::spawn(async move {
                let r = consume(stream, rbuf, &rdy, &shared, stop, conf).await;
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
        } else if args.drain && now >= start + DRAIN_NOTHING {
            break;
        }
        tokio::time::sleep_until((now + POLL).min(end_time).into()).await;
    }
    let _ = stop_tx.send(true);

    let mut first_err = None;
    let mut hist = new_histogram();
    for t in tasks {
        match t.await {
            Ok(Ok(h)) => {
                // Same bounds on both sides: adding cannot fail.
                let _ = hist.add(&h);
            }
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
    let mut result = summary.result_line("reader");
    if args.latency {
        let ms = |ns: u64| ns as f64 / 1e6;
        let line = format!(
            "latency: samples {} - p50 {:.3}ms - p99 {:.3}ms - p99.9 {:.3}ms - max {:.3}ms",
            hist.len(),
            ms(hist.value_at_quantile(0.5)),
            ms(hist.value_at_quantile(0.99)),
            ms(hist.value_at_quantile(0.999)),
            ms(hist.max()),
        );
        eprintln!("{}", log_line(PREFIX, &line));
        result.push_str(&format!(
            " lat_samples={} p50_ms={:.3} p99_ms={:.3} p999_ms={:.3} max_ms={:.3}",
            hist.len(),
            ms(hist.value_at_quantile(0.5)),
            ms(hist.value_at_quantile(0.99)),
            ms(hist.value_at_quantile(0.999)),
            ms(hist.max()),
        ));
    }
    println!("{result}");
    Ok(())
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

/// Per-connection settings.
#[derive(Clone, Copy)]
struct Conf {
    mode: FinMode,
    rdy: u64,
    latency: bool,
    handler: Duration,
}

/// What the go-mode writer task writes.
enum Out {
    Fin([u8; wire::ID_LEN]),
    Nop,
}

/// go-nsq's connection write loop: one write (and so one syscall) per command.
async fn go_writer(
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Out>,
    handler: Duration,
) {
    let mut cmd = Vec::with_capacity(wire::FIN_LEN);
    while let Some(o) = rx.recv().await {
        if !handler.is_zero() && matches!(o, Out::Fin(_)) {
            let t = Instant::now();
            while t.elapsed() < handler {
                std::hint::spin_loop();
            }
        }
        cmd.clear();
        match o {
            Out::Fin(id) => wire::put_fin(&mut cmd, &id),
            Out::Nop => cmd.extend_from_slice(wire::NOP),
        }
        if wr.write_all(&cmd).await.is_err() {
            return;
        }
    }
}

/// One connection's loop: `RDY`, then read as much as the socket has and FIN every message
/// as `conf.mode` says, answer heartbeats, until told to stop or the connection closes.
/// Returns the latency histogram (empty without `--latency`).
async fn consume(
    mut stream: TcpStream,
    mut rbuf: BytesMut,
    rdy: &[u8],
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
    conf: Conf,
) -> Result<Histogram<u64>, String> {
    stream
        .write_all(rdy)
        .await
        .map_err(|e| format!("write RDY: {e}"))?;
    let mut hist = new_histogram();
    let (mut rd, wr) = stream.into_split();
    // go mode: FINs go to a writer task; the other modes write from this task.
    let (go_tx, mut wr) = if conf.mode == FinMode::Go {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(go_writer(wr, rx, conf.handler));
        (Some(tx), None)
    } else {
        (None, Some(wr))
    };
    let mut wbuf: Vec<u8> = Vec::with_capacity(64 << 10);
    let mut msg_count = 0u64;
    // nsq mode: the reference tool flushes its buffered writer once a second.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if rbuf.capacity() - rbuf.len() < MIN_READ_ROOM {
            // All frames taken from the buffer have been dropped, so this reclaims the space
            // in front of the unparsed tail instead of allocating (unless a frame is huge).
            rbuf.reserve(READ_BUF / 2);
        }
        let n = tokio::select! {
            biased;
            _ = stop.changed() => return Ok(hist),
            _ = tick.tick(), if conf.mode == FinMode::Nsq => {
                flush(&mut wr, &mut wbuf).await?;
                continue;
            }
            r = rd.read_buf(&mut rbuf) => r.map_err(|e| format!("read: {e}"))?,
        };
        if n == 0 {
            // nsqd closed the connection (it logs why); what we counted so far stands.
            eprintln!("{}", log_line(PREFIX, "connection closed by nsqd"));
            return Ok(hist);
        }
        let now_ns = if conf.latency { wire::unix_nanos() } else { 0 };
        let mut got = 0u64;
        let mut saw_heartbeat = false;
        while let Some(frame) = take_frame(&mut rbuf)? {
            match FrameType::from_i32(frame.frame_type) {
                Some(FrameType::Message) => {
                    let id = wire::message_id(&frame.data).ok_or_else(|| {
                        format!("short message frame ({} bytes)", frame.data.len())
                    })?;
                    got += 1;
                    if conf.latency {
                        if let Some(sent) = wire::stamped_nanos(&frame.data) {
                            let _ =
                                hist.record(now_ns.saturating_sub(sent).clamp(1, MAX_LATENCY_NS));
                        }
                    }
                    match &go_tx {
                        Some(tx) => tx
                            .send(Out::Fin(*id))
                            .map_err(|_| "FIN writer ended".to_string())?,
                        None => {
                            wire::put_fin(&mut wbuf, id);
                            if conf.mode == FinMode::Nsq {
                                msg_count += 1;
                                if wbuf.len() >= GO_BUFIO
                                    || (msg_count % conf.rdy) as f64 > conf.rdy as f64 * 0.75
                                {
                                    flush(&mut wr, &mut wbuf).await?;
                                }
                            }
                        }
                    }
                }
                Some(FrameType::Response) if frame.data[..] == *HEARTBEAT => match &go_tx {
                    Some(tx) => tx
                        .send(Out::Nop)
                        .map_err(|_| "FIN writer ended".to_string())?,
                    None => {
                        wbuf.extend_from_slice(wire::NOP);
                        saw_heartbeat = true;
                    }
                },
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
        if conf.mode == FinMode::Batch || saw_heartbeat {
            flush(&mut wr, &mut wbuf).await?;
        }
    }
}

/// Writes and clears `wbuf` (nothing when empty).
async fn flush(wr: &mut Option<OwnedWriteHalf>, wbuf: &mut Vec<u8>) -> Result<(), String> {
    if let (Some(w), false) = (wr.as_mut(), wbuf.is_empty()) {
        w.write_all(wbuf)
            .await
            .map_err(|e| format!("write FIN: {e}"))?;
        wbuf.clear();
    }
    Ok(())
}
