//! Integration tests of the queue engine: topics, channels, in-flight/deferred tracking, the
//! queue scanner, ephemeral auto-deletion, deletion and shutdown persistence.
//!
//! The reference is nsqd/topic.go (messagePump, PutMessage), nsqd/channel.go (PutMessage,
//! StartInFlightTimeout, processInFlightQueue, processDeferredQueue, exit) and nsqd/nsqd.go
//! (queueScanLoop, resizePool); docs/durability.md covers what we do differently. Time is
//! always Tokio's paused clock (`start_paused` + `advance`), never a real sleep; durable topics
//! and channels get real DiskQueues in a temporary data directory.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nsq_core::client_stats::ClientStats;
use nsq_core::{
    scanner, Channel, Consumer, Engine, FinishError, Hooks, Message, NoHooks, Options,
    RequeueError, ScanOptions, SubscribeError, Topic,
};
use nsq_protocol::MessageId;
use parking_lot::Mutex;
use tempfile::TempDir;

// ---- helpers ------------------------------------------------------------------------------

/// A consumer connection stand-in that counts the callbacks the channel makes.
struct TestConsumer {
    id: u64,
    timeouts: AtomicUsize,
    empties: AtomicUsize,
    closes: AtomicUsize,
}

impl TestConsumer {
    fn new(id: u64) -> Arc<Self> {
        Arc::new(TestConsumer {
            id,
            timeouts: AtomicUsize::new(0),
            empties: AtomicUsize::new(0),
            closes: AtomicUsize::new(0),
        })
    }

    fn timeouts(&self) -> usize {
        self.timeouts.load(Ordering::SeqCst)
    }

    fn empties(&self) -> usize {
        self.empties.load(Ordering::SeqCst)
    }

    fn closes(&self) -> usize {
        self.closes.load(Ordering::SeqCst)
    }
}

impl Consumer for TestConsumer {
    fn id(&self) -> u64 {
        self.id
    }
    fn on_timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::SeqCst);
    }
    fn on_empty(&self) {
        self.empties.fetch_add(1, Ordering::SeqCst);
    }
    fn close(&self) {
        self.closes.fetch_add(1, Ordering::SeqCst);
    }
    fn stats(&self) -> ClientStats {
        ClientStats::default()
    }
}

/// Records every hook call as a line of text, in order.
#[derive(Default)]
struct RecordingHooks {
    events: Mutex<Vec<String>>,
}

impl RecordingHooks {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.events.lock())
    }
}

impl Hooks for RecordingHooks {
    fn topic_created(&self, topic: &str) {
        self.events.lock().push(format!("topic_created {topic}"));
    }
    fn topic_deleted(&self, topic: &str) {
        self.events.lock().push(format!("topic_deleted {topic}"));
    }
    fn channel_created(&self, topic: &str, channel: &str) {
        self.events
            .lock()
            .push(format!("channel_created {topic}/{channel}"));
    }
    fn channel_deleted(&self, topic: &str, channel: &str) {
        self.events
            .lock()
            .push(format!("channel_deleted {topic}/{channel}"));
    }
}

/// The default msg timeout used for deliveries that are not about timeouts.
const MSG_TIMEOUT: Duration = Duration::from_secs(60);

fn opts(dir: &TempDir, mem_queue_size: usize) -> Options {
    Options {
        data_path: dir.path().to_path_buf(),
        mem_queue_size,
        ..Options::default()
    }
}

fn engine_with(o: Options) -> Arc<Engine> {
    Engine::new(o, Arc::new(NoHooks))
}

fn topic(e: &Engine, name: &str) -> Arc<Topic> {
    e.get_or_create_topic(name).expect("create topic").0
}

fn channel(t: &Arc<Topic>, name: &str) -> Arc<Channel> {
    t.get_or_create_channel(name).expect("create channel").0
}

fn body(i: usize) -> Bytes {
    Bytes::from(format!("msg-{i:06}"))
}

fn bodies(r: std::ops::Range<usize>) -> Vec<Bytes> {
    r.map(body).collect()
}

fn body_str(m: &Message) -> String {
    String::from_utf8(m.body.to_vec()).expect("utf-8 body")
}

fn body_strs(ms: &[Message]) -> Vec<String> {
    ms.iter().map(body_str).collect()
}

fn expected(r: std::ops::Range<usize>) -> Vec<String> {
    r.map(|i| format!("msg-{i:06}")).collect()
}

/// Takes everything deliverable now, `per_take` at a time, for `client`.
fn take_all(ch: &Channel, client: u64, per_take: usize) -> Vec<Message> {
    let mut out = Vec::new();
    loop {
        let before = out.len();
        let n = ch.take(client, per_take, MSG_TIMEOUT, 0, &mut out);
        assert_eq!(
            out.len() - before,
            n,
            "take's return value is the number appended"
        );
        assert!(n <= per_take, "take returned {n} > max {per_take}");
        if n == 0 {
            return out;
        }
    }
}

/// Takes one deliverable message (panics when there is none).
fn take_one(ch: &Channel, client: u64, timeout: Duration) -> Message {
    let mut out = Vec::new();
    assert_eq!(
        ch.take(client, 1, timeout, 0, &mut out),
        1,
        "expected a deliverable message"
    );
    out.pop().unwrap()
}

fn finish_all(ch: &Channel, client: u64, ms: &[Message]) {
    for m in ms {
        ch.finish(client, &m.id).expect("FIN");
    }
}

/// Lets spawned tasks (topic pumps, the scanner and its workers) run.
async fn settle() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}

/// Yields until `cond` holds (the topic pump runs as a spawned task).
async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("timed out waiting for {what}");
}

/// Advances the paused clock by `total` in 10 ms steps, letting the scanner run at every step.
async fn advance_by(total: Duration) {
    let step = Duration::from_millis(10);
    let mut done = Duration::ZERO;
    while done < total {
        let d = step.min(total - done);
        tokio::time::advance(d).await;
        settle().await;
        done += d;
    }
}

