//! Queue settings under replication (docs/replication.md, ADMIN op 6; README "Beyond NSQ:
//! queue settings"): a change on the origin reaches its replica's backlog, a catch-up carries
//! them, and a takeover gives them to the queues it creates. Ports are all bound to `:0`
//! (or chosen by `nsq_testkit::free_port`).

mod common;

use std::path::Path;
use std::time::Duration;

use common::origin::{admin, publish, Origin};
use common::pair::Pair;
use nsq_core::queue_settings::QueueSettings;
use nsq_protocol::replication::{AdminOp, Frame, TopicItem, WelcomeAnswer};
use nsq_testkit::http::request;
use nsq_testkit::wait::eventually;
use nsqd::NsqdHandle;
use tempfile::TempDir;

async fn post(n: &NsqdHandle, path: &str) -> (u16, String) {
    let r = request(n.http_addr().unwrap(), "POST", path, &[], b"").await;
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The settings of topic `t` (and of its channel `c` when given) in `topics`.
fn settings_in(topics: &[TopicItem], t: &str, c: Option<&str>) -> Option<Vec<(String, String)>> {
    let topic = topics.iter().find(|x| x.topic == t)?;
    match c {
        None => Some(topic.settings.clone()),
        Some(c) => topic
            .channels
            .iter()
            .find(|x| x.name == c)
            .map(|x| x.settings.clone()),
    }
}

/// B's copy of A's topics (its newest epoch).
fn b_topics(p: &Pair) -> Vec<TopicItem> {
    let repl = p.b().nsqd.replication.as_ref().unwrap();
    repl.backlog_topics(p.a_node())
        .pop()
        .map(|(_, t)| t)
        .unwrap_or_default()
}

/// A topic's and a channel's settings set on the origin reach the replica's backlog as they
/// change (a cleared key leaves it); a replica that lost its copy gets them back with the
/// catch-up's STATE TOPIC item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_reach_the_replica_and_a_catch_up_carries_them() {
    let mut p = Pair::start(&["--replication-ack-timeout=5s"]).await;
    assert_eq!(post(&p.a, "/topic/create?topic=t").await.0, 200);
    assert_eq!(post(&p.a, "/channel/create?topic=t&channel=c").await.0, 200);
    let (status, body) = post(&p.a, "/topic/config?topic=t&ttl=1h").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(
        &p.a,
        "/channel/config?topic=t&channel=c&max_attempts=2&dead_letter_topic=dlq",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let want_t = pairs(&[("ttl", "3600000000000")]);
    let want_c = pairs(&[("max_attempts", "2"), ("dead_letter_topic", "dlq")]);
    eventually(async || {
        let topics = b_topics(&p);
        settings_in(&topics, "t", None) == Some(want_t.clone())
            && settings_in(&topics, "t", Some("c")) == Some(want_c.clone())
    })
    .await;

    // A cleared key leaves the copy too; an unchanged POST adds no record.
    let (status, _) = post(&p.a, "/channel/config?topic=t&channel=c&dead_letter_topic=").await;
    assert_eq!(status, 200);
    let want_c = pairs(&[("max_attempts", "2")]);
    eventually(async || settings_in(&b_topics(&p), "t", Some("c")) == Some(want_c.clone())).await;
    let seq = p.a.nsqd.replication.as_ref().unwrap().log.last_seq();
    let (status, _) = post(&p.a, "/channel/config?topic=t&channel=c&max_attempts=2").await;
    assert_eq!(status, 200);
    assert_eq!(p.a.nsqd.replication.as_ref().unwrap().log.last_seq(), seq);

    // B loses its copy while down: the catch-up brings the settings back.
    p.b.take().unwrap().shutdown().await;
    std::fs::remove_dir_all(p.b_dir.path().join("replica")).unwrap();
    p.start_b().await;
    eventually(async || {
        let topics = b_topics(&p);
        p.backlog()
            .is_some_and(|b| !b.catching_up && b.last_seq > 0)
            && settings_in(&topics, "t", None) == Some(want_t.clone())
            && settings_in(&topics, "t", Some("c")) == Some(want_c.clone())
    })
    .await;
    p.shutdown().await;
}

/// B: `--replication-peer` (so replication is on; with `--replicas=1` it dials nobody).
async fn start_b(dir: &Path) -> NsqdHandle {
    let args = [
        "--replication-peer=127.0.0.1:1".to_string(),
        "--replication-takeover-timeout=1s".to_string(),
    ];
    common::start_replayed(common::options(dir, &args)).await
}

fn settings_frame(seq: u64, topic: &str, channel: &str, p: &[(&str, &str)]) -> Frame {
    let Frame::Admin(mut a) = admin(seq, AdminOp::Settings, topic, channel) else {
        unreachable!()
    };
    a.settings = pairs(p);
    Frame::Admin(a)
}

/// A takeover creates the copy's topics and channels with the copy's settings (in effect:
/// the channel's max attempts and dead-letter topic, the TTL it inherits from its topic) and
/// writes them to `nsqd.dat`; a queue that has settings of its own here keeps them, and a pair
/// this node cannot take (a key it does not know) is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_carries_the_copys_settings() {
    let dir = TempDir::new().unwrap();
    let b = start_b(dir.path()).await;
    // Topic k exists here with a setting of its own.
    assert_eq!(post(&b, "/topic/create?topic=k").await.0, 200);
    assert_eq!(post(&b, "/topic/config?topic=k&ttl=5m").await.0, 200);

    let (mut o, answer) = Origin::hello(&b, 1, None).await;
    let Frame::Welcome(w) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(w.answer, WelcomeAnswer::Catchup);
    o.send(&Frame::CatchupBegin { seq: 0 }).await;
    o.send(&Frame::CatchupEnd { seq: 0 }).await;
    let frames = [
        admin(1, AdminOp::Create, "t", ""),
        admin(2, AdminOp::Create, "t", "c"),
        settings_frame(3, "t", "", &[("ttl", "3600000000000")]),
        settings_frame(
            4,
            "t",
            "c",
            &[
                ("max_attempts", "2"),
                ("dead_letter_topic", "dlq"),
                ("a_future_key", "1"),
            ],
        ),
        admin(5, AdminOp::Create, "k", ""),
        settings_frame(6, "k", "", &[("ttl", "1000000000")]),
        publish(7, "t", &["c"], 0, &[1]),
    ];
    for f in &frames {
        o.send(f).await;
    }
    o.acked(7).await;
    drop(o);
    let repl = b.nsqd.replication.clone().unwrap();
    eventually(async || repl.takeovers() == 1).await;

    let t = b.nsqd.engine.get_topic("t").expect("t created");
    assert_eq!(
        t.settings(),
        QueueSettings {
            ttl: Some(Duration::from_secs(3600)),
            ..Default::default()
        }
    );
    let c = t.get_channel("c").expect("c created");
    assert_eq!(
        c.settings(),
        QueueSettings {
            max_attempts: Some(2),
            dead_letter_topic: Some("dlq".into()),
            ..Default::default()
        }
    );
    // In effect, not only stored.
    assert_eq!(c.max_attempts(), Some(2));
    assert_eq!(c.dead_letter_topic().as_deref(), Some("dlq"));
    // Topic k keeps its own.
    let k = b.nsqd.engine.get_topic("k").unwrap();
    assert_eq!(k.settings().ttl, Some(Duration::from_secs(300)));
    // The adopted message is on t:c.
    assert_eq!(c.depth(), 1);

    // nsqd.dat has them (written by the scheduled metadata write).
    let dat = dir.path().join("nsqd.dat");
    eventually(async || {
        std::fs::read_to_string(&dat).is_ok_and(|s| s.contains(r#""max_attempts":2"#))
    })
    .await;
    let text = std::fs::read_to_string(&dat).unwrap();
    assert!(text.contains(r#""dead_letter_topic":"dlq""#), "{text}");
    assert!(text.contains(r#""ttl":"1h0m0s""#), "{text}");
    assert!(text.contains(r#""ttl":"5m0s""#), "{text}");
    b.shutdown().await;
}

/// An origin restarted cleanly on its data directory loads its settings from `nsqd.dat`
/// and continues its epoch: the replica's copy keeps the settings, and publishes still go
/// through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_origin_keeps_its_settings_and_its_replica_too() {
    let (a_dir, b_dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (a_port, b_port) = (common::pair::free_port(), common::pair::free_port());
    let a_args = vec![
        format!("--tcp-address=127.0.0.1:{a_port}"),
        "--replicas=2".to_string(),
        format!("--replication-peer=127.0.0.1:{b_port}"),
    ];
    let b_args = vec![
        format!("--tcp-address=127.0.0.1:{b_port}"),
        format!("--replication-peer=127.0.0.1:{a_port}"),
    ];
    let a = common::pair::start_on(a_dir.path(), &a_args).await;
    let b = common::pair::start_on(b_dir.path(), &b_args).await;
    let node = a.nsqd.replication.as_ref().unwrap().identity.node_id;
    assert_eq!(post(&a, "/topic/create?topic=t").await.0, 200);
    assert_eq!(post(&a, "/channel/create?topic=t&channel=c").await.0, 200);
    let (status, body) = post(&a, "/channel/config?topic=t&channel=c&max_attempts=4").await;
    assert_eq!(status, 200, "{body}");
    let b_copy = |b: &NsqdHandle| {
        let topics = b
            .nsqd
            .replication
            .as_ref()
            .unwrap()
            .backlog_topics(node)
            .pop()
            .map(|(_, t)| t)
            .unwrap_or_default();
        settings_in(&topics, "t", Some("c"))
    };
    let want = Some(pairs(&[("max_attempts", "4")]));
    eventually(async || b_copy(&b) == want).await;
    a.shutdown().await;

    let a = common::pair::start_on(a_dir.path(), &a_args).await;
    let t = a.nsqd.engine.get_topic("t").unwrap();
    assert_eq!(t.get_channel("c").unwrap().max_attempts(), Some(4));
    let r = request(a.http_addr().unwrap(), "POST", "/pub?topic=t", &[], b"x").await;
    assert_eq!(r.status, 200);
    let repl = b.nsqd.replication.as_ref().unwrap();
    eventually(async || {
        repl.backlogs()
            .iter()
            .any(|x| x.origin == node && x.messages == 1)
    })
    .await;
    assert_eq!(b_copy(&b), want);
    b.shutdown().await;
    a.shutdown().await;
}
