//! nsqadmin's redrive (ours, beyond NSQ: crates/nsqadmin/src/http/api/redrive.rs) against two
//! real nsqd started in-process (`--nsqd-http-address` mode): dead letters made on the first
//! (a channel with `max_attempts=1` and `dead_letter_topic=dlq`, a consumer requeueing each
//! message once), shown with their origin by peek, moved back by `POST
//! /api/redrive/:topic/:channel` (checked against nsqd's `/stats` depths), or published to a
//! topic named with `to`; admins only under `--admin-user`; nsqd's refusals passed through.

mod common;

use std::time::Duration;

use common::cluster::{node_entry, notification_sink, Cluster};
use common::send;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Two nsqd (the first with `--http-peek`) and an nsqadmin over both.
async fn cluster(extra: &[String]) -> Cluster {
    Cluster::start_with(&["--http-peek".to_string()], extra).await
}

impl Cluster {
    /// On nsqd `i`: topic `t` with channels `c` (max_attempts 1, dead letters to `dlq`) and
    /// `d`; `dlq` with channel `x`.
    async fn dead_letter_setup(&self, i: usize) {
        for p in [
            "/topic/create?topic=t",
            "/channel/create?topic=t&channel=c",
            "/channel/create?topic=t&channel=d",
            "/topic/create?topic=dlq",
            "/channel/create?topic=dlq&channel=x",
            "/channel/config?topic=t&channel=c&max_attempts=1&dead_letter_topic=dlq",
        ] {
            self.nsqd_ok(i, p, b"").await;
        }
    }

    /// A consumer of `t`/`c` on nsqd `i` takes `n` messages and requeues each once: they go
    /// to `dlq` (whose `x` holds `n` more); returns their IDs on `t`.
    async fn dead_letter(&self, i: usize, n: usize) -> Vec<String> {
        let before = self.depth(i, "dlq", "x").await;
        let mut s = TcpStream::connect(self.nsqds[i].0.tcp_addr())
            .await
            .unwrap();
        s.write_all(b"  V2SUB t c\n").await.unwrap();
        let (kind, data) = frame(&mut s).await;
        assert_eq!((kind, &data[..]), (0, &b"OK"[..]));
        s.write_all(format!("RDY {n}\n").as_bytes()).await.unwrap();
        let mut ids = Vec::new();
        while ids.len() < n {
            let (kind, data) = frame(&mut s).await;
            if kind != 2 {
                continue; // a heartbeat
            }
            let id = String::from_utf8_lossy(&data[10..26]).to_string();
            s.write_all(format!("REQ {id} 0\n").as_bytes())
                .await
                .unwrap();
            ids.push(id);
        }
        let want = before + n as u64;
        for _ in 0..200 {
            if self.depth(i, "dlq", "x").await == want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(self.depth(i, "dlq", "x").await, want);
        drop(s);
        ids
    }
}

/// One V2 frame: its type and data.
async fn frame(s: &mut TcpStream) -> (u32, Vec<u8>) {
    let size = s.read_u32().await.unwrap() as usize;
    let kind = s.read_u32().await.unwrap();
    let mut data = vec![0u8; size - 4];
    s.read_exact(&mut data).await.unwrap();
    (kind, data)
}

#[tokio::test]
async fn redrive_moves_dead_letters_back_to_their_channel() {
    let (endpoint, got) = notification_sink().await;
    let c = cluster(&[format!("--notification-http-endpoint={endpoint}")]).await;
    c.dead_letter_setup(0).await;
    // The second node has the dead-letter channel too, empty: it answers its zeros.
    c.dead_letter_setup(1).await;
    c.nsqd_ok(0, "/pub?topic=t", b"m1").await;
    c.nsqd_ok(0, "/pub?topic=t", b"m2").await;
    let ids = c.dead_letter(0, 2).await;

    // Peek through nsqadmin shows where each came from.
    let (st, v) = send(&c.url("/api/peek/dlq/x"), "GET", &[], b"").await;
    assert_eq!(st, 200, "{v}");
    let mut origins: Vec<String> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let o = &m["dead_letter"];
            assert_eq!(
                (&o["topic"], &o["channel"], &o["attempts"], &o["reason"]),
                (&json!("t"), &json!("c"), &json!(1), &json!("max_attempts")),
                "{m}"
            );
            assert_eq!(m["node"], c.node(0));
            o["id"].as_str().unwrap().to_string()
        })
        .collect();
    origins.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(origins, want);

    // A message published to dlq by a client has no origin: skipped, left there.
    c.nsqd_ok(0, "/pub?topic=dlq", b"plain").await;
    assert_eq!(c.depth(0, "t", "d").await, 2);
    let (st, v) = c.post("/api/redrive/dlq/x", json!({})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (&v["moved"], &v["skipped"], &v["failed"], &v["message"]),
        (&json!(2), &json!(1), &json!(0), &json!("")),
        "{v}"
    );
    assert_eq!((&v["topic"], &v["channel"]), (&json!("dlq"), &json!("x")));
    let n0 = node_entry(&v, &c.node(0));
    assert_eq!(
        (&n0["moved"], &n0["skipped"], &n0["failed"]),
        (&json!(2), &json!(1), &json!(0)),
        "{v}"
    );
    assert!(n0.get("error").is_none(), "{v}");
    let n1 = node_entry(&v, &c.node(1));
    assert_eq!(
        (&n1["moved"], &n1["skipped"], &n1["failed"]),
        (&json!(0), &json!(0), &json!(0)),
        "{v}"
    );
    // Back in t:c only (t:d already had them), the unknown one still in dlq:x.
    assert_eq!(c.depth(0, "dlq", "x").await, 1);
    assert_eq!(c.depth(0, "t", "c").await, 2);
    assert_eq!(c.depth(0, "t", "d").await, 2);

    // Notified as the other admin actions are.
    let mut notes = Vec::new();
    for _ in 0..100 {
        notes = got.lock().clone();
        if !notes.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(
        (
            &notes[0]["action"],
            &notes[0]["topic"],
            &notes[0]["channel"]
        ),
        (&json!("redrive_channel"), &json!("dlq"), &json!("x"))
    );
    c.shutdown().await;
}