/// Files in the data directory whose names start with `prefix`.
fn files_with_prefix(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read data dir")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

// ---- 1. fan-out ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn fan_out_delivers_every_message_to_every_channel_sharing_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 10_000));
    let t = topic(&e, "fanout");
    let chans: Vec<_> = ["a", "b", "c"].iter().map(|n| channel(&t, n)).collect();

    t.put_many(bodies(0..1000), Duration::ZERO).unwrap();
    assert_eq!(t.stats().message_count, 1000);

    let got: Vec<Vec<Message>> = chans.iter().map(|c| take_all(c, 1, 64)).collect();
    for (c, msgs) in chans.iter().zip(&got) {
        assert_eq!(
            msgs.len(),
            1000,
            "channel {} delivered everything",
            c.name()
        );
        assert_eq!(
            body_strs(msgs),
            expected(0..1000),
            "channel {} is in publish order",
            c.name()
        );
        assert!(msgs.iter().all(|m| m.attempts == 1));
        let s = c.stats();
        assert_eq!(
            (s.message_count, s.depth, s.in_flight_count),
            (1000, 0, 1000)
        );
    }
    let triples = got[0].iter().zip(&got[1]).zip(&got[2]);
    for (i, ((a, b), c)) in triples.enumerate() {
        assert_eq!(a.id, b.id);
        assert_eq!(a.id, c.id);
        assert_eq!(a.timestamp, b.timestamp);
        assert_eq!(a.body, c.body);
        assert_eq!(
            a.body.as_ptr(),
            b.body.as_ptr(),
            "message {i}: body copied for channel b"
        );
        assert_eq!(
            a.body.as_ptr(),
            c.body.as_ptr(),
            "message {i}: body copied for channel c"
        );
    }
    for (c, msgs) in chans.iter().zip(&got) {
        finish_all(c, 1, msgs);
        assert_eq!(c.stats().in_flight_count, 0);
    }
}

// ---- 2. topic backlog ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn topic_backlog_accumulates_then_drains_into_first_channel() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 10));
    let t = topic(&e, "backlog");

    t.put_many(bodies(0..5), Duration::ZERO).unwrap();
    assert_eq!(
        (t.depth(), t.stats().backend_depth),
        (5, 0),
        "fits in memory"
    );
    t.put_many(bodies(5..60), Duration::ZERO).unwrap();
    for i in 60..100 {
        t.put(body(i), Duration::ZERO).unwrap();
    }
    let s = t.stats();
    assert_eq!(s.depth, 100);
    assert_eq!(
        s.backend_depth, 90,
        "beyond mem_queue_size the backlog is on disk"
    );
    assert_eq!(s.message_count, 100);
    settle().await;
    assert_eq!(t.depth(), 100, "no channel: nothing moves");

    let c = channel(&t, "c");
    wait_for("topic drained", || t.depth() == 0).await;
    settle().await;
    assert_eq!(c.depth(), 100);
    assert_eq!(c.stats().message_count, 100);
    let got = take_all(&c, 1, 7);
    assert_eq!(
        body_strs(&got),
        expected(0..100),
        "nothing lost, topic backlog kept FIFO"
    );

    // With the backlog gone, new publishes take the direct path again.
    t.put_many(bodies(100..110), Duration::ZERO).unwrap();
    assert_eq!(t.depth(), 0);
    assert_eq!(body_strs(&take_all(&c, 1, 100)), expected(100..110));
}

// ---- 3. channel overflow to disk ----------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn channel_overflow_to_disk_stays_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 10));
    let t = topic(&e, "overflow");
    let c = channel(&t, "c");

    t.put_many(bodies(0..60), Duration::ZERO).unwrap();
    let s = c.stats();
    assert_eq!(s.depth, 60);
    assert!(s.backend_depth > 0, "overflow went to the disk queue");
    assert_eq!(s.backend_depth, 50);

    let mut got = Vec::new();
    assert_eq!(
        c.take(1, 25, MSG_TIMEOUT, 0, &mut got),
        25,
        "memory then disk in one take"
    );
    // More publishes while older messages wait on disk queue up behind them (spill mode).
    for i in 60..100 {
        t.put(body(i), Duration::ZERO).unwrap();
    }
    assert!(c.stats().backend_depth > 0);
    got.extend(take_all(&c, 1, 3));
    assert_eq!(
        body_strs(&got),
        expected(0..100),
        "exact FIFO across memory and disk"
    );
    assert_eq!(c.stats().backend_depth, 0);
    finish_all(&c, 1, &got);

    // Drained: memory is used again.
    t.put_many(bodies(100..105), Duration::ZERO).unwrap();
    assert_eq!((c.depth(), c.stats().backend_depth), (5, 0));
    assert_eq!(body_strs(&take_all(&c, 1, 100)), expected(100..105));
}

// ---- 4. mem_queue_size = 0 ----------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn zero_mem_queue_goes_through_disk_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 0));
    let t = topic(&e, "nomem");
    let c = channel(&t, "c");

    t.put_many(bodies(0..50), Duration::ZERO).unwrap();
    for i in 50..100 {
        t.put(body(i), Duration::ZERO).unwrap();
    }
    let s = c.stats();
    assert_eq!(
        (s.depth, s.backend_depth),
        (100, 100),
        "everything is on disk"
    );
    assert!(c.peek_bodies().is_empty());

    let mut got = take_all(&c, 1, 9);
    assert_eq!(body_strs(&got), expected(0..100));

    // A REQ 0 also goes through the disk queue and comes back.
    let first = got.remove(0);
    c.requeue(1, &first.id, Duration::ZERO).unwrap();
    assert_eq!(c.stats().backend_depth, 1);
    let again = take_all(&c, 1, 10);
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].id, again[0].attempts), (first.id, 2));
}

// ---- 5. FIN / REQ / TOUCH failures --------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn fin_req_touch_failure_cases() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 100));
    let t = topic(&e, "fails");
    let c = channel(&t, "c");
    t.put_many(bodies(0..3), Duration::ZERO).unwrap();

    let unknown = MessageId::from_u64(42);
    assert_eq!(c.finish(1, &unknown), Err(FinishError::NotInFlight));
    assert_eq!(
        c.requeue(1, &unknown, Duration::ZERO),
        Err(RequeueError::NotInFlight)
    );
    assert_eq!(
        c.touch(1, &unknown, MSG_TIMEOUT),
        Err(FinishError::NotInFlight)
    );

    let m = take_one(&c, 1, MSG_TIMEOUT);
    assert_eq!(c.finish(2, &m.id), Err(FinishError::NotOwner));
    assert_eq!(
        c.requeue(2, &m.id, Duration::ZERO),
        Err(RequeueError::NotOwner)
    );
    assert_eq!(c.touch(2, &m.id, MSG_TIMEOUT), Err(FinishError::NotOwner));
    assert_eq!(
        c.stats().in_flight_count,
        1,
        "failed attempts leave the message in flight"
    );
    assert_eq!(c.stats().requeue_count, 0);

    assert_eq!(c.finish(1, &m.id), Ok(()));
    assert_eq!(
        c.finish(1, &m.id),
        Err(FinishError::NotInFlight),
        "FIN twice"
    );
    assert_eq!(
        c.requeue(1, &m.id, Duration::ZERO),
        Err(RequeueError::NotInFlight)
    );
    assert_eq!(
        c.touch(1, &m.id, MSG_TIMEOUT),
        Err(FinishError::NotInFlight)
    );

    // REQ on a deleted (exiting) channel fails; so do put, SUB and delivery.
    let m2 = take_one(&c, 1, MSG_TIMEOUT);
    assert!(t.delete_channel("c"));
    assert!(c.is_exiting());
    let r = c.requeue(1, &m2.id, Duration::ZERO);
    assert!(
        matches!(
            r,
            Err(RequeueError::Exiting) | Err(RequeueError::NotInFlight)
        ),
        "REQ after delete: {r:?}"
    );
    assert!(
        c.put(std::iter::once(m2.clone())).is_err(),
        "put on an exiting channel"
    );
    assert_eq!(
        c.add_consumer(TestConsumer::new(9)).err(),
        Some(SubscribeError::Exiting)
    );
    let mut out = Vec::new();
    assert_eq!(c.take(1, 10, MSG_TIMEOUT, 0, &mut out), 0);
}

