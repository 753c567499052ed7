//! nsqadmin's node endpoint with replication (docs/replication.md, Visibility): for an nsqd
//! whose `/stats` has the `replication` key, `/api/nodes/:node` carries it unchanged (the UI's
//! Replication panel); for one without, the answer has no such key. Three nsqd in process: A
//! replicates to B (`--replicas=2`), C has replication off. And `/api/replication`, the
//! Replication page's data, over three nsqd replicating for each other.

mod common;

use common::{raw, send, start_admin, start_nsqd};
use nsq_testkit::http::request;
use serde_json::Value;

fn free_port() -> u16 {
    nsq_testkit::free_port()
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

/// An HTTP server on a loopback port answering each request with `answer(request line)`:
/// `(status line, JSON body)`.
async fn fake_http(answer: fn(&str) -> (&'static str, String)) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&req);
                let (status, body) = answer(text.lines().next().unwrap_or(""));
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr.to_string()
}

/// `/api/replication` (the Replication page's data): three nsqd replicating for each other
/// (`--replicas=2`, each listing the other two) and one with replication off, in
/// `--nsqd-http-address` order (the order of `/api/nodes`). Each replicating node shows its
/// replica set (one linked peer of the two), `fenced:false`, and its replica holds a backlog
/// of its epoch with its messages; the node without replication has `"replication":null`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_endpoint_lists_every_node() {
    use nsq_testkit::wait::eventually;

    let ports = [free_port(), free_port(), free_port()];
    let mut repl = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let mut args = vec![
            format!("--tcp-address=127.0.0.1:{port}"),
            "--replicas=2".to_string(),
        ];
        for (j, other) in ports.iter().enumerate() {
            if j != i {
                args.push(format!("--replication-peer=127.0.0.1:{other}"));
            }
        }
        repl.push(start_nsqd(&args).await);
    }
    let (off, _off_dir) = start_nsqd(&[]).await;
    let mut nodes: Vec<String> = repl
        .iter()
        .map(|(h, _)| h.http_addr().unwrap().to_string())
        .collect();
    nodes.push(off.http_addr().unwrap().to_string());
    let admin = start_admin(
        &nodes
            .iter()
            .map(|n| format!("--nsqd-http-address={n}"))
            .collect::<Vec<_>>(),
    )
    .await;
    let url = format!("http://{}/api/replication", admin.http_addr());

    // Each replicating node has its replica set linked before anything is published.
    for n in &nodes[..3] {
        let n: std::net::SocketAddr = n.parse().unwrap();
        eventually(async || {
            let s = request(n, "GET", "/stats?format=json", &[], b"")
                .await
                .json();
            s["replication"]["peers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["in_replica_set"] == true && p["state"] == "connected")
        })
        .await;
    }
    // Node i gets i+1 messages, each OK'd once its replica stored it.
    for (i, n) in nodes[..3].iter().enumerate() {
        for k in 0..=i {
            let r = request(
                n.parse().unwrap(),
                "POST",
                "/pub?topic=t",
                &[],
                format!("m{k}").as_bytes(),
            )
            .await;
            r.assert_text_ok("OK");
        }
    }

    let (st, v) = send(&url, "GET", &[], b"").await;
    assert_eq!(st, 200, "{v}");
    let list = v["nodes"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|n| n["node"].as_str().unwrap()).collect();
    assert_eq!(names, nodes, "{v}");
    // The order and addresses of /api/nodes.
    let (_, vn) = send(
        &format!("http://{}/api/nodes", admin.http_addr()),
        "GET",
        &[],
        b"",
    )
    .await;
    for (a, b) in list.iter().zip(vn["nodes"].as_array().unwrap()) {
        for k in ["broadcast_address", "tcp_port", "http_port"] {
            assert_eq!(a[k], b[k], "{k}: {v} {vn}");
        }
    }

    let ids: Vec<String> = list[..3]
        .iter()
        .map(|n| n["replication"]["node_id"].as_str().unwrap().to_string())
        .collect();
    for (i, n) in list[..3].iter().enumerate() {
        let r = &n["replication"];
        assert!(n.get("error").is_none(), "{n}");
        assert_eq!(n["tcp_port"], ports[i], "{n}");
        assert_eq!(r["replicas"], 2, "{n}");
        assert_eq!(r["fenced"], false, "{n}");
        assert_eq!(r["publish_failures"], 0, "{n}");
        let peers = r["peers"].as_array().unwrap();
        assert_eq!(peers.len(), 2, "{n}");
        let set: Vec<&Value> = peers
            .iter()
            .filter(|p| p["in_replica_set"] == true)
            .collect();
        assert_eq!(set.len(), 1, "one peer of two holds node {i}'s copies: {n}");
        // The replica holds node i's i+1 messages in a backlog of node i's epoch.
        let holder = ports
            .iter()
            .position(|p| set[0]["address"] == format!("127.0.0.1:{p}"))
            .unwrap_or_else(|| panic!("replica set of a peer list: {n}"));
        assert_ne!(holder, i);
        assert_eq!(set[0]["node_id"], ids[holder].as_str(), "{n}");
        let held = list[holder]["replication"]["backlogs"].as_array().unwrap();
        let b = held
            .iter()
            .find(|b| b["origin"] == ids[i].as_str())
            .unwrap_or_else(|| panic!("node {holder} holds no backlog of node {i}: {v}"));
        assert_eq!(b["epoch"], r["epoch"], "{b}");
        assert_eq!(b["state"], "replicating", "{b}");
        assert_eq!(b["messages"], i + 1, "{b}");
        assert!(b["bytes"].as_u64().unwrap() > 0, "{b}");
    }
    // Off: `null`, no error; nothing to warn of.
    assert_eq!(list[3]["replication"], Value::Null, "{v}");
    assert!(list[3].get("error").is_none(), "{v}");
    assert_eq!(v["message"], "", "{v}");
    let body = String::from_utf8(raw(&url, "GET", &[], b"").await.body).unwrap();
    assert!(body.starts_with(r#"{"nodes":[{"node":"#), "{body}");
    assert!(
        body.ends_with(r#""replication":null}],"message":""}"#),
        "{body}"
    );
    admin.shutdown().await;

    off.shutdown().await;
    for (h, _dir) in repl {
        h.shutdown().await;
    }
}

/// `/api/replication` with nodes from nsqlookupd (a fake one listing them): the nodes sorted
/// by hostname as `/api/nodes` sorts them; a listed node that does not answer is in the list
/// with its `error` and `"replication":null`, and the answer's `message` is the warning
/// (nsqadmin/http.go's partial-error convention); when not one listed node answers, the
/// stats fan-out's `502 UPSTREAM_ERROR`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_endpoint_reports_unreadable_nodes() {
    let (off, _off_dir) = start_nsqd(&[]).await;
    let off_addr = off.http_addr().unwrap();
    // The lookupd's producers: `off` (hostname `b-off`) and a dead one (`a-dead`).
    static NODES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let dead: std::net::SocketAddr = common::dead_addr().parse().unwrap();
    // (nsqadmin tells producers apart by `broadcast_address:tcp_port`.)
    let producer = |host: &str, a: std::net::SocketAddr, tcp: u16| {
        format!(
            r#"{{"remote_address":"127.0.0.1:1","hostname":"{host}","broadcast_address":"127.0.0.1","tcp_port":{tcp},"http_port":{},"version":"1.3.0","tombstones":[],"topics":[]}}"#,
            a.port()
        )
    };
    NODES
        .set(format!(
            r#"{{"producers":[{},{}]}}"#,
            producer("b-off", off_addr, 1),
            producer("a-dead", dead, 2)
        ))
        .unwrap();
    let lookupd = fake_http(|line| {
        if line.starts_with("GET /nodes ") {
            ("200 OK", NODES.get().unwrap().clone())
        } else {
            ("404 Not Found", r#"{"message":"NOT_FOUND"}"#.to_string())
        }
    })
    .await;
    let admin = start_admin(&[format!("--lookupd-http-address={lookupd}")]).await;
    let url = format!("http://{}/api/replication", admin.http_addr());
    let (st, v) = send(&url, "GET", &[], b"").await;
    assert_eq!(st, 200, "{v}");
    let list = v["nodes"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{v}");
    assert_eq!(list[0]["hostname"], "a-dead", "{v}");
    assert_eq!(list[0]["node"], dead.to_string(), "{v}");
    assert_eq!(list[0]["replication"], Value::Null, "{v}");
    let err = list[0]["error"].as_str().unwrap();
    assert!(!err.is_empty(), "{v}");
    assert_eq!(v["message"], format!("WARNING: {err}"), "{v}");
    assert_eq!(list[1]["hostname"], "b-off", "{v}");
    assert_eq!(list[1]["node"], off_addr.to_string(), "{v}");
    assert_eq!(list[1]["replication"], Value::Null, "{v}");
    assert!(list[1].get("error").is_none(), "{v}");
    // A node's `replication` comes before its `error`.
    let body = String::from_utf8(raw(&url, "GET", &[], b"").await.body).unwrap();
    assert!(body.contains(r#","replication":null,"error":"#), "{body}");

    // Not one node answers.
    off.shutdown().await;
    let (st, v) = send(&url, "GET", &[], b"").await;
    assert_eq!(st, 502, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("UPSTREAM_ERROR: failed to query any nsqd: "),
        "{v}"
    );
    admin.shutdown().await;
}
