//! A returning origin (replication, docs/replication.md "Return"): a manifest of what a peer
//! took over, applied to the engine, removes every listed message still pending here — in
//! memory, in flight, deferred, unread in the diskqueue, or pending on the topic — without
//! delivering it, and nothing else changes; the delivery hold stops every channel.
//!
//! NSQ has no counterpart; the engine is driven as `tests/engine.rs` does (Tokio's paused
//! clock, real diskqueues in a temporary data directory).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nsq_core::client_stats::ClientStats;
use nsq_core::{
    Channel, Consumer, Engine, FinishError, Message, NoHooks, Options, Replicator, Topic,
};
use nsq_protocol::replication::{AdminOp, Manifest, ReqEntry};
use nsq_protocol::MessageId;
use parking_lot::Mutex;
use tempfile::TempDir;

const MSG_TIMEOUT: Duration = Duration::from_secs(60);
const LATER: Duration = Duration::from_secs(3600);

struct TestConsumer {
    id: u64,
    timeouts: AtomicUsize,
}

impl Consumer for TestConsumer {
    fn id(&self) -> u64 {
        self.id
    }
    fn on_timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::SeqCst);
    }
    fn on_empty(&self) {}
    fn close(&self) {}
    fn stats(&self) -> ClientStats {
        ClientStats::default()
    }
}

fn consumer(id: u64) -> Arc<TestConsumer> {
    Arc::new(TestConsumer {
        id,
        timeouts: AtomicUsize::new(0),
    })
}

fn engine(dir: &TempDir, mem_queue_size: usize) -> Arc<Engine> {
    Engine::new(
        Options {
            data_path: dir.path().to_path_buf(),
            mem_queue_size,
            ..Options::default()
        },
        Arc::new(NoHooks),
    )
}

fn topic(e: &Engine, name: &str) -> Arc<Topic> {
    e.get_or_create_topic(name).unwrap().0
}

fn channel(t: &Arc<Topic>, name: &str) -> Arc<Channel> {
    t.get_or_create_channel(name).unwrap().0
}

fn bodies(n: usize) -> Vec<Bytes> {
    (0..n).map(|i| Bytes::from(format!("m{i}"))).collect()
}

fn names(ms: &[Message]) -> Vec<String> {
    ms.iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect()
}

fn take_all(ch: &Channel, client: u64) -> Vec<Message> {
    let mut out = Vec::new();
    while ch.take(client, 3, MSG_TIMEOUT, 0, &mut out) > 0 {}
    out
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("timed out waiting for {what}");
}

fn entry(topic: &str, channel: &str, ids: Vec<MessageId>) -> Manifest {
    Manifest {
        epoch: 1,
        topic: topic.into(),
        channel: channel.into(),
        ids,
    }
}

/// The IDs of the topic's messages m0..mN, learned from a channel that takes them all.
fn ids_of(ms: &[Message]) -> Vec<MessageId> {
    ms.iter().map(|m| m.id).collect()
}