#[tokio::test(start_paused = true)]
async fn touch_is_capped_at_delivery_plus_max_msg_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(Options {
        max_msg_timeout: Duration::from_secs(3),
        ..opts(&dir, 100)
    });
    let t = topic(&e, "touch");
    let c = channel(&t, "c");
    let consumer = TestConsumer::new(1);
    c.add_consumer(consumer.clone()).unwrap();
    t.put(body(0), Duration::ZERO).unwrap();

    let m = take_one(&c, 1, Duration::from_secs(2));
    tokio::time::advance(Duration::from_millis(1500)).await;
    assert_eq!(
        c.touch(1, &m.id, Duration::from_secs(2)),
        Ok(()),
        "deadline 3.5 s capped to 3 s"
    );

    tokio::time::advance(Duration::from_millis(600)).await; // t = 2.1 s: the original deadline passed
    assert!(!scanner::scan_channel(&c), "TOUCH moved the deadline");
    assert_eq!(c.stats().in_flight_count, 1);

    tokio::time::advance(Duration::from_millis(800)).await; // t = 2.9 s
    assert_eq!(
        c.touch(1, &m.id, Duration::from_secs(2)),
        Ok(()),
        "still capped at 3 s"
    );
    assert!(!scanner::scan_channel(&c));
    tokio::time::advance(Duration::from_millis(99)).await; // t = 2.999 s
    assert!(!scanner::scan_channel(&c));
    assert_eq!(c.stats().timeout_count, 0);

    tokio::time::advance(Duration::from_millis(1)).await; // t = 3 s
    assert!(
        scanner::scan_channel(&c),
        "times out at delivery + max_msg_timeout"
    );
    let s = c.stats();
    assert_eq!((s.timeout_count, s.in_flight_count, s.depth), (1, 0, 1));
    assert_eq!(consumer.timeouts(), 1);
    assert_eq!(
        c.touch(1, &m.id, Duration::from_secs(2)),
        Err(FinishError::NotInFlight)
    );
}

// ---- 6. take(max) and attempts ------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn take_respects_max_and_counts_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 100));
    let t = topic(&e, "take");
    let c = channel(&t, "c");
    t.put_many(bodies(0..10), Duration::ZERO).unwrap();

    let mut out = Vec::new();
    assert_eq!(
        c.take(1, 0, MSG_TIMEOUT, 0, &mut out),
        0,
        "max 0 takes nothing"
    );
    assert_eq!(c.take(1, 3, MSG_TIMEOUT, 0, &mut out), 3);
    assert_eq!(out.len(), 3);
    assert!(
        out.iter().all(|m| m.attempts == 1),
        "first delivery has attempts 1"
    );
    assert_eq!(c.stats().in_flight_count, 3);
    assert_eq!(c.depth(), 7);

    let first = out[0].clone();
    c.requeue(1, &first.id, Duration::ZERO).unwrap();
    assert_eq!(c.depth(), 8, "REQ 0 puts it back");

    let rest = take_all(&c, 1, 100);
    assert_eq!(rest.len(), 8);
    assert_eq!(body_strs(&rest[..7]), expected(3..10));
    let last = rest.last().unwrap();
    assert_eq!(
        (last.id, last.attempts),
        (first.id, 2),
        "redelivery after REQ 0 has attempts 2"
    );
    assert_eq!(
        last.timestamp, first.timestamp,
        "timestamp preserved across requeue"
    );
    assert_eq!(c.take(1, 100, MSG_TIMEOUT, 0, &mut Vec::new()), 0);
}

// ---- 7. the queue scanner -----------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn scanner_times_out_undefers_and_releases_dpub() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 100));
    let t = topic(&e, "scan");
    let c = channel(&t, "c");
    let d = channel(&t, "d");
    let consumer = TestConsumer::new(1);
    c.add_consumer(consumer.clone()).unwrap();
    let sc = scanner::spawn(e.clone(), ScanOptions::default());
    settle().await;

    // Timeout: 1 s msg timeout, requeued by the scanner, redelivered with attempts 2.
    t.put(body(0), Duration::ZERO).unwrap();
    let _ = take_all(&d, 7, 10); // keep channel d empty
    let m = take_one(&c, 1, Duration::from_secs(1));
    assert_eq!(m.attempts, 1);
    advance_by(Duration::from_millis(900)).await;
    assert_eq!(c.stats().timeout_count, 0, "no timeout before the deadline");
    assert_eq!(c.stats().in_flight_count, 1);
    advance_by(Duration::from_millis(300)).await;
    let s = c.stats();
    assert_eq!(
        (s.timeout_count, s.in_flight_count, s.depth, s.requeue_count),
        (1, 0, 1, 0)
    );
    assert_eq!(consumer.timeouts(), 1, "owner told once");
    let m = take_one(&c, 1, MSG_TIMEOUT);
    assert_eq!(m.attempts, 2);

    // REQ with a 2 s delay: deferred, not deliverable before 2 s, deliverable after.
    c.requeue(1, &m.id, Duration::from_secs(2)).unwrap();
    let s = c.stats();
    assert_eq!(
        (
            s.deferred_count,
            s.requeue_count,
            s.in_flight_count,
            s.depth
        ),
        (1, 1, 0, 0)
    );
    advance_by(Duration::from_millis(1900)).await;
    assert_eq!(
        c.take(1, 10, MSG_TIMEOUT, 0, &mut Vec::new()),
        0,
        "deferred for 2 s"
    );
    assert_eq!(c.stats().deferred_count, 1);
    advance_by(Duration::from_millis(300)).await;
    assert_eq!(c.stats().deferred_count, 0);
    let m2 = take_one(&c, 1, MSG_TIMEOUT);
    assert_eq!((m2.id, m2.attempts), (m.id, 3));
    c.finish(1, &m2.id).unwrap();

    // DPUB: every channel gets it deferred; released after the delay.
    t.put(body(1), Duration::from_secs(3)).unwrap();
    for ch in [&c, &d] {
        let s = ch.stats();
        assert_eq!((s.deferred_count, s.depth), (1, 0), "channel {}", ch.name());
    }
    advance_by(Duration::from_millis(2900)).await;
    assert_eq!(c.stats().deferred_count, 1);
    assert_eq!(d.stats().deferred_count, 1);
    advance_by(Duration::from_millis(300)).await;
    for ch in [&c, &d] {
        let s = ch.stats();
        assert_eq!((s.deferred_count, s.depth), (0, 1), "channel {}", ch.name());
        let got = take_all(ch, 1, 10);
        assert_eq!(body_strs(&got), vec!["msg-000001".to_string()]);
        assert_eq!(got[0].attempts, 1);
    }

    // A channel created after the scanner started: never early, and at the latest after the
    // 5 s channel-list refresh (the reference's bound; ours also looks at once).
    let late = channel(&t, "late");
    t.put(body(2), Duration::ZERO).unwrap();
    let _ = take_one(&late, 1, Duration::from_millis(100));
    advance_by(Duration::from_millis(90)).await;
    assert_eq!(late.stats().timeout_count, 0, "not before its deadline");
    advance_by(Duration::from_secs(6)).await;
    assert_eq!(
        late.stats().timeout_count,
        1,
        "picked up within the refresh interval"
    );

    sc.stop().await;
    // Stopped: nothing times out any more.
    let m = take_one(&late, 1, Duration::from_millis(100));
    assert_eq!(m.attempts, 2);
    advance_by(Duration::from_secs(1)).await;
    assert_eq!(late.stats().in_flight_count, 1);
    assert_eq!(late.stats().timeout_count, 1);
}

