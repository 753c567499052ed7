//! `bench_writer`: publishes to nsqd over N connections for a fixed time and reports the
//! publish rate (the Rust counterpart of NSQ's `bench/bench_writer`).
//!
//! * `--mode mpub` (default): each connection sends `MPUB` batches and waits for each `OK`,
//!   as NSQ's tool does.
//! * `--mode pub`: each connection sends one `PUB` and waits for its `OK` before the next,
//!   like go-nsq's synchronous `Producer.Publish` called from N goroutines.
//! * `--mode producer`: go-nsq's `Producer` shared by `--concurrency` goroutines (default 8):
//!   one connection (per `--connections`), each `PUB` written on its own (go-nsq flushes
//!   every command), up to `--concurrency` waiting for their `OK`s; each `OK` lets its
//!   publisher send the next `PUB`.
//! * `--rate R`: a fixed offered load of R msgs/s in single `PUB`s (one write each, not waiting
//!   for the `OK`s, like go-nsq's `PublishAsync`), each body starting with its send time (Unix
//!   nanoseconds, big-endian) for `bench_reader --latency`.
//!
//! `--msgs N` stops once N messages were sent.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use clap::{Parser, ValueEnum};
use nsq_bench::report::{log_line, parse_deadline, Summary};
use nsq_bench::{default_connections, go_style_args, godur, net, wire};
use nsq_protocol::frame::{take_frame, FrameType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PREFIX: &str = "[bench_writer] ";

/// What each connection sends.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// MPUB batches of --batch-size, one at a time
    Mpub,
    /// single PUBs, each waiting for its OK (go-nsq's synchronous Publish)
    Pub,
    /// one go-nsq Producer per connection shared by --concurrency publishers: PUBs
    /// pipelined, one write each
    Producer,
}

/// Publish fixed-size messages to nsqd with MPUB as fast as the request/response cycle allows.
#[derive(Parser, Debug)]
#[command(name = "bench_writer")]
struct Args {
    /// duration of time to run (Go syntax: 10s, 1m30s, 500ms)
    #[arg(long, default_value = "10s", value_parser = godur::parse)]
    runfor: Duration,
    /// <addr>:<port> to connect to nsqd
    #[arg(long, default_value = "127.0.0.1:4150")]
    nsqd_tcp_address: String,
    /// topic to publish messages to
    #[arg(long, default_value = "sub_bench")]
    topic: String,
    /// size of messages in bytes
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    size: u32,
    /// number of messages per MPUB
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    batch_size: u32,
    /// deadline to start the benchmark run, "2006-01-02 15:04:05" (UTC)
    #[arg(long)]
    deadline: Option<String>,
    /// number of publishing connections [default: one per core for mpub, 8 for pub, 1 with
    /// --rate]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    connections: Option<u32>,
    /// mpub (batches), pub (one synchronous PUB at a time per connection) or producer
    /// (go-nsq's Producer used by --concurrency goroutines)
    #[arg(long, value_enum, default_value_t = Mode::Mpub)]
    mode: Mode,
    /// publishers sharing each connection in --mode producer
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
    /// offered load in msgs/s (single PUBs, send time stamped in the body); overrides --mode
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    rate: Option<u64>,
    /// stop after this many messages in total
    #[arg(long)]
    msgs: Option<u64>,
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
    let size = args.size as usize;
    let batch_size = match (args.rate, args.mode) {
        (None, Mode::Mpub) => args.batch_size as usize,
        _ => 1,
    };
    let body_len = wire::mpub_body_len(batch_size, size);
    if body_len > 5 * 1024 * 1024 {
        eprintln!(
            "{PREFIX}warning: MPUB body of {body_len} bytes exceeds nsqd's default --max-body-size"
        );
    }
    // The one MPUB (or PUB) command every connection writes over and over.
    let body = vec![b'x'; size.max(if args.rate.is_some() { 8 } else { 0 })];
    let cmd: Arc<[u8]> = if args.mode == Mode::Mpub && args.rate.is_none() {
        wire::encode_mpub(&args.topic, batch_size, &body).into()
    } else {
        let mut v = Vec::new();
        wire::put_pub(&mut v, &args.topic, &body);
        v.into()
    };

    let n = args.connections.map_or_else(
        || match (args.rate, args.mode) {
            (Some(_), _) => 1,
            (None, Mode::Pub) => 8,
            (None, Mode::Producer) => 1,
            (None, Mode::Mpub) => default_connections(),
        },
        |c| c as usize,
    );
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(net::connect(&args.nsqd_tcp_address).await?);
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

    let start = Instant::now();
    let end_time = start + args.runfor;
    let budget = Arc::new(Budget {
        left: AtomicU64::new(args.msgs.unwrap_or(u64::MAX)),
    });
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|stream| {
            let cmd = Arc::clone(&cmd);
            let budget = Arc::clone(&budget);
            match args.rate {
                Some(rate) => tokio::spawn(offer(
                    stream,
                    args.topic.clone(),
                    body.clone(),
                    rate as f64 / n as f64,
                    start,
                    end_time,
                    budget,
                )),
                None if args.mode == Mode::Producer => tokio::spawn(producer(
                    stream,
                    cmd,
                    u64::from(args.concurrency),
                    end_time,
                    budget,
                )),
                None => tokio::spawn(publish(stream, cmd, batch_size as u64, end_time, budget)),
            }
        })
        .collect();
    let mut total = 0u64;
    let mut first_err = None;
    for t in tasks {
        match t.await {
            Ok(Ok(c)) => total += c,
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(e) => first_err = first_err.or(Some(format!("publisher task failed: {e}"))),
        }
    }
    let elapsed = start.elapsed();
    if let Some(e) = first_err {
        return Err(e);
    }

    let summary = Summary {
        msgs: total,
        elapsed,
        size,
    };
    eprintln!("{}", log_line(PREFIX, &summary.go_line()));
    println!("{}", summary.result_line("writer"));
    Ok(())
}

