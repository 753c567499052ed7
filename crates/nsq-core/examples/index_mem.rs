//! What a replica's backlog index costs per held message (issue 29): memory, counted by a
//! global allocator, and the time to apply the records a replica receives.
//!
//! `cargo run --release -p nsq-core --example index_mem -- [--messages N] [--pub-batch N]
//! [--fanout-batch N] [--fin-batch N]` (defaults 1,000,000; 1 message per PUB as a PUB
//! command gives; 1,024 IDs per FANOUT, the topic pump's batch; 1 ID per FIN, as one FIN
//! command gives). Six flows, each into a fresh index:
//!
//! * `topic→1`: PUBs to a topic without channels (pending on the topic), a FANOUT of them
//!   to one channel, FINs on it.
//! * `topic→3`: the same, fanned out to three channels, FINs on each.
//! * `direct 1` / `direct 3`: PUBs straight to one / three channels (a topic whose channels
//!   exist), FINs on each.
//! * `deferred 1`: DPUBs straight to one channel, FINs on it.
//! * `scattered`: PUBs straight to one channel, FINs of all but every eighth in a scattered
//!   order (what is left of the index then), then FINs of all.
//!
//! For each it prints the index's heap per held message after each step (jemalloc's
//! `stats.allocated`, nsqd's allocator, less what was allocated before the index was made,
//! divided by the messages held) and the apply time per record and per message of each step.
//! Records are built in batches before the clock starts and dropped after; only
//! `Index::apply` is timed.

use std::time::{Duration, Instant};

use bytes::Bytes;
use nsq_core::replica::{Index, Loc, Record};
use nsq_protocol::replication::{Fanout, Fin, Frame, Pub, PubMessage};
use nsq_protocol::MessageId;
use tikv_jemalloc_ctl::{epoch, stats};

/// The allocator nsqd runs with (apps/nsqd/src/main.rs).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes the application holds, as jemalloc counts them (`stats.allocated`: each allocation
/// at its size class, so rounding up is included; jemalloc adds no per-allocation header).
fn live() -> i64 {
    epoch::advance().expect("jemalloc epoch");
    stats::allocated::read().expect("jemalloc stats.allocated") as i64
}

const TOPIC: &str = "orders";
const CHANNELS: [&str; 3] = ["billing", "shipping", "audit"];
/// Records built at a time, outside the timed part.
const BUILD: usize = 8192;
/// Bytes per body (only the length reaches the index).
const BODY: usize = 200;

/// The records of one step, built lazily in batches.
type Step<'a> = Box<dyn FnMut(&mut Feed) -> Option<Record> + 'a>;

/// The replica's log position: seq and place in the segment files, as a store advances it.
struct Feed {
    seq: u64,
    segment: u64,
    offset: u64,
}

impl Feed {
    fn loc(&mut self, len: u32) -> Loc {
        if self.offset >= 64 << 20 {
            self.segment += 1;
            self.offset = 0;
        }
        let loc = Loc {
            segment: self.segment,
            offset: self.offset,
            len,
        };
        self.offset += u64::from(len);
        loc
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

/// IDs as the origin's GUID factory makes them: `(ts << 22) | (node << 12) | sequence`, here
/// 100 per time unit (about 95k messages/s).
fn id(n: u64) -> MessageId {
    let ts = 440_000_000_000u64 + n / 100;
    MessageId::from_u64((ts << 22) | (617 << 12) | (n % 100))
}

/// Applies a step's records; returns (records, time).
fn run(ix: &mut Index, feed: &mut Feed, mut step: Step<'_>) -> (u64, Duration) {
    let mut records = 0;
    let mut took = Duration::ZERO;
    let mut batch: Vec<(Record, Loc)> = Vec::with_capacity(BUILD);
    loop {
        batch.clear();
        while batch.len() < BUILD {
            let Some(r) = step(feed) else { break };
            let len = match &r {
                Record::Frame(Frame::Pub(p)) => 40 + p.messages.len() as u32 * (28 + BODY as u32),
                _ => 64,
            };
            let loc = feed.loc(len);
            batch.push((r, loc));
        }
        if batch.is_empty() {
            return (records, took);
        }
        let start = Instant::now();
        for (r, loc) in &batch {
            ix.apply(r, *loc);
        }
        took += start.elapsed();
        records += batch.len() as u64;
    }
}

fn publish(n: u64, per: u64, channels: &'static [&'static str], defer: i64) -> Step<'static> {
    let mut next = 0u64;
    let body = Bytes::from(vec![b'x'; BODY]);
    Box::new(move |feed| {
        if next >= n {
            return None;
        }
        let end = (next + per).min(n);
        let messages = (next..end)
            .map(|i| PubMessage {
                id: id(i),
                timestamp: 1_700_000_000_000_000_000 + i as i64,
                body: body.clone(),
            })
            .collect();
        next = end;
        Some(Record::Frame(Frame::Pub(Pub {
            seq: feed.next_seq(),
            topic: TOPIC.into(),
            defer_until: defer,
            channels: channels.iter().map(|c| c.to_string()).collect(),
            messages,
        })))
    })
}