#[tokio::test]
async fn redrive_to_a_topic_and_with_n() {
    let c = cluster(&[]).await;
    c.dead_letter_setup(0).await;
    for b in [&b"a"[..], b"b", b"c"] {
        c.nsqd_ok(0, "/pub?topic=t", b).await;
    }
    c.dead_letter(0, 3).await;
    c.nsqd_ok(0, "/topic/create?topic=other", b"").await;
    c.nsqd_ok(0, "/channel/create?topic=other&channel=o", b"")
        .await;

    // n=1 to `other`: one message published there; the others stay.
    let (st, v) = c
        .post("/api/redrive/dlq/x", json!({"n": 1, "to": "other"}))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!((&v["moved"], &v["skipped"]), (&json!(1), &json!(0)), "{v}");
    assert_eq!(node_entry(&v, &c.node(0))["moved"], 1, "{v}");
    assert_eq!(c.depth(0, "other", "o").await, 1);
    assert_eq!(c.depth(0, "dlq", "x").await, 2);
    assert_eq!(c.depth(0, "t", "c").await, 0);

    // The rest, to `other` too (an empty n means all).
    let (st, v) = c
        .post("/api/redrive/dlq/x", json!({"n": null, "to": "other"}))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["moved"], 2, "{v}");
    assert_eq!(c.depth(0, "other", "o").await, 3);
    assert_eq!(c.depth(0, "dlq", "x").await, 0);
    assert_eq!(c.depth(0, "t", "c").await, 0);

    // Bad values are refused before any nsqd is asked.
    for (body, msg) in [
        (json!({"n": 0}), "INVALID_N"),
        (json!({"n": "all"}), "INVALID_N"),
        (json!({"to": "no such!"}), "INVALID_TO"),
        (json!([1]), "INVALID_BODY"),
    ] {
        assert_eq!(
            c.post("/api/redrive/dlq/x", body.clone()).await,
            (400, json!({"message": msg})),
            "{body}"
        );
    }
    // An unknown channel: nsqd's 404.
    assert_eq!(
        c.post("/api/redrive/dlq/none", json!({})).await,
        (404, json!({"message": "CHANNEL_NOT_FOUND"}))
    );
    c.shutdown().await;
}

#[tokio::test]
async fn a_paused_channel_is_refused_as_nsqd_refuses_it() {
    let c = cluster(&[]).await;
    c.dead_letter_setup(0).await;
    c.dead_letter_setup(1).await;
    c.nsqd_ok(0, "/pub?topic=t", b"m").await;
    c.dead_letter(0, 1).await;

    // Paused on every node: nsqd's 400, nothing moved.
    let (st, v) = c
        .post("/api/topics/dlq/x", json!({"action": "pause"}))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        c.post("/api/redrive/dlq/x", json!({})).await,
        (400, json!({"message": "CHANNEL_PAUSED"}))
    );
    assert_eq!(c.depth(0, "dlq", "x").await, 1);
    assert_eq!(c.depth(0, "t", "c").await, 0);

    // Paused on one node only: the other's redrive is done, the paused one listed and warned.
    c.nsqd_ok(0, "/channel/unpause?topic=dlq&channel=x", b"")
        .await;
    let (st, v) = c.post("/api/redrive/dlq/x", json!({})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["moved"], 1, "{v}");
    assert_eq!(node_entry(&v, &c.node(1))["error"], "CHANNEL_PAUSED");
    assert!(
        v["message"].as_str().unwrap().starts_with("WARNING: ")
            && v["message"].as_str().unwrap().contains("CHANNEL_PAUSED"),
        "{v}"
    );
    assert_eq!(c.depth(0, "dlq", "x").await, 0);
    assert_eq!(c.depth(0, "t", "c").await, 1);
    c.shutdown().await;
}

#[tokio::test]
async fn redrive_needs_an_admin() {
    let c = cluster(&["--admin-user=alice".to_string()]).await;
    c.dead_letter_setup(0).await;
    c.nsqd_ok(0, "/pub?topic=t", b"m").await;
    c.dead_letter(0, 1).await;
    for user in [None, Some("mallory")] {
        let h: Vec<(&str, &str)> = user.map(|u| ("X-Forwarded-User", u)).into_iter().collect();
        assert_eq!(
            send(&c.url("/api/redrive/dlq/x"), "POST", &h, b"{}").await,
            (403, json!({"message": "FORBIDDEN"})),
            "as {user:?}"
        );
    }
    assert_eq!(c.depth(0, "dlq", "x").await, 1);
    let alice = [("X-Forwarded-User", "alice")];
    let (st, v) = send(&c.url("/api/redrive/dlq/x"), "POST", &alice, b"{}").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["moved"], 1, "{v}");
    assert_eq!(c.depth(0, "dlq", "x").await, 0);
    assert_eq!(c.depth(0, "t", "c").await, 1);
    c.shutdown().await;
}
