//! nsqadmin's queue-settings API (ours, beyond NSQ: crates/nsqadmin/src/http/api/settings.rs)
//! against two real nsqd started in-process (`--nsqd-http-address` mode), the first with
//! `--http-peek`: the config round trip checked against each nsqd's own `/channel/config`,
//! nsqd's refusals passed through, admins only when `--admin-user` is set, peek per node, and
//! the expired counter summed over the nodes (and recorded in the chart history).

mod common;

use std::time::Duration;

use common::cluster::{node_entry, subscribe, Cluster};
use common::send;
use nsq_integration_tests::find_channel;
use serde_json::{json, Value};

/// Two nsqd (the first with `--http-peek`) and an nsqadmin over both.
async fn cluster(extra: &[String]) -> Cluster {
    Cluster::start_with(&["--http-peek".to_string()], extra).await
}

fn setting(source: &str, value: Value) -> Value {
    json!({"source": source, "value": value})
}

#[tokio::test]
async fn channel_and_topic_config_round_trip() {
    let c = cluster(&[]).await;
    c.create_channel(0, "t", "c").await;
    c.create_channel(1, "t", "c").await;

    let (st, v) = c.get("/api/settings/t/c").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["topic"].clone(), v["channel"].clone()),
        (json!("t"), json!("c"))
    );
    assert_eq!(v["message"], "");
    assert_eq!(v["nodes"].as_array().unwrap().len(), 2);
    for k in [
        "dead_letter_topic",
        "max_attempts",
        "max_depth",
        "overflow",
        "ttl",
    ] {
        assert_eq!(v["settings"][k], setting("off", Value::Null), "{k}");
    }

    // Set through nsqadmin: on both nodes, as each nsqd answers itself.
    let (st, v) = c
        .post(
            "/api/settings/t/c",
            json!({"settings": {"ttl": "10m", "max_attempts": 3}}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["settings"]["ttl"], setting("set", json!("10m0s")));
    assert_eq!(v["settings"]["max_attempts"], setting("set", json!(3)));
    for i in 0..2 {
        let (st, own) = c
            .nsqd(i, "GET", "/channel/config?topic=t&channel=c", b"")
            .await;
        assert_eq!(st, 200);
        assert_eq!(node_entry(&v, &c.node(i))["settings"], own["settings"]);
        assert_eq!(own["settings"]["ttl"], setting("set", json!("10m0s")));
    }
    let (_, again) = c.get("/api/settings/t/c").await;
    assert_eq!(again["settings"], v["settings"]);

    // nsqd's refusals pass through, and change nothing.
    for (body, msg) in [
        (json!({"settings": {"ttl": "soon"}}), "INVALID_TTL"),
        (
            json!({"settings": {"max_attempts": -1}}),
            "INVALID_MAX_ATTEMPTS",
        ),
        (json!({"settings": {"max_size": 5}}), "INVALID_KEY_MAX_SIZE"),
        (json!({"settings": {"ttl": true}}), "INVALID_BODY"),
        (json!({"ttl": "1m"}), "INVALID_BODY"),
    ] {
        assert_eq!(
            c.post("/api/settings/t/c", body.clone()).await,
            (400, json!({"message": msg})),
            "{body}"
        );
    }
    let (_, after) = c.get("/api/settings/t/c").await;
    assert_eq!(after["settings"], v["settings"]);

    // A value set on one node only: the merged view says so, each node keeps its own.
    c.nsqd_ok(0, "/channel/config?topic=t&channel=c&max_depth=5", b"")
        .await;
    let (_, v) = c.get("/api/settings/t/c").await;
    assert_eq!(v["settings"]["max_depth"], setting("differs", Value::Null));
    assert_eq!(
        node_entry(&v, &c.node(0))["settings"]["max_depth"],
        setting("set", json!(5))
    );
    assert_eq!(
        node_entry(&v, &c.node(1))["settings"]["max_depth"],
        setting("off", Value::Null)
    );
    // null (or "") clears.
    let (st, v) = c
        .post(
            "/api/settings/t/c",
            json!({"settings": {"max_depth": null, "ttl": ""}}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["settings"]["max_depth"], setting("off", Value::Null));
    assert_eq!(v["settings"]["ttl"], setting("off", Value::Null));

    // The topic's: a channel without its own ttl takes the topic's.
    let (st, v) = c
        .post("/api/settings/t", json!({"settings": {"ttl": "1h"}}))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["topic"], "t");
    assert!(v.get("channel").is_none(), "{v}");
    assert_eq!(v["settings"]["ttl"], setting("set", json!("1h0m0s")));
    let (_, v) = c.get("/api/settings/t/c").await;
    assert_eq!(v["settings"]["ttl"], setting("topic", json!("1h0m0s")));
    assert_eq!(
        c.post(
            "/api/settings/t",
            json!({"settings": {"overflow": "sometimes"}})
        )
        .await,
        (400, json!({"message": "INVALID_OVERFLOW"}))
    );

    // A channel on one node only: the other is listed with nsqd's refusal; on none, a 404.
    c.nsqd_ok(0, "/channel/create?topic=t&channel=one", b"")
        .await;
    let (st, v) = c.get("/api/settings/t/one").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["message"], "");
    assert_eq!(node_entry(&v, &c.node(1))["error"], "CHANNEL_NOT_FOUND");
    assert!(node_entry(&v, &c.node(0))["settings"].is_object());
    assert_eq!(
        c.get("/api/settings/t/none").await,
        (404, json!({"message": "CHANNEL_NOT_FOUND"}))
    );
    c.shutdown().await;
}