#[tokio::test(start_paused = true)]
async fn scan_channel_is_exact_and_reports_dirty() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 100));
    let t = topic(&e, "scan1");
    let c = channel(&t, "c");
    let a = TestConsumer::new(1);
    let b = TestConsumer::new(2);
    c.add_consumer(a.clone()).unwrap();
    c.add_consumer(b.clone()).unwrap();
    t.put_many(bodies(0..4), Duration::ZERO).unwrap();

    assert!(!scanner::scan_channel(&c), "nothing to do is not dirty");
    let ma = take_one(&c, 1, Duration::from_secs(1));
    let mb = take_one(&c, 2, Duration::from_secs(2));
    let mc = take_one(&c, 1, Duration::from_secs(5));
    c.requeue(1, &mc.id, Duration::from_millis(1500)).unwrap();

    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(!scanner::scan_channel(&c), "never early");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(scanner::scan_channel(&c), "fires at the deadline");
    assert_eq!((a.timeouts(), b.timeouts()), (1, 0));
    assert!(!scanner::scan_channel(&c));

    tokio::time::advance(Duration::from_millis(500)).await; // 1.5 s: deferred due
    assert_eq!(c.stats().deferred_count, 1);
    assert!(scanner::scan_channel(&c));
    assert_eq!(c.stats().deferred_count, 0);

    tokio::time::advance(Duration::from_millis(500)).await; // 2 s: b's message
    assert!(scanner::scan_channel(&c));
    assert_eq!((a.timeouts(), b.timeouts()), (1, 1));

    // A timed-out message whose owner is not a consumer is requeued without a callback.
    let md = take_one(&c, 3, Duration::from_secs(1));
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(scanner::scan_channel(&c));
    assert_eq!((a.timeouts(), b.timeouts()), (1, 1));

    let s = c.stats();
    assert_eq!(
        (
            s.timeout_count,
            s.requeue_count,
            s.in_flight_count,
            s.deferred_count
        ),
        (3, 1, 0, 0)
    );
    // Every requeue went to the tail, in the order it happened.
    assert_eq!(body_str(&md), "msg-000003");
    let ids: Vec<_> = take_all(&c, 1, 10).iter().map(|m| m.id).collect();
    assert_eq!(ids, vec![ma.id, mc.id, mb.id, md.id]);
}

// ---- 8. counters --------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn counters_follow_the_lifecycle_table() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 100));
    let t = topic(&e, "counters");
    let c = channel(&t, "c");

    t.put_many(bodies(0..10), Duration::ZERO).unwrap();
    let ts = t.stats();
    assert_eq!((ts.message_count, ts.message_bytes, ts.depth), (10, 100, 0));
    let check = |what: &str, depth, in_flight, deferred, msgs, req, tmo| {
        let s = c.stats();
        assert_eq!(
            (s.depth, s.in_flight_count, s.deferred_count, s.message_count, s.requeue_count, s.timeout_count),
            (depth, in_flight, deferred, msgs, req, tmo),
            "after {what}: (depth, in_flight, deferred, message_count, requeue_count, timeout_count)"
        );
    };
    check("publish", 10, 0, 0, 10, 0, 0);

    let mut out = Vec::new();
    c.take(1, 4, Duration::from_secs(1), 0, &mut out);
    check("delivery", 6, 4, 0, 10, 0, 0);
    c.finish(1, &out[0].id).unwrap();
    check("FIN", 6, 3, 0, 10, 0, 0);
    c.requeue(1, &out[1].id, Duration::ZERO).unwrap();
    check("REQ 0", 7, 2, 0, 10, 1, 0);
    c.requeue(1, &out[2].id, Duration::from_secs(5)).unwrap();
    check("REQ 5s", 7, 1, 1, 10, 2, 0);
    c.touch(1, &out[3].id, Duration::from_secs(1)).unwrap();
    check("TOUCH", 7, 1, 1, 10, 2, 0);

    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(scanner::scan_channel(&c));
    check("timeout", 8, 0, 1, 10, 2, 1);
    tokio::time::advance(Duration::from_secs(4)).await;
    assert!(scanner::scan_channel(&c));
    check("deferred due", 9, 0, 0, 10, 2, 1);

    t.put(body(10), Duration::from_secs(1)).unwrap();
    check("DPUB", 9, 0, 1, 11, 2, 1);
    assert_eq!(t.stats().message_count, 11);
    assert_eq!(t.stats().message_bytes, 110);

    // Sampled-out messages are consumed and lost (depth −1, nothing in flight).
    let mut sampled = Vec::new();
    let mut taken = 0;
    while c.depth() > 0 {
        taken += c.take(1, 1, MSG_TIMEOUT, 1, &mut sampled);
    }
    assert_eq!(taken, sampled.len());
    let s = c.stats();
    assert_eq!(s.in_flight_count, sampled.len());
    assert!(
        sampled.len() < 9,
        "sample_rate 1 keeps ~2%: kept {}",
        sampled.len()
    );
}

