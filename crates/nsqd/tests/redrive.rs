//! Dead letters' origins and redrive (crate::redrive, nsq_core::topic::dead_letters; README
//! "Beyond NSQ: queue settings"): peek shows where a dead letter came from, `POST
//! /channel/redrive` moves dead letters back into the channel each left (not the topic's
//! other channels), or publishes them to a topic named with `to`.

mod common;

use std::time::Duration;

use common::Daemon;
use nsq_testkit::stats::channel;
use nsq_testkit::wait::eventually;
use serde_json::{json, Value};

async fn ok(d: &Daemon, path: &str) -> Value {
    let r = d.post(path, b"").await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    if r.body.is_empty() {
        Value::Null
    } else {
        r.json()
    }
}

async fn publish(d: &Daemon, topic: &str, body: &[u8]) {
    let r = d.post(&format!("/pub?topic={topic}"), body).await;
    assert_eq!((r.status, r.text()), (200, "OK".to_string()));
}

async fn depth(d: &Daemon, t: &str, c: &str) -> Value {
    channel(&d.stats("").await, t, c)["depth"].clone()
}

/// Topic `t` with channels `c` (max_attempts 1, dead letters to `dlq`) and `d`; `dlq` with
/// channel `x`. Bodies `m1`, `m2` published; a consumer on `t:c` requeues both once, so both
/// are dead-lettered. Returns their original IDs on `t`.
async fn two_dead_letters(d: &Daemon) -> Vec<String> {
    for p in [
        "/topic/create?topic=t",
        "/channel/create?topic=t&channel=c",
        "/channel/create?topic=t&channel=d",
        "/topic/create?topic=dlq",
        "/channel/create?topic=dlq&channel=x",
        "/channel/config?topic=t&channel=c&max_attempts=1&dead_letter_topic=dlq",
    ] {
        ok(d, p).await;
    }
    publish(d, "t", b"m1").await;
    publish(d, "t", b"m2").await;
    let mut c = d.v2().await;
    c.send_ok(b"SUB t c\n").await;
    c.send(b"RDY 2\n").await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let m = c.message().await;
        let id = String::from_utf8_lossy(m.id.as_bytes()).to_string();
        c.send(format!("REQ {id} 0\n").as_bytes()).await;
        ids.push(id);
    }
    eventually(async || depth(d, "dlq", "x").await == json!(2)).await;
    drop(c);
    eventually(async || {
        let s = d.stats("").await;
        channel(&s, "t", "c")["in_flight_count"] == json!(0)
            && channel(&s, "t", "c")["depth"] == json!(0)
    })
    .await;
    ids
}

#[tokio::test]
async fn peek_shows_where_a_dead_letter_came_from() {
    let d = Daemon::start(&["--http-peek"]).await;
    let ids = two_dead_letters(&d).await;
    let r = d.get("/channel/peek?topic=dlq&channel=x").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let msgs = r.json()["messages"].as_array().unwrap().clone();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    let mut seen = Vec::new();
    for m in &msgs {
        let o = &m["dead_letter"];
        assert_eq!(
            (&o["topic"], &o["channel"], &o["attempts"], &o["reason"]),
            (&json!("t"), &json!("c"), &json!(1), &json!("max_attempts")),
            "{m}"
        );
        assert_ne!(m["id"], o["id"], "a new ID on the dead-letter topic");
        seen.push((
            m["preview"].as_str().unwrap().to_string(),
            o["id"].as_str().unwrap().to_string(),
        ));
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            ("m1".to_string(), ids[0].clone()),
            ("m2".into(), ids[1].clone())
        ]
    );
    // A message published there by a client has no origin.
    publish(&d, "dlq", b"plain").await;
    let r = d.get("/channel/peek?topic=dlq&channel=x").await.json();
    let plain: Vec<&Value> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["preview"] == "plain")
        .collect();
    assert_eq!(plain.len(), 1);
    assert!(plain[0].get("dead_letter").is_none(), "{}", plain[0]);
}

