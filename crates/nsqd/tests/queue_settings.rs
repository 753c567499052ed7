//! Per-topic and per-channel queue settings (nsq_core::queue_settings; README, "Beyond NSQ"):
//! the API (`GET`/`POST /topic/config`, `/channel/config`), `nsqd.dat`'s fields, the node
//! default `--max-queue-depth`, and `max_depth` with `overflow=refuse` refusing publishes over
//! TCP and HTTP with nothing of a refused publish stored.

mod common;

use common::pair::Pair;
use common::{options, v2, Daemon};
use nsq_testkit::frames::sized;
use nsq_testkit::http::request;
use nsq_testkit::stats::{channel, topic};
use nsq_testkit::wait::eventually;
use serde_json::json;

fn mpub(topic: &str, bodies: &[&[u8]]) -> Vec<u8> {
    let mut body = (bodies.len() as u32).to_be_bytes().to_vec();
    for b in bodies {
        body.extend_from_slice(&(b.len() as u32).to_be_bytes());
        body.extend_from_slice(b);
    }
    sized(&format!("MPUB {topic}\n"), &body)
}

#[tokio::test]
async fn settings_api_answers_and_persists() {
    let d = Daemon::start(&["--max-queue-depth=1000"]).await;
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    d.post("/channel/create?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();

    // Effective values: the node default, then the topic's own.
    let r = d.get("/topic/config?topic=t").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"topic": "t", "settings": {
            "max_depth": {"value": 1000, "source": "default"},
            "max_bytes": {"value": null, "source": "off"},
            "mem_queue_size": {"value": null, "source": "off"},
            "overflow": {"value": null, "source": "off"},
            "ttl": {"value": null, "source": "off"},
        }})
    );
    let r = d
        .post("/topic/config?topic=t&max_depth=5&overflow=refuse", b"")
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["settings"]["max_depth"],
        json!({"value": 5, "source": "set"})
    );
    assert!(
        d.nsqd_dat()
            .contains(r#""settings":{"max_depth":5,"overflow":"refuse"}"#),
        "{}",
        d.nsqd_dat()
    );
    // A channel's bound is its own (not its topic's).
    let r = d.get("/channel/config?topic=t&channel=c").await;
    assert_eq!(
        r.json(),
        json!({"topic": "t", "channel": "c", "settings": {
            "max_attempts": {"value": null, "source": "off"},
            "dead_letter_topic": {"value": null, "source": "off"},
            "max_depth": {"value": 1000, "source": "default"},
            "max_bytes": {"value": null, "source": "off"},
            "mem_queue_size": {"value": null, "source": "off"},
            "overflow": {"value": null, "source": "off"},
            "ttl": {"value": null, "source": "off"},
        }})
    );
    d.post("/channel/config?topic=t&channel=c&max_depth=7", b"")
        .await;
    assert!(
        d.nsqd_dat()
            .contains(r#"{"name":"c","paused":false,"settings":{"max_depth":7}}"#),
        "{}",
        d.nsqd_dat()
    );

    // Bad input: named, nothing changed.
    let bad = [
        (
            "/topic/config?topic=t&max_depth=0",
            400,
            "INVALID_MAX_DEPTH",
        ),
        (
            "/topic/config?topic=t&max_depth=x&overflow=refuse",
            400,
            "INVALID_MAX_DEPTH",
        ),
        (
            "/topic/config?topic=t&overflow=sometimes",
            400,
            "INVALID_OVERFLOW",
        ),
        (
            "/topic/config?topic=t&max_bytes=0",
            400,
            "INVALID_MAX_BYTES",
        ),
        (
            "/topic/config?topic=t&mem_queue_size=-1",
            400,
            "INVALID_MEM_QUEUE_SIZE",
        ),
        ("/topic/config?topic=t&depth=3", 400, "INVALID_KEY_DEPTH"),
        (
            "/topic/config?topic=t&max_attempts=3",
            400,
            "INVALID_MAX_ATTEMPTS",
        ),
        (
            "/channel/config?topic=t&channel=c&max_attempts=0",
            400,
            "INVALID_MAX_ATTEMPTS",
        ),
        (
            "/channel/config?topic=t&channel=c&dead_letter_topic=t",
            400,
            "INVALID_DEAD_LETTER_TOPIC",
        ),
        (
            "/channel/config?topic=t&channel=c&dead_letter_topic=a/b",
            400,
            "INVALID_DEAD_LETTER_TOPIC",
        ),
        (
            "/channel/config?topic=t&channel=c&max_size=5",
            400,
            "INVALID_KEY_MAX_SIZE",
        ),
        ("/topic/config?topic=t&ttl=30", 400, "INVALID_TTL"),
        ("/topic/config?topic=t&ttl=0s", 400, "INVALID_TTL"),
        (
            "/topic/config?topic=nope&max_depth=3",
            404,
            "TOPIC_NOT_FOUND",
        ),
        ("/topic/config", 400, "MISSING_ARG_TOPIC"),
        (
            "/channel/config?topic=t&channel=nope",
            404,
            "CHANNEL_NOT_FOUND",
        ),
        ("/channel/config?topic=t", 400, "MISSING_ARG_CHANNEL"),
    ];
    for (target, status, msg) in bad {
        d.post(target, b"").await.assert_err(status, msg);
    }
    let r = d.get("/topic/config?topic=t").await;
    assert_eq!(
        r.json()["settings"]["max_depth"],
        json!({"value": 5, "source": "set"})
    );

    // An empty value clears the key; with none left the file is as NSQ writes it.
    d.post("/topic/config?topic=t&max_depth=&overflow=", b"")
        .await;
    d.post("/channel/config?topic=t&channel=c&max_depth=", b"")
        .await;
    let r = d.get("/topic/config?topic=t").await;
    assert_eq!(
        r.json()["settings"]["max_depth"],
        json!({"value": 1000, "source": "default"})
    );
    assert_eq!(
        d.nsqd_dat(),
        r#"{"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":false}]}],"version":"1.3.0"}"#
    );
}

#[tokio::test]
async fn settings_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let h = nsqd::start(options::<&str>(dir.path(), &[])).await.unwrap();
    let d = Daemon { h, dir };
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    d.post("/channel/create?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    d.post("/topic/config?topic=t&max_depth=100", b"").await;
    d.post("/channel/config?topic=t&channel=c&max_depth=3", b"")
        .await;
    let Daemon { h, dir } = d;
    h.shutdown().await;
    let h = nsqd::start(options::<&str>(dir.path(), &[])).await.unwrap();
    let d = Daemon { h, dir };
    let r = d.get("/channel/config?topic=t&channel=c").await;
    assert_eq!(
        r.json()["settings"]["max_depth"],
        json!({"value": 3, "source": "set"})
    );
    let r = d.get("/topic/config?topic=t").await;
    assert_eq!(
        r.json()["settings"]["max_depth"],
        json!({"value": 100, "source": "set"})
    );
    // And the channel's bound is enforced again.
    let mut c = d.v2().await;
    c.send_ok(&sized("PUB t\n", b"1")).await;
    c.send_ok(&sized("PUB t\n", b"2")).await;
    c.send_ok(&sized("PUB t\n", b"3")).await;
    c.send(&sized("PUB t\n", b"4")).await;
    c.expect_fatal("E_PUB_FAILED PUB failed topic t is full")
        .await;
    let s = d.stats("").await;
    assert_eq!(channel(&s, "t", "c")["depth"], 3);
}

#[tokio::test]
async fn refuse_at_the_bound_over_tcp_and_http() {
    let d = Daemon::start(&[]).await;
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    d.post("/topic/config?topic=t&max_depth=3", b"").await;
    // No channel: the topic holds its messages.
    let mut c = d.v2().await;
    c.send_ok(&mpub("t", &[b"a", b"b"])).await;
    // MPUB is all or nothing: 2 + 2 > 3.
    c.send(&mpub("t", &[b"c", b"d"])).await;
    c.expect_fatal("E_MPUB_FAILED MPUB failed topic t is full")
        .await;
    let s = d.stats("").await;
    assert_eq!(topic(&s, "t")["depth"], 2);
    let mut c = d.v2().await;
    c.send_ok(&sized("PUB t\n", b"c")).await;
    c.send(&sized("DPUB t 100\n", b"d")).await;
    c.expect_fatal("E_DPUB_FAILED DPUB failed topic t is full")
        .await;
    d.post("/pub?topic=t", b"d").await.assert_err(503, "FULL");
    d.post("/mpub?topic=t", b"d\ne")
        .await
        .assert_err(503, "FULL");
    assert_eq!(topic(&d.stats("").await, "t")["depth"], 3);
    assert_eq!(topic(&d.stats("").await, "t")["message_count"], 3);

    // Another topic is not bounded by t's setting.
    d.post("/pub?topic=u", b"x").await;
    d.post("/pub?topic=u", b"y").await;
    d.post("/pub?topic=u", b"z").await;
    d.post("/pub?topic=u", b"w").await;
    assert_eq!(topic(&d.stats("").await, "u")["depth"], 4);

    // Room comes back as messages leave: raise the bound, or consume.
    d.post("/topic/config?topic=t&max_depth=4", b"").await;
    let r = d.post("/pub?topic=t", b"d").await;
    assert_eq!(r.status, 200, "{}", r.text());
    d.post("/pub?topic=t", b"e").await.assert_err(503, "FULL");
}

#[tokio::test]
async fn a_channel_bound_counts_what_waits_in_its_topic() {
    // A node default applies to every topic and channel without its own value.
    let d = Daemon::start(&["--max-queue-depth=4"]).await;
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    d.post("/channel/create?topic=t&channel=slow", b"")
        .await
        .assert_empty_ok();
    d.post("/channel/create?topic=t&channel=fast", b"")
        .await
        .assert_empty_ok();
    // The topic's own bound is lifted; each channel keeps the default of 4.
    d.post("/topic/config?topic=t&max_depth=1000", b"").await;
    for i in 0..4 {
        let r = d.post("/pub?topic=t", format!("m{i}").as_bytes()).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    d.post("/pub?topic=t", b"m4").await.assert_err(503, "FULL");
    // Only the full channel's bound is raised: the other still holds 4 and refuses.
    d.post("/channel/config?topic=t&channel=slow&max_depth=10", b"")
        .await;
    d.post("/pub?topic=t", b"m4").await.assert_err(503, "FULL");
    d.post("/channel/config?topic=t&channel=fast&max_depth=", b"")
        .await;
    d.post("/channel/config?topic=t&channel=fast&max_depth=5", b"")
        .await;
    let r = d.post("/pub?topic=t", b"m4").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = d.stats("").await;
    assert_eq!(channel(&s, "t", "slow")["depth"], 5);
    assert_eq!(channel(&s, "t", "fast")["depth"], 5);
    // Emptying a channel makes room in it.
    d.post("/channel/empty?topic=t&channel=fast", b"")
        .await
        .assert_empty_ok();
    let r = d.post("/pub?topic=t", b"m5").await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn with_no_setting_nothing_changes() {
    let d = Daemon::start(&[]).await;
    let mut c = v2(&d.h).await;
    for i in 0..50 {
        c.send_ok(&sized("PUB t\n", format!("{i}").as_bytes()))
            .await;
    }
    let r = d.get("/topic/config?topic=t").await;
    assert_eq!(
        r.json()["settings"],
        json!({
            "max_depth": {"value": null, "source": "off"},
            "max_bytes": {"value": null, "source": "off"},
            "mem_queue_size": {"value": null, "source": "off"},
            "overflow": {"value": null, "source": "off"},
            "ttl": {"value": null, "source": "off"},
        })
    );
    assert_eq!(topic(&d.stats("").await, "t")["depth"], 50);
    assert!(!d.nsqd_dat().contains("settings"), "{}", d.nsqd_dat());
}

/// Subscribes to `t`/`c` with RDY `rdy` and handles what arrives until nothing has for
/// `wait`: a message whose body `requeue` accepts is requeued (REQ, no delay), the others
/// FINed. Returns every delivery in order: (body, attempts, ID).
async fn consume_with(
    d: &Daemon,
    rdy: u32,
    wait: std::time::Duration,
    requeue: &dyn Fn(&[u8]) -> bool,
) -> Vec<(String, u16, nsq_protocol::MessageId)> {
    let mut c = d.v2().await;
    c.send_ok(b"SUB t c\n").await;
    c.send(format!("RDY {rdy}\n").as_bytes()).await;
    let mut got = Vec::new();
    while let Ok(Some(f)) = tokio::time::timeout(wait, c.frame()).await {
        assert_eq!(f.frame_type, 2, "{f:?}");
        let m = nsq_protocol::message::decode(f.data).unwrap();
        let id = String::from_utf8_lossy(m.id.as_bytes()).to_string();
        let cmd = if requeue(&m.body) {
            format!("REQ {id} 0\n")
        } else {
            format!("FIN {id}\n")
        };
        c.send(cmd.as_bytes()).await;
        got.push((
            String::from_utf8_lossy(&m.body).to_string(),
            m.attempts,
            m.id,
        ));
    }
    got
}

/// [`consume_with`] FINing everything: the bodies in order.
async fn consume(d: &Daemon, rdy: u32, wait: std::time::Duration) -> Vec<String> {
    let got = consume_with(d, rdy, wait, &|_| false).await;
    got.into_iter().map(|(body, _, _)| body).collect()
}

/// Channel `t`/`c` is empty (nothing queued, in flight or deferred) and counts `n` as
/// `<what>` (`expired`, `dead_lettered`) in `/stats` JSON and text and in `/metrics`.
async fn assert_counted(d: &Daemon, what: &str, n: u64) {
    let s = d.stats("").await;
    let c = channel(&s, "t", "c");
    assert_eq!(
        (
            &c[format!("{what}_count").as_str()],
            &c["depth"],
            &c["in_flight_count"],
            &c["deferred_count"]
        ),
        (&json!(n), &json!(0), &json!(0), &json!(0)),
        "{c}"
    );
    let text = d.get("/stats").await.text();
    let label = what.replace('_', "-");
    assert!(text.contains(&format!(" {label}: {n}\n")), "{text}");
    let m = d.get("/metrics").await.text();
    let metric = format!("nsq_channel_{what}_total{{topic=\"t\",channel=\"c\"}} {n}\n");
    assert!(m.contains(&metric), "{m}");
}

/// TTL on a paused channel: what waited past the TTL is not delivered (counted as expired),
/// what is younger is; in memory, and with everything on disk (`--mem-queue-size=0`) with the
/// TTL inherited from the topic.
#[tokio::test]
async fn expired_messages_are_not_delivered() {
    for (flags, inherited) in [(&[][..], false), (&["--mem-queue-size=0"][..], true)] {
        let d = Daemon::start(flags).await;
        d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
        d.post("/channel/create?topic=t&channel=c", b"")
            .await
            .assert_empty_ok();
        let target = if inherited {
            "/topic/config?topic=t&ttl=300ms"
        } else {
            "/channel/config?topic=t&channel=c&ttl=300ms"
        };
        let r = d.post(target, b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
        let r = d.get("/channel/config?topic=t&channel=c").await;
        let source = if inherited { "topic" } else { "set" };
        assert_eq!(
            r.json()["settings"]["ttl"],
            json!({"value": "300ms", "source": source})
        );
        d.post("/channel/pause?topic=t&channel=c", b"")
            .await
            .assert_empty_ok();
        for i in 0..5 {
            d.post("/pub?topic=t", format!("old{i}").as_bytes()).await;
        }
        // A deferred message due after the TTL has passed expires too.
        d.post("/pub?topic=t&defer=600", b"late").await;
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        d.post("/pub?topic=t", b"new0").await;
        d.post("/pub?topic=t", b"new1").await;
        d.post("/channel/unpause?topic=t&channel=c", b"")
            .await
            .assert_empty_ok();
        let got = consume(&d, 10, std::time::Duration::from_millis(700)).await;
        assert_eq!(got, ["new0", "new1"], "{flags:?}");
        assert_counted(&d, "expired", 6).await;
    }
}

/// Without a TTL nothing expires and `/stats` has no `expired_count`; a TTL cleared stops
/// expiring.
#[tokio::test]
async fn no_ttl_no_expiry() {
    let d = Daemon::start(&[]).await;
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    d.post("/channel/create?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    d.post("/channel/config?topic=t&channel=c&ttl=100ms", b"")
        .await;
    d.post("/channel/config?topic=t&channel=c&ttl=", b"").await;
    d.post("/pub?topic=t", b"kept").await;
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    let got = consume(&d, 10, std::time::Duration::from_millis(500)).await;
    assert_eq!(got, ["kept"]);
    let s = d.stats("").await;
    let c = channel(&s, "t", "c");
    assert!(c.get("expired_count").is_none(), "{c}");
    assert!(!d.get("/stats").await.text().contains("expired"));
}

/// A consumer that always requeues: with `max_attempts=3` the message is delivered three
/// times, then not again, and counted; the node default `--max-attempts` applies to a channel
/// without its own.
#[tokio::test]
async fn max_attempts_stops_redelivery() {
    let d = Daemon::start(&["--max-attempts=2"]).await;
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    d.post("/channel/create?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    let r = d.get("/channel/config?topic=t&channel=c").await;
    assert_eq!(
        r.json()["settings"]["max_attempts"],
        json!({"value": 2, "source": "default"})
    );
    d.post("/channel/config?topic=t&channel=c&max_attempts=3", b"")
        .await;
    d.post("/pub?topic=t", b"poison").await;
    d.post("/pub?topic=t", b"fine").await;
    let got = consume_with(&d, 1, std::time::Duration::from_millis(700), &|b| {
        b == b"poison"
    })
    .await;
    let attempts: Vec<u16> = got
        .iter()
        .filter(|(b, _, _)| b == "poison")
        .map(|(_, a, _)| *a)
        .collect();
    let finished: Vec<&str> = got
        .iter()
        .filter(|(b, _, _)| b != "poison")
        .map(|(b, _, _)| b.as_str())
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert_eq!(finished, ["fine"]);
    assert_counted(&d, "dead_lettered", 1).await;
}

/// `GET /channel/peek` (with `--http-peek`): the next messages (memory, then disk), those in
/// flight and the deferred ones; depth, attempts and order are the same before and after.
/// Without the flag it is an unknown path.
#[tokio::test]
async fn peek_shows_without_changing_delivery() {
    let off = Daemon::start(&[]).await;
    off.get("/channel/peek?topic=t&channel=c")
        .await
        .assert_err(404, "NOT_FOUND");
    let d = Daemon::start(&["--http-peek", "--mem-queue-size=2"]).await;
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    d.post("/channel/create?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    for i in 0..5 {
        d.post("/pub?topic=t", format!("m{i}").as_bytes()).await;
    }
    d.post("/pub?topic=t&defer=60000", b"later\x01").await;
    // One in flight.
    let mut c = d.v2().await;
    c.send_ok(b"SUB t c\n").await;
    c.send(b"RDY 1\n").await;
    let first = c.message().await;
    assert_eq!(&first.body[..], b"m0");
    let before = d.stats("").await;
    let r = d.get("/channel/peek?topic=t&channel=c&n=3").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let msgs = v["messages"].as_array().unwrap();
    let summary: Vec<(String, String)> = msgs
        .iter()
        .map(|m| {
            (
                m["state"].as_str().unwrap().to_string(),
                m["preview"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("queued", "m1"),
        ("queued", "m2"),
        ("queued", "m3"),
        ("in_flight", "m0"),
        ("deferred", "later."),
    ];
    assert_eq!(
        summary,
        want.map(|(a, b)| (a.to_string(), b.to_string())),
        "{v}"
    );
    assert_eq!(msgs[3]["attempts"], 1);
    assert_eq!(msgs[4]["body"], "bGF0ZXIB");
    assert!(msgs[4]["due"].as_i64().unwrap() > msgs[4]["timestamp"].as_i64().unwrap());
    assert_eq!(
        msgs[3]["id"],
        String::from_utf8_lossy(first.id.as_bytes()).to_string()
    );
    // Nothing changed: the same stats, and delivery goes on in order with attempts 1.
    let after = d.stats("").await;
    assert_eq!(channel(&before, "t", "c"), channel(&after, "t", "c"));
    c.send(
        format!(
            "FIN {}\nRDY 10\n",
            String::from_utf8_lossy(first.id.as_bytes())
        )
        .as_bytes(),
    )
    .await;
    for want in ["m1", "m2", "m3", "m4"] {
        let m = c.message().await;
        assert_eq!((&m.body[..], m.attempts), (want.as_bytes(), 1));
    }
    d.get("/channel/peek?topic=t&channel=c&n=0")
        .await
        .assert_err(400, "INVALID_N");
    d.get("/channel/peek?topic=t&channel=nope")
        .await
        .assert_err(404, "CHANNEL_NOT_FOUND");
}

/// `max_attempts` with a `dead_letter_topic`: after its attempts the message is published
/// to the dead-letter topic (same body, a new ID) and FINed on the channel, in memory and in
/// durable mode; counted and never delivered on the channel again.
#[tokio::test]
async fn dead_letters_go_to_the_dead_letter_topic() {
    for flags in [&[][..], &["--durable"][..]] {
        let d = Daemon::start(flags).await;
        d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
        d.post("/channel/create?topic=t&channel=c", b"")
            .await
            .assert_empty_ok();
        d.post("/topic/create?topic=t_dead", b"")
            .await
            .assert_empty_ok();
        d.post("/channel/create?topic=t_dead&channel=inspect", b"")
            .await
            .assert_empty_ok();
        let r = d
            .post(
                "/channel/config?topic=t&channel=c&max_attempts=2&dead_letter_topic=t_dead",
                b"",
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        d.post("/pub?topic=t", b"poison").await;
        let got = consume_with(&d, 1, std::time::Duration::from_millis(700), &|_| true).await;
        let attempts: Vec<u16> = got.iter().map(|(_, a, _)| *a).collect();
        let original = got.last().map(|(_, _, id)| *id);
        assert_eq!(attempts, [1, 2], "{flags:?}");
        let s = d.stats("").await;
        let ch = channel(&s, "t", "c");
        assert_eq!(
            (
                &ch["dead_lettered_count"],
                &ch["depth"],
                &ch["in_flight_count"]
            ),
            (&json!(1), &json!(0), &json!(0)),
            "{flags:?}: {ch}"
        );
        assert_eq!(channel(&s, "t_dead", "inspect")["depth"], 1, "{flags:?}");
        let mut dl = d.v2().await;
        dl.send_ok(b"SUB t_dead inspect\n").await;
        dl.send(b"RDY 1\n").await;
        let m = dl.message().await;
        assert_eq!((&m.body[..], m.attempts), (&b"poison"[..], 1));
        assert_ne!(Some(m.id), original);
    }
}

/// The node's `--dead-letter-topic` applies to every channel without its own, except the
/// channels of that topic itself; a bad name stops nsqd at startup.
#[tokio::test]
async fn a_node_default_dead_letter_topic() {
    let d = Daemon::start(&["--max-attempts=1", "--dead-letter-topic=dlq"]).await;
    for t in ["t", "dlq"] {
        d.post(&format!("/topic/create?topic={t}"), b"").await;
        d.post(&format!("/channel/create?topic={t}&channel=c"), b"")
            .await;
    }
    let r = d.get("/channel/config?topic=t&channel=c").await;
    assert_eq!(
        r.json()["settings"]["dead_letter_topic"],
        json!({"value": "dlq", "source": "default"})
    );
    let r = d.get("/channel/config?topic=dlq&channel=c").await;
    assert_eq!(
        r.json()["settings"]["dead_letter_topic"],
        json!({"value": null, "source": "off"})
    );
    let mut o = options::<&str>(d.dir.path(), &["--dead-letter-topic=a b"]);
    o.data_path = d.dir.path().join("other").display().to_string();
    assert_eq!(
        o.validate().unwrap_err().to_string(),
        "--dead-letter-topic must be a valid topic name (got \"a b\")"
    );
}

/// An expired message goes to the channel's dead-letter topic when it has one (counted as
/// expired, not as dead-lettered).
#[tokio::test]
async fn expired_messages_go_to_the_dead_letter_topic() {
    let d = Daemon::start(&[]).await;
    for (t, c) in [("t", "c"), ("t_dead", "inspect")] {
        d.post(&format!("/topic/create?topic={t}"), b"").await;
        d.post(&format!("/channel/create?topic={t}&channel={c}"), b"")
            .await
            .assert_empty_ok();
    }
    d.post(
        "/channel/config?topic=t&channel=c&ttl=200ms&dead_letter_topic=t_dead",
        b"",
    )
    .await;
    d.post("/channel/pause?topic=t&channel=c", b"").await;
    for i in 0..3 {
        d.post("/pub?topic=t", format!("old{i}").as_bytes()).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    d.post("/channel/unpause?topic=t&channel=c", b"").await;
    let got = consume(&d, 10, std::time::Duration::from_millis(500)).await;
    assert!(got.is_empty(), "{got:?}");
    assert_counted(&d, "expired", 3).await;
    let s = d.stats("").await;
    assert!(channel(&s, "t", "c").get("dead_lettered_count").is_none());
    assert_eq!(channel(&s, "t_dead", "inspect")["depth"], 3);
}

/// `overflow=drop_oldest` on a channel keeps the newest `max_depth` queued messages (memory
/// and disk), counts and logs the rest; publishes never fail; in-flight messages are not
/// touched.
#[tokio::test]
async fn drop_oldest_keeps_the_newest() {
    for flags in [&[][..], &["--mem-queue-size=2"][..]] {
        let d = Daemon::start(flags).await;
        d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
        d.post("/channel/create?topic=t&channel=c", b"")
            .await
            .assert_empty_ok();
        let r = d
            .post(
                "/channel/config?topic=t&channel=c&max_depth=3&overflow=drop_oldest",
                b"",
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        for i in 0..5 {
            let r = d.post("/pub?topic=t", format!("m{i}").as_bytes()).await;
            assert_eq!(r.status, 200, "{}", r.text());
        }
        let r = d.post("/mpub?topic=t", b"m5\nm6").await;
        assert_eq!(r.status, 200, "{}", r.text());
        let got = consume(&d, 10, std::time::Duration::from_millis(500)).await;
        assert_eq!(got, ["m4", "m5", "m6"], "{flags:?}");
        assert_counted(&d, "dropped", 4).await;
    }
}

/// With replication on, dead-lettering is replicated as what it is: the originals' FINs and
/// the dead-letter topic's publish. B's copy of A holds the 3 dead-letter copies (not 6),
/// and nothing once they are consumed from the dead-letter topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_lettering_is_replicated() {
    let p = Pair::start(&[]).await;
    let http = p.a.http_addr().unwrap();
    for target in [
        "/topic/create?topic=t",
        "/channel/create?topic=t&channel=c",
        "/topic/create?topic=t_dead",
        "/channel/create?topic=t_dead&channel=inspect",
        "/channel/config?topic=t&channel=c&max_attempts=1&dead_letter_topic=t_dead",
    ] {
        let r = request(http, "POST", target, &[], b"").await;
        assert_eq!(r.status, 200, "{target}: {}", r.text());
    }
    for i in 0..3 {
        let r = request(
            http,
            "POST",
            "/pub?topic=t",
            &[],
            format!("p{i}").as_bytes(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    eventually(async || p.backlog().is_some_and(|b| b.messages == 3)).await;
    let mut c = v2(&p.a).await;
    c.send_ok(b"SUB t c\n").await;
    c.send(b"RDY 3\n").await;
    for _ in 0..3 {
        let m = c.message().await;
        let id = String::from_utf8_lossy(m.id.as_bytes()).to_string();
        c.send(format!("REQ {id} 0\n").as_bytes()).await;
    }
    eventually(async || {
        let r = request(http, "GET", "/stats?format=json&topic=t_dead", &[], b"").await;
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        channel(&v, "t_dead", "inspect")["depth"] == 3
    })
    .await;
    eventually(async || p.backlog().is_some_and(|b| b.messages == 3)).await;
    let mut dl = v2(&p.a).await;
    dl.send_ok(b"SUB t_dead inspect\n").await;
    dl.send(b"RDY 3\n").await;
    for _ in 0..3 {
        let m = dl.message().await;
        let id = String::from_utf8_lossy(m.id.as_bytes()).to_string();
        dl.send(format!("FIN {id}\n").as_bytes()).await;
    }
    eventually(async || p.backlog().is_some_and(|b| b.messages == 0)).await;
    p.shutdown().await;
}