// ---- 9. pause -----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn paused_channel_delivers_nothing_paused_topic_accumulates() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 10));
    let t = topic(&e, "pause");
    let c = channel(&t, "c");

    t.put_many(bodies(0..5), Duration::ZERO).unwrap();
    c.pause();
    assert!(c.is_paused() && c.stats().paused);
    assert_eq!(c.take(1, 10, MSG_TIMEOUT, 0, &mut Vec::new()), 0);
    t.put_many(bodies(5..8), Duration::ZERO).unwrap();
    assert_eq!(c.depth(), 8, "a paused channel still receives");
    c.unpause();
    assert!(!c.is_paused());
    let got = take_all(&c, 1, 100);
    assert_eq!(body_strs(&got), expected(0..8));

    t.pause();
    assert!(t.is_paused() && t.stats().paused);
    t.put_many(bodies(8..38), Duration::ZERO).unwrap();
    settle().await;
    assert_eq!(t.depth(), 30, "paused topic accumulates (memory and disk)");
    assert_eq!(t.stats().backend_depth, 20);
    assert_eq!(c.depth(), 0);
    t.unpause();
    wait_for("topic drained after unpause", || t.depth() == 0).await;
    let got = take_all(&c, 1, 100);
    assert_eq!(body_strs(&got), expected(8..38));
}

// ---- 10. empty ----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn channel_and_topic_empty_discard_everything() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 10));
    let t = topic(&e, "empty");
    let c = channel(&t, "c");
    let a = TestConsumer::new(1);
    let b = TestConsumer::new(2);
    c.add_consumer(a.clone()).unwrap();
    c.add_consumer(b.clone()).unwrap();

    t.put_many(bodies(0..30), Duration::ZERO).unwrap();
    let mut out = Vec::new();
    c.take(1, 3, MSG_TIMEOUT, 0, &mut out);
    c.requeue(1, &out[0].id, Duration::from_secs(10)).unwrap();
    t.put(body(30), Duration::from_secs(10)).unwrap();
    let s = c.stats();
    assert_eq!((s.depth, s.in_flight_count, s.deferred_count), (27, 2, 2));
    assert!(s.backend_depth > 0);

    c.empty().unwrap();
    let s = c.stats();
    assert_eq!(
        (
            s.depth,
            s.backend_depth,
            s.in_flight_count,
            s.deferred_count
        ),
        (0, 0, 0, 0)
    );
    assert_eq!((a.empties(), b.empties()), (1, 1), "every consumer told");
    assert_eq!((a.closes(), b.closes()), (0, 0));
    assert_eq!(c.finish(1, &out[1].id), Err(FinishError::NotInFlight));
    tokio::time::advance(Duration::from_secs(11)).await;
    scanner::scan_channel(&c);
    assert_eq!(c.depth(), 0, "emptied deferred messages do not come back");
    assert_eq!(c.consumer_count(), 2);

    t.put_many(bodies(100..115), Duration::ZERO).unwrap();
    assert_eq!(
        body_strs(&take_all(&c, 1, 4)),
        expected(100..115),
        "works after empty"
    );

    // Topic empty: the topic's own queue only.
    t.pause();
    t.put_many(bodies(200..230), Duration::ZERO).unwrap();
    t.put_many(bodies(230..232), Duration::ZERO).unwrap();
    assert_eq!(t.depth(), 32);
    t.empty().unwrap();
    let ts = t.stats();
    assert_eq!((ts.depth, ts.backend_depth), (0, 0));
    t.unpause();
    settle().await;
    assert_eq!(c.depth(), 0, "nothing reaches the channel");
    t.put_many(bodies(300..303), Duration::ZERO).unwrap();
    settle().await;
    assert_eq!(body_strs(&take_all(&c, 1, 10)), expected(300..303));
}

// ---- 11. ephemeral ------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn ephemeral_overflow_is_dropped_and_last_consumer_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 10));
    let t = topic(&e, "t#ephemeral");
    assert!(t.is_ephemeral());

    // Topic backlog beyond memory is dropped silently.
    t.put_many(bodies(0..25), Duration::ZERO).unwrap();
    assert_eq!(t.depth(), 10);
    assert_eq!(t.stats().backend_depth, 0);

    let c = channel(&t, "c#ephemeral");
    assert!(c.is_ephemeral());
    wait_for("ephemeral topic drained", || t.depth() == 0).await;
    settle().await; // let the pump notice it is done, so publishes go straight to the channel
    assert_eq!(body_strs(&take_all(&c, 1, 100)), expected(0..10));

    // Channel overflow beyond memory is dropped silently too.
    assert!(t.put_many(bodies(100..125), Duration::ZERO).is_ok());
    let s = c.stats();
    assert_eq!((s.depth, s.backend_depth), (10, 0));
    assert_eq!(body_strs(&take_all(&c, 1, 100)), expected(100..110));
    assert!(
        files_with_prefix(dir.path(), "t#ephemeral").is_empty(),
        "no disk queue files"
    );

    // Consumers come and go; the last one leaving deletes channel, then topic.
    let a = TestConsumer::new(1);
    let b = TestConsumer::new(2);
    c.add_consumer(a.clone()).unwrap();
    c.add_consumer(b.clone()).unwrap();
    c.remove_consumer(1);
    assert!(t.get_channel("c#ephemeral").is_some(), "one consumer left");
    c.remove_consumer(2);
    assert!(
        t.get_channel("c#ephemeral").is_none(),
        "last consumer gone: channel deleted"
    );
    assert!(c.is_exiting());
    assert!(
        e.get_topic("t#ephemeral").is_none(),
        "ephemeral topic without channels deleted"
    );
    assert!(t.is_exiting());

    // A channel that never had a consumer is not auto-deleted.
    let t2 = topic(&e, "t2#ephemeral");
    let c2 = channel(&t2, "never#ephemeral");
    c2.remove_consumer(77);
    assert!(t2.get_channel("never#ephemeral").is_some());
    assert!(e.get_topic("t2#ephemeral").is_some());

    // An ephemeral topic keeps living while a durable channel remains.
    let c3 = channel(&t2, "eph#ephemeral");
    let _durable = channel(&t2, "durable");
    c3.add_consumer(TestConsumer::new(5)).unwrap();
    c3.remove_consumer(5);
    assert!(t2.get_channel("eph#ephemeral").is_none());
    assert!(e.get_topic("t2#ephemeral").is_some());
}