/// Memory queue: in flight and deferred ones are settled at once, queued ones are dropped
/// when met; a topic entry covers every channel; counters and other messages unchanged.
#[tokio::test(start_paused = true)]
async fn a_manifest_removes_listed_messages_from_memory_in_flight_and_deferred() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, 100);
    let t = topic(&e, "t");
    let c = channel(&t, "c");
    let d = channel(&t, "d");
    let (cc, cd) = (consumer(1), consumer(2));
    c.add_consumer(cc.clone()).unwrap();
    d.add_consumer(cd.clone()).unwrap();
    t.put_many(bodies(10), Duration::ZERO).unwrap();
    wait_for("fan-out", || c.depth() == 10 && d.depth() == 10).await;

    // d holds every message in flight (and tells the IDs).
    let on_d = take_all(&d, 2);
    let id = ids_of(&on_d);
    // c: m0 and m1 in flight, m2 deferred, m3..m9 queued.
    let mut got = Vec::new();
    assert_eq!(c.take(1, 3, MSG_TIMEOUT, 0, &mut got), 3);
    c.requeue(1, &id[2], LATER).unwrap();
    assert_eq!(c.stats().deferred_count, 1);

    let settled = e.apply_manifest(&[
        entry("t", "c", vec![id[1], id[2], id[4], id[6]]),
        entry("t", "", vec![id[8]]),
        entry("t", "gone", vec![id[5]]),
        entry("unknown", "c", vec![id[3]]),
    ]);
    // c: m1 (in flight), m2 (deferred); d: m8 (in flight, a topic entry).
    assert_eq!(settled, 3);
    let s = c.stats();
    assert_eq!((s.in_flight_count, s.deferred_count), (1, 0));
    assert_eq!(
        cc.timeouts.load(Ordering::SeqCst),
        1,
        "m1's consumer holds one less"
    );
    assert_eq!(cd.timeouts.load(Ordering::SeqCst), 1);
    assert_eq!(d.stats().in_flight_count, 9);
    assert_eq!(
        c.finish(1, &id[1]),
        Err(FinishError::NotInFlight),
        "settled: its FIN fails as after a timeout"
    );
    // m4, m6 and m8 wait in c's memory queue until met.
    assert_eq!(e.returning().pending(), 3);

    let rest = take_all(&c, 1);
    assert_eq!(names(&rest), ["m3", "m5", "m7", "m9"]);
    assert_eq!(
        e.returning().pending(),
        0,
        "the skip set empties as it is met"
    );
    c.finish(1, &id[0]).unwrap();
    for m in &rest {
        c.finish(1, &m.id).unwrap();
    }
    let s = c.stats();
    assert_eq!(
        (s.depth, s.in_flight_count, s.deferred_count),
        (0, 0, 0),
        "nothing left"
    );
    assert_eq!(
        (s.message_count, s.requeue_count, s.timeout_count),
        (10, 1, 0),
        "counters as before"
    );
    for m in on_d.iter().filter(|m| m.id != id[8]) {
        d.finish(2, &m.id).unwrap();
    }
    assert_eq!(d.stats().in_flight_count, 0);
}

/// `--mem-queue-size=0`: what waits unread in the diskqueue is dropped when read, a deferred
/// one leaves the journal, and after a restart nothing of it comes back.
#[tokio::test(start_paused = true)]
async fn a_manifest_removes_listed_messages_from_the_diskqueue_and_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let e = engine(&dir, 0);
        let t = topic(&e, "t");
        let c = channel(&t, "c");
        let d = channel(&t, "d");
        t.put_many(bodies(10), Duration::ZERO).unwrap();
        wait_for("fan-out", || c.depth() == 10 && d.depth() == 10).await;
        // The IDs, from d (then requeued: d keeps them all).
        let on_d = take_all(&d, 2);
        let id = ids_of(&on_d);
        for m in &on_d {
            d.requeue(2, &m.id, Duration::ZERO).unwrap();
        }
        let mut got = Vec::new();
        assert_eq!(c.take(1, 2, MSG_TIMEOUT, 0, &mut got), 2);
        c.requeue(1, &id[1], LATER).unwrap();
        assert_eq!(c.stats().deferred_count, 1);

        let settled = e.apply_manifest(&[
            entry("t", "c", vec![id[1], id[3], id[5]]),
            entry("t", "", vec![id[7]]),
        ]);
        assert_eq!(settled, 1, "the deferred m1");
        assert_eq!(c.stats().deferred_count, 0);
        // m3, m5, m7 unread on c; m7 unread (requeued) on d.
        assert_eq!(e.returning().pending(), 4);
        let rest = take_all(&c, 1);
        assert_eq!(names(&rest), ["m2", "m4", "m6", "m8", "m9"]);
        for m in rest.iter().chain(&got[..1]) {
            c.finish(1, &m.id).unwrap();
        }
        let on_d = take_all(&d, 2);
        assert_eq!(on_d.len(), 9, "d loses m7 only");
        assert!(on_d.iter().all(|m| m.id != id[7]));
        assert_eq!(e.returning().pending(), 0);
        for m in &on_d {
            d.requeue(2, &m.id, Duration::ZERO).unwrap();
        }
        let s = c.stats();
        assert_eq!((s.depth, s.in_flight_count, s.deferred_count), (0, 0, 0));
        e.close();
        id
    };
    // A restart: c has nothing (no journal entry of m1 left), d its nine.
    let e = engine(&dir, 0);
    let t = topic(&e, "t");
    let c = channel(&t, "c");
    let d = channel(&t, "d");
    assert_eq!(c.stats().deferred_count, 0);
    assert!(take_all(&c, 1).is_empty());
    let on_d = take_all(&d, 2);
    assert_eq!(on_d.len(), 9);
    assert!(on_d.iter().all(|m| m.id != id[7]));
}

