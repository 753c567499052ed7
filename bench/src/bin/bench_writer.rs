//! `bench_writer`: publishes MPUB batches to nsqd over N connections for a fixed time and
//! reports the publish rate (the Rust counterpart of NSQ's `bench/bench_writer`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use clap::Parser;
use nsq_bench::report::{log_line, parse_deadline, Summary};
use nsq_bench::{default_connections, go_style_args, godur, net, wire};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const PREFIX: &str = "[bench_writer] ";

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
    /// number of publishing connections [default: one per core]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    connections: Option<u32>,
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
    let batch_size = args.batch_size as usize;
    let body_len = wire::mpub_body_len(batch_size, size);
    if body_len > 5 * 1024 * 1024 {
        eprintln!(
            "{PREFIX}warning: MPUB body of {body_len} bytes exceeds nsqd's default --max-body-size"
        );
    }
    // The one MPUB command every connection writes over and over.
    let mpub: Arc<[u8]> = wire::encode_mpub(&args.topic, batch_size, &vec![b'x'; size]).into();

    let n = args
        .connections
        .map_or_else(default_connections, |c| c as usize);
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
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|stream| {
            let mpub = Arc::clone(&mpub);
            tokio::spawn(publish(stream, mpub, batch_size as u64, end_time))
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

/// One connection's loop: MPUB, wait for `OK`, repeat until `end_time` has passed.
/// Returns the number of messages acknowledged.
async fn publish(
    mut stream: TcpStream,
    mpub: Arc<[u8]>,
    batch_size: u64,
    end_time: Instant,
) -> Result<u64, String> {
    let mut rbuf = BytesMut::with_capacity(4096);
    let mut count = 0u64;
    loop {
        stream
            .write_all(&mpub)
            .await
            .map_err(|e| format!("write MPUB: {e}"))?;
        net::expect_ok(&mut stream, &mut rbuf, "MPUB").await?;
        count += batch_size;
        if Instant::now() >= end_time {
            return Ok(count);
        }
    }
}
