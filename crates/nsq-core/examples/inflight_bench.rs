//! What the channel's in-flight queue costs per message in a drain, with the cache pressure
//! of a real one: `cargo run --release -p nsq-core --example inflight_bench -- [--messages N]
//! [--clients N] [--rdy N] [--fin-batch N] [--rounds N]` (defaults 3,000,000; 2; 2,500; 195,
//! the FINs a 4 KiB buffered writer such as NSQ's bench_reader sends at once; 5).
//!
//! Messages with 200-byte bodies and IDs from the daemon's own ID factory are delivered to
//! `--clients` consumers that each keep `--rdy` in flight; each delivery copies the frame into
//! a send buffer as the connection's writer would (which pushes older entries out of the CPU
//! cache, as in the daemon), and each consumer FINs its oldest messages in batches of
//! `--fin-batch` the way a connection's reader does (`Channel::finish_many`: prefetch, then one
//! by one; `NO_PREFETCH=1` skips the prefetch). Prints ns per message (insert + FIN) for each
//! round and the median; only the queue's work and the frame copy are timed.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nsq_core::inflight::InFlightQueue;
use nsq_core::message::{GuidFactory, Message};

fn arg(name: &str, default: usize) -> usize {
    let mut it = std::env::args();
    while let Some(a) = it.next() {
        if a == name {
            return it.next().and_then(|v| v.parse().ok()).unwrap_or(default);
        }
        if let Some(v) = a.strip_prefix(&format!("{name}=")) {
            return v.parse().unwrap_or(default);
        }
    }
    default
}

fn main() {
    let messages = arg("--messages", 3_000_000);
    let clients = arg("--clients", 2).max(1);
    let rdy = arg("--rdy", 2_500).max(1);
    let batch = arg("--fin-batch", 195).max(1);
    let rounds = arg("--rounds", 5).max(1);
    let body = Bytes::from(vec![b'x'; 200]);
    let mut guid = GuidFactory::new(1);
    let mut per_msg = Vec::new();
    for round in 0..rounds {
        // The backlog, built before the clock starts (a memory queue's messages).
        let mut now_ns = 1_700_000_000_000_000_000i64 + round as i64 * 1_000_000_000_000;
        let backlog: Vec<Message> = (0..messages)
            .map(|_| loop {
                if let Some(id) = guid.try_new_id(now_ns) {
                    break Message::new(id, body.clone());
                }
                now_ns += 1 << 20;
            })
            .collect();
        let mut q = InFlightQueue::new();
        let mut windows: Vec<VecDeque<_>> = vec![VecDeque::new(); clients];
        let mut send = Vec::with_capacity(1 << 16);
        let mut ids = Vec::with_capacity(batch);
        let timeout = Duration::from_secs(60);
        let t0 = Instant::now();
        let start = Instant::now();
        for (n, msg) in backlog.into_iter().enumerate() {
            let c = n % clients;
            // The writer: frame into the send buffer (flushed when full).
            send.extend_from_slice(&msg.id.0);
            send.extend_from_slice(&msg.body);
            if send.len() > (1 << 16) - 256 {
                std::hint::black_box(&send);
                send.clear();
            }
            windows[c].push_back(msg.id);
            q.insert(msg, None, c as u64, t0, timeout)
                .expect("unique IDs");
            if windows[c].len() >= rdy {
                ids.clear();
                ids.extend(windows[c].drain(..batch.min(rdy)));
                if std::env::var_os("NO_PREFETCH").is_none() {
                    q.prefetch(&ids);
                }
                for id in &ids {
                    q.remove_owned(c as u64, id).expect("in flight");
                }
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let ns = secs * 1e9 / messages as f64;
        println!(
            "round {round}: {ns:.1} ns per message ({} left in flight)",
            q.len()
        );
        per_msg.push(ns);
    }
    per_msg.sort_by(f64::total_cmp);
    println!(
        "median {:.1} ns per message ({messages} messages, {clients} clients, RDY {rdy}, FIN batch {batch})",
        per_msg[per_msg.len() / 2]
    );
}