/// Records what the engine streams: the IDs published, the IDs FINed per channel.
#[derive(Default)]
struct Recorder {
    published: Mutex<Vec<MessageId>>,
    finished: Mutex<Vec<(String, MessageId)>>,
}

impl Replicator for Recorder {
    fn encode_messages(&self, msgs: &[Message]) -> Bytes {
        self.published.lock().extend(msgs.iter().map(|m| m.id));
        Bytes::new()
    }
    fn publish(&self, _: &str, _: i64, _: Option<&[Arc<Channel>]>, _: Bytes) -> u64 {
        0
    }
    fn fanout(&self, _: &str, _: &[Arc<Channel>], _: &[Message]) {}
    fn finish(&self, _: &str, channel: &str, ids: &[MessageId]) {
        let mut f = self.finished.lock();
        f.extend(ids.iter().map(|id| (channel.to_string(), *id)));
    }
    fn requeue(&self, _: &str, _: &str, _: ReqEntry) {}
    fn admin(&self, _: AdminOp, _: &str, _: &str) {}
    fn settings(&self, _: &str, _: &str, _: nsq_protocol::replication::Settings) {}
}

/// Messages still pending on the topic (a paused topic holds them) are skipped on every
/// channel once fanned out, a channel created after the manifest included; what is dropped
/// is streamed to the replicas as FINed.
#[tokio::test(start_paused = true)]
async fn a_topic_entry_covers_messages_not_fanned_out_yet() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, 100);
    let rec = Arc::new(Recorder::default());
    assert!(e.set_replicator(rec.clone()));
    let t = topic(&e, "t");
    let c = channel(&t, "c");
    t.pause();
    t.put_many(bodies(4), Duration::ZERO).unwrap();
    tokio::task::yield_now().await;
    assert_eq!((t.depth(), c.depth()), (4, 0));
    let id = rec.published.lock().clone();
    assert_eq!(id.len(), 4);

    let settled = e.apply_manifest(&[entry("t", "", vec![id[1]]), entry("t", "c", vec![id[2]])]);
    assert_eq!(settled, 0);
    assert_eq!(
        e.returning().pending(),
        1,
        "m1 pending on the topic (m2 is not on c yet)"
    );
    let x = channel(&t, "x");
    t.unpause();
    wait_for("fan-out", || c.depth() == 4 && x.depth() == 4).await;
    // c's own entry (m2) was not on c when applied: only the topic entry holds.
    assert_eq!(names(&take_all(&c, 1)), ["m0", "m2", "m3"]);
    assert_eq!(names(&take_all(&x, 2)), ["m0", "m2", "m3"]);
    let fins = rec.finished.lock().clone();
    assert_eq!(fins, [("c".to_string(), id[1]), ("x".to_string(), id[1])]);
    // A manifest applied again once it left the topic: the topic entry is gone.
    e.apply_manifest(&[entry("t", "", vec![id[1]])]);
    assert_eq!(e.returning().pending(), 0);
}

/// The hold: no channel delivers until released; release wakes the consumers.
#[tokio::test(start_paused = true)]
async fn the_delivery_hold_stops_every_channel() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, 100);
    e.hold_delivery();
    let t = topic(&e, "t");
    let c = channel(&t, "c");
    t.put_many(bodies(2), Duration::ZERO).unwrap();
    wait_for("fan-out", || c.depth() == 2).await;
    assert!(e.returning().is_holding());
    assert!(take_all(&c, 1).is_empty());
    let woken = c.notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    e.release_delivery();
    woken.await;
    assert_eq!(names(&take_all(&c, 1)), ["m0", "m1"]);
}