/// Redrive puts each dead letter back into the channel it left — as a new message (new ID,
/// attempts 0) — and nowhere else; a message without a known origin is put back and counted
/// as skipped unless `to` names a topic, which then gets it as a publish.
#[tokio::test]
async fn redrive_moves_dead_letters_back_to_their_channel() {
    let d = Daemon::start(&["--http-peek"]).await;
    let ids = two_dead_letters(&d).await;
    assert_eq!(depth(&d, "t", "d").await, 2, "d never consumed");
    publish(&d, "dlq", b"plain").await;
    // Channel c's consumer is gone: what comes back stays queued there.
    let r = ok(&d, "/channel/redrive?topic=dlq&channel=x").await;
    assert_eq!(
        r,
        json!({"topic": "dlq", "channel": "x", "moved": 2, "skipped": 1, "failed": 0})
    );
    assert_eq!(depth(&d, "t", "c").await, 2);
    assert_eq!(
        depth(&d, "t", "d").await,
        2,
        "not published to the topic again"
    );
    assert_eq!(depth(&d, "dlq", "x").await, 1, "the plain one stays");
    let back = d.get("/channel/peek?topic=t&channel=c").await.json();
    let mut got: Vec<(String, Value, bool)> = back["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["preview"].as_str().unwrap().to_string(),
                m["attempts"].clone(),
                ids.contains(&m["id"].as_str().unwrap().to_string()),
            )
        })
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        [
            ("m1".to_string(), json!(0), false),
            ("m2".to_string(), json!(0), false)
        ]
    );
    // The plain one, with `to`: published to topic other (created).
    let r = ok(&d, "/channel/redrive?topic=dlq&channel=x&to=other").await;
    assert_eq!(
        (r["moved"].clone(), r["skipped"].clone()),
        (json!(1), json!(0))
    );
    let s = d.stats("").await;
    let other = s["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic_name"] == "other")
        .expect("topic other")
        .clone();
    assert_eq!(other["depth"], 1, "{other}");
    assert_eq!(depth(&d, "dlq", "x").await, 0);
    // Nothing left in flight for the redrive.
    assert_eq!(channel(&s, "dlq", "x")["in_flight_count"], 0);
    // Nothing to move: zeros.
    let r = ok(&d, "/channel/redrive?topic=dlq&channel=x").await;
    assert_eq!(
        (r["moved"].clone(), r["skipped"].clone()),
        (json!(0), json!(0))
    );
    // The redriven messages are delivered on c like any.
    let mut c = d.v2().await;
    c.send_ok(b"SUB t c\n").await;
    c.send(b"RDY 2\n").await;
    for _ in 0..2 {
        let m = c.message().await;
        assert_eq!(m.attempts, 1);
        c.send(format!("FIN {}\n", String::from_utf8_lossy(m.id.as_bytes())).as_bytes())
            .await;
    }
    eventually(async || depth(&d, "t", "c").await == json!(0)).await;
}

/// `n` bounds how many move; a channel whose origin channel was deleted keeps its message.
#[tokio::test]
async fn redrive_takes_n_and_skips_a_gone_channel() {
    let d = Daemon::start(&[]).await;
    two_dead_letters(&d).await;
    let r = ok(&d, "/channel/redrive?topic=dlq&channel=x&n=1").await;
    assert_eq!(r["moved"], 1, "{r}");
    assert_eq!(depth(&d, "dlq", "x").await, 1);
    ok(&d, "/channel/delete?topic=t&channel=c").await;
    let r = ok(&d, "/channel/redrive?topic=dlq&channel=x").await;
    assert_eq!(
        (r["moved"].clone(), r["skipped"].clone()),
        (json!(0), json!(1))
    );
    assert_eq!(depth(&d, "dlq", "x").await, 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        channel(&d.stats("").await, "dlq", "x")["in_flight_count"],
        0
    );
}

#[tokio::test]
async fn redrive_bad_input() {
    let d = Daemon::start(&[]).await;
    ok(&d, "/topic/create?topic=dlq").await;
    ok(&d, "/channel/create?topic=dlq&channel=x").await;
    for (path, status, msg) in [
        ("/channel/redrive?topic=dlq", 400, "MISSING_ARG_CHANNEL"),
        ("/channel/redrive?channel=x", 400, "MISSING_ARG_TOPIC"),
        (
            "/channel/redrive?topic=nope&channel=x",
            404,
            "TOPIC_NOT_FOUND",
        ),
        (
            "/channel/redrive?topic=dlq&channel=nope",
            404,
            "CHANNEL_NOT_FOUND",
        ),
        ("/channel/redrive?topic=dlq&channel=x&n=0", 400, "INVALID_N"),
        ("/channel/redrive?topic=dlq&channel=x&n=x", 400, "INVALID_N"),
        (
            "/channel/redrive?topic=dlq&channel=x&to=bad!",
            400,
            "INVALID_TO",
        ),
    ] {
        d.post(path, b"").await.assert_err(status, msg);
    }
    ok(&d, "/channel/pause?topic=dlq&channel=x").await;
    d.post("/channel/redrive?topic=dlq&channel=x", b"")
        .await
        .assert_err(400, "CHANNEL_PAUSED");
    // GET is not the method.
    assert_eq!(
        d.get("/channel/redrive?topic=dlq&channel=x").await.status,
        405
    );
}
