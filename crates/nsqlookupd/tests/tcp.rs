//! Byte-level tests of the V1 TCP protocol (nsqlookupd/lookup_protocol_v1.go): exact response frames for
//! every command and error, fatal-error closes, disconnect clean-up, bad IDENTIFY sizes.

mod common;

use common::{frame, nsqd_body, Lookupd, BROADCAST};
use serde_json::json;
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn bad_magic_gets_e_bad_protocol_and_close() {
    let l = Lookupd::start().await;
    let mut c = l.connect().await;
    c.send(b"  V2PING\n").await;
    assert_eq!(c.rest().await, frame(b"E_BAD_PROTOCOL"));
}

#[tokio::test]
async fn short_magic_closes_silently() {
    let l = Lookupd::start().await;
    let mut c = l.connect().await;
    c.send(b"  V").await;
    c.s.shutdown().await.unwrap();
    assert_eq!(c.rest().await, b"");
}

#[tokio::test]
async fn identify_reply_is_exact() {
    let l = Lookupd::start().await;
    let mut c = l.connect().await;
    c.send(b"  V1").await;
    c.send(b"PING\n").await;
    assert_eq!(c.frame().await.unwrap(), b"OK", "PING before IDENTIFY");
    c.identify(nsqd_body("10.0.0.5", 4150, 4151).as_bytes())
        .await;
    let expected = format!(
        r#"{{"broadcast_address":"{BROADCAST}","hostname":"{}","http_port":{},"tcp_port":{},"version":"1.3.0"}}"#,
        nsqlookupd::options::hostname(),
        l.h.http_addr().port(),
        l.h.tcp_addr().port()
    );
    assert_eq!(
        String::from_utf8(c.frame().await.unwrap()).unwrap(),
        expected
    );
    assert_eq!(c.cmd("PING extra params\n").await, "OK");
    assert_eq!(c.cmd("REGISTER t\n").await, "OK");
    // Parameters on the IDENTIFY line are ignored, but a second IDENTIFY is fatal and its
    // body is not read.
    c.send(b"IDENTIFY x y\n").await;
    c.expect_fatal("E_INVALID cannot IDENTIFY again").await;
}