fn fanout(n: u64, per: u64, channels: &'static [&'static str]) -> Step<'static> {
    let mut next = 0u64;
    Box::new(move |feed| {
        if next >= n {
            return None;
        }
        let end = (next + per).min(n);
        let ids = (next..end).map(id).collect();
        next = end;
        Some(Record::Frame(Frame::Fanout(Fanout {
            seq: feed.next_seq(),
            topic: TOPIC.into(),
            more: false,
            channels: channels.iter().map(|c| c.to_string()).collect(),
            ids,
        })))
    })
}

/// FINs on each of `channels` in turn, per batch of IDs (the channels consume alongside).
fn finish(n: u64, per: u64, channels: &'static [&'static str]) -> Step<'static> {
    let mut next = 0u64;
    let mut c = 0usize;
    Box::new(move |feed| {
        if next >= n {
            return None;
        }
        let end = (next + per).min(n);
        let ids = (next..end).map(id).collect();
        let channel = channels[c].to_string();
        c += 1;
        if c == channels.len() {
            c = 0;
            next = end;
        }
        Some(Record::Frame(Frame::Fin(Fin {
            seq: feed.next_seq(),
            topic: TOPIC.into(),
            channel,
            ids,
        })))
    })
}

/// FINs one ID at a time of all the messages but every eighth, in a scattered order (a
/// stride through the IDs), on the first of `channels`.
fn finish_scattered(n: u64, channels: &'static [&'static str]) -> Step<'static> {
    // 7,919 is prime: unless it divides n, the stride visits every ID once.
    let stride = if n.is_multiple_of(7919) { 1 } else { 7919 };
    let mut i = 0u64;
    Box::new(move |feed| loop {
        if i >= n {
            return None;
        }
        let k = i * stride % n;
        i += 1;
        if !k.is_multiple_of(8) {
            return Some(Record::Frame(Frame::Fin(Fin {
                seq: feed.next_seq(),
                topic: TOPIC.into(),
                channel: channels[0].to_string(),
                ids: vec![id(k)],
            })));
        }
    })
}

struct Args {
    messages: u64,
    pub_batch: u64,
    fanout_batch: u64,
    fin_batch: u64,
}

fn report(what: &str, held: u64, base: i64, steps: &[(&str, u64, u64, Duration)]) {
    let b = live() - base;
    let mut line = format!("{what:<36}");
    if held > 0 {
        line += &format!(" {:>7.1} B/msg", b as f64 / held as f64);
    } else {
        line += &format!(" {b:>7} B left");
    }
    for (name, records, msgs, took) in steps {
        line += &format!(
            "  | {name}: {:.0} ns/record, {:.0} ns/msg",
            took.as_nanos() as f64 / *records as f64,
            took.as_nanos() as f64 / *msgs as f64
        );
    }
    println!("{line}");
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// PUB to the topic, FANOUT to the channels.
    Fanned,
    /// PUB to the channels.
    Direct,
    /// DPUB to the channels (deferred by a minute).
    Deferred,
    /// PUB to the channels, then FINs of 7 in 8 in a scattered order before the rest.
    Scattered,
}

