//! Queue settings beyond `max_depth` (nsq_core::queue_settings; README, "Beyond NSQ"):
//! `max_bytes` (a bound in bytes: each queued message counts its diskqueue record, 4 + 26 +
//! body bytes, in memory or unread on disk) refusing or dropping, the node default
//! `--max-queue-bytes`, `overflow=drop_oldest` on a topic's own queue, and a queue's own
//! `mem_queue_size`; all through the API, `nsqd.dat` and a restart.

mod common;

use std::time::Duration;

use common::{options, Daemon};
use nsq_testkit::frames::sized;
use nsq_testkit::stats::{channel, topic};
use serde_json::json;

/// A message's bytes for `max_bytes`: its record on disk.
fn rec(body: &[u8]) -> u64 {
    4 + 26 + body.len() as u64
}

fn mpub(topic: &str, bodies: &[&[u8]]) -> Vec<u8> {
    let mut body = (bodies.len() as u32).to_be_bytes().to_vec();
    for b in bodies {
        body.extend_from_slice(&(b.len() as u32).to_be_bytes());
        body.extend_from_slice(b);
    }
    sized(&format!("MPUB {topic}\n"), &body)
}

/// Creates topic `t` and its channel `ch`.
async fn create(d: &Daemon, ch: &str) {
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    d.post(&format!("/channel/create?topic=t&channel={ch}"), b"")
        .await
        .assert_empty_ok();
}