/// Emptying or deleting a channel, or deleting the topic, forgets its entries (nothing of it
/// is left to skip); a topic entry found fanned out when applied again moves to the channels.
#[tokio::test(start_paused = true)]
async fn emptied_or_deleted_queues_leave_nothing_to_skip() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, 100);
    let rec = Arc::new(Recorder::default());
    assert!(e.set_replicator(rec.clone()));
    let t = topic(&e, "t");
    let (c, d) = (channel(&t, "c"), channel(&t, "d"));
    t.put_many(bodies(3), Duration::ZERO).unwrap();
    wait_for("fan-out", || c.depth() == 3 && d.depth() == 3).await;
    let id = rec.published.lock().clone();
    e.apply_manifest(&[
        entry("t", "c", vec![id[0]]),
        entry("t", "d", vec![id[1], id[2]]),
    ]);
    assert_eq!(e.returning().pending(), 3);
    c.empty().unwrap();
    assert_eq!(e.returning().pending(), 2);
    assert!(t.delete_channel("d"));
    assert_eq!(e.returning().pending(), 0);

    // A topic entry pending on a paused topic, then fanned out: applied again, it becomes
    // c's entry, and c meets it.
    t.pause();
    t.put_many(bodies(2), Duration::ZERO).unwrap();
    tokio::task::yield_now().await;
    let id = rec.published.lock()[3..].to_vec();
    e.apply_manifest(&[entry("t", "", vec![id[0]])]);
    assert!(e.returning().only_topic_entries());
    t.unpause();
    wait_for("fan-out", || c.depth() == 2).await;
    e.reapply_skips();
    assert!(!e.returning().only_topic_entries());
    assert_eq!(e.returning().pending(), 1);
    assert_eq!(names(&take_all(&c, 1)), ["m1"]);
    assert_eq!(e.returning().pending(), 0);

    // A deleted topic: its entries go.
    t.pause();
    t.put_many(bodies(1), Duration::ZERO).unwrap();
    tokio::task::yield_now().await;
    let last = *rec.published.lock().last().unwrap();
    e.apply_manifest(&[entry("t", "", vec![last])]);
    assert_eq!(e.returning().pending(), 1);
    assert!(e.delete_topic("t"));
    assert_eq!(e.returning().pending(), 0);
}

/// A consumer with a window of one, behind a run of taken-over messages on the diskqueue:
/// one take reads past the dropped records to the first message it may deliver (a run
/// longer than one take's reads wakes the consumers to go on). Before, each take read one
/// record, dropped it and returned nothing, and delivery stalled until the next wake-up.
#[tokio::test]
async fn a_take_reads_past_a_run_of_taken_over_messages() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, 0);
    let t = topic(&e, "t");
    let c = channel(&t, "c");
    let d = channel(&t, "d");
    t.put_many(bodies(40), Duration::ZERO).unwrap();
    wait_for("fan-out", || c.depth() == 40 && d.depth() == 40).await;
    let on_d = take_all(&d, 2);
    let id = ids_of(&on_d);
    // m0..m9 taken over: one take with a window of 1 skips them and delivers m10.
    e.apply_manifest(&[entry("t", "c", id[..10].to_vec())]);
    let mut got = Vec::new();
    assert_eq!(c.take(1, 1, MSG_TIMEOUT, 0, &mut got), 1);
    assert_eq!(names(&got), ["m10"]);
    c.finish(1, &got[0].id).unwrap();
    // m11..m38 taken over (28, more than one take reads): the consumers are woken.
    e.apply_manifest(&[entry("t", "c", id[11..39].to_vec())]);
    let woken = c.notified();
    got.clear();
    assert_eq!(c.take(1, 1, MSG_TIMEOUT, 0, &mut got), 0);
    tokio::time::timeout(Duration::from_secs(1), woken)
        .await
        .expect("a take that only dropped records wakes the consumers");
    assert_eq!(c.take(1, 1, MSG_TIMEOUT, 0, &mut got), 1);
    assert_eq!(names(&got), ["m39"]);
}