#[tokio::test]
async fn settings_changes_and_peek_need_an_admin() {
    let c = cluster(&["--admin-user=alice".to_string()]).await;
    c.create_channel(0, "t", "c").await;
    let body = json!({"settings": {"ttl": "1m"}}).to_string();
    for user in [None, Some("mallory")] {
        let h: Vec<(&str, &str)> = user.map(|u| ("X-Forwarded-User", u)).into_iter().collect();
        for path in ["/api/settings/t", "/api/settings/t/c"] {
            assert_eq!(
                send(&c.url(path), "POST", &h, body.as_bytes()).await,
                (403, json!({"message": "FORBIDDEN"})),
                "{path} as {user:?}"
            );
        }
        assert_eq!(
            send(&c.url("/api/peek/t/c"), "GET", &h, b"").await,
            (403, json!({"message": "FORBIDDEN"}))
        );
    }
    // Reading the settings is not restricted.
    assert_eq!(c.get("/api/settings/t/c").await.0, 200);
    let alice = [("X-Forwarded-User", "alice")];
    let (st, v) = send(&c.url("/api/settings/t/c"), "POST", &alice, body.as_bytes()).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["settings"]["ttl"], setting("set", json!("1m0s")));
    let (st, v) = send(&c.url("/api/peek/t/c"), "GET", &alice, b"").await;
    assert_eq!(st, 200, "{v}");
    c.shutdown().await;
}