// ---- 12. delete ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn delete_closes_consumers_and_removes_files() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(Options {
        sync_every: 1,
        ..opts(&dir, 10)
    });
    let t = topic(&e, "del");
    let c = channel(&t, "c");
    let d = channel(&t, "d");
    let a = TestConsumer::new(1);
    c.add_consumer(a.clone()).unwrap();

    t.put_many(bodies(0..50), Duration::ZERO).unwrap();
    assert!(
        !files_with_prefix(dir.path(), "del:c.diskqueue").is_empty(),
        "channel c spilled to disk"
    );
    assert!(
        !files_with_prefix(dir.path(), "del:d.diskqueue").is_empty(),
        "channel d spilled to disk"
    );

    assert!(t.delete_channel("c"));
    assert!(!t.delete_channel("c"), "unknown now");
    assert_eq!(a.closes(), 1, "consumer connection closed");
    assert_eq!(c.consumer_count(), 0);
    assert!(t.get_channel("c").is_none());
    assert!(
        files_with_prefix(dir.path(), "del:c.").is_empty(),
        "channel files removed"
    );
    assert!(
        !files_with_prefix(dir.path(), "del:d.").is_empty(),
        "other channel untouched"
    );

    // The topic's own backlog and its remaining channel's files go with the topic.
    t.pause();
    t.put_many(bodies(50..100), Duration::ZERO).unwrap();
    assert!(
        !files_with_prefix(dir.path(), "del.diskqueue").is_empty(),
        "topic spilled to disk"
    );
    let b = TestConsumer::new(2);
    d.add_consumer(b.clone()).unwrap();
    assert!(e.delete_topic("del"));
    assert!(!e.delete_topic("del"));
    assert!(e.get_topic("del").is_none());
    assert_eq!(b.closes(), 1);
    assert!(d.is_exiting() && t.is_exiting());
    assert!(
        t.put(body(0), Duration::ZERO).is_err(),
        "deleted topic refuses puts"
    );
    assert_eq!(
        files_with_prefix(dir.path(), "del"),
        Vec::<String>::new(),
        "all files removed"
    );
}

// ---- 13. shutdown persistence -------------------------------------------------------------

/// Builds an engine on `dir`, recreates `topic`/`channel` and collects everything it delivers.
async fn restart_and_drain(
    dir: &TempDir,
    mem: usize,
    topic_name: &str,
    channel_name: &str,
) -> Vec<Message> {
    let e = engine_with(opts(dir, mem));
    let t = topic(&e, topic_name);
    let c = channel(&t, channel_name);
    let mut got = Vec::new();
    for _ in 0..1000 {
        got.extend(take_all(&c, 1, 7));
        if t.depth() == 0 && c.depth() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    got.extend(take_all(&c, 1, 7));
    e.close();
    got
}

#[tokio::test(start_paused = true)]
async fn restart_delivers_channel_disk_backlog() {
    let dir = tempfile::tempdir().unwrap();
    {
        let e = engine_with(opts(&dir, 10));
        let t = topic(&e, "rc");
        channel(&t, "c");
        t.put_many(bodies(0..30), Duration::ZERO).unwrap();
        e.close();
    }
    let got = restart_and_drain(&dir, 10, "rc", "c").await;
    // Close appends the memory queue behind what was already on disk (as the reference
    // does), so only "each exactly once" holds across a restart, not publish order.
    let mut got = body_strs(&got);
    got.sort();
    assert_eq!(got, expected(0..30));
}

#[tokio::test(start_paused = true)]
async fn restart_delivers_topic_disk_backlog() {
    let dir = tempfile::tempdir().unwrap();
    {
        let e = engine_with(opts(&dir, 10));
        let t = topic(&e, "rt");
        t.put_many(bodies(0..30), Duration::ZERO).unwrap();
        e.close();
    }
    let got = restart_and_drain(&dir, 10, "rt", "c").await;
    // Close appends the memory queue behind what was already on disk (as the reference
    // does), so only "each exactly once" holds across a restart, not publish order.
    let mut got = body_strs(&got);
    got.sort();
    assert_eq!(got, expected(0..30));
}

#[tokio::test(start_paused = true)]
async fn close_flushes_memory_in_flight_and_deferred_to_disk() {
    // The flush half of shutdown persistence (delivery after restart is covered by the
    // restart tests around this one).
    let dir = tempfile::tempdir().unwrap();
    {
        let e = engine_with(opts(&dir, 1000));
        let t = topic(&e, "rm");
        let c = channel(&t, "c");
        t.put_many(bodies(0..10), Duration::ZERO).unwrap();
        let mut out = Vec::new();
        c.take(1, 4, MSG_TIMEOUT, 0, &mut out);
        c.requeue(1, &out[0].id, Duration::from_secs(30)).unwrap();
        t.pause();
        t.put_many(bodies(10..13), Duration::ZERO).unwrap();
        assert_eq!(c.stats().backend_depth, 0);
        e.close();
        assert!(t.is_exiting() && c.is_exiting());
        assert!(
            t.put(body(99), Duration::ZERO).is_err(),
            "closed topic refuses puts"
        );
        assert_eq!(
            c.add_consumer(TestConsumer::new(1)).err(),
            Some(SubscribeError::Exiting)
        );
    }
    let e = engine_with(opts(&dir, 1000));
    let t = topic(&e, "rm");
    assert_eq!(t.stats().backend_depth, 3, "topic memory queue written out");
    let c = channel(&t, "c");
    // 6 queued + 3 in flight + 1 deferred.
    assert_eq!(
        c.stats().backend_depth,
        10,
        "channel memory, in-flight and deferred written out"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_persists_everything_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (in_flight, deferred) = {
        let e = engine_with(opts(&dir, 10));
        let t = topic(&e, "persist");
        let c = channel(&t, "c");
        let a = TestConsumer::new(1);
        c.add_consumer(a.clone()).unwrap();
        // 20 into the channel: 10 in memory, 10 on disk.
        t.put_many(bodies(0..20), Duration::ZERO).unwrap();
        let mut out = Vec::new();
        assert_eq!(c.take(1, 5, MSG_TIMEOUT, 0, &mut out), 5);
        for m in &out[..3] {
            c.requeue(1, &m.id, Duration::from_secs(30)).unwrap();
        }
        let in_flight: Vec<MessageId> = out[3..].iter().map(|m| m.id).collect();
        let deferred: Vec<MessageId> = out[..3].iter().map(|m| m.id).collect();
        // 15 more held by the paused topic: 10 in memory, 5 on disk.
        t.pause();
        t.put_many(bodies(20..35), Duration::ZERO).unwrap();
        assert_eq!(t.depth(), 15);
        let s = c.stats();
        assert_eq!((s.depth, s.in_flight_count, s.deferred_count), (15, 2, 3));
        e.close();
        assert_eq!(a.closes(), 1, "shutdown closes consumer connections");
        (in_flight, deferred)
    };

    let got = restart_and_drain(&dir, 10, "persist", "c").await;
    let mut seen = HashSet::new();
    for m in &got {
        assert!(seen.insert(m.id), "{} delivered twice", body_str(m));
    }
    let mut bodies_got = body_strs(&got);
    bodies_got.sort();
    assert_eq!(bodies_got, expected(0..35), "every message exactly once");
    for m in &got {
        let want = if in_flight.contains(&m.id) || deferred.contains(&m.id) {
            2
        } else {
            1
        };
        assert_eq!(m.attempts, want, "attempts of {}", body_str(m));
    }
}

// ---- 14. max_channel_consumers ------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn max_channel_consumers_is_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(Options {
        max_channel_consumers: 2,
        ..opts(&dir, 100)
    });
    let t = topic(&e, "limit");
    let c = channel(&t, "c");
    c.add_consumer(TestConsumer::new(1)).unwrap();
    c.add_consumer(TestConsumer::new(2)).unwrap();
    assert_eq!(
        c.add_consumer(TestConsumer::new(3)),
        Err(SubscribeError::TooManyConsumers(2))
    );
    assert_eq!(c.consumer_count(), 2);
    c.remove_consumer(1);
    assert_eq!(c.add_consumer(TestConsumer::new(3)), Ok(()));
    assert_eq!(c.consumer_count(), 2);

    // 0 = unlimited.
    let dir2 = tempfile::tempdir().unwrap();
    let e2 = engine_with(opts(&dir2, 100));
    let c2 = channel(&topic(&e2, "nolimit"), "c");
    for id in 0..100 {
        c2.add_consumer(TestConsumer::new(id)).unwrap();
    }
    assert_eq!(c2.consumer_count(), 100);
}