#[tokio::test]
async fn identify_reply_escapes_like_go() {
    let l = Lookupd::start_with(|o| o.broadcast_address = "a<b>&c".into()).await;
    let mut c = l.connect().await;
    c.send(b"  V1").await;
    c.identify(nsqd_body("x", 1, 2).as_bytes()).await;
    let reply = String::from_utf8(c.frame().await.unwrap()).unwrap();
    assert!(
        reply.starts_with(r#"{"broadcast_address":"a\u003cb\u003e\u0026c","#),
        "{reply}"
    );
}

#[tokio::test]
async fn spec_example_session() {
    let l = Lookupd::start().await;
    let mut c = l.connect().await;
    c.send(b"  V1").await;
    let body = br#"{"broadcast_address":"10.0.0.5","hostname":"nsqd-a","http_port":4151,"tcp_port":4150,"version":"1.3.0"}"#;
    assert_eq!(body.len(), 0x67);
    c.identify(body).await;
    c.frame().await.unwrap();
    let mut pipelined = Vec::new();
    pipelined.extend_from_slice(b"REGISTER orders\nREGISTER orders billing\nPING\n");
    pipelined.extend_from_slice(b"REGISTER bad!name\nPING\n");
    c.send(&pipelined).await;
    let mut expected = Vec::new();
    for d in [&b"OK"[..], b"OK", b"OK"] {
        expected.extend_from_slice(&frame(d));
    }
    let err = b"E_BAD_TOPIC REGISTER topic name 'bad!name' is not valid";
    assert_eq!(err.len(), 0x37);
    expected.extend_from_slice(&frame(err));
    assert_eq!(c.rest().await, expected, "nothing after the fatal error");
    // All of this peer's producer entries are gone; registrations remain.
    common::eventually(async || l.json("/debug").await == json!({})).await;
    assert_eq!(
        l.json("/lookup?topic=orders").await,
        json!({"channels":["billing"],"producers":[]})
    );
}

#[tokio::test]
async fn register_and_unregister_errors() {
    let l = Lookupd::start().await;
    let body = nsqd_body("n", 1, 2);
    let cases: &[(&str, &str)] = &[
        (
            "REGISTER\n",
            "E_INVALID REGISTER insufficient number of params",
        ),
        (
            "UNREGISTER\n",
            "E_INVALID UNREGISTER insufficient number of params",
        ),
        (
            "REGISTER bad!t\n",
            "E_BAD_TOPIC REGISTER topic name 'bad!t' is not valid",
        ),
        (
            "UNREGISTER bad!t c\n",
            "E_BAD_TOPIC UNREGISTER topic name 'bad!t' is not valid",
        ),
        (
            "REGISTER  c\n",
            "E_BAD_TOPIC REGISTER topic name '' is not valid",
        ),
        (
            "REGISTER t bad!c\n",
            "E_BAD_CHANNEL REGISTER channel name 'bad!c' is not valid",
        ),
        (
            "UNREGISTER t bad!c\n",
            "E_BAD_CHANNEL UNREGISTER channel name 'bad!c' is not valid",
        ),
        (
            "REGISTER bad!t bad!c\n",
            "E_BAD_TOPIC REGISTER topic name 'bad!t' is not valid",
        ),
        ("ping\n", "E_INVALID invalid command ping"),
        ("\n", "E_INVALID invalid command "),
        ("FOO bar\n", "E_INVALID invalid command FOO"),
    ];
    for (cmd, err) in cases {
        let mut c = l.identified(&body).await;
        c.send(cmd.as_bytes()).await;
        c.expect_fatal(err).await;
    }
    // Before IDENTIFY the state check comes first, even with bad parameters.
    for cmd in ["REGISTER\n", "UNREGISTER bad!t\n", "REGISTER t c\n"] {
        let mut c = l.connect().await;
        c.send(b"  V1").await;
        c.send(cmd.as_bytes()).await;
        c.expect_fatal("E_INVALID client must IDENTIFY").await;
    }
    // Trailing whitespace / CR is stripped; extra parameters are ignored.
    let mut c = l.identified(&body).await;
    assert_eq!(c.cmd("REGISTER t c extra\r\n").await, "OK");
    assert_eq!(c.cmd("  UNREGISTER t c  \n").await, "OK");
    assert_eq!(c.cmd("UNREGISTER never c\n").await, "OK");
    assert_eq!(
        l.json("/lookup?topic=t").await["channels"],
        json!(["c"]),
        "non-ephemeral channel stays after UNREGISTER"
    );
}

#[tokio::test]
async fn identify_body_errors() {
    let l = Lookupd::start().await;
    let cases: &[(&[u8], &str)] = &[
        (
            b"not json",
            "E_BAD_BODY IDENTIFY failed to decode JSON body",
        ),
        (
            br#"{"broadcast_address":"a","tcp_port":4150.5,"http_port":1,"version":"v"}"#,
            "E_BAD_BODY IDENTIFY failed to decode JSON body",
        ),
        (
            br#"{"broadcast_address":"a","tcp_port":"4150","http_port":1,"version":"v"}"#,
            "E_BAD_BODY IDENTIFY failed to decode JSON body",
        ),
        (br#"{}"#, "E_BAD_BODY IDENTIFY missing fields"),
        (
            br#"{"broadcast_address":"a","tcp_port":1,"http_port":0,"version":"v"}"#,
            "E_BAD_BODY IDENTIFY missing fields",
        ),
        (
            br#"{"broadcast_address":"","tcp_port":1,"http_port":2,"version":"v"}"#,
            "E_BAD_BODY IDENTIFY missing fields",
        ),
        (
            br#"{"broadcast_address":"a","tcp_port":1,"http_port":2}"#,
            "E_BAD_BODY IDENTIFY missing fields",
        ),
    ];
    for (body, err) in cases {
        let mut c = l.connect().await;
        c.send(b"  V1").await;
        c.identify(body).await;
        c.expect_fatal(err).await;
    }
    // Case-insensitive keys, unknown keys ignored, remote_address overwritten.
    let mut c = l.connect().await;
    c.send(b"  V1").await;
    c.identify(
        br#"{"BROADCAST_ADDRESS":"a","Tcp_Port":1,"http_port":2,"version":"v","x":[1],"remote_address":"spoof"}"#,
    )
    .await;
    assert!(c.frame().await.unwrap().starts_with(b"{"));
    let local = c.s.local_addr().unwrap().to_string();
    assert_eq!(
        l.json("/nodes").await["producers"][0]["remote_address"],
        json!(local)
    );
}

#[tokio::test]
async fn bad_body_sizes_do_not_crash() {
    let l = Lookupd::start().await;
    let mut survivor = l.identified(&nsqd_body("s", 1, 2)).await;
    for size in [-1i32, i32::MIN, i32::MAX, 64 * 1024 * 1024] {
        let mut c = l.connect().await;
        c.send(b"  V1IDENTIFY\n").await;
        c.send(&size.to_be_bytes()).await;
        c.expect_fatal("E_BAD_BODY IDENTIFY failed to read body size")
            .await;
    }
    assert_eq!(survivor.cmd("REGISTER t\n").await, "OK");
    assert_eq!(
        l.json("/lookup?topic=t").await["producers"][0]["broadcast_address"],
        json!("s")
    );
}

#[tokio::test]
async fn eof_inside_identify_body() {
    let l = Lookupd::start().await;
    let mut c = l.connect().await;
    c.send(b"  V1IDENTIFY\n\x00\x00").await;
    c.s.shutdown().await.unwrap();
    c.expect_fatal("E_BAD_BODY IDENTIFY failed to read body size")
        .await;

    let mut c = l.connect().await;
    c.send(b"  V1IDENTIFY\n\x00\x00\x00\x10{\"a\"").await;
    c.s.shutdown().await.unwrap();
    c.expect_fatal("E_BAD_BODY IDENTIFY failed to read body")
        .await;

    // A partial command line at EOF is not executed.
    let mut c = l.connect().await;
    c.send(b"  V1PING").await;
    c.s.shutdown().await.unwrap();
    assert_eq!(c.rest().await, b"");
}

#[tokio::test]
async fn unregister_topic_and_ephemeral_rules() {
    let l = Lookupd::start().await;
    let mut c = l.identified(&nsqd_body("n", 1, 2)).await;
    for cmd in [
        "REGISTER t c\n",
        "REGISTER t e#ephemeral\n",
        "REGISTER x#ephemeral c\n",
        "REGISTER y#ephemeral\n",
    ] {
        assert_eq!(c.cmd(cmd).await, "OK");
    }
    assert_eq!(c.cmd("UNREGISTER t e#ephemeral\n").await, "OK");
    assert_eq!(l.json("/channels?topic=t").await, json!({"channels":["c"]}));
    // Topic unregistration also leaves the topic's channels; ephemeral topic is deleted,
    // its channel registrations are not.
    assert_eq!(c.cmd("UNREGISTER x#ephemeral\n").await, "OK");
    assert_eq!(c.cmd("UNREGISTER y#ephemeral\n").await, "OK");
    assert_eq!(l.json("/topics").await, json!({"topics":["t"]}));
    assert_eq!(
        l.json("/channels?topic=x%23ephemeral").await,
        json!({"channels":["c"]})
    );
    // The topic registration stays with zero producers after a plain UNREGISTER.
    assert_eq!(c.cmd("UNREGISTER t\n").await, "OK");
    assert_eq!(
        l.json("/lookup?topic=t").await,
        json!({"channels":["c"],"producers":[]})
    );
    let debug = l.json("/debug").await;
    assert_eq!(
        debug.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["client::"]
    );
}

#[tokio::test]
async fn nsqd_session_then_lookup_has_reference_shape() {
    let l = Lookupd::start().await;
    let mut c = l.connect().await;
    // Exactly what nsqd sends: magic, IDENTIFY, REGISTER per channel, PING.
    c.send(b"  V1").await;
    let body = r#"{"broadcast_address":"nsqd-a.local","hostname":"nsqd-a","http_port":4151,"tcp_port":4150,"version":"1.3.0"}"#;
    c.identify(body.as_bytes()).await;
    let reply: serde_json::Value = serde_json::from_slice(&c.frame().await.unwrap()).unwrap();
    assert_eq!(reply["tcp_port"], json!(l.h.tcp_addr().port()));
    assert_eq!(reply["http_port"], json!(l.h.http_addr().port()));
    assert_eq!(c.cmd("REGISTER t c\n").await, "OK");
    assert_eq!(c.cmd("PING\n").await, "OK");

    let remote = c.s.local_addr().unwrap().to_string();
    let r = l.get("/lookup?topic=t").await;
    r.assert_json(&format!(
        r#"{{"channels":["c"],"producers":[{{"remote_address":"{remote}","hostname":"nsqd-a","broadcast_address":"nsqd-a.local","tcp_port":4150,"http_port":4151,"version":"1.3.0"}}]}}"#
    ));
    let r = l.get("/nodes").await;
    r.assert_json(&format!(
        r#"{{"producers":[{{"remote_address":"{remote}","hostname":"nsqd-a","broadcast_address":"nsqd-a.local","tcp_port":4150,"http_port":4151,"version":"1.3.0","tombstones":[false],"topics":["t"]}}]}}"#
    ));
    assert_eq!(l.json("/channels?topic=t").await, json!({"channels":["c"]}));

    // Disconnect: producers gone everywhere, registrations kept.
    drop(c);
    common::eventually(async || l.json("/nodes").await == json!({"producers":[]})).await;
    assert_eq!(
        l.json("/lookup?topic=t").await,
        json!({"channels":["c"],"producers":[]})
    );
    assert_eq!(l.json("/debug").await, json!({}));
}

/// Ours: an nsqd that replicates sends `"replication":{"group":…}` in IDENTIFY; `/nodes`
/// shows it as `replication_group`, last in its producer, and nowhere else (`/lookup` and
/// the IDENTIFY reply are NSQ's).
#[tokio::test]
async fn a_replication_group_is_shown_by_nodes_only() {
    let l = Lookupd::start().await;
    let mut c = l.connect().await;
    c.send(b"  V1").await;
    let body = r#"{"broadcast_address":"nsqd-a.local","hostname":"nsqd-a","http_port":4151,"replication":{"group":"0123456789abcdef"},"tcp_port":4150,"version":"1.3.0"}"#;
    c.identify(body.as_bytes()).await;
    let reply: serde_json::Value = serde_json::from_slice(&c.frame().await.unwrap()).unwrap();
    assert_eq!(reply.get("replication"), None);
    assert_eq!(c.cmd("REGISTER t\n").await, "OK");
    let remote = c.s.local_addr().unwrap().to_string();
    l.get("/nodes").await.assert_json(&format!(
        r#"{{"producers":[{{"remote_address":"{remote}","hostname":"nsqd-a","broadcast_address":"nsqd-a.local","tcp_port":4150,"http_port":4151,"version":"1.3.0","tombstones":[false],"topics":["t"],"replication_group":"0123456789abcdef"}}]}}"#
    ));
    l.get("/lookup?topic=t").await.assert_json(&format!(
        r#"{{"channels":[],"producers":[{{"remote_address":"{remote}","hostname":"nsqd-a","broadcast_address":"nsqd-a.local","tcp_port":4150,"http_port":4151,"version":"1.3.0"}}]}}"#
    ));
    // A group without a secret is the empty string, still shown.
    let body = r#"{"broadcast_address":"b","hostname":"b","http_port":2,"replication":{"group":""},"tcp_port":1,"version":"1.3.0"}"#;
    let _b = l.identified(body).await;
    common::eventually(async || {
        l.json("/nodes").await["producers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["broadcast_address"] == "b" && p["replication_group"] == "")
    })
    .await;
}

#[tokio::test]
async fn two_connections_are_two_producers() {
    let l = Lookupd::start().await;
    let body = nsqd_body("same", 1, 2);
    let mut a = l.identified(&body).await;
    let mut b = l.identified(&body).await;
    assert_eq!(a.cmd("REGISTER t\n").await, "OK");
    assert_eq!(b.cmd("REGISTER t\n").await, "OK");
    assert_eq!(
        l.json("/lookup?topic=t").await["producers"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    drop(a);
    common::eventually(async || {
        l.json("/lookup?topic=t").await["producers"]
            .as_array()
            .unwrap()
            .len()
            == 1
    })
    .await;
}

#[tokio::test]
async fn shutdown_closes_clients() {
    let l = Lookupd::start().await;
    let mut c = l.identified(&nsqd_body("n", 1, 2)).await;
    let tcp = l.h.tcp_addr();
    tokio::time::timeout(std::time::Duration::from_secs(5), l.h.shutdown())
        .await
        .expect("shutdown completes");
    assert_eq!(c.rest().await, b"");
    assert!(tokio::net::TcpStream::connect(tcp).await.is_err());
}

#[tokio::test]
async fn wildcard_listen_addresses_like_go() {
    // `:0` (empty host) is accepted, and listens on IPv4 (and IPv6 where available).
    let l = Lookupd::start_with(|o| {
        o.tcp_address = ":0".into();
        o.http_address = "0.0.0.0:0".into();
    })
    .await;
    let port = l.h.tcp_addr().port();
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(b"  V1IDENTIFY\n").await.unwrap();
    let body = nsqd_body("n", 1, 2);
    s.write_all(&(body.len() as u32).to_be_bytes())
        .await
        .unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut c = common::Client(nsq_testkit::FrameConn::new(s));
    assert!(c.frame().await.unwrap().starts_with(b"{"));
    // The peer id of an IPv4 client on a dual-stack socket is plain `ip:port`.
    let http = std::net::SocketAddr::from(([127, 0, 0, 1], l.h.http_addr().port()));
    let r = common::request(http, "GET", "/nodes", &[], b"").await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        v["producers"][0]["remote_address"],
        json!(c.s.local_addr().unwrap().to_string())
    );
}

/// Both listeners queue as many connects as the system allows (`net.core.somaxconn`, as Go's
/// `net.Listen`), not the 128 that Tokio's `TcpListener::bind` asks for.
#[tokio::test]
async fn listeners_have_the_system_backlog() {
    let Some(want) = nsq_testkit::sockets::somaxconn() else {
        eprintln!("no /proc/sys/net/core/somaxconn: skipped");
        return;
    };
    let l = Lookupd::start().await;
    for (what, port) in [
        ("TCP", l.h.tcp_addr().port()),
        ("HTTP", l.h.http_addr().port()),
    ] {
        let Some(got) = nsq_testkit::sockets::listen_backlog(port) else {
            eprintln!("`ss` not available: skipped");
            return;
        };
        assert_eq!(got, want, "{what} listener backlog");
    }
}
