//! DiskQueue throughput: 10k 200-byte records written in batches of 200, then read back in
//! batches of 200, through real files in a temp directory on /tmp (nsqd's defaults for file
//! size and sync cadence, so the background syncer fsyncs as it would in production).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
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

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