// ---- 15. hooks ----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn hooks_see_creations_and_deletions() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = Arc::new(RecordingHooks::default());
    let e = Engine::new(opts(&dir, 100), hooks.clone());

    let (t, created) = e.get_or_create_topic("h").unwrap();
    assert!(created);
    assert!(
        !e.get_or_create_topic("h").unwrap().1,
        "second get does not create"
    );
    assert!(t.get_or_create_channel("c").unwrap().1);
    assert!(!t.get_or_create_channel("c").unwrap().1);
    channel(&t, "d");
    assert_eq!(
        hooks.take(),
        vec![
            "topic_created h",
            "channel_created h/c",
            "channel_created h/d"
        ]
    );

    assert!(t.delete_channel("c"));
    assert_eq!(hooks.take(), vec!["channel_deleted h/c"]);

    assert!(e.delete_topic("h"));
    let mut ev = hooks.take();
    ev.sort();
    assert_eq!(ev, vec!["channel_deleted h/d", "topic_deleted h"]);

    // Ephemeral auto-deletion goes through the same hooks.
    let te = topic(&e, "x#ephemeral");
    let ce = channel(&te, "y#ephemeral");
    ce.add_consumer(TestConsumer::new(1)).unwrap();
    ce.remove_consumer(1);
    let mut ev = hooks.take();
    ev.sort();
    assert_eq!(
        ev,
        vec![
            "channel_created x#ephemeral/y#ephemeral",
            "channel_deleted x#ephemeral/y#ephemeral",
            "topic_created x#ephemeral",
            "topic_deleted x#ephemeral",
        ]
    );
}

// ---- 16. GUIDs ----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn guids_are_unique_and_increasing() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(Options {
        node_id: 617,
        ..opts(&dir, 20_000)
    });
    let t = topic(&e, "guid");
    let c = channel(&t, "c");
    t.put_many(bodies(0..10_000), Duration::ZERO).unwrap();
    t.put_many(bodies(10_000..10_100), Duration::ZERO).unwrap();
    let got = take_all(&c, 1, 1000);
    assert_eq!(got.len(), 10_100);
    for w in got.windows(2) {
        assert!(w[0].id < w[1].id, "{} !< {}", w[0].id, w[1].id);
    }
    let unique: HashSet<_> = got.iter().map(|m| m.id).collect();
    assert_eq!(unique.len(), got.len());
    for m in &got {
        let v = u64::from_str_radix(std::str::from_utf8(m.id.as_bytes()).unwrap(), 16).unwrap();
        assert_eq!((v >> 12) & 1023, 617, "node id in every GUID");
    }
}

// ---- extra: competing consumers ------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_publishers_and_consumers_lose_and_duplicate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(opts(&dir, 50));
    let t = topic(&e, "stress");
    let chans: Vec<_> = ["a", "b"].iter().map(|n| channel(&t, n)).collect();
    const PRODUCERS: usize = 4;
    const PER: usize = 2_000;
    let total = PRODUCERS * PER;

    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            for chunk in (p * PER..(p + 1) * PER).collect::<Vec<_>>().chunks(37) {
                t.put_many(chunk.iter().map(|&i| body(i)), Duration::ZERO)
                    .unwrap();
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut consumers = Vec::new();
    for (ci, ch) in chans.iter().enumerate() {
        for client in 0..2u64 {
            let ch = ch.clone();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let seen2 = seen.clone();
            consumers.push((
                ci,
                seen,
                tokio::spawn(async move {
                    let mut idle = 0;
                    loop {
                        let mut out = Vec::new();
                        let n = ch.take(client, 16, MSG_TIMEOUT, 0, &mut out);
                        for m in &out {
                            ch.finish(client, &m.id).unwrap();
                        }
                        seen2.lock().extend(out.into_iter().map(|m| m.body));
                        if n == 0 {
                            idle += 1;
                            if idle > 2_000 {
                                return;
                            }
                            tokio::task::yield_now().await;
                        } else {
                            idle = 0;
                        }
                    }
                }),
            ));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut per_channel: Vec<Vec<Bytes>> = vec![Vec::new(); chans.len()];
    for (ci, seen, task) in consumers {
        task.await.unwrap();
        per_channel[ci].extend(seen.lock().drain(..));
    }
    for (ch, got) in chans.iter().zip(per_channel.iter_mut()) {
        // Anything a consumer gave up on before the producers finished is still queued.
        let rest = take_all(ch, 9, 1000);
        got.extend(rest.into_iter().map(|m| m.body));
        let set: HashSet<Bytes> = got.iter().cloned().collect();
        assert_eq!(set.len(), got.len(), "channel {}: duplicates", ch.name());
        assert_eq!(got.len(), total, "channel {}: lost messages", ch.name());
        assert_eq!(ch.stats().message_count, total as u64);
    }
}

// ---- replication hooks (crate::replicate, docs/replication.md "Settlement streaming") -----

/// A replicator that records what it is told, in order.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<String>>,
    seq: std::sync::atomic::AtomicU64,
}

impl Recorder {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.events.lock())
    }
    fn push(&self, e: String) {
        self.events.lock().push(e);
    }
}

