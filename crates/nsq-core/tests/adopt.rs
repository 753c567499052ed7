//! `Topic::adopt` (issue 22 phase 2b, docs/replication.md "Takeover", "Delivering"): messages
//! taken over from another node's backlog keep their ID, timestamp, attempts and remaining
//! deferral, go into the channel they were pending on (or into the topic, fanned out like a
//! publish), and are replicated like a publish: one PUB frame per distinct deferral, listing
//! the channel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nsq_core::{Channel, Engine, Message, NoHooks, Options, Replicator};
use nsq_protocol::replication::{AdminOp, ReqEntry};
use nsq_protocol::MessageId;
use parking_lot::Mutex;
use tempfile::TempDir;

/// One recorded publish: topic, due (Unix ns), channels (None: the topic), message count.
type Published = (String, i64, Option<Vec<String>>, usize);

#[derive(Default)]
struct Recorder {
    seq: AtomicU64,
    published: Mutex<Vec<Published>>,
}

impl Replicator for Recorder {
    fn encode_messages(&self, msgs: &[Message]) -> Bytes {
        Bytes::from(vec![0u8; msgs.len()])
    }

    fn publish(
        &self,
        topic: &str,
        defer_until: i64,
        channels: Option<&[Arc<Channel>]>,
        messages: Bytes,
    ) -> u64 {
        self.published.lock().push((
            topic.to_string(),
            defer_until,
            channels.map(|c| c.iter().map(|c| c.name().to_string()).collect()),
            messages.len(),
        ));
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn fanout(&self, _: &str, _: &[Arc<Channel>], _: &[Message]) {}
    fn finish(&self, _: &str, _: &str, _: &[MessageId]) {}
    fn requeue(&self, _: &str, _: &str, _: ReqEntry) {}
    fn admin(&self, _: AdminOp, _: &str, _: &str) {}
    fn settings(&self, _: &str, _: &str, _: nsq_protocol::replication::Settings) {}
}

fn msg(n: u8, attempts: u16, defer_ms: u32) -> Message {
    Message {
        id: MessageId([b'0' + n; 16]),
        timestamp: 1_600_000_000_000_000_000 + i64::from(n),
        attempts,
        body: Bytes::from(format!("body-{n}")),
        defer_ms,
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

#[tokio::test]
async fn adopted_messages_keep_their_identity_and_are_replicated_like_a_publish() {
    let dir = TempDir::new().unwrap();
    let e = Engine::new(
        Options {
            data_path: dir.path().to_path_buf(),
            ..Options::default()
        },
        Arc::new(NoHooks),
    );
    let rec = Arc::new(Recorder::default());
    assert!(e.set_replicator(rec.clone()));

    // Into a channel: one immediate (attempts kept), one deferred by what it had left.
    let t = e.get_or_create_topic("t").unwrap().0;
    let before = now_ns();
    let r = t
        .adopt(Some("c"), vec![msg(1, 3, 0), msg(2, 1, 5_000)])
        .unwrap();
    let c = t.get_channel("c").expect("created by adopt");
    let published = rec.published.lock().clone();
    assert_eq!(published.len(), 2, "{published:?}");
    assert_eq!(r.replication_seq(), 2, "the last PUB's seq");
    assert_eq!(published[0], ("t".into(), 0, Some(vec!["c".into()]), 1));
    let (_, due, ref chans, n) = published[1];
    assert_eq!((chans.clone(), n), (Some(vec!["c".to_string()]), 1));
    assert!(due >= before + 5_000_000_000 && due <= now_ns() + 5_000_000_000);
    let mut out = Vec::new();
    assert_eq!(c.take(1, 10, Duration::from_secs(60), 0, &mut out), 1);
    assert_eq!(out[0].id, msg(1, 0, 0).id);
    assert_eq!(
        out[0].timestamp,
        msg(1, 0, 0).timestamp,
        "publish time kept"
    );
    assert_eq!(&out[0].body[..], b"body-1");
    assert!(out[0].attempts >= 3, "attempts kept: {}", out[0].attempts);
    assert_eq!(c.stats().deferred_count, 1);

    // Into a topic with two channels: fanned out to both, one PUB listing them.
    let t2 = e.get_or_create_topic("t2").unwrap().0;
    let x = t2.get_or_create_channel("x").unwrap().0;
    let y = t2.get_or_create_channel("y").unwrap().0;
    rec.published.lock().clear();
    let r = t2.adopt(None, vec![msg(3, 0, 0)]).unwrap();
    assert_eq!(r.replication_seq(), 3);
    assert_eq!(
        rec.published.lock().clone(),
        [(
            "t2".to_string(),
            0,
            Some(vec!["x".to_string(), "y".to_string()]),
            1
        )]
    );
    for ch in [&x, &y] {
        let mut out = Vec::new();
        assert_eq!(ch.take(1, 10, Duration::from_secs(60), 0, &mut out), 1);
        assert_eq!(
            (out[0].id, out[0].timestamp),
            (msg(3, 0, 0).id, msg(3, 0, 0).timestamp)
        );
    }
    e.close();
}