#[tokio::test]
async fn peek_lists_each_nodes_messages_and_takes_none() {
    let c = cluster(&[]).await;
    c.create_channel(0, "t", "c").await;
    c.create_channel(1, "t", "c").await;
    c.nsqd_ok(0, "/pub?topic=t", b"m0").await;
    c.nsqd_ok(0, "/pub?topic=t", b"m1").await;
    c.nsqd_ok(1, "/pub?topic=t", b"other").await;

    let (st, v) = c.get("/api/peek/t/c?n=20").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["message"], "");
    let n0 = node_entry(&v, &c.node(0));
    assert_eq!(
        (n0["peek"].clone(), n0["count"].clone()),
        (json!("on"), json!(2))
    );
    // The second nsqd runs without --http-peek: listed as off, not an error.
    let n1 = node_entry(&v, &c.node(1));
    assert_eq!(n1["peek"], "off");
    assert!(
        n1.get("count").is_none() && n1.get("error").is_none(),
        "{n1}"
    );
    let ms = v["messages"].as_array().unwrap();
    let previews: Vec<&str> = ms.iter().map(|m| m["preview"].as_str().unwrap()).collect();
    assert_eq!(previews, ["m0", "m1"]);
    for m in ms {
        assert_eq!(m["node"], c.node(0));
        assert_eq!(m["state"], "queued");
        assert_eq!(m["attempts"], 0);
        assert_eq!(m["id"].as_str().unwrap().len(), 16);
        assert!(m["timestamp"].as_i64().unwrap() > 0);
    }
    // As nsqd lists them.
    let (_, own) = c
        .nsqd(0, "GET", "/channel/peek?topic=t&channel=c&n=20", b"")
        .await;
    let mut own_ms = own["messages"].as_array().unwrap().clone();
    for m in &mut own_ms {
        m["node"] = json!(c.node(0));
    }
    assert_eq!(ms, &own_ms);
    // Nothing was taken.
    let s = c.nsqd_stats(0).await;
    let ch = find_channel(&s, "t", "c").unwrap();
    assert_eq!(
        (ch["depth"].clone(), ch["in_flight_count"].clone()),
        (json!(2), json!(0))
    );

    let (_, v) = c.get("/api/peek/t/c?n=1").await;
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);
    for n in ["0", "1001", "x"] {
        assert_eq!(
            c.get(&format!("/api/peek/t/c?n={n}")).await,
            (400, json!({"message": "INVALID_N"}))
        );
    }
    assert_eq!(
        c.get("/api/peek/t/none").await.1["nodes"][0]["error"],
        "CHANNEL_NOT_FOUND"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn expired_counts_are_summed_over_the_nodes() {
    let c = cluster(&[]).await;
    c.create_channel(0, "t", "c").await;
    c.create_channel(1, "t", "c").await;
    // Without expiries the counters are absent, as in NSQ's JSON.
    let (_, v) = c.get("/api/topics/t/c").await;
    assert!(v.get("expired_count").is_none(), "{v}");
    let (_, v) = c.get("/api/topics/t").await;
    assert!(v.get("expired_count").is_none(), "{v}");
    assert!(v["channels"][0].get("expired_count").is_none(), "{v}");

    let (st, v) = c
        .post("/api/settings/t/c", json!({"settings": {"ttl": "1ms"}}))
        .await;
    assert_eq!(st, 200, "{v}");
    c.nsqd_ok(0, "/pub?topic=t", b"a").await;
    c.nsqd_ok(1, "/pub?topic=t", b"b").await;
    // Older than 1 ms by the time a consumer would get them: not delivered, counted.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _consumers = (
        subscribe(&c.nsqds[0].0, "t", "c", 1).await,
        subscribe(&c.nsqds[1].0, "t", "c", 1).await,
    );
    for i in 0..2 {
        let mut expired = Value::Null;
        for _ in 0..100 {
            let s = c.nsqd_stats(i).await;
            expired = find_channel(&s, "t", "c").unwrap()["expired_count"].clone();
            if expired == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(expired, 1, "nsqd {i}");
    }
    let (st, v) = c.get("/api/topics/t/c").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["expired_count"], 2);
    assert_eq!(v["depth"], 0);
    assert!(v.get("dead_lettered_count").is_none(), "{v}");
    for n in v["nodes"].as_array().unwrap() {
        assert_eq!(n["expired_count"], 1, "{n}");
    }
    let (_, v) = c.get("/api/topics/t").await;
    assert_eq!(v["expired_count"], 2);
    assert_eq!(v["channels"][0]["expired_count"], 2);
    c.shutdown().await;
}

