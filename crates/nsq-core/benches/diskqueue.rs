//! DiskQueue throughput: 10k 200-byte records written in batches of 200, then read back in
//! batches of 200, through real files in a temp directory on /tmp (nsqd's defaults for file
//! size and sync cadence, so the background syncer fsyncs as it would in production).
//!
//! Plus one fixed-duration figure for durable publishing (printed, not a criterion group):
//! 2 writer threads each looping `put_batch(200 x 200 B)` + `wait_durable` for 5 s, reporting
//! msgs/s and data fdatasyncs/s (group commit shares syncs between the writers); then the same
//! with every batch going to two queues (a topic and its channel). It runs when no filter is
//! given or the filter mentions `durable`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use nsq_core::backend::BackendQueue;
use nsq_core::diskqueue::{DiskQueue, DiskQueueOptions};

const RECORDS: usize = 10_000;
const BATCH: usize = 200;
const SIZE: usize = 200;

fn write_then_read(q: &DiskQueue, payload: &[u8], out: &mut Vec<bytes::Bytes>) {
    for _ in 0..RECORDS / BATCH {
        q.put_batch(BATCH, &mut |_, buf| buf.extend_from_slice(payload))
            .unwrap();
    }
    let mut read = 0;
    while read < RECORDS {
        out.clear();
        let n = q.read_batch(BATCH, out);
        assert!(n > 0, "queue ran dry after {read}");
        black_box(&out);
        read += n;
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::Builder::new()
        .prefix("dq-bench")
        .tempdir_in("/tmp")
        .unwrap();
    let q = DiskQueue::open("bench", DiskQueueOptions::new(dir.path())).unwrap();
    let payload = vec![0x5au8; SIZE];
    let mut out = Vec::with_capacity(BATCH);

    let mut group = c.benchmark_group("diskqueue");
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.bench_function("write_read_10k_200B_msgs", |b| {
        b.iter(|| write_then_read(&q, &payload, &mut out))
    });
    group.throughput(Throughput::Bytes((RECORDS * SIZE) as u64));
    group.bench_function("write_read_10k_200B_bytes", |b| {
        b.iter(|| write_then_read(&q, &payload, &mut out))
    });
    group.finish();
    q.close().unwrap();
}

/// `queues` = 1: one queue; 2: every batch goes to two queues (a topic and its channel) and
/// waits for both.
fn durable_two_writers(queues: usize) {
    const WRITERS: usize = 2;
    const RUN: Duration = Duration::from_secs(5);
    let dir = tempfile::Builder::new()
        .prefix("dq-bench-durable")
        .tempdir_in("/tmp")
        .unwrap();
    let qs: Vec<Arc<DiskQueue>> = (0..queues)
        .map(|i| {
            DiskQueue::open(&format!("durable{i}"), DiskQueueOptions::new(dir.path())).unwrap()
        })
        .collect();
    let payload = vec![0x5au8; SIZE];
    let syncs_before: u64 = qs.iter().map(|q| q.data_syncs()).sum();
    let start = Instant::now();
    let threads: Vec<_> = (0..WRITERS)
        .map(|_| {
            let qs = qs.clone();
            let payload = payload.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let mut msgs = 0usize;
                while start.elapsed() < RUN {
                    let tickets: Vec<_> = qs
                        .iter()
                        .map(|q| {
                            q.put_batch(BATCH, &mut |_, buf| buf.extend_from_slice(&payload))
                                .unwrap()
                        })
                        .collect();
                    for (q, t) in qs.iter().zip(tickets) {
                        rt.block_on(q.wait_durable(t)).unwrap();
                    }
                    msgs += BATCH;
                }
                msgs
            })
        })
        .collect();
    let msgs: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let secs = start.elapsed().as_secs_f64();
    let syncs = qs.iter().map(|q| q.data_syncs()).sum::<u64>() - syncs_before;
    println!(
        "diskqueue/durable_2_writers_{queues}_queues: put_batch({BATCH} x {SIZE} B) to {queues} queue(s) + wait_durable, {WRITERS} threads, {secs:.1} s: {:.0} msgs/s, {:.0} fdatasyncs/s",
        msgs as f64 / secs,
        syncs as f64 / secs,
    );
    for q in qs {
        q.close().unwrap();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3));
    targets = bench
}

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let bench_mode = std::env::args().any(|a| a == "--bench");
    if bench_mode && (filters.is_empty() || filters.iter().any(|f| f.contains("durable"))) {
        durable_two_writers(1);
        durable_two_writers(2);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