fn ok(r: &nsq_testkit::http::HttpResponse) {
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Subscribes to `t`/`ch` and FINs what arrives until nothing has for 500 ms: the bodies in
/// order.
async fn consume(d: &Daemon, t: &str, ch: &str) -> Vec<String> {
    let mut c = d.v2().await;
    c.send_ok(format!("SUB {t} {ch}\n").as_bytes()).await;
    c.send(b"RDY 100\n").await;
    let mut got = Vec::new();
    while let Ok(Some(f)) = tokio::time::timeout(Duration::from_millis(500), c.frame()).await {
        assert_eq!(f.frame_type, 2, "{f:?}");
        let m = nsq_protocol::message::decode(f.data).unwrap();
        let id = String::from_utf8_lossy(m.id.as_bytes()).to_string();
        c.send(format!("FIN {id}\n").as_bytes()).await;
        got.push(String::from_utf8_lossy(&m.body).to_string());
    }
    got
}

/// `max_bytes` with `overflow=refuse` on a topic (no channel: it holds its messages) refuses
/// PUB, MPUB (all or nothing), DPUB, `/pub` and `/mpub` exactly as `max_depth` does, and
/// stores nothing of a refused publish.
#[tokio::test]
async fn refuse_at_max_bytes_on_a_topic() {
    let d = Daemon::start(&[]).await;
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    ok(&d.post("/topic/config?topic=t&max_bytes=100", b"").await);
    let mut c = d.v2().await;
    // 40 + 40 = 80 bytes.
    c.send_ok(&sized("PUB t\n", b"0123456789")).await;
    c.send_ok(&mpub("t", &[b"abcdefghij"])).await;
    // 80 + 31 + 31 > 100: the whole MPUB is refused.
    c.send(&mpub("t", &[b"a", b"b"])).await;
    c.expect_fatal("E_MPUB_FAILED MPUB failed topic t is full")
        .await;
    let mut c = d.v2().await;
    c.send(&sized("PUB t\n", b"x")).await;
    c.expect_fatal("E_PUB_FAILED PUB failed topic t is full")
        .await;
    let mut c = d.v2().await;
    c.send(&sized("DPUB t 100\n", b"x")).await;
    c.expect_fatal("E_DPUB_FAILED DPUB failed topic t is full")
        .await;
    d.post("/pub?topic=t", b"x").await.assert_err(503, "FULL");
    d.post("/mpub?topic=t", b"x\ny")
        .await
        .assert_err(503, "FULL");
    let s = d.stats("").await;
    assert_eq!(topic(&s, "t")["depth"], 2);
    assert_eq!(topic(&s, "t")["message_count"], 2);
    // Exactly at the bound is allowed: 80 + 31 = 111.
    ok(&d.post("/topic/config?topic=t&max_bytes=111", b"").await);
    assert_eq!(rec(b"x"), 31);
    ok(&d.post("/pub?topic=t", b"x").await);
    d.post("/pub?topic=t", b"y").await.assert_err(503, "FULL");
    // A node default applies where a queue has none; its own value wins.
    let d = Daemon::start(&["--max-queue-bytes=100"]).await;
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    let r = d.get("/topic/config?topic=t").await;
    assert_eq!(
        r.json()["settings"]["max_bytes"],
        json!({"value": 100, "source": "default"})
    );
    for _ in 0..3 {
        ok(&d.post("/pub?topic=t", b"x").await);
    }
    d.post("/pub?topic=t", b"y").await.assert_err(503, "FULL");
}

/// A channel's `max_bytes` counts its own queue (memory and disk) and what still waits in
/// its topic; the topic refuses for it. With `--mem-queue-size=1` most of it is on disk.
#[tokio::test]
async fn refuse_at_a_channel_max_bytes_in_memory_and_on_disk() {
    for flags in [&[][..], &["--mem-queue-size=1"][..]] {
        let d = Daemon::start(flags).await;
        create(&d, "c").await;
        create(&d, "other").await;
        let bound = 3 * rec(b"0123456789");
        ok(&d
            .post(
                &format!("/channel/config?topic=t&channel=c&max_bytes={bound}"),
                b"",
            )
            .await);
        let mut c = d.v2().await;
        for i in 0..3 {
            c.send_ok(&sized("PUB t\n", format!("message-{i}").as_bytes()))
                .await;
        }
        c.send(&sized("PUB t\n", b"m")).await;
        c.expect_fatal("E_PUB_FAILED PUB failed topic t is full")
            .await;
        d.post("/pub?topic=t", b"m").await.assert_err(503, "FULL");
        let s = d.stats("").await;
        assert_eq!(channel(&s, "t", "c")["depth"], 3, "{flags:?}");
        assert_eq!(channel(&s, "t", "other")["depth"], 3, "{flags:?}");
        // What is consumed makes room.
        let got = consume(&d, "t", "c").await;
        assert_eq!(got, ["message-0", "message-1", "message-2"], "{flags:?}");
        ok(&d.post("/pub?topic=t", b"m").await);
    }
}

/// `overflow=drop_oldest` with `max_bytes` on a channel keeps the newest messages that fit
/// (memory and disk), counts the others as dropped; publishes never fail.
#[tokio::test]
async fn drop_oldest_by_bytes_on_a_channel() {
    for flags in [&[][..], &["--mem-queue-size=2"][..]] {
        let d = Daemon::start(flags).await;
        create(&d, "c").await;
        // Room for four 2-byte messages (32 bytes each), not five.
        ok(&d
            .post(
                "/channel/config?topic=t&channel=c&max_bytes=128&overflow=drop_oldest",
                b"",
            )
            .await);
        for i in 0..5 {
            ok(&d.post("/pub?topic=t", format!("m{i}").as_bytes()).await);
        }
        ok(&d.post("/mpub?topic=t", b"m5\nm6").await);
        let got = consume(&d, "t", "c").await;
        assert_eq!(got, ["m3", "m4", "m5", "m6"], "{flags:?}");
        let s = d.stats("").await;
        assert_eq!(channel(&s, "t", "c")["dropped_count"], 3, "{flags:?}");
        assert!(topic(&s, "t").get("dropped_count").is_none());
    }
}

/// `overflow=drop_oldest` on a topic: while it has no channel, or is paused, it keeps the
/// newest `max_depth` / `max_bytes` of its own queue (memory and disk), counted in `/stats`
/// JSON and text and in `/metrics`; the channels then get the newest.
#[tokio::test]
async fn drop_oldest_on_a_topic_keeps_the_newest() {
    for flags in [&[][..], &["--mem-queue-size=2"][..]] {
        // No channel yet, bounded by depth.
        let d = Daemon::start(flags).await;
        d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
        ok(&d
            .post(
                "/topic/config?topic=t&max_depth=3&overflow=drop_oldest",
                b"",
            )
            .await);
        for i in 0..6 {
            ok(&d.post("/pub?topic=t", format!("m{i}").as_bytes()).await);
        }
        let s = d.stats("").await;
        assert_eq!(topic(&s, "t")["depth"], 3, "{flags:?}");
        assert_eq!(topic(&s, "t")["dropped_count"], 3, "{flags:?}");
        let text = d.get("/stats").await.text();
        assert!(text.contains(" dropped: 3\n"), "{text}");
        let m = d.get("/metrics").await.text();
        assert!(
            m.contains("nsq_topic_dropped_total{topic=\"t\"} 3\n"),
            "{m}"
        );
        create(&d, "c").await;
        assert_eq!(consume(&d, "t", "c").await, ["m3", "m4", "m5"], "{flags:?}");

        // Paused, bounded by bytes: three 2-byte messages fit, not four.
        d.post("/topic/pause?topic=t", b"").await.assert_empty_ok();
        ok(&d
            .post("/topic/config?topic=t&max_depth=&max_bytes=127", b"")
            .await);
        for b in ["m6", "m7", "m8", "m9", "mA"] {
            ok(&d.post("/pub?topic=t", b.as_bytes()).await);
        }
        // 160 bytes: the two oldest go.
        ok(&d.post("/mpub?topic=t", b"mB\nmC").await);
        assert_eq!(topic(&d.stats("").await, "t")["depth"], 3);
        d.post("/topic/unpause?topic=t", b"")
            .await
            .assert_empty_ok();
        assert_eq!(consume(&d, "t", "c").await, ["mA", "mB", "mC"], "{flags:?}");
        let s = d.stats("").await;
        assert_eq!(topic(&s, "t")["dropped_count"], 7, "{flags:?}");
        assert!(channel(&s, "t", "c").get("dropped_count").is_none());
    }
}

/// A channel's `mem_queue_size=0` sends what it queues to disk while the topic's other
/// channels keep theirs in memory; a topic's own (paused) does the same for the topic. A
/// change applies to later puts.
#[tokio::test]
async fn mem_queue_size_per_queue() {
    let d = Daemon::start(&[]).await;
    for ch in ["disk", "mem"] {
        create(&d, ch).await;
    }
    ok(&d
        .post("/channel/config?topic=t&channel=disk&mem_queue_size=0", b"")
        .await);
    for i in 0..5 {
        ok(&d.post("/pub?topic=t", format!("m{i}").as_bytes()).await);
    }
    let s = d.stats("").await;
    let depths = |ch: &str| {
        let c = channel(&s, "t", ch);
        (c["depth"].clone(), c["backend_depth"].clone())
    };
    assert_eq!(depths("disk"), (json!(5), json!(5)));
    assert_eq!(depths("mem"), (json!(5), json!(0)));
    // Raised: later puts go to memory once the disk's backlog is read (FIFO).
    ok(&d
        .post("/channel/config?topic=t&channel=disk&mem_queue_size=", b"")
        .await);
    let want: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    assert_eq!(consume(&d, "t", "disk").await, want);
    ok(&d.post("/pub?topic=t", b"m5").await);
    let s = d.stats("").await;
    assert_eq!(channel(&s, "t", "disk")["backend_depth"], 0);

    // The topic's own: paused, it queues on disk.
    ok(&d.post("/topic/config?topic=t&mem_queue_size=0", b"").await);
    d.post("/topic/pause?topic=t", b"").await.assert_empty_ok();
    for i in 6..9 {
        ok(&d.post("/pub?topic=t", format!("m{i}").as_bytes()).await);
    }
    let s = d.stats("").await;
    assert_eq!(topic(&s, "t")["depth"], 3);
    assert_eq!(topic(&s, "t")["backend_depth"], 3);
    d.post("/topic/unpause?topic=t", b"")
        .await
        .assert_empty_ok();
    assert_eq!(consume(&d, "t", "disk").await, ["m5", "m6", "m7", "m8"]);
}

/// The new keys through `POST`/`GET`, `nsqd.dat` and a restart, and enforced after it.
#[tokio::test]
async fn settings_round_trip_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let h = nsqd::start(options::<&str>(dir.path(), &[])).await.unwrap();
    let d = Daemon { h, dir };
    create(&d, "c").await;
    let r = d
        .post(
            "/topic/config?topic=t&max_bytes=1000&overflow=drop_oldest&mem_queue_size=0",
            b"",
        )
        .await;
    ok(&r);
    let topic_settings = json!({
        "max_depth": {"value": null, "source": "off"},
        "max_bytes": {"value": 1000, "source": "set"},
        "overflow": {"value": "drop_oldest", "source": "set"},
        "mem_queue_size": {"value": 0, "source": "set"},
        "ttl": {"value": null, "source": "off"},
    });
    assert_eq!(r.json()["settings"], topic_settings);
    let r = d
        .post(
            "/channel/config?topic=t&channel=c&max_bytes=62&mem_queue_size=0",
            b"",
        )
        .await;
    ok(&r);
    assert_eq!(
        r.json()["settings"]["max_bytes"],
        json!({"value": 62, "source": "set"})
    );
    let dat = d.nsqd_dat();
    assert!(
        dat.contains(
            r#""settings":{"max_bytes":1000,"overflow":"drop_oldest","mem_queue_size":0}"#
        ),
        "{dat}"
    );
    assert!(
        dat.contains(
            r#"{"name":"c","paused":false,"settings":{"max_bytes":62,"mem_queue_size":0}}"#
        ),
        "{dat}"
    );

    let Daemon { h, dir } = d;
    h.shutdown().await;
    let h = nsqd::start(options::<&str>(dir.path(), &[])).await.unwrap();
    let d = Daemon { h, dir };
    assert_eq!(
        d.get("/topic/config?topic=t").await.json()["settings"],
        topic_settings
    );
    let r = d.get("/channel/config?topic=t&channel=c").await;
    assert_eq!(
        r.json()["settings"]["mem_queue_size"],
        json!({"value": 0, "source": "set"})
    );
    // Enforced: the channel's bytes (two 1-byte messages) and its memory queue of 0.
    let mut c = d.v2().await;
    c.send_ok(&sized("PUB t\n", b"a")).await;
    c.send_ok(&sized("PUB t\n", b"b")).await;
    c.send(&sized("PUB t\n", b"c")).await;
    c.expect_fatal("E_PUB_FAILED PUB failed topic t is full")
        .await;
    let s = d.stats("").await;
    assert_eq!(channel(&s, "t", "c")["backend_depth"], 2);
}
