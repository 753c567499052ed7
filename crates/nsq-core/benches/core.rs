//! Throughput of the queue engine without sockets: publish into a topic with three channels and
//! drain every channel (take + FIN), with the channel queues in memory and, in a second variant,
//! mostly going through the DiskQueue.
//!
//! Run: `cargo bench -p nsq-core --bench core -- --warm-up-time 1 --measurement-time 3`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nsq_core::{Channel, Engine, Message, NoHooks, Options, Topic};

/// Messages published per iteration.
const MESSAGES: usize = 10_000;
/// Messages per `put_many` (an MPUB).
const BATCH: usize = 200;
const BODY_LEN: usize = 200;
/// Messages per `take` (a generous RDY window).
const TAKE: usize = 2500;
const MSG_TIMEOUT: Duration = Duration::from_secs(60);

struct Setup {
    /// Kept alive for the engine's data files.
    _dir: tempfile::TempDir,
    engine: Arc<Engine>,
    topic: Arc<Topic>,
    channels: Vec<Arc<Channel>>,
    bodies: Vec<Bytes>,
}

fn setup(mem_queue_size: usize) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        data_path: dir.path().to_path_buf(),
        mem_queue_size,
        ..Options::default()
    };
    let engine = Engine::new(opts, Arc::new(NoHooks));
    let topic = engine.get_or_create_topic("bench").expect("topic").0;
    let channels = ["a", "b", "c"]
        .iter()
        .map(|n| topic.get_or_create_channel(n).expect("channel").0)
        .collect();
    let bodies = (0..MESSAGES)
        .map(|i| {
            let mut b = format!("{i:08}").into_bytes();
            b.resize(BODY_LEN, b'x');
            Bytes::from(b)
        })
        .collect();
    Setup {
        _dir: dir,
        engine,
        topic,
        channels,
        bodies,
    }
}

/// One iteration: publish everything, then drain each channel completely.
fn publish_and_drain(s: &Setup, out: &mut Vec<Message>) {
    for chunk in s.bodies.chunks(BATCH) {
        s.topic
            .put_many(chunk.iter().cloned(), Duration::ZERO)
            .expect("publish");
    }
    for ch in &s.channels {
        let mut drained = 0;
        while drained < MESSAGES {
            out.clear();
            let n = ch.take(1, TAKE, MSG_TIMEOUT, 0, out);
            assert!(
                n > 0,
                "channel {} stalled at {drained}/{MESSAGES}",
                ch.name()
            );
            for m in out.iter() {
                ch.finish(1, &m.id).expect("FIN");
            }
            drained += n;
        }
    }
}

fn bench_publish_drain(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let _enter = rt.enter();

    let mut group = c.benchmark_group("publish 10k x 200 B into 3 channels and drain");
    group.throughput(Throughput::Elements(MESSAGES as u64));
    group.sample_size(20);
    for (label, mem) in [("memory", 100_000), ("diskqueue (mem 1000)", 1000)] {
        let s = setup(mem);
        let mut out = Vec::with_capacity(TAKE);
        group.bench_with_input(BenchmarkId::from_parameter(label), &s, |b, s| {
            b.iter(|| publish_and_drain(s, &mut out));
        });
        for ch in &s.channels {
            assert_eq!(ch.depth(), 0);
        }
        s.engine.close();
    }
    group.finish();
}

criterion_group!(benches, bench_publish_drain);
criterion_main!(benches);