/// One flow; returns the total apply time of its PUBs, FANOUTs and FINs.
fn flow(a: &Args, name: &str, how: Flow, channels: &'static [&'static str]) -> Duration {
    let fanned = how == Flow::Fanned;
    let n = a.messages;
    let base = live();
    let mut ix = Index::new();
    let mut feed = Feed {
        seq: 0,
        segment: 1,
        offset: 0,
    };
    let mut total = Duration::ZERO;
    let direct: &'static [&'static str] = if fanned { &[] } else { channels };
    let defer = if how == Flow::Deferred {
        1_700_000_060_000_000_000
    } else {
        0
    };
    let (r, t) = run(&mut ix, &mut feed, publish(n, a.pub_batch, direct, defer));
    total += t;
    assert_eq!(ix.messages(), n);
    let state = match how {
        Flow::Fanned => "on the topic".to_string(),
        Flow::Direct => format!("on {} channel(s)", channels.len()),
        Flow::Deferred => format!("deferred on {} channel(s)", channels.len()),
        Flow::Scattered => format!("on {} channel(s)", channels.len()),
    };
    report(
        &format!("{name}: PUB, {state}"),
        n,
        base,
        &[("PUB", r, n, t)],
    );
    if fanned {
        let (r, t) = run(&mut ix, &mut feed, fanout(n, a.fanout_batch, channels));
        total += t;
        assert_eq!(ix.messages(), n);
        let what = format!("{name}: FANOUT, on {} channel(s)", channels.len());
        report(&what, n, base, &[("FANOUT", r, n, t)]);
    }
    if how == Flow::Scattered {
        let (r, t) = run(&mut ix, &mut feed, finish_scattered(n, channels));
        total += t;
        let held = ix.messages();
        assert_eq!(held, n.div_ceil(8));
        let what = format!("{name}: FIN 7 in 8, scattered");
        report(&what, held, base, &[("FIN", r, r, t)]);
    }
    let (r, t) = run(&mut ix, &mut feed, finish(n, a.fin_batch, channels));
    total += t;
    assert_eq!(ix.messages(), 0);
    let settled = n * channels.len() as u64;
    report(
        &format!("{name}: FIN, all settled"),
        0,
        base,
        &[("FIN", r, settled, t)],
    );
    drop(ix);
    total
}

fn main() {
    let mut a = Args {
        messages: 1_000_000,
        pub_batch: 1,
        fanout_batch: 1024,
        fin_batch: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let v: u64 = args
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{flag} needs a number"));
        match flag.as_str() {
            "--messages" => a.messages = v,
            "--pub-batch" => a.pub_batch = v.max(1),
            "--fanout-batch" => a.fanout_batch = v.max(1),
            "--fin-batch" => a.fin_batch = v.max(1),
            _ => panic!("unknown flag {flag}"),
        }
    }
    println!(
        "{} messages, {} per PUB, {} per FANOUT, {} per FIN",
        a.messages, a.pub_batch, a.fanout_batch, a.fin_batch
    );
    let totals = [
        ("topic→1", flow(&a, "topic→1", Flow::Fanned, &CHANNELS[..1])),
        ("topic→3", flow(&a, "topic→3", Flow::Fanned, &CHANNELS)),
        (
            "direct 1",
            flow(&a, "direct 1", Flow::Direct, &CHANNELS[..1]),
        ),
        ("direct 3", flow(&a, "direct 3", Flow::Direct, &CHANNELS)),
        (
            "deferred 1",
            flow(&a, "deferred 1", Flow::Deferred, &CHANNELS[..1]),
        ),
        (
            "scattered",
            flow(&a, "scattered", Flow::Scattered, &CHANNELS[..1]),
        ),
    ];
    let line: Vec<String> = totals
        .iter()
        .map(|(n, t)| format!("{n} {:.3} s", t.as_secs_f64()))
        .collect();
    println!("apply time, PUB + FANOUT + FIN: {}", line.join(", "));
}