/// What is left of `--msgs`, shared by the connections.
struct Budget {
    left: AtomicU64,
}

impl Budget {
    /// Claims `n` messages; false once the budget is spent.
    fn claim(&self, n: u64) -> bool {
        self.left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(n))
            .is_ok()
    }
}

/// One connection's loop: MPUB (or PUB), wait for `OK`, repeat until `end_time` has passed.
/// Returns the number of messages acknowledged.
async fn publish(
    mut stream: TcpStream,
    cmd: Arc<[u8]>,
    batch_size: u64,
    end_time: Instant,
    budget: Arc<Budget>,
) -> Result<u64, String> {
    let mut rbuf = BytesMut::with_capacity(4096);
    let mut count = 0u64;
    while budget.claim(batch_size) {
        stream
            .write_all(&cmd)
            .await
            .map_err(|e| format!("write PUB: {e}"))?;
        net::expect_ok(&mut stream, &mut rbuf, "PUB").await?;
        count += batch_size;
        if Instant::now() >= end_time {
            break;
        }
    }
    Ok(count)
}

/// `--mode producer`: go-nsq's `Producer` (producer.go, `router`: one `WriteCommand`, i.e.
/// one write and flush, per `PUB`; responses matched to publishers in order) used by
/// `concurrency` goroutines calling `Publish` in a loop. Returns the messages acknowledged.
async fn producer(
    stream: TcpStream,
    cmd: Arc<[u8]>,
    concurrency: u64,
    end_time: Instant,
    budget: Arc<Budget>,
) -> Result<u64, String> {
    let (mut rd, mut wr) = stream.into_split();
    let mut rbuf = BytesMut::with_capacity(4096);
    let (mut in_flight, mut oks) = (0u64, 0u64);
    while in_flight < concurrency && budget.claim(1) {
        wr.write_all(&cmd)
            .await
            .map_err(|e| format!("write PUB: {e}"))?;
        in_flight += 1;
    }
    loop {
        while let Some(f) = take_frame(&mut rbuf)? {
            match FrameType::from_i32(f.frame_type) {
                Some(FrameType::Response) if f.data[..] == *b"OK" => {}
                // `_heartbeat_`: ignored (a run shorter than two heartbeat intervals is not closed)
                Some(FrameType::Response) => continue,
                _ => return Err(String::from_utf8_lossy(&f.data).into_owned()),
            }
            oks += 1;
            in_flight -= 1;
            if Instant::now() < end_time && budget.claim(1) {
                wr.write_all(&cmd)
                    .await
                    .map_err(|e| format!("write PUB: {e}"))?;
                in_flight += 1;
            }
        }
        if in_flight == 0 {
            return Ok(oks);
        }
        rbuf.reserve(4096);
        match rd.read_buf(&mut rbuf).await {
            Ok(0) => return Err("nsqd closed the connection".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// `--rate`: sends single PUBs on schedule (`rate` msgs/s from `start`), each with its send
/// time in the first 8 body bytes, without waiting for the `OK`s, which a reader task counts.
/// Sending happens in ~1 ms ticks (the timer's resolution), one write per PUB. Returns the
/// number of messages acknowledged.
async fn offer(
    stream: TcpStream,
    topic: String,
    mut body: Vec<u8>,
    rate: f64,
    start: Instant,
    end_time: Instant,
    budget: Arc<Budget>,
) -> Result<u64, String> {
    let (mut rd, mut wr) = stream.into_split();
    let acks = tokio::spawn(async move {
        let mut rbuf = BytesMut::with_capacity(4096);
        let mut oks = 0u64;
        loop {
            while let Some(f) = take_frame(&mut rbuf)? {
                match FrameType::from_i32(f.frame_type) {
                    Some(FrameType::Response) if f.data[..] == *b"OK" => oks += 1,
                    Some(FrameType::Response) => {}
                    _ => return Err(String::from_utf8_lossy(&f.data).into_owned()),
                }
            }
            rbuf.reserve(4096);
            match rd.read_buf(&mut rbuf).await {
                Ok(0) | Err(_) => return Ok(oks),
                Ok(_) => {}
            }
        }
    });
    let mut cmd = Vec::with_capacity(body.len() + topic.len() + 16);
    let mut sent = 0u64;
    'run: loop {
        let now = Instant::now();
        if now >= end_time {
            break;
        }
        let due = (now.duration_since(start).as_secs_f64() * rate) as u64;
        while sent < due {
            if !budget.claim(1) {
                break 'run;
            }
            body[..8].copy_from_slice(&wire::unix_nanos().to_be_bytes());
            cmd.clear();
            wire::put_pub(&mut cmd, &topic, &body);
            wr.write_all(&cmd)
                .await
                .map_err(|e| format!("write PUB: {e}"))?;
            sent += 1;
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    // Let the OKs arrive, then close our side so the reader task sees EOF after nsqd's.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = wr.shutdown().await;
    match tokio::time::timeout(Duration::from_secs(5), acks).await {
        Ok(Ok(r)) => r.map(|oks| oks.min(sent)),
        Ok(Err(e)) => Err(format!("ack reader failed: {e}")),
        Err(_) => Err("timed out waiting for OKs".to_string()),
    }
}
