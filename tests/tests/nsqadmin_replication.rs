//! nsqadmin's node endpoint with replication (docs/replication.md, Visibility): for an nsqd
//! whose `/stats` has the `replication` key, `/api/nodes/:node` carries it unchanged (the UI's
//! Replication panel); for one without, the answer has no such key. Three nsqd in process: A
//! replicates to B (`--replicas=2`), C has replication off.

mod common;

use common::{raw, send, start_admin, start_nsqd};
use nsq_testkit::http::request;
use serde_json::Value;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `v` without the fields that change with the clock (`last_seen_ms` of each peer).
fn timeless(mut v: Value) -> Value {
    for p in v["peers"].as_array_mut().into_iter().flatten() {
        p.as_object_mut().unwrap().remove("last_seen_ms");
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_endpoint_carries_the_replication_key() {
    let b_port = free_port();
    let (a, _a_dir) = start_nsqd(&[
        "--replicas=2".into(),
        format!("--replication-peer=127.0.0.1:{b_port}"),
    ])
    .await;
    let (b, _b_dir) = start_nsqd(&[
        format!("--tcp-address=127.0.0.1:{b_port}"),
        format!("--replication-peer={}", a.tcp_addr()),
    ])
    .await;
    let (c, _c_dir) = start_nsqd(&[]).await;
    let nodes = [&a, &b, &c].map(|h| h.http_addr().unwrap().to_string());
    let admin = start_admin(
        &nodes
            .iter()
            .map(|n| format!("--nsqd-http-address={n}"))
            .collect::<Vec<_>>(),
    )
    .await;
    let api = |node: &str| format!("http://{}/api/nodes/{node}", admin.http_addr());

    // Two publishes to A, each OK'd once B stored it; one to C.
    for (n, body) in [(&nodes[0], "one"), (&nodes[0], "two"), (&nodes[2], "three")] {
        let r = request(
            n.parse().unwrap(),
            "POST",
            "/pub?topic=t",
            &[],
            body.as_bytes(),
        )
        .await;
        r.assert_text_ok("OK");
    }

    for (i, node) in nodes.iter().take(2).enumerate() {
        let (st, v) = send(&api(node), "GET", &[], b"").await;
        assert_eq!(st, 200, "{v}");
        let own = request(node.parse().unwrap(), "GET", "/stats?format=json", &[], b"")
            .await
            .json();
        assert_eq!(
            timeless(v["replication"].clone()),
            timeless(own["replication"].clone()),
            "node {i}: {v}"
        );
        // `replication` comes after nsqadmin's own fields, before `message`.
        let body = String::from_utf8(raw(&api(node), "GET", &[], b"").await.body).unwrap();
        let at = body.find(r#","replication":{"node_id":"#).expect(&body);
        assert!(body[..at].contains(r#""total_clients":"#), "{body}");
        assert!(body.ends_with(r#"},"message":""}"#), "{body}");
    }
    // A: B is its linked peer in the replica set; B: it holds A's two messages.
    let (_, va) = send(&api(&nodes[0]), "GET", &[], b"").await;
    let r = &va["replication"];
    assert_eq!(r["replicas"], 2);
    let peer = &r["peers"][0];
    assert_eq!(peer["address"], format!("127.0.0.1:{b_port}"));
    assert_eq!(peer["state"], "connected");
    assert_eq!(peer["in_replica_set"], true);
    assert!(peer["last_seen_ms"].is_u64(), "{peer}");
    assert_eq!(r["publish_failures"], 0);
    assert_eq!(r["takeovers"], 0);
    let (_, vb) = send(&api(&nodes[1]), "GET", &[], b"").await;
    let backlogs = vb["replication"]["backlogs"].as_array().unwrap();
    assert_eq!(backlogs.len(), 1, "{vb}");
    assert_eq!(backlogs[0]["origin"], r["node_id"]);
    assert_eq!(backlogs[0]["epoch"], r["epoch"]);
    assert_eq!(backlogs[0]["state"], "replicating");
    assert_eq!(backlogs[0]["messages"], 2);
    assert!(backlogs[0]["bytes"].as_u64().unwrap() > 0);

    // C: no replication, no key; the answer is nsqadmin's usual one.
    let (st, v) = send(&api(&nodes[2]), "GET", &[], b"").await;
    assert_eq!(st, 200, "{v}");
    assert!(v.get("replication").is_none(), "{v}");
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "message",
            "node",
            "topics",
            "total_clients",
            "total_messages"
        ]
    );
    assert_eq!(v["total_messages"], 1);

    admin.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
    c.shutdown().await;
}
