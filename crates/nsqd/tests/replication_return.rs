//! Return (issue 22, docs/replication.md "Return"): an origin nsqd A whose peer answers HELLO
//! with TAKEN_OVER and a manifest. The peer is a fake taker: a listener on 127.0.0.1:0 that
//! speaks the link codec, acknowledges what A replicates, and answers each HELLO as the test
//! planned (WELCOME, or TAKEN_OVER + MANIFEST + MANIFEST_END, possibly after a delay).

mod common;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use nsq_protocol::replication::{
    self, Challenge, Frame, Hello, Item, Manifest, Welcome, WelcomeAnswer, LINK_VERSION,
    MIN_MAX_FRAME, NONCE_LEN,
};
use nsq_protocol::MessageId;
use nsq_testkit::frames::{sized, FrameConn};
use nsq_testkit::http::request;
use nsq_testkit::wait::eventually;
use nsqd::NsqdHandle;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// DROP frames received: (epoch, taker).
type Drops = Arc<Mutex<Vec<(u64, u64)>>>;

const FAKE_NODE: u64 = 0x7a6b_0000_0000_0001;

/// How the fake answers a HELLO.
enum Answer {
    Welcome,
    /// WELCOME, then a STATUS saying the fake takes this origin's `epoch` over.
    WelcomeThenClaim {
        epoch: u64,
    },
    TakenOver {
        epoch: u64,
        delay: Duration,
        entries: Vec<(String, String, Vec<MessageId>)>,
    },
}

struct Fake {
    addr: SocketAddr,
    /// Its node ID (one per fake: two members never share one).
    node: u64,
    hellos: mpsc::UnboundedReceiver<Hello>,
    applied: mpsc::UnboundedReceiver<u64>,
    /// Every message A replicated: body → ID.
    ids: Arc<Mutex<HashMap<String, MessageId>>>,
    plan: Arc<Mutex<VecDeque<Answer>>>,
    /// Bumped to end every open session.
    cut: watch::Sender<u64>,
    /// DROP frames received: (epoch, taker).
    drops: Drops,
    /// Cleared: the fake stores nothing (it ACKs no frame).
    acks: Arc<AtomicBool>,
}

impl Fake {
    async fn start() -> Fake {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let node = FAKE_NODE + u64::from(addr.port());
        let (htx, hellos) = mpsc::unbounded_channel();
        let (atx, applied) = mpsc::unbounded_channel();
        let ids = Arc::new(Mutex::new(HashMap::new()));
        let plan = Arc::new(Mutex::new(VecDeque::new()));
        let cut = watch::channel(0).0;
        let drops = Arc::new(Mutex::new(Vec::new()));
        let acks = Arc::new(AtomicBool::new(true));
        let (ids2, plan2, cut2, drops2) = (ids.clone(), plan.clone(), cut.clone(), drops.clone());
        let acks2 = acks.clone();
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = l.accept().await else { return };
                let (htx, atx, ids, plan) = (htx.clone(), atx.clone(), ids2.clone(), plan2.clone());
                let cut = cut2.subscribe();
                let (drops, acks) = (drops2.clone(), acks2.clone());
                tokio::spawn(async move {
                    let _ = serve(s, htx, atx, ids, plan, cut, (drops, acks, node)).await;
                });
            }
        });
        Fake {
            addr,
            node,
            hellos,
            applied,
            ids,
            plan,
            cut,
            drops,
            acks,
        }
    }

    async fn hello(&mut self) -> Hello {
        tokio::time::timeout(Duration::from_secs(10), self.hellos.recv())
            .await
            .expect("a HELLO within 10 s")
            .unwrap()
    }

    /// Forgets the HELLOs received so far.
    fn forget_hellos(&mut self) {
        while self.hellos.try_recv().is_ok() {}
    }

    async fn applied(&mut self) -> u64 {
        tokio::time::timeout(Duration::from_secs(10), self.applied.recv())
            .await
            .expect("MANIFEST_APPLIED within 10 s")
            .unwrap()
    }

    fn then(&self, a: Answer) {
        self.plan.lock().push_back(a);
    }

    fn cut_links(&self) {
        self.cut.send_modify(|g| *g += 1);
    }

    async fn id(&self, body: &str) -> MessageId {
        eventually(async || self.ids.lock().contains_key(body)).await;
        self.ids.lock()[body]
    }
}

