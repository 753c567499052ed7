//! nsq-client's throughput against a running nsqd, next to bench_writer/bench_reader:
//!
//! * `client_bench producer`: one `Producer` (one connection) publishing `--size`-byte single
//!   messages, first from one task (synchronous one-PUB-at-a-time, the baseline), then shared
//!   by `--tasks` tasks (pipelined); each phase runs `--runfor`.
//! * `client_bench consumer`: one `Consumer` with `--max-in-flight` and a handler that returns
//!   `Ok`, draining the topic's backlog (stops after `--runfor` or 1 s without a message).
//!
//! `--threads` sets the runtime's worker threads (default 1: the client's tasks then wake each
//! other without cross-thread signalling, as nsqd runs). Each line reports msgs/s and the client process's CPU time (utime + stime from
//! `/proc/self/stat`, in USER_HZ = 100 ticks) per message.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nsq_client::{Config, Consumer, Message, Producer};

struct Args {
    mode: String,
    addr: String,
    topic: String,
    channel: String,
    size: usize,
    tasks: usize,
    runfor: Duration,
    max_in_flight: usize,
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mode = it
        .next()
        .ok_or("usage: client_bench producer|consumer [--flag=value...]")?;
    let mut a = Args {
        mode,
        addr: "127.0.0.1:4150".into(),
        topic: "sub_bench".into(),
        channel: "ch".into(),
        size: 200,
        tasks: 8,
        runfor: Duration::from_secs(5),
        max_in_flight: 2500,
        threads: 1,
    };
    for arg in it {
        let (k, v) = arg
            .trim_start_matches('-')
            .split_once('=')
            .ok_or_else(|| format!("expected --flag=value, got {arg}"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|e| format!("{k}: {e}"));
        match k {
            "nsqd-tcp-address" => a.addr = v.into(),
            "topic" => a.topic = v.into(),
            "channel" => a.channel = v.into(),
            "size" => a.size = num(v)?,
            "tasks" => a.tasks = num(v)?,
            "runfor" => a.runfor = Duration::from_secs_f64(v.parse().map_err(|e| format!("{e}"))?),
            "max-in-flight" => a.max_in_flight = num(v)?,
            "threads" => a.threads = num(v)?,
            _ => return Err(format!("unknown flag {k}")),
        }
    }
    Ok(a)
}

/// utime + stime of this process.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the `(comm)`: state is field 3; utime/stime are fields 14/15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn report(what: &str, msgs: u64, wall: Duration, cpu: Duration) -> f64 {
    let rate = msgs as f64 / wall.as_secs_f64();
    let per = if msgs > 0 {
        cpu.as_nanos() as f64 / msgs as f64 / 1000.0
    } else {
        0.0
    };
    println!(
        "{what:<28} {msgs:>9} msgs in {:>6.2}s  {rate:>10.0} msgs/s  client CPU {per:>6.2} us/msg",
        wall.as_secs_f64()
    );
    rate
}

async fn publish_phase(p: &Producer, a: &Args, tasks: usize) -> (u64, Duration, Duration) {
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let body = bytes::Bytes::from(vec![b'a'; a.size]);
    let (cpu0, t0) = (cpu_time(), Instant::now());
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (p, count, stop, body, topic) = (
            p.clone(),
            count.clone(),
            stop.clone(),
            body.clone(),
            a.topic.clone(),
        );
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                p.publish(&topic, &body).await.expect("publish");
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(a.runfor).await;
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await.expect("publisher task");
    }
    (
        count.load(Ordering::Relaxed),
        t0.elapsed(),
        cpu_time() - cpu0,
    )
}

async fn producer(a: Args) {
    let p = Producer::new(&a.addr, Config::default()).expect("producer");
    p.connect().await.expect("connect");
    let (n, wall, cpu) = publish_phase(&p, &a, 1).await;
    let sync = report("producer sync (1 task)", n, wall, cpu);
    let (n, wall, cpu) = publish_phase(&p, &a, a.tasks).await;
    let shared = report(
        &format!("producer shared ({} tasks)", a.tasks),
        n,
        wall,
        cpu,
    );
    println!("pipelined / synchronous: {:.1}x", shared / sync);
}

async fn consumer(a: Args) {
    let config = Config {
        max_in_flight: a.max_in_flight,
        ..Config::default()
    };
    let consumer = Consumer::new(&a.topic, &a.channel, config).expect("consumer");
    let stop = consumer.stop_handle();
    let received = Arc::new(AtomicU64::new(0));
    let r = received.clone();
    consumer.connect_to_nsqd(&a.addr).await.expect("connect");
    let runner = tokio::spawn(consumer.run(
        move |_m: &Message| {
            r.fetch_add(1, Ordering::Relaxed);
            std::future::ready(Ok::<(), std::io::Error>(()))
        },
        1,
    ));
    // The clock starts with the first message.
    while received.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (cpu0, t0) = (cpu_time(), Instant::now());
    let start_count = received.load(Ordering::Relaxed);
    let (mut last, mut last_change) = (start_count, Instant::now());
    while t0.elapsed() < a.runfor {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = received.load(Ordering::Relaxed);
        if now != last {
            (last, last_change) = (now, Instant::now());
        } else if last_change.elapsed() > Duration::from_secs(1) {
            break;
        }
    }
    let wall = last_change.min(Instant::now()) - t0;
    let cpu = cpu_time() - cpu0;
    report(
        &format!("consumer (max_in_flight {})", a.max_in_flight),
        last - start_count,
        wall,
        cpu,
    );
    stop.stop().await;
    let _ = runner.await;
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads.max(1))
        .enable_all()
        .build()
        .expect("runtime");
    match a.mode.as_str() {
        "producer" => rt.block_on(producer(a)),
        "consumer" => rt.block_on(consumer(a)),
        m => {
            eprintln!("unknown mode {m}: producer | consumer");
            std::process::exit(2);
        }
    }
}
