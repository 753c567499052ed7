//! nsqadmin's JSON API against two real nsqd started in-process (`--nsqd-http-address` mode):
//! every read endpoint checked against nsqd's own `/stats`, every admin action checked by its
//! effect on nsqd, partial answers with an unreachable node, notifications, ACLs, `/config`,
//! the UI shell, compression, base path and the history API.

mod common;

use std::time::Duration;

use common::cluster::{notification_sink, subscribe, wait_for, Cluster};
use common::{dead_addr, raw, send, start_admin, start_nsqd};
use nsq_integration_tests::{find_channel, find_topic};
use serde_json::{json, Value};

// ---- read API -------------------------------------------------------------------------------

#[tokio::test]
async fn topics_list_is_the_sorted_union_with_v1_headers() {
    let c = Cluster::start(&[]).await;
    let (st, v) = c.get("/api/topics").await;
    assert_eq!((st, v), (200, json!({"topics": null, "message": ""})));
    c.publish(0, "zeta", 1).await;
    c.publish(1, "alpha", 1).await;
    c.publish(1, "zeta", 1).await;
    let r = raw(&c.url("/api/topics"), "GET", &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(r.header("x-nsq-content-type"), Some("nsq; version=1.0"));
    assert_eq!(r.body, br#"{"topics":["alpha","zeta"],"message":""}"#);
    let (st, v) = c.get("/api/topics?inactive=true").await;
    assert_eq!((st, v), (200, json!({"topics": {}, "message": ""})));
    let (st, v) = c.get("/api/topics?x=%zz").await;
    assert_eq!(
        (st, v),
        (400, json!({"message": "invalid URL escape \"%zz\""}))
    );
    c.shutdown().await;
}

#[tokio::test]
async fn topic_aggregates_match_nsqd_stats() {
    let c = Cluster::start(&[]).await;
    c.create_channel(0, "t", "c1").await;
    c.create_channel(1, "t", "c1").await;
    c.create_channel(1, "t", "c2").await;
    c.publish(0, "t", 3).await;
    c.publish(1, "t", 5).await;
    let (st, v) = c.get("/api/topics/t").await;
    assert_eq!(st, 200, "{v}");
    let (s0, s1) = (c.nsqd_stats(0).await, c.nsqd_stats(1).await);
    let (t0, t1) = (find_topic(&s0, "t").unwrap(), find_topic(&s1, "t").unwrap());
    assert_eq!(v["node"], "*");
    assert_eq!(v["hostname"], "");
    assert_eq!(v["message_count"], json!(8));
    assert_eq!(
        v["message_count"].as_i64().unwrap(),
        t0["message_count"].as_i64().unwrap() + t1["message_count"].as_i64().unwrap()
    );
    assert_eq!(
        v["depth"].as_i64().unwrap(),
        t0["depth"].as_i64().unwrap() + t1["depth"].as_i64().unwrap()
    );
    assert_eq!(v["message"], "");
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    for n in nodes {
        let i = if n["node"] == c.node(0) { 0 } else { 1 };
        assert_eq!(n["node"], c.node(i));
        assert_eq!(n["nodes"], Value::Null);
        assert_eq!(
            n["memory_depth"],
            json!(n["depth"].as_i64().unwrap() - n["backend_depth"].as_i64().unwrap())
        );
        let mine = if i == 0 { t0 } else { t1 };
        assert_eq!(n["message_count"], mine["message_count"]);
        // Per-node channel entries keep their own numbers.
        for ch in n["channels"].as_array().unwrap() {
            let real = find_channel(
                if i == 0 { &s0 } else { &s1 },
                "t",
                ch["channel_name"].as_str().unwrap(),
            )
            .unwrap();
            assert_eq!(ch["depth"], real["depth"]);
            assert_eq!(ch["node"], c.node(i));
            assert_eq!(ch["clients"], Value::Null, "clients not requested");
        }
    }
    let chans = v["channels"].as_array().unwrap();
    assert_eq!(chans.len(), 2);
    let c1 = chans.iter().find(|x| x["channel_name"] == "c1").unwrap();
    assert_eq!(c1["node"], "*");
    assert_eq!(c1["depth"], json!(8));
    assert_eq!(c1["nodes"].as_array().unwrap().len(), 2);
    let c2 = chans.iter().find(|x| x["channel_name"] == "c2").unwrap();
    assert_eq!(
        c2["node"],
        c.node(1),
        "a single-node channel is that node's object"
    );
    assert_eq!(c2["depth"], json!(5));
    assert_eq!(
        v["e2e_processing_latency"],
        json!({"count":0,"percentiles":null,"topic":"t","channel":"","host":"*"})
    );
    // Field order of the reference.
    let r = raw(&c.url("/api/topics/t"), "GET", &[], b"").await;
    let text = String::from_utf8(r.body).unwrap();
    assert!(
        text.starts_with(r#"{"node":"*","hostname":"","topic_name":"t","depth":"#),
        "{text}"
    );
    assert!(text.ends_with(r#""message":""}"#), "{text}");
    // A topic on no nsqd: zero producers.
    let (st, v) = c.get("/api/topics/nope").await;
    assert_eq!(
        (st, v),
        (
            502,
            json!({"message": "UPSTREAM_ERROR: failed to query any nsqd: "})
        )
    );
    c.shutdown().await;
}

#[tokio::test]
async fn channel_with_clients_and_node_and_counter() {
    let c = Cluster::start(&[]).await;
    c.create_channel(0, "t", "c").await;
    c.create_channel(1, "t", "c").await;
    c.publish(0, "t", 2).await;
    c.publish(1, "t", 4).await;
    let _sub = subscribe(&c.nsqds[1].0, "t", "c", 0).await;
    let (st, v) = c.get("/api/topics/t/c").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["node"], "*");
    assert_eq!(v["hostname"], "");
    assert_eq!(v["depth"], json!(6));
    assert_eq!(v["client_count"], json!(1));
    let clients = v["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 1);
    assert_eq!(clients[0]["node"], c.node(1));
    assert!(clients[0]["connected"].as_i64().unwrap() >= 0);
    let keys: Vec<&str> = clients[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert!(keys.contains(&"tls_negotiated_protocol_is_mutual") && !keys.contains(&"state"));
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert!(nodes.iter().all(|n| n["clients"].is_array()));
    // A channel that exists nowhere.
    let (st, v) = c.get("/api/topics/t/none").await;
    assert_eq!((st, v), (200, json!({"message": ""})));

    // /api/nodes and /api/nodes/:node
    let (st, v) = c.get("/api/nodes").await;
    assert_eq!(st, 200);
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    for n in nodes {
        assert_eq!(n["remote_addresses"], Value::Null);
        assert_eq!(n["remote_address"], "");
        assert_eq!(n["broadcast_address"], "127.0.0.1");
        assert_eq!(n["version"], "1.3.0");
        assert_eq!(n["out_of_date"], false);
        assert_eq!(n["topics"], json!([{"topic":"t","tombstoned":false}]));
    }
    let (st, v) = c.get(&format!("/api/nodes/{}", c.node(1))).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["node"], c.node(1));
    assert_eq!(v["total_messages"], json!(4));
    assert_eq!(v["total_clients"], json!(1));
    assert_eq!(
        v["topics"][0]["channels"][0]["clients"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let (st, v) = c.get("/api/nodes/127.0.0.1:1").await;
    assert_eq!((st, v), (404, json!({"message": "NODE_NOT_FOUND"})));

    // /api/counter
    let (st, v) = c.get("/api/counter").await;
    assert_eq!(st, 200);
    let k0 = format!("t:c:{}", c.node(0));
    assert_eq!(
        v["stats"][&k0],
        json!({"node": c.node(0), "topic_name": "t", "channel_name": "c", "message_count": 2})
    );
    assert_eq!(
        v["stats"][format!("t:c:{}", c.node(1))]["message_count"],
        json!(4)
    );
    c.shutdown().await;
}

// ---- admin actions --------------------------------------------------------------------------

#[tokio::test]
async fn actions_are_reflected_in_nsqd_stats() {
    let c = Cluster::start(&[]).await;
    // Create (N-mode: on every configured nsqd).
    let (st, v) = c
        .post("/api/topics", json!({"topic":"a","channel":"ch"}))
        .await;
    assert_eq!((st, v), (200, json!({"message": ""})));
    for i in 0..2 {
        assert!(find_channel(&c.nsqd_stats(i).await, "a", "ch").is_some());
    }
    c.publish(0, "a", 3).await;
    c.publish(1, "a", 2).await;

    // Pause / unpause a channel.
    let (st, _) = c.post("/api/topics/a/ch", json!({"action":"pause"})).await;
    assert_eq!(st, 200);
    for i in 0..2 {
        assert_eq!(
            find_channel(&c.nsqd_stats(i).await, "a", "ch").unwrap()["paused"],
            true
        );
    }
    let (_, v) = c.get("/api/topics/a/ch").await;
    assert_eq!(v["paused"], true);
    c.post("/api/topics/a/ch", json!({"action":"unpause"}))
        .await;
    assert_eq!(
        find_channel(&c.nsqd_stats(0).await, "a", "ch").unwrap()["paused"],
        false
    );

    // Pause / unpause the topic.
    c.post("/api/topics/a", json!({"action":"pause"})).await;
    for i in 0..2 {
        assert_eq!(
            find_topic(&c.nsqd_stats(i).await, "a").unwrap()["paused"],
            true
        );
    }
    let (_, v) = c.get("/api/topics/a").await;
    assert_eq!(v["paused"], true);
    c.post("/api/topics/a", json!({"action":"unpause"})).await;
    assert_eq!(
        find_topic(&c.nsqd_stats(1).await, "a").unwrap()["paused"],
        false
    );

    // Empty the channel.
    assert_eq!(
        find_channel(&c.nsqd_stats(0).await, "a", "ch").unwrap()["depth"],
        3
    );
    let (st, _) = c.post("/api/topics/a/ch", json!({"action":"empty"})).await;
    assert_eq!(st, 200);
    for i in 0..2 {
        assert_eq!(
            find_channel(&c.nsqd_stats(i).await, "a", "ch").unwrap()["depth"],
            0
        );
    }
    // Empty a topic (messages held at a topic without channels).
    c.publish(0, "held", 4).await;
    assert_eq!(
        find_topic(&c.nsqd_stats(0).await, "held").unwrap()["depth"],
        4
    );
    c.post("/api/topics/held", json!({"action":"empty"})).await;
    assert_eq!(
        find_topic(&c.nsqd_stats(0).await, "held").unwrap()["depth"],
        0
    );

    // Delete the channel, then the topic.
    let (st, v) = c.delete("/api/topics/a/ch", b"").await;
    assert_eq!((st, v), (200, json!({"message": ""})));
    for i in 0..2 {
        assert!(find_channel(&c.nsqd_stats(i).await, "a", "ch").is_none());
    }
    let (st, _) = c.delete("/api/topics/a", b"").await;
    assert_eq!(st, 200);
    for i in 0..2 {
        assert!(find_topic(&c.nsqd_stats(i).await, "a").is_none());
    }

    // Tombstone: deletes the topic on that node only.
    c.publish(0, "tomb", 1).await;
    c.publish(1, "tomb", 1).await;
    let (st, v) = c
        .delete(&format!("/api/nodes/{}", c.node(0)), br#"{"topic":"tomb"}"#)
        .await;
    assert_eq!((st, v), (200, json!({"message": ""})));
    assert!(find_topic(&c.nsqd_stats(0).await, "tomb").is_none());
    assert!(find_topic(&c.nsqd_stats(1).await, "tomb").is_some());
    c.shutdown().await;
}

#[tokio::test]
async fn action_validation_errors() {
    let c = Cluster::start(&[]).await;
    let url = c.url("/api/topics");
    assert_eq!(
        send(&url, "POST", &[], b"").await,
        (400, json!({"message":"EOF"}))
    );
    assert_eq!(
        send(&url, "POST", &[], b"notjson").await,
        (
            400,
            json!({"message":"invalid character 'o' in literal null (expecting 'u')"})
        )
    );
    assert_eq!(
        c.post("/api/topics", json!({"topic":"bad topic"})).await,
        (400, json!({"message":"INVALID_TOPIC"}))
    );
    assert_eq!(
        c.post("/api/topics", json!({"topic":"ok","channel":"bad!"}))
            .await,
        (400, json!({"message":"INVALID_CHANNEL"}))
    );
    assert_eq!(
        c.post("/api/topics/t", json!({"action":"explode"})).await,
        (400, json!({"message":"INVALID_ACTION"}))
    );
    assert_eq!(
        send(&c.url("/api/topics/t/c"), "POST", &[], b"").await,
        (400, json!({"message":"EOF"}))
    );
    assert_eq!(
        c.delete(&format!("/api/nodes/{}", c.node(0)), b"{").await,
        (400, json!({"message":"INVALID_BODY"}))
    );
    assert_eq!(
        c.delete(&format!("/api/nodes/{}", c.node(0)), br#"{"topic":"a b"}"#)
            .await,
        (400, json!({"message":"INVALID_TOPIC"}))
    );
    // A topic no nsqd has: nothing to do, 200.
    assert_eq!(
        c.post("/api/topics/ghost", json!({"action":"pause"})).await,
        (200, json!({"message":""}))
    );
    // Tombstoning on a node that is not there.
    let (st, v) = c
        .delete(&format!("/api/nodes/{}", dead_addr()), br#"{"topic":"t"}"#)
        .await;
    assert_eq!(st, 502);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("UPSTREAM_ERROR: Get \"http://"),
        "{v}"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn router_semantics() {
    let c = Cluster::start(&[]).await;
    assert_eq!(
        c.get("/api/nope").await,
        (404, json!({"message":"NOT_FOUND"}))
    );
    let r = raw(&c.url("/api/nodes"), "POST", &[], b"").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, OPTIONS"));
    let r = raw(&c.url("/api/topics/x"), "OPTIONS", &[], b"").await;
    assert_eq!(
        (r.status, r.header("allow")),
        (200, Some("DELETE, GET, OPTIONS, POST"))
    );
    let r = raw(&c.url("/api/topics/"), "GET", &[], b"").await;
    assert_eq!((r.status, r.header("location")), (301, Some("/api/topics")));
    let r = raw(&c.url("/API/Nodes"), "GET", &[], b"").await;
    assert_eq!((r.status, r.header("location")), (301, Some("/api/nodes")));
    let r = raw(&c.url("/api/topics/"), "POST", &[], b"{}").await;
    assert_eq!(r.status, 307);
    let r = raw(&c.url("/ping"), "GET", &[], b"").await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"OK"[..]));
    c.shutdown().await;
}

// ---- partial failures -----------------------------------------------------------------------

#[tokio::test]
async fn unreachable_node_gives_partial_answers() {
    let (n, _d) = start_nsqd(&[]).await;
    let dead = dead_addr();
    let admin = start_admin(&[
        format!("--nsqd-http-address={}", n.http_addr().unwrap()),
        format!("--nsqd-http-address={dead}"),
        "--http-client-connect-timeout=500ms".to_string(),
    ])
    .await;
    let base = format!("http://{}", admin.http_addr());
    let refused = |path: &str| {
        format!("Get \"http://{dead}{path}\": dial tcp {dead}: connect: connection refused")
    };
    for p in ["/topic/create?topic=t", "/channel/create?topic=t&channel=c"] {
        let r = raw(
            &format!("http://{}{p}", n.http_addr().unwrap()),
            "POST",
            &[],
            b"",
        )
        .await;
        assert_eq!(r.status, 200);
    }

    let (st, v) = send(&format!("{base}/api/topics"), "GET", &[], b"").await;
    assert_eq!(st, 200);
    assert_eq!(v["topics"], json!(["t"]));
    assert_eq!(
        v["message"],
        format!("WARNING: {}", refused("/stats?format=json"))
    );

    let (st, v) = send(&format!("{base}/api/topics/t"), "GET", &[], b"").await;
    assert_eq!(st, 200);
    assert_eq!(v["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(
        v["message"],
        format!(
            "WARNING: {}",
            refused("/stats?format=json&topic=t&include_clients=false")
        )
    );
    let (st, v) = send(&format!("{base}/api/nodes"), "GET", &[], b"").await;
    assert_eq!(st, 200);
    assert_eq!(v["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(v["message"], format!("WARNING: {}", refused("/info")));
    let (st, v) = send(&format!("{base}/api/counter"), "GET", &[], b"").await;
    assert_eq!(st, 200);
    assert!(v["message"].as_str().unwrap().starts_with("WARNING: "));
    let (st, v) = send(
        &format!("{base}/api/topics/t/c"),
        "POST",
        &[],
        br#"{"action":"pause"}"#,
    )
    .await;
    assert_eq!(st, 200);
    assert!(
        v["message"].as_str().unwrap().starts_with("WARNING: "),
        "{v}"
    );
    admin.shutdown().await;

    // Every node down: 502.
    let admin = start_admin(&[format!("--nsqd-http-address={dead}")]).await;
    let (st, v) = send(
        &format!("http://{}/api/topics", admin.http_addr()),
        "GET",
        &[],
        b"",
    )
    .await;
    assert_eq!(st, 502);
    assert_eq!(
        v["message"],
        format!(
            "UPSTREAM_ERROR: failed to query any nsqd: {}",
            refused("/stats?format=json")
        )
    );
    // The UI page itself still renders.
    let r = raw(&format!("http://{}/", admin.http_addr()), "GET", &[], b"").await;
    assert_eq!(r.status, 200);
    admin.shutdown().await;
    n.shutdown().await;
}

// ---- notifications, ACL, /config ------------------------------------------------------------

#[tokio::test]
async fn notifications_carry_the_reference_body() {
    let (endpoint, got) = notification_sink().await;
    let c = Cluster::start(&[format!("--notification-http-endpoint={endpoint}")]).await;
    c.publish(0, "t1", 1).await;
    c.create_channel(0, "t1", "c2").await;
    let url = c.url("/api/topics/t1/c2?x=1");
    let auth = format!("Basic {}", "YWxpY2U6c2VjcmV0");
    let (st, _) = send(
        &url,
        "POST",
        &[("User-Agent", "test-ua"), ("Authorization", &auth)],
        br#"{"action":"unpause"}"#,
    )
    .await;
    assert_eq!(st, 200);
    c.post("/api/topics", json!({"topic":"t2","channel":"c"}))
        .await;
    c.delete(&format!("/api/nodes/{}", c.node(0)), br#"{"topic":"t1"}"#)
        .await;
    c.delete("/api/topics/t2", b"").await;
    let got = wait_for(&got, 5).await;
    let actions: Vec<&str> = got.iter().map(|v| v["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "unpause_channel",
            "create_topic",
            "create_channel",
            "tombstone_topic_producer",
            "delete_topic"
        ]
    );
    let first = got[0].as_object().unwrap();
    let keys: Vec<&str> = first.keys().map(String::as_str).collect();
    // serde_json sorts keys; check presence and values instead of order.
    for k in [
        "action",
        "topic",
        "channel",
        "timestamp",
        "user",
        "remote_ip",
        "user_agent",
        "url",
        "via",
    ] {
        assert!(keys.contains(&k), "missing {k} in {first:?}");
    }
    assert!(!keys.contains(&"node"));
    assert_eq!(first["topic"], "t1");
    assert_eq!(first["channel"], "c2");
    assert_eq!(first["user"], "alice");
    assert_eq!(first["user_agent"], "test-ua");
    assert_eq!(
        first["url"],
        format!("http://{}/api/topics/t1/c2?x=1", c.admin.http_addr())
    );
    assert_eq!(first["via"], nsqd::options::hostname());
    assert!(first["remote_ip"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((first["timestamp"].as_i64().unwrap() - now).abs() < 30);
    assert_eq!(got[3]["node"], c.node(0));
    assert!(got[1].get("user").is_none() && got[1].get("channel").is_none());
    c.shutdown().await;
}

#[tokio::test]
async fn notification_endpoint_down_is_not_fatal() {
    let c = Cluster::start(&[format!(
        "--notification-http-endpoint=http://{}/x",
        dead_addr()
    )])
    .await;
    for _ in 0..3 {
        let (st, _) = c.post("/api/topics", json!({"topic":"n"})).await;
        assert_eq!(st, 200);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(c.get("/api/topics").await.0, 200);
    c.shutdown().await;
}

#[tokio::test]
async fn admin_users_and_config_endpoint() {
    let c = Cluster::start(&[
        "--admin-user=alice".to_string(),
        "--admin-user=bob".to_string(),
    ])
    .await;
    let url = c.url("/api/topics");
    assert_eq!(
        send(&url, "POST", &[], b"").await,
        (403, json!({"message":"FORBIDDEN"})),
        "403 comes before body parsing"
    );
    assert_eq!(
        send(
            &url,
            "POST",
            &[("X-Forwarded-User", "mallory")],
            br#"{"topic":"x"}"#
        )
        .await
        .0,
        403
    );
    assert_eq!(
        send(
            &url,
            "POST",
            &[("X-Forwarded-User", "bob")],
            br#"{"topic":"x"}"#
        )
        .await
        .0,
        200
    );
    assert_eq!(
        c.get("/api/topics").await.0,
        200,
        "reads are never restricted"
    );
    // IS_ADMIN in the page depends on the request.
    let page = raw(&c.url("/"), "GET", &[("X-Forwarded-User", "alice")], b"").await;
    assert!(String::from_utf8_lossy(&page.body).contains("var IS_ADMIN =  true ;"));
    let page = raw(&c.url("/"), "GET", &[], b"").await;
    assert!(String::from_utf8_lossy(&page.body).contains("var IS_ADMIN =  false ;"));

    // /config
    let r = raw(&c.url("/config/http_address"), "GET", &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"127.0.0.1:0");
    assert_eq!(
        c.get("/config/http_client_request_timeout").await,
        (200, json!(5_000_000_000i64))
    );
    assert_eq!(
        c.get("/config/admin_users").await,
        (200, json!(["alice", "bob"]))
    );
    assert_eq!(
        c.get("/config/nsqlookupd_http_addresses").await,
        (200, json!([]))
    );
    assert_eq!(c.get("/config/log_level").await, (200, json!(2)));
    assert_eq!(
        c.get("/config/nope").await,
        (400, json!({"message":"INVALID_OPTION"}))
    );
    let put = |opt: &str, body: &'static [u8]| {
        let u = c.url(&format!("/config/{opt}"));
        async move { send(&u, "PUT", &[], body).await }
    };
    assert_eq!(put("log_level", b"debug").await, (200, json!(1)));
    assert_eq!(
        put("log_level", b"loud").await,
        (400, json!({"message":"INVALID_VALUE"}))
    );
    assert_eq!(
        put("log_level", b"").await,
        (413, json!({"message":"INVALID_VALUE"}))
    );
    assert_eq!(
        put("http_address", b"x").await,
        (400, json!({"message":"INVALID_OPTION"}))
    );
    assert_eq!(
        put("nsqlookupd_http_addresses", b"\"x\"").await,
        (400, json!({"message":"INVALID_VALUE"}))
    );
    c.shutdown().await;

    // Outside the CIDR.
    let c = Cluster::start(&["--allow-config-from-cidr=10.0.0.0/8".to_string()]).await;
    assert_eq!(
        c.get("/config/log_level").await,
        (403, json!({"message":"FORBIDDEN"}))
    );
    c.shutdown().await;
}

// ---- UI shell -------------------------------------------------------------------------------

#[tokio::test]
async fn ui_shell_assets_compression_and_base_path() {
    let c = Cluster::start(&[
        "--base-path=admin/".to_string(),
        "--graphite-url=http://g:1".to_string(),
    ])
    .await;
    let r = raw(&c.url("/admin"), "GET", &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html"));
    let page = String::from_utf8(r.body).unwrap();
    assert!(
        page.contains(r#"<script src="/admin/static/main.js"></script>"#),
        "{page}"
    );
    assert!(page.contains(r#"var BASE_PATH = "/admin";"#));
    assert!(page.contains(r#"var GRAPHITE_URL = "http://g:1";"#));
    assert!(page.contains("var GRAPH_ENABLED = true;"));
    assert!(page.contains("var NSQLOOKUPD = [];"));
    assert!(page.contains("var STATSD_INTERVAL =  60 ;"));
    for route in [
        "/admin/topics/t",
        "/admin/topics/t/c",
        "/admin/nodes",
        "/admin/nodes/x:1",
        "/admin/counter",
        "/admin/lookup",
    ] {
        let r = raw(&c.url(route), "GET", &[], b"").await;
        assert_eq!((route, r.status), (route, 200));
    }
    let r = raw(&c.url("/admin/"), "GET", &[], b"").await;
    assert_eq!((r.status, r.header("location")), (301, Some("/admin")));
    let r = raw(&c.url("/admin/static/main.js"), "GET", &[], b"").await;
    assert_eq!(
        r.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert!(r.body.len() > 1000);
    let r = raw(&c.url("/admin/fonts/base.css"), "GET", &[], b"").await;
    assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
    let r = raw(&c.url("/admin/static/nope.js"), "GET", &[], b"").await;
    assert_eq!((r.status, r.body.as_slice()), (404, &b"NOT_FOUND"[..]));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(
        raw(&c.url("/admin/static/main.js"), "HEAD", &[], b"")
            .await
            .status,
        405
    );
    assert_eq!(
        raw(&c.url("/api/topics"), "GET", &[], b"").await.status,
        404
    );
    assert_eq!(
        raw(&c.url("/admin/api/topics"), "GET", &[], b"")
            .await
            .status,
        200
    );

    // gzip, then deflate, whichever comes first.
    let r = raw(
        &c.url("/admin/api/topics"),
        "GET",
        &[("Accept-Encoding", "br, gzip, deflate")],
        b"",
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let mut out = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&r.body[..]), &mut out)
        .unwrap();
    assert_eq!(out, r#"{"topics":null,"message":""}"#);
    let r = raw(
        &c.url("/admin/ping"),
        "GET",
        &[("Accept-Encoding", "deflate, gzip")],
        b"",
    )
    .await;
    assert_eq!(r.header("content-encoding"), Some("deflate"));
    let mut out = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::DeflateDecoder::new(&r.body[..]),
        &mut out,
    )
    .unwrap();
    assert_eq!(out, "OK");
    c.shutdown().await;
}

#[tokio::test]
async fn history_api_records_polls() {
    let c = Cluster::start(&["--history-interval=100ms".to_string()]).await;
    c.create_channel(0, "h", "c").await;
    c.publish(0, "h", 5).await;
    let mut v = Value::Null;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        v = c.get("/api/history/topics/h").await.1;
        if v["samples"].as_array().is_some_and(|s| s.len() >= 2) {
            break;
        }
    }
    let samples = v["samples"].as_array().unwrap();
    assert!(samples.len() >= 2, "{v}");
    let last = samples.last().unwrap();
    assert_eq!(last["messages"], json!(5));
    assert_eq!(last["depth"], json!(0));
    assert_eq!(v["interval_ms"], json!(100));
    assert_eq!(v["channels"][0]["channel"], "c");
    assert_eq!(
        v["channels"][0]["samples"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["depth"],
        json!(5)
    );
    let (st, ch) = c.get("/api/history/topics/h/c").await;
    assert_eq!(st, 200);
    assert!(!ch["samples"].as_array().unwrap().is_empty());
    // Without queue settings the samples are NSQ-like: no given-up counters.
    let keys = |s: &Value| s.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    for s in ch["samples"].as_array().unwrap().iter().chain(samples) {
        assert_eq!(
            keys(s),
            ["deferred", "depth", "in_flight", "messages", "rate", "t"],
            "{s}"
        );
    }
    let (st, total) = c.get("/api/history").await;
    assert_eq!(st, 200);
    assert_eq!(total["topics"], json!(["h"]));
    c.shutdown().await;

    let c = Cluster::start(&["--history-interval=0".to_string()]).await;
    assert_eq!(
        c.get("/api/history").await,
        (404, json!({"message":"HISTORY_DISABLED"}))
    );
    c.shutdown().await;
}

#[tokio::test]
async fn graphite_rate_endpoint_validation() {
    let c = Cluster::start(&[]).await;
    assert_eq!(
        c.get("/api/graphite?metric=x").await,
        (400, json!({"message":"INVALID_ARG_METRIC"}))
    );
    assert_eq!(
        c.get("/api/graphite?metric=rate").await,
        (400, json!({"message":"INVALID_ARG_TARGET"}))
    );
    assert_eq!(
        c.get("/api/graphite?metric=%zz").await,
        (400, json!({"message":"INVALID_REQUEST"}))
    );
    c.shutdown().await;
}