/// The history (`/api/history/...`, for the charts) records the expired counter of a ttl
/// channel, summed over the nodes, cumulative and per second; a channel (and the cluster)
/// without any keeps NSQ-like samples, without the fields.
#[tokio::test]
async fn history_records_the_expired_counts() {
    let c = cluster(&["--history-interval=100ms".to_string()]).await;
    for i in 0..2 {
        c.create_channel(i, "t", "c").await;
        c.create_channel(i, "t", "plain").await;
    }
    let (st, v) = c
        .post("/api/settings/t/c", json!({"settings": {"ttl": "1ms"}}))
        .await;
    assert_eq!(st, 200, "{v}");
    // A sample before the expiry, so a later one has a rate.
    let samples = |v: &Value| v["samples"].as_array().cloned().unwrap_or_default();
    for _ in 0..100 {
        if !samples(&c.get("/api/history/topics/t/c").await.1).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let v = c.get("/api/history/topics/t/c").await.1;
    assert!(!samples(&v).is_empty(), "{v}");
    assert!(!v.to_string().contains("expired"), "{v}");

    c.nsqd_ok(0, "/pub?topic=t", b"a").await;
    c.nsqd_ok(1, "/pub?topic=t", b"b").await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _consumers = (
        subscribe(&c.nsqds[0].0, "t", "c", 1).await,
        subscribe(&c.nsqds[1].0, "t", "c", 1).await,
    );
    let mut v = Value::Null;
    for _ in 0..100 {
        v = c.get("/api/history/topics/t/c").await.1;
        if samples(&v).last().is_some_and(|s| s["expired"] == 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ss = samples(&v);
    assert_eq!(ss.last().unwrap()["expired"], 2, "{v}");
    // Every sample of the series has the fields; the expiries show as a positive rate.
    assert!(ss.iter().all(|s| s.get("expired_rate").is_some()), "{v}");
    assert!(
        ss.iter()
            .any(|s| s["expired_rate"].as_f64().unwrap_or(0.0) > 0.0),
        "{v}"
    );
    assert_eq!(ss.last().unwrap()["dead_lettered"], 0, "{v}");
    assert_eq!(ss.last().unwrap()["dropped"], 0, "{v}");

    // The topic's series sums its channels; the plain channel and the cluster have none.
    let (st, v) = c.get("/api/history/topics/t").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(samples(&v).last().unwrap()["expired"], 2, "{v}");
    let plain = v["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|ch| ch["channel"] == "plain")
        .unwrap()
        .clone();
    assert!(!plain.to_string().contains("expired"), "{plain}");
    let total = c.get("/api/history").await.1;
    assert!(!total.to_string().contains("expired"), "{total}");
    c.shutdown().await;
}

/// The settings and peek endpoints live under their own prefixes, so a channel named `config`
/// is an ordinary channel as in NSQ: `GET /api/topics/t/config` answers its stats and `POST`
/// acts on it, and its own settings are at `/api/settings/t/config`.
#[tokio::test]
async fn a_channel_named_config_is_an_ordinary_channel() {
    let c = cluster(&[]).await;
    c.create_channel(0, "t", "config").await;
    c.create_channel(1, "t", "config").await;
    c.nsqd_ok(0, "/pub?topic=t", b"a").await;
    c.nsqd_ok(0, "/pub?topic=t", b"b").await;
    c.nsqd_ok(1, "/pub?topic=t", b"c").await;

    let (st, v) = c.get("/api/topics/t/config").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["topic_name"], "t", "{v}");
    assert_eq!(v["channel_name"], "config", "{v}");
    assert_eq!(v["depth"], 3, "{v}");
    assert_eq!(v["paused"], false, "{v}");
    assert_eq!(v["nodes"].as_array().unwrap().len(), 2, "{v}");
    assert!(v.get("settings").is_none(), "a settings answer: {v}");

    let (st, v) = c
        .post("/api/topics/t/config", json!({"action": "pause"}))
        .await;
    assert_eq!(st, 200, "{v}");
    for i in 0..2 {
        assert_eq!(
            find_channel(&c.nsqd_stats(i).await, "t", "config").unwrap()["paused"],
            true,
            "nsqd {i}"
        );
    }
    let (_, v) = c.get("/api/topics/t/config").await;
    assert_eq!(v["paused"], true, "{v}");

    // Its settings, and the topic's, at their own paths.
    let (st, v) = c.get("/api/settings/t/config").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (&v["topic"], &v["channel"]),
        (&json!("t"), &json!("config"))
    );
    let (st, v) = c.get("/api/settings/t").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["topic"], "t", "{v}");
    assert!(v.get("channel").is_none(), "{v}");
    c.shutdown().await;
}