async fn read(s: &mut TcpStream, buf: &mut BytesMut) -> Option<Frame> {
    loop {
        if let Some(f) = replication::decode(buf, MIN_MAX_FRAME).unwrap() {
            return Some(f);
        }
        if s.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
}

async fn serve(
    mut s: TcpStream,
    hellos: mpsc::UnboundedSender<Hello>,
    applied: mpsc::UnboundedSender<u64>,
    ids: Arc<Mutex<HashMap<String, MessageId>>>,
    plan: Arc<Mutex<VecDeque<Answer>>>,
    mut cut: watch::Receiver<u64>,
    (drops, acks, node): (Drops, Arc<AtomicBool>, u64),
) -> Option<()> {
    let mut magic = [0u8; 4];
    s.read_exact(&mut magic).await.ok()?;
    assert_eq!(&magic, b"  R1");
    let mut buf = BytesMut::new();
    let Some(Frame::Hello(h)) = read(&mut s, &mut buf).await else {
        panic!("HELLO expected first");
    };
    let origin = h.node_id;
    let _ = hellos.send(h);
    // The membership handshake of a group without a secret: empty proofs both ways.
    let mut out = BytesMut::new();
    replication::encode(
        &Frame::Challenge(Challenge {
            node_id: node,
            nonce: [7; NONCE_LEN],
            broadcast_address: "fake".into(),
            tcp_port: node as u16,
            proof: Default::default(),
        }),
        &mut out,
    );
    s.write_all(&out).await.ok()?;
    match read(&mut s, &mut buf).await? {
        Frame::Auth { proof } => assert!(proof.is_empty()),
        other => panic!("AUTH expected, got {other:?}"),
    }
    let answer = plan.lock().pop_front().unwrap_or(Answer::Welcome);
    let mut out = BytesMut::new();
    let welcome = Frame::Welcome(Welcome {
        version: LINK_VERSION,
        node_id: node,
        answer: WelcomeAnswer::Catchup,
        last_seq: 0,
        max_frame: MIN_MAX_FRAME,
    });
    match answer {
        Answer::Welcome => replication::encode(&welcome, &mut out),
        Answer::WelcomeThenClaim { epoch } => {
            replication::encode(&welcome, &mut out);
            let claim = replication::StatusEntry {
                origin,
                epoch,
                state: replication::BacklogState::TakingOver,
                last_seq: 0,
                messages: 0,
                bytes: 0,
                complete: true,
                echo: 0,
            };
            replication::encode(&Frame::Status(vec![claim]), &mut out);
        }
        Answer::TakenOver {
            epoch,
            delay,
            entries,
        } => {
            tokio::time::sleep(delay).await;
            let n: usize = entries.iter().map(|e| e.2.len()).sum();
            replication::encode(
                &Frame::TakenOver {
                    epoch,
                    by_node: node,
                    entries: n as u64,
                    last_seq: 0,
                },
                &mut out,
            );
            for (topic, channel, ids) in entries {
                replication::encode(
                    &Frame::Manifest(Manifest {
                        epoch,
                        topic,
                        channel,
                        ids,
                    }),
                    &mut out,
                );
            }
            replication::encode(&Frame::ManifestEnd { epoch }, &mut out);
        }
    }
    s.write_all(&out).await.ok()?;
    let mut out = BytesMut::new();
    loop {
        let f = tokio::select! {
            f = read(&mut s, &mut buf) => f?,
            _ = cut.changed() => return None,
        };
        match &f {
            Frame::ManifestApplied { epoch } => {
                let _ = applied.send(*epoch);
            }
            Frame::Drop { epoch, taker } => drops.lock().push((*epoch, *taker)),
            Frame::Pub(p) => {
                let mut m = ids.lock();
                for x in &p.messages {
                    m.insert(String::from_utf8_lossy(&x.body).into_owned(), x.id);
                }
            }
            // A message published before the catch-up's snapshot was taken travels in it,
            // not as a PUB frame (A reports the link connected before that).
            Frame::State(Item::Message(x)) => {
                ids.lock()
                    .insert(String::from_utf8_lossy(&x.body).into_owned(), x.id);
            }
            _ => {}
        }
        if let Some(seq) = f.seq().filter(|_| acks.load(Ordering::Relaxed)) {
            out.clear();
            replication::encode(&Frame::Ack { seq }, &mut out);
            s.write_all(&out).await.ok()?;
        }
    }
}

async fn start_a(dir: &Path, fake: &Fake) -> NsqdHandle {
    let o = common::options(
        dir,
        &[
            "--replicas=2".to_string(),
            format!("--replication-peer={}", fake.addr),
        ],
    );
    common::start_replayed(o).await
}

async fn create_channel(h: &NsqdHandle, topic: &str, channel: &str) {
    let r = request(
        h.http_addr().unwrap(),
        "POST",
        &format!("/topic/create?topic={topic}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    let r = request(
        h.http_addr().unwrap(),
        "POST",
        &format!("/channel/create?topic={topic}&channel={channel}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
}

async fn publish(h: &NsqdHandle, n: usize) {
    let mut body = (n as u32).to_be_bytes().to_vec();
    for i in 0..n {
        let b = format!("m{i}");
        body.extend_from_slice(&(b.len() as u32).to_be_bytes());
        body.extend_from_slice(b.as_bytes());
    }
    let mut c = FrameConn::connect(h.tcp_addr(), b"  V2").await;
    c.send_ok(&sized("MPUB t\n", &body)).await;
}

/// SUB t `channel` with RDY 100.
async fn subscribe(h: &NsqdHandle, channel: &str) -> FrameConn {
    let mut sub = FrameConn::connect(h.tcp_addr(), b"  V2").await;
    sub.send_ok(format!("SUB t {channel}\n").as_bytes()).await;
    sub.send(b"RDY 100\n").await;
    sub
}

/// The bodies of the next `n` messages, sorted, each FINed.
async fn receive(sub: &mut FrameConn, n: usize) -> Vec<String> {
    let mut v = Vec::new();
    for _ in 0..n {
        let m = sub.message().await;
        sub.send(format!("FIN {}\n", String::from_utf8_lossy(&m.id.0)).as_bytes())
            .await;
        v.push(String::from_utf8(m.body.to_vec()).unwrap());
    }
    v.sort();
    v
}

/// No message arrives for `d`.
async fn nothing_for(sub: &mut FrameConn, d: Duration) {
    if let Ok(m) = tokio::time::timeout(d, sub.message()).await {
        panic!("unexpected message {:?}", String::from_utf8_lossy(&m.body));
    }
}

fn dat(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("replication.dat")).unwrap()).unwrap()
}

fn taken_files(dir: &Path) -> usize {
    std::fs::read_dir(nsqd::replication::returning::taken_dir(dir))
        .map(|r| r.count())
        .unwrap_or(0)
}

/// A peer answers TAKEN_OVER: A stores and applies the manifest, answers MANIFEST_APPLIED,
/// moves to the next epoch (persisted) and links again with it; a consumer gets only what the
/// manifest does not list (a channel entry and a topic entry); the stored manifest is deleted
/// once used up.
#[tokio::test]
async fn a_taken_over_epoch_is_applied_and_the_origin_moves_on() {
    let mut fake = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let a = start_a(dir.path(), &fake).await;
    let first = fake.hello().await;
    assert!(!first.previous_unclean);
    let e1 = first.epoch;
    create_channel(&a, "t", "c").await;
    publish(&a, 6).await;
    let mut id = Vec::new();
    for i in 0..6 {
        id.push(fake.id(&format!("m{i}")).await);
    }

    fake.then(Answer::TakenOver {
        epoch: e1,
        delay: Duration::ZERO,
        entries: vec![
            ("t".into(), "c".into(), vec![id[1], id[3]]),
            ("t".into(), "".into(), vec![id[5]]),
        ],
    });
    fake.cut_links();
    let again = fake.hello().await;
    assert_eq!(again.epoch, e1, "the session that learns of the takeover");
    assert_eq!(fake.applied().await, e1);
    let next = fake.hello().await;
    assert_eq!(next.epoch, e1 + 1, "a new session in the next epoch");
    assert_eq!(dat(dir.path())["epoch"], e1 + 1);
    assert_eq!(a.nsqd.replication.as_ref().unwrap().epoch(), e1 + 1);
    assert_eq!(taken_files(dir.path()), 1, "the manifest is stored");

    let mut sub = subscribe(&a, "c").await;
    assert_eq!(receive(&mut sub, 3).await, ["m0", "m2", "m4"]);
    nothing_for(&mut sub, Duration::from_millis(300)).await;
    let ch = common::channel(&a, "t", "c");
    eventually(async || ch.depth() == 0 && ch.stats().in_flight_count == 0).await;
    eventually(async || taken_files(dir.path()) == 0).await;
    a.shutdown().await;
    assert_eq!(
        dat(dir.path())["epoch"],
        e1 + 1,
        "a clean stop keeps the new epoch"
    );
}

/// After an unclean stop A holds delivery until its peer answered (here a TAKEN_OVER of the
/// previous epoch, 1.5 s late), then delivers what the manifest does not list; the manifest
/// is kept across a restart until what it lists is met.
#[tokio::test]
async fn after_an_unclean_stop_delivery_waits_for_the_manifest_and_it_survives_a_restart() {
    let mut fake = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let a = start_a(dir.path(), &fake).await;
    let e = fake.hello().await.epoch;
    create_channel(&a, "t", "c").await;
    create_channel(&a, "t", "d").await;
    publish(&a, 4).await;
    let mut id = Vec::new();
    for i in 0..4 {
        id.push(fake.id(&format!("m{i}")).await);
    }
    a.shutdown().await;
    // replication.dat as an unclean run leaves it: no clean_seq.
    let mut d = dat(dir.path());
    d.as_object_mut().unwrap().remove("clean_seq");
    std::fs::write(dir.path().join("replication.dat"), d.to_string()).unwrap();

    fake.then(Answer::TakenOver {
        epoch: e,
        delay: Duration::from_millis(1500),
        entries: vec![
            ("t".into(), "c".into(), vec![id[1]]),
            ("t".into(), "d".into(), vec![id[2]]),
        ],
    });
    let a = start_a(dir.path(), &fake).await;
    let mut sub = subscribe(&a, "c").await;
    let h = fake.hello().await;
    assert!(h.previous_unclean);
    assert_eq!((h.epoch, h.previous_epoch), (e + 1, e));
    nothing_for(&mut sub, Duration::from_millis(1000)).await;
    assert_eq!(fake.applied().await, e);
    assert_eq!(receive(&mut sub, 3).await, ["m0", "m2", "m3"]);
    nothing_for(&mut sub, Duration::from_millis(300)).await;
    // Already past epoch e: no new epoch.
    assert_eq!(a.nsqd.replication.as_ref().unwrap().epoch(), e + 1);
    // The next session does not call epoch e unclean again (another holder of it would
    // take it over a second time) and tells the peer to DROP its copies of it.
    fake.forget_hellos();
    fake.then(Answer::Welcome);
    fake.cut_links();
    let h = fake.hello().await;
    assert!(!h.previous_unclean, "{h:?}");
    assert_eq!(h.epoch, e + 1);
    // DROP names the taker whose manifest was applied (link version 3): a copy of epoch e
    // goes to it as a handoff, never to a second takeover.
    eventually(async || fake.drops.lock().contains(&(e, fake.node))).await;
    drop(sub);
    // d's m2 was not met yet: the manifest stays, and a restart applies it again.
    assert_eq!(taken_files(dir.path()), 1);
    a.shutdown().await;

    fake.forget_hellos();
    let a = start_a(dir.path(), &fake).await;
    assert!(!fake.hello().await.previous_unclean);
    let mut sub = subscribe(&a, "d").await;
    assert_eq!(receive(&mut sub, 3).await, ["m0", "m1", "m3"]);
    nothing_for(&mut sub, Duration::from_millis(300)).await;
    eventually(async || taken_files(dir.path()) == 0).await;
    a.shutdown().await;
}

/// Two takers of the same epoch (docs/replication.md, Safety model): A applies both
/// manifests, moves to the next epoch once, and delivers only what neither lists. (N = 3, so
/// that both peers are in A's replica set and hold its messages.)
#[tokio::test]
async fn the_manifests_of_two_takers_are_both_applied() {
    let mut f1 = Fake::start().await;
    let mut f2 = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let o = common::options(
        dir.path(),
        &[
            "--replicas=3".to_string(),
            format!("--replication-peer={}", f1.addr),
            format!("--replication-peer={}", f2.addr),
        ],
    );
    let a = common::start_replayed(o).await;
    let e = f1.hello().await.epoch;
    assert_eq!(f2.hello().await.epoch, e);
    create_channel(&a, "t", "c").await;
    publish(&a, 5).await;
    let mut id = Vec::new();
    for i in 0..5 {
        id.push(f1.id(&format!("m{i}")).await);
    }
    f1.then(Answer::TakenOver {
        epoch: e,
        delay: Duration::ZERO,
        entries: vec![("t".into(), "c".into(), vec![id[0], id[1]])],
    });
    f2.then(Answer::TakenOver {
        epoch: e,
        delay: Duration::from_millis(200),
        entries: vec![("t".into(), "".into(), vec![id[1], id[3]])],
    });
    f1.cut_links();
    f2.cut_links();
    assert_eq!(f1.applied().await, e);
    assert_eq!(f2.applied().await, e);
    eventually(async || a.nsqd.replication.as_ref().unwrap().epoch() == e + 1).await;
    let mut sub = subscribe(&a, "c").await;
    assert_eq!(receive(&mut sub, 2).await, ["m2", "m4"]);
    nothing_for(&mut sub, Duration::from_millis(300)).await;
    assert_eq!(dat(dir.path())["epoch"], e + 1);
    a.shutdown().await;
}

/// A publish still waiting for its replica when the epoch it was logged in is taken over fails
/// as soon as the manifest is applied (the core's `FailPublish` when it moves to the next
/// epoch: the publish's copies went with the old one), not after `--replication-ack-timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_waiting_when_its_epoch_is_taken_over_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut fake = Fake::start().await;
    fake.acks.store(false, Ordering::Relaxed);
    let o = common::options(
        dir.path(),
        &[
            "--replicas=2".to_string(),
            format!("--replication-peer={}", fake.addr),
            "--replication-ack-timeout=1m".to_string(),
        ],
    );
    let a = common::start_replayed(o).await;
    let e = fake.hello().await.epoch;
    // Linked (its catch-up sent): the publish goes to the fake as a PUB frame.
    let repl = a.nsqd.replication.as_ref().unwrap();
    eventually(async || repl.peers().iter().all(|p| p.connected)).await;
    let mut c = FrameConn::connect(a.tcp_addr(), b"  V2").await;
    c.send(&sized("PUB t\n", b"x")).await;
    fake.id("x").await;
    fake.then(Answer::TakenOver {
        epoch: e,
        delay: Duration::ZERO,
        entries: vec![],
    });
    let cut = Instant::now();
    fake.cut_links();
    assert_eq!(fake.applied().await, e);
    c.expect_fatal("E_PUB_FAILED PUB failed not enough replicas: 0 of 1 stored it within 1m0s")
        .await;
    assert!(
        cut.elapsed() < Duration::from_secs(20),
        "{:?}",
        cut.elapsed()
    );
    assert_eq!(repl.epoch(), e + 1);
    a.shutdown().await;
}

/// A member's STATUS says it takes A's current epoch over while A is linked to it (a cut that
/// healed, say): A leaves that epoch at once (the core's rule: a taker never welcomes its
/// origin back into the epoch it takes over), persists the next, delivers none of its
/// replicated messages from then on, and once the manifest is applied delivers only what the
/// manifest does not list.
#[tokio::test]
async fn a_claimed_origin_leaves_its_epoch_and_stays_fenced_until_the_manifest_comes() {
    let mut fake = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let a = start_a(dir.path(), &fake).await;
    let e1 = fake.hello().await.epoch;
    create_channel(&a, "t", "c").await;
    publish(&a, 6).await;
    let mut id = Vec::new();
    for i in 0..6 {
        id.push(fake.id(&format!("m{i}")).await);
    }
    fake.then(Answer::WelcomeThenClaim { epoch: e1 });
    fake.cut_links();
    assert_eq!(
        fake.hello().await.epoch,
        e1,
        "the session that hears the claim"
    );
    let repl = a.nsqd.replication.as_ref().unwrap();
    eventually(async || repl.fenced()).await;
    let mut sub = subscribe(&a, "c").await;
    // A leaves e1: persisted, and its next session is of e1 + 1.
    eventually(async || repl.epoch() == e1 + 1).await;
    assert_eq!(dat(dir.path())["epoch"], e1 + 1);
    nothing_for(&mut sub, Duration::from_millis(1000)).await;
    // The taker's answer to that session: TAKEN_OVER of e1 with the manifest.
    fake.then(Answer::TakenOver {
        epoch: e1,
        delay: Duration::ZERO,
        entries: vec![("t".into(), "c".into(), vec![id[1], id[3]])],
    });
    fake.cut_links();
    fake.forget_hellos();
    assert_eq!(fake.applied().await, e1);
    assert_eq!(receive(&mut sub, 4).await, ["m0", "m2", "m4", "m5"]);
    nothing_for(&mut sub, Duration::from_millis(300)).await;
    assert_eq!(repl.epoch(), e1 + 1);
    assert_eq!(dat(dir.path())["epoch"], e1 + 1);
    a.shutdown().await;
}

/// Take points (docs/replication.md, "Return"): A takes over an epoch of another origin B
/// that carries message X (B had it from A: say B took A's epoch over and then vanished); a
/// manifest of A's own earlier epoch, from a copy taken before that, then lists X. A keeps X
/// — it came back here after the taker's copy was taken — and delivers it: dropping it would
/// lose it, since B, its only other holder, is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_does_not_take_back_a_message_adopted_after_its_copy() {
    use common::origin::{admin, publish as origin_pub, Origin};
    use nsq_protocol::replication::AdminOp;
    let mut fake = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let o = common::options(
        dir.path(),
        &[
            "--replicas=2".to_string(),
            format!("--replication-peer={}", fake.addr),
            "--replication-takeover-timeout=1s".to_string(),
        ],
    );
    let a = common::start_replayed(o).await;
    let e1 = fake.hello().await.epoch;
    // B replicates its epoch 1 to A: topic t, channel c, message X (id(7), "body-7").
    let (mut b, answer) = Origin::hello(&a, 1, None).await;
    assert!(matches!(answer, Frame::Welcome(_)), "{answer:?}");
    b.send(&Frame::CatchupBegin { seq: 0 }).await;
    b.send(&Frame::CatchupEnd { seq: 0 }).await;
    b.send(&admin(1, AdminOp::Create, "t", "")).await;
    b.send(&admin(2, AdminOp::Create, "t", "c")).await;
    b.send(&origin_pub(3, "t", &["c"], 0, &[7])).await;
    b.acked(3).await;
    drop(b);
    // B is gone: A takes its epoch over (X is now A's), and its replica (the fake) stores it.
    let x = common::origin::id(7);
    eventually(async || a.nsqd.replication.as_ref().unwrap().takeovers() == 1).await;
    // The fake took A's epoch e1 over from a copy up to seq 0, listing X.
    fake.then(Answer::TakenOver {
        epoch: e1,
        delay: Duration::ZERO,
        entries: vec![("t".into(), "c".into(), vec![x])],
    });
    fake.cut_links();
    assert_eq!(fake.applied().await, e1);
    let mut sub = subscribe(&a, "c").await;
    assert_eq!(receive(&mut sub, 1).await, ["body-7"]);
    a.shutdown().await;
}
