//! nsqadmin in `--lookupd-http-address` mode: an in-process nsqlookupd with an in-process nsqd
//! registered to it, and nsqadmin reading the cluster through the lookupd.

mod common;

use common::{client, send};

use std::time::Duration;

use serde_json::json;

#[tokio::test]
async fn lookupd_mode_end_to_end() {
    let nsqlookupd::options::ParseOutcome::Run(lo) = nsqlookupd::options::parse_args(
        [
            "nsqlookupd",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--broadcast-address=127.0.0.1",
        ]
        .map(String::from),
    )
    .unwrap() else {
        panic!("not a run")
    };
    let lookupd = nsqlookupd::start(lo).await.unwrap();
    let lhttp = lookupd.http_addr().to_string();

    let dir = tempfile::tempdir().unwrap();
    let nsqd::options::ParseOutcome::Run(no) = nsqd::options::parse_args(vec![
        "nsqd".to_string(),
        "--tcp-address=127.0.0.1:0".to_string(),
        "--http-address=127.0.0.1:0".to_string(),
        "--broadcast-address=127.0.0.1".to_string(),
        format!("--lookupd-tcp-address={}", lookupd.tcp_addr()),
        format!("--data-path={}", dir.path().display()),
    ])
    .unwrap() else {
        panic!("not a run")
    };
    let nsqd = nsqd::start(no).await.unwrap();
    let node = nsqd.http_addr().unwrap().to_string();
    for p in [
        "/topic/create?topic=t",
        "/channel/create?topic=t&channel=c",
        "/pub?topic=t",
    ] {
        let (st, _) = send(&format!("http://{node}{p}"), "POST", &[], b"x").await;
        assert_eq!(st, 200, "{p}");
    }
    // Wait for the registration to reach nsqlookupd.
    let mut registered = false;
    for _ in 0..100 {
        let (st, v) = send(&format!("http://{lhttp}/lookup?topic=t"), "GET", &[], b"").await;
        if st == 200 && v["producers"].as_array().is_some_and(|p| !p.is_empty()) {
            registered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(registered, "nsqd never registered topic t with nsqlookupd");

    let nsqadmin::options::ParseOutcome::Run(ao) = nsqadmin::options::parse_args(vec![
        "nsqadmin".to_string(),
        "--http-address=127.0.0.1:0".to_string(),
        format!("--lookupd-http-address={lhttp}"),
    ])
    .unwrap() else {
        panic!("not a run")
    };
    let admin = nsqadmin::start(ao).await.unwrap();
    let base = format!("http://{}", admin.http_addr());

    let (st, v) = send(&format!("{base}/api/topics"), "GET", &[], b"").await;
    assert_eq!((st, v), (200, json!({"topics": ["t"], "message": ""})));

    let (st, v) = send(&format!("{base}/api/nodes"), "GET", &[], b"").await;
    assert_eq!(st, 200, "{v}");
    let n = &v["nodes"][0];
    assert_eq!(n["broadcast_address"], "127.0.0.1");
    assert_eq!(n["http_port"], json!(nsqd.http_addr().unwrap().port()));
    let ra = n["remote_addresses"].as_array().unwrap();
    assert_eq!(ra.len(), 1);
    assert!(ra[0]
        .as_str()
        .unwrap()
        .starts_with(&format!("{lhttp}/127.0.0.1:")));
    assert_eq!(n["topics"], json!([{"topic":"t","tombstoned":false}]));

    let (st, v) = send(&format!("{base}/api/topics/t"), "GET", &[], b"").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["message_count"], json!(1));
    assert_eq!(v["nodes"][0]["node"], node);
    let (st, v) = send(&format!("{base}/api/topics/t/c"), "GET", &[], b"").await;
    assert_eq!((st, v["depth"].clone()), (200, json!(1)));

    // Unknown to lookupd: its 404 text.
    let (st, v) = send(&format!("{base}/api/topics/nope"), "GET", &[], b"").await;
    assert_eq!(st, 502);
    assert_eq!(
        v["message"],
        "UPSTREAM_ERROR: failed to query any nsqlookupd: got response 404 Not Found \"{\\\"message\\\":\\\"TOPIC_NOT_FOUND\\\"}\""
    );

    // Create a topic (lookupd only: it is inactive), see it on the Lookup view's data.
    let (st, _) = send(
        &format!("{base}/api/topics"),
        "POST",
        &[],
        br#"{"topic":"fresh","channel":"fc"}"#,
    )
    .await;
    assert_eq!(st, 200);
    let (st, v) = send(&format!("{base}/api/topics?inactive=true"), "GET", &[], b"").await;
    assert_eq!(
        (st, v),
        (200, json!({"topics": {"fresh": ["fc"]}, "message": ""}))
    );
    let (st, _) = send(&format!("{base}/api/topics/fresh/fc"), "DELETE", &[], b"").await;
    assert_eq!(st, 200);
    let (st, _) = send(&format!("{base}/api/topics/fresh"), "DELETE", &[], b"").await;
    assert_eq!(st, 200);
    let (_, v) = send(&format!("{base}/api/topics"), "GET", &[], b"").await;
    assert_eq!(v["topics"], json!(["t"]));

    // A channel created through lookupd reaches the producing nsqd.
    let (st, _) = send(
        &format!("{base}/api/topics"),
        "POST",
        &[],
        br#"{"topic":"t","channel":"c2"}"#,
    )
    .await;
    assert_eq!(st, 200);
    let (_, stats) = send(&format!("http://{node}/stats?format=json"), "GET", &[], b"").await;
    let chans: Vec<&str> = stats["topics"][0]["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["channel_name"].as_str().unwrap())
        .collect();
    assert_eq!(chans, ["c", "c2"]);

    // Tombstone: lookupd marks it, nsqd deletes the topic.
    let (st, v) = send(
        &format!("{base}/api/nodes/{node}"),
        "DELETE",
        &[],
        br#"{"topic":"t"}"#,
    )
    .await;
    assert_eq!((st, v), (200, json!({"message": ""})));
    let (_, stats) = send(&format!("http://{node}/stats?format=json"), "GET", &[], b"").await;
    assert_eq!(stats["topics"], json!([]));
    let (_, v) = send(&format!("http://{lhttp}/nodes"), "GET", &[], b"").await;
    let p = &v["producers"][0];
    let idx = p["topics"]
        .as_array()
        .unwrap()
        .iter()
        .position(|t| t == "t");
    if let Some(i) = idx {
        assert_eq!(p["tombstones"][i], true);
    }

    // The UI knows the lookupds.
    let r = client()
        .request("GET", &format!("{base}/lookup"), &[], b"")
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&r.body).contains(&format!("var NSQLOOKUPD = [\"{lhttp}\",];")));

    admin.shutdown().await;
    nsqd.shutdown().await;
    lookupd.shutdown().await;
}
