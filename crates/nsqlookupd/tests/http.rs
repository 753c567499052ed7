//! HTTP API tests (nsqlookupd/http.go): every endpoint and error with exact status, headers
//! and body; routing (404/405/OPTIONS/redirects); tombstone lifetime and inactive-producer
//! expiry with tiny timeouts.

mod common;

use std::time::Duration;

use common::{nsqd_body, request, Lookupd};
use serde_json::json;

#[tokio::test]
async fn ping_and_info() {
    let l = Lookupd::start().await;
    let r = l.get("/ping").await;
    assert_eq!((r.status, r.text()), (200, "OK".to_string()));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("x-nsq-content-type"), None);
    l.get("/info").await.assert_json(r#"{"version":"1.3.0"}"#);
    // Accept and Authorization headers are ignored.
    let r = request(
        l.h.http_addr(),
        "GET",
        "/info",
        &[
            ("Accept", "application/vnd.nsq; version=1.0"),
            ("Authorization", "Bearer x"),
        ],
        b"",
    )
    .await;
    r.assert_json(r#"{"version":"1.3.0"}"#);
}

#[tokio::test]
async fn empty_db() {
    let l = Lookupd::start().await;
    l.get("/topics").await.assert_json(r#"{"topics":[]}"#);
    l.get("/nodes").await.assert_json(r#"{"producers":[]}"#);
    l.get("/debug").await.assert_json("{}");
    l.get("/channels?topic=t")
        .await
        .assert_json(r#"{"channels":[]}"#);
    l.get("/channels?topic=")
        .await
        .assert_json(r#"{"channels":[]}"#);
    l.get("/lookup?topic=t")
        .await
        .assert_err(404, "TOPIC_NOT_FOUND");
    l.get("/lookup?topic=")
        .await
        .assert_err(404, "TOPIC_NOT_FOUND");
}

#[tokio::test]
async fn parameter_errors() {
    let l = Lookupd::start().await;
    for (m, path) in [
        ("GET", "/lookup"),
        ("GET", "/channels"),
        ("POST", "/topic/create"),
        ("POST", "/topic/delete"),
        ("POST", "/channel/create"),
        ("POST", "/channel/delete"),
        ("POST", "/topic/tombstone"),
    ] {
        l.req(m, path).await.assert_err(400, "MISSING_ARG_TOPIC");
        l.req(m, &format!("{path}?topic=%zz"))
            .await
            .assert_err(400, "INVALID_REQUEST");
        l.req(m, &format!("{path}?x=1;y=2"))
            .await
            .assert_err(400, "INVALID_REQUEST");
    }
    l.post("/topic/create?topic=bad!")
        .await
        .assert_err(400, "INVALID_ARG_TOPIC");
    for path in ["/channel/create", "/channel/delete"] {
        l.post(&format!("{path}?topic=bad!&channel=bad!"))
            .await
            .assert_err(400, "INVALID_ARG_TOPIC");
        l.post(&format!("{path}?topic=t"))
            .await
            .assert_err(400, "MISSING_ARG_CHANNEL");
        l.post(&format!("{path}?topic=t&channel=bad!"))
            .await
            .assert_err(400, "INVALID_ARG_CHANNEL");
    }
    l.post("/topic/tombstone?topic=t")
        .await
        .assert_err(400, "MISSING_ARG_NODE");
    l.post("/channel/delete?topic=t&channel=c")
        .await
        .assert_err(404, "CHANNEL_NOT_FOUND");
    // Not validated: deleting / tombstoning anything succeeds.
    l.post("/topic/delete?topic=bad!").await.assert_empty_ok();
    l.post("/topic/tombstone?topic=bad!&node=x")
        .await
        .assert_empty_ok();
}

#[tokio::test]
async fn create_and_delete() {
    let l = Lookupd::start().await;
    l.post("/topic/create?topic=a").await.assert_empty_ok();
    l.post("/topic/create?topic=a").await.assert_empty_ok();
    l.get("/lookup?topic=a")
        .await
        .assert_json(r#"{"channels":[],"producers":[]}"#);
    l.post("/channel/create?topic=b&channel=c1")
        .await
        .assert_empty_ok();
    l.post("/channel/create?topic=b&channel=c2&channel=ignored")
        .await
        .assert_empty_ok();
    l.get("/topics")
        .await
        .assert_json(r#"{"topics":["a","b"]}"#);
    l.get("/channels?topic=b")
        .await
        .assert_json(r#"{"channels":["c1","c2"]}"#);
    l.get("/lookup?topic=b")
        .await
        .assert_json(r#"{"channels":["c1","c2"],"producers":[]}"#);
    // Registrations without producers do not show in /debug.
    l.get("/debug").await.assert_json("{}");

    l.post("/channel/delete?topic=b&channel=c1")
        .await
        .assert_empty_ok();
    l.get("/channels?topic=b")
        .await
        .assert_json(r#"{"channels":["c2"]}"#);
    l.post("/topic/delete?topic=b").await.assert_empty_ok();
    l.get("/topics").await.assert_json(r#"{"topics":["a"]}"#);
    l.get("/channels?topic=b")
        .await
        .assert_json(r#"{"channels":[]}"#);
    l.post("/topic/delete?topic=nope").await.assert_empty_ok();
    // A body is read and ignored; parameters come only from the query.
    let r = request(
        l.h.http_addr(),
        "POST",
        "/topic/create?topic=q",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"topic=ignored",
    )
    .await;
    r.assert_empty_ok();
    l.get("/topics")
        .await
        .assert_json(r#"{"topics":["a","q"]}"#);
}

#[tokio::test]
async fn debug_dump_shape() {
    let l = Lookupd::start().await;
    let mut c = l.identified(&nsqd_body("10.0.0.5", 4150, 4151)).await;
    assert_eq!(c.cmd("REGISTER orders billing\n").await, "OK");
    let id = c.s.local_addr().unwrap().to_string();
    let d = l.json("/debug").await;
    let keys: Vec<_> = d.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        ["channel:orders:billing", "client::", "topic:orders:"]
    );
    let p = &d["client::"][0];
    let fields: Vec<_> = p.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        fields,
        [
            "broadcast_address",
            "hostname",
            "http_port",
            "id",
            "last_update",
            "tcp_port",
            "tombstoned",
            "tombstoned_at",
            "version"
        ]
    );
    assert_eq!(p["id"], json!(id));
    assert_eq!(p["tombstoned"], json!(false));
    assert_eq!(p["tombstoned_at"], json!(-6795364578871345152i64));
    assert!(p["last_update"].as_i64().unwrap() > 1_600_000_000_000_000_000);
    // Raw text: keys sorted, compact.
    let raw = l.get("/debug").await.text();
    assert!(raw.starts_with(r#"{"channel:orders:billing":[{"broadcast_address":"10.0.0.5","hostname":"10.0.0.5-host","http_port":4151,"id":""#), "{raw}");
}

#[tokio::test]
async fn tombstones_hide_from_lookup_until_lifetime() {
    let l = Lookupd::start_with(|o| o.tombstone_lifetime = Duration::from_millis(300)).await;
    let mut a = l.identified(&nsqd_body("a.host", 4150, 4151)).await;
    let mut b = l.identified(&nsqd_body("b.host", 4250, 4251)).await;
    for c in [&mut a, &mut b] {
        assert_eq!(c.cmd("REGISTER t\n").await, "OK");
        assert_eq!(c.cmd("REGISTER u\n").await, "OK");
    }
    l.post("/topic/tombstone?topic=t&node=a.host:4151")
        .await
        .assert_empty_ok();
    let addrs = |v: serde_json::Value| -> Vec<String> {
        v["producers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["broadcast_address"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(addrs(l.json("/lookup?topic=t").await), ["b.host"]);
    // Per topic: u still lists both.
    assert_eq!(addrs(l.json("/lookup?topic=u").await).len(), 2);
    // /nodes keeps the node and reports the tombstone per topic.
    let nodes = l.json("/nodes").await;
    let na = nodes["producers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["broadcast_address"] == "a.host")
        .unwrap()
        .clone();
    assert_eq!(na["topics"], json!(["t", "u"]));
    assert_eq!(na["tombstones"], json!([true, false]));
    let d = l.json("/debug").await;
    assert!(d["topic:t:"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["tombstoned"] == json!(true)));
    // Re-REGISTER does not reset the tombstone.
    assert_eq!(a.cmd("REGISTER t\n").await, "OK");
    assert_eq!(addrs(l.json("/lookup?topic=t").await), ["b.host"]);
    // The tombstone expires by itself.
    common::eventually(async || addrs(l.json("/lookup?topic=t").await).len() == 2).await;
    // UNREGISTER removes the entry (and its tombstone).
    l.post("/topic/tombstone?topic=t&node=a.host:4151")
        .await
        .assert_empty_ok();
    assert_eq!(a.cmd("UNREGISTER t\n").await, "OK");
    assert_eq!(a.cmd("REGISTER t\n").await, "OK");
    assert_eq!(addrs(l.json("/lookup?topic=t").await).len(), 2);
}

#[tokio::test]
async fn inactive_producers_expire_and_ping_revives() {
    let l = Lookupd::start_with(|o| o.inactive_producer_timeout = Duration::from_millis(300)).await;
    let mut c = l.identified(&nsqd_body("n", 1, 2)).await;
    assert_eq!(c.cmd("REGISTER t c\n").await, "OK");
    assert_eq!(
        l.json("/lookup?topic=t").await["producers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    common::eventually(async || {
        l.json("/lookup?topic=t").await == json!({"channels":["c"],"producers":[]})
            && l.json("/nodes").await == json!({"producers":[]})
    })
    .await;
    // Still in the DB (unfiltered).
    assert_eq!(
        l.json("/debug").await["client::"].as_array().unwrap().len(),
        1
    );
    assert_eq!(c.cmd("PING\n").await, "OK");
    assert_eq!(
        l.json("/lookup?topic=t").await["producers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        l.json("/nodes").await["producers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn wildcard_quirks() {
    let l = Lookupd::start().await;
    l.post("/channel/create?topic=a&channel=x")
        .await
        .assert_empty_ok();
    l.post("/channel/create?topic=b&channel=y")
        .await
        .assert_empty_ok();
    l.get("/channels?topic=*")
        .await
        .assert_json(r#"{"channels":["x","y"]}"#);
    l.get("/lookup?topic=*")
        .await
        .assert_json(r#"{"channels":["x","y"],"producers":[]}"#);
    l.post("/topic/delete?topic=*").await.assert_empty_ok();
    l.get("/topics").await.assert_json(r#"{"topics":[]}"#);
}

#[tokio::test]
async fn routing() {
    let l = Lookupd::start().await;
    l.get("/nope").await.assert_err(404, "NOT_FOUND");
    l.get("/config/log_level")
        .await
        .assert_err(404, "NOT_FOUND");
    l.get("/debug/pprof").await.assert_err(404, "NOT_FOUND");

    let r = l.post("/ping").await;
    r.assert_err(405, "METHOD_NOT_ALLOWED");
    assert_eq!(r.header("allow"), Some("GET, OPTIONS"));
    let r = l.get("/topic/create?topic=t").await;
    r.assert_err(405, "METHOD_NOT_ALLOWED");
    assert_eq!(r.header("allow"), Some("OPTIONS, POST"));
    let r = l.req("HEAD", "/ping").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, OPTIONS"));

    let r = l.req("OPTIONS", "/lookup").await;
    assert_eq!((r.status, r.text()), (200, String::new()));
    assert_eq!(r.header("allow"), Some("GET, OPTIONS"));
    assert_eq!(r.header("content-type"), None);
    assert_eq!(r.header("x-nsq-content-type"), None);
    l.req("OPTIONS", "/nope").await.assert_err(404, "NOT_FOUND");

    let r = l.get("/ping/").await;
    assert_eq!((r.status, r.header("location")), (301, Some("/ping")));
    let r = l.get("/LOOKUP?topic=t").await;
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/lookup?topic=t"))
    );
    let r = l.post("/topic/create/?topic=t").await;
    assert_eq!(
        (r.status, r.header("location")),
        (307, Some("/topic/create?topic=t"))
    );
    let r = l.post("/Topic/Tombstone").await;
    assert_eq!(
        (r.status, r.header("location")),
        (307, Some("/topic/tombstone"))
    );
}