fn names(chans: &[Arc<Channel>]) -> String {
    chans
        .iter()
        .map(|c| c.name().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl nsq_core::Replicator for Recorder {
    fn encode_messages(&self, msgs: &[Message]) -> Bytes {
        Bytes::from(body_strs(msgs).join(","))
    }
    fn publish(
        &self,
        topic: &str,
        defer_until: i64,
        channels: Option<&[Arc<Channel>]>,
        messages: Bytes,
    ) -> u64 {
        let to = channels.map_or("topic".to_string(), names);
        let deferred = if defer_until > 0 { " deferred" } else { "" };
        self.push(format!(
            "PUB {topic} [{}] -> {to}{deferred}",
            String::from_utf8_lossy(&messages)
        ));
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn fanout(&self, topic: &str, channels: &[Arc<Channel>], msgs: &[Message]) {
        self.push(format!(
            "FANOUT {topic} [{}] -> {}",
            body_strs(msgs).join(","),
            names(channels)
        ));
    }
    fn finish(&self, topic: &str, channel: &str, ids: &[MessageId]) {
        self.push(format!("FIN {topic}:{channel} {}", ids.len()));
    }
    fn requeue(&self, topic: &str, channel: &str, e: nsq_protocol::replication::ReqEntry) {
        let how = if e.due == 0 { "now" } else { "deferred" };
        self.push(format!(
            "REQ {topic}:{channel} {how} attempts {}",
            e.attempts
        ));
    }
    fn admin(&self, op: nsq_protocol::replication::AdminOp, topic: &str, channel: &str) {
        self.push(format!("ADMIN {op:?} {topic}:{channel}"));
    }
    fn settings(&self, topic: &str, channel: &str, settings: nsq_protocol::replication::Settings) {
        self.push(format!("SETTINGS {topic}:{channel} {settings:?}"));
    }
}

/// The engine tells its replicator every replicated event, in the order they take effect;
/// ephemeral topics and channels report nothing; a publish's receipt carries its seq.
#[tokio::test(start_paused = true)]
async fn replicator_hears_every_event_in_order() {
    let dir = TempDir::new().unwrap();
    let e = engine_with(opts(&dir, 100));
    let rec = Arc::new(Recorder::default());
    assert!(e.set_replicator(rec.clone()));
    let t = topic(&e, "t");
    let r = t.put_many(bodies(0..2), Duration::ZERO).unwrap();
    assert_eq!(r.replication_seq(), 1);
    let c = channel(&t, "c");
    let _eph = channel(&t, "e#ephemeral");
    wait_for("fan-out", || c.depth() == 2).await;
    let r = t.put(body(2), Duration::ZERO).unwrap();
    assert_eq!(r.replication_seq(), 2);
    t.put(body(3), Duration::from_secs(5)).unwrap();
    wait_for("fan-out", || {
        c.depth() == 3 && c.stats().deferred_count == 1
    })
    .await;
    let ms = take_all(&c, 1, 10);
    assert_eq!(ms.len(), 3);
    c.requeue(1, &ms[0].id, Duration::ZERO).unwrap();
    c.requeue(1, &ms[1].id, Duration::from_secs(1)).unwrap();
    let mut failed = Vec::new();
    assert_eq!(c.finish_many(1, &[ms[2].id, ms[2].id], &mut failed), 1);
    // The pump is done: a publish goes straight to the channels.
    settle().await;
    t.put(body(5), Duration::ZERO).unwrap();
    c.pause();
    c.unpause();
    c.empty().unwrap();
    t.pause();
    t.unpause();
    t.empty().unwrap();
    t.delete_channel("c");
    let eph = topic(&e, "x#ephemeral");
    eph.put(body(9), Duration::ZERO).unwrap();
    e.delete_topic("t");
    assert_eq!(
        rec.take(),
        vec![
            "ADMIN Create t:",
            "PUB t [msg-000000,msg-000001] -> topic",
            "ADMIN Create t:c",
            // The pump was still running: these queue behind it (on the topic) and it hands
            // them over. The recorder gets every channel; the daemon's log leaves ephemeral
            // ones out.
            "FANOUT t [msg-000000,msg-000001] -> c,e#ephemeral",
            "PUB t [msg-000002] -> topic",
            "PUB t [msg-000003] -> topic deferred",
            "FANOUT t [msg-000002,msg-000003] -> c,e#ephemeral",
            "REQ t:c now attempts 1",
            "REQ t:c deferred attempts 1",
            "FIN t:c 1",
            "PUB t [msg-000005] -> c,e#ephemeral",
            "ADMIN Pause t:c",
            "ADMIN Unpause t:c",
            "ADMIN Empty t:c",
            "ADMIN Pause t:",
            "ADMIN Unpause t:",
            "ADMIN Empty t:",
            "ADMIN Delete t:c",
            "ADMIN Delete t:",
        ]
    );
}

/// A catch-up's snapshot: the topic's item, then every message where it is, once.
#[tokio::test(start_paused = true)]
async fn a_catchup_snapshot_lists_every_unsettled_message_once() {
    for mem in [100, 0] {
        let dir = TempDir::new().unwrap();
        let e = engine_with(opts(&dir, mem));
        e.set_replicator(Arc::new(Recorder::default()));
        let t = topic(&e, "t");
        t.put_many(bodies(0..1), Duration::ZERO).unwrap();
        let c = channel(&t, "c");
        wait_for("fan-out", || c.depth() == 1).await;
        t.put_many(bodies(1..4), Duration::ZERO).unwrap();
        t.put(body(4), Duration::from_secs(60)).unwrap();
        // Through the topic's diskqueue a deferral is lost (the record has no field for it,
        // as in the reference).
        let deferred = usize::from(mem > 0);
        wait_for("fan-out", || {
            c.depth() == 5 - deferred as i64 && c.stats().deferred_count == deferred
        })
        .await;
        let inflight = take_one(&c, 1, MSG_TIMEOUT);
        let u = topic(&e, "u");
        u.put_many(bodies(5..7), Duration::ZERO).unwrap();
        // In chunks of one record each: the same snapshot as in one piece.
        let mut items = Vec::new();
        let mut scan = nsq_core::CatchupScan::new(&e);
        let mut chunks = 0;
        while !scan.next_chunk(1, &mut items).unwrap() {
            chunks += 1;
        }
        if mem == 0 {
            // One chunk per record read from disk (4 on the channel's, 2 on u's).
            assert!(chunks >= 6, "{chunks}");
        }
        let mut seen: Vec<String> = items
            .iter()
            .map(|i| match i {
                nsq_protocol::replication::Item::Topic(t) => format!(
                    "topic {} [{}]",
                    t.topic,
                    t.channels
                        .iter()
                        .map(|c| c.name.clone())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                nsq_protocol::replication::Item::Message(m) => format!(
                    "{} {} {}{}",
                    m.topic,
                    String::from_utf8_lossy(&m.body),
                    if m.topic_pending {
                        "topic".to_string()
                    } else {
                        m.channels[0].name.clone()
                    },
                    if m.channels.iter().any(|c| c.due > 0) {
                        " deferred"
                    } else {
                        ""
                    }
                ),
            })
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            vec![
                "t msg-000000 c",
                "t msg-000001 c",
                "t msg-000002 c",
                "t msg-000003 c",
                if mem > 0 {
                    "t msg-000004 c deferred"
                } else {
                    "t msg-000004 c"
                },
                "topic t [c]",
                "topic u []",
                "u msg-000005 topic",
                "u msg-000006 topic",
            ],
            "mem-queue-size {mem}"
        );
        assert_eq!(body_str(&inflight), "msg-000000");
        // Nothing was consumed by the snapshot.
        assert_eq!(take_all(&c, 1, 10).len(), 4 - deferred);
        assert_eq!(u.depth(), 2);
    }
}
