//! HTTP API tests: the daemon in-process on 127.0.0.1:0 and a tiny raw HTTP/1.1 client, so
//! status lines, headers and bodies are asserted exactly (nsqd-http-api.md).

mod common;

use std::time::Duration;

use common::Daemon;
use nsq_testkit::http::request;
use nsq_testkit::stats::{channel, topic};
use nsq_testkit::{eventually, Value};

// ---- health, info ---------------------------------------------------------------------------

#[tokio::test]
async fn ping_and_info() {
    let d = Daemon::start(&[]).await;
    let r = d.get("/ping").await;
    assert_eq!((r.status, r.text()), (200, "OK".to_string()));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("x-nsq-content-type"), None);

    let r = d.get("/info").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(r.header("x-nsq-content-type"), Some("nsq; version=1.0"));
    let text = r.text();
    let keys = [
        "version",
        "broadcast_address",
        "hostname",
        "http_port",
        "tcp_port",
        "start_time",
        "max_heartbeat_interval",
        "max_output_buffer_size",
        "max_output_buffer_timeout",
        "max_deflate_level",
        "draining",
    ];
    let mut last = 0;
    for k in keys {
        let at = text
            .find(&format!("\"{k}\":"))
            .unwrap_or_else(|| panic!("{k} missing in {text}"));
        assert!(at >= last, "{k} out of order in {text}");
        last = at;
    }
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["version"], "1.3.0");
    assert_eq!(v["tcp_port"], d.h.tcp_addr().port());
    assert_eq!(v["http_port"], d.http().port());
    assert_eq!(v["max_heartbeat_interval"], 60_000_000_000i64);
    assert_eq!(v["max_output_buffer_size"], 65536);
    assert_eq!(v["max_output_buffer_timeout"], 30_000_000_000i64);
    assert_eq!(v["max_deflate_level"], 6);
    assert!(!text.ends_with('\n'));
    // The Accept header of old clients changes nothing.
    let r2 = request(
        d.http(),
        "GET",
        "/info",
        &[("Accept", "application/vnd.nsq; version=1.0")],
        b"",
    )
    .await;
    assert_eq!(r2.status, 200);
    d.h.shutdown().await;
}

// ---- routing --------------------------------------------------------------------------------

#[tokio::test]
async fn routing_404_405_options() {
    let d = Daemon::start(&[]).await;
    for legacy in [
        "/put",
        "/mput",
        "/create_topic",
        "/delete_channel",
        "/nope",
        "/",
    ] {
        d.post(legacy, b"").await.assert_err(404, "NOT_FOUND");
    }
    d.get("/nope").await.assert_err(404, "NOT_FOUND");

    let r = d.get("/topic/create?topic=x").await;
    r.assert_err(405, "METHOD_NOT_ALLOWED");
    assert_eq!(r.header("allow"), Some("OPTIONS, POST"));
    let r = d.post("/ping", b"").await;
    r.assert_err(405, "METHOD_NOT_ALLOWED");
    assert_eq!(r.header("allow"), Some("GET, OPTIONS"));
    let r = d.req("DELETE", "/config/log_level", b"").await;
    r.assert_err(405, "METHOD_NOT_ALLOWED");
    assert_eq!(r.header("allow"), Some("GET, OPTIONS, PUT"));
    let r = d.req("HEAD", "/ping", b"").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, OPTIONS"));
    // The topic was not created by the GET.
    assert_eq!(d.stats("").await["topics"], serde_json::json!([]));

    let r = d.req("OPTIONS", "/ping", b"").await;
    assert_eq!((r.status, r.text()), (200, String::new()));
    assert_eq!(r.header("allow"), Some("GET, OPTIONS"));
    assert_eq!(r.header("content-length"), Some("0"));
    assert_eq!(r.header("content-type"), None);
    assert_eq!(r.header("x-nsq-content-type"), None);
    let r = d.req("OPTIONS", "/debug/pprof/symbol", b"").await;
    assert_eq!(r.header("allow"), Some("GET, OPTIONS, POST"));
    d.req("OPTIONS", "/nope", b"")
        .await
        .assert_err(404, "NOT_FOUND");
    d.h.shutdown().await;
}

#[tokio::test]
async fn routing_redirects() {
    let d = Daemon::start(&[]).await;
    let r = d.get("/ping/").await;
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/ping"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.text(), "<a href=\"/ping\">Moved Permanently</a>.\n\n");
    assert_eq!(r.body.len(), 40);

    let r = d.get("/debug/pprof").await;
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/debug/pprof/"))
    );

    let r = d.post("/pub/?topic=x", b"m").await;
    assert_eq!(
        (r.status, r.header("location")),
        (307, Some("/pub?topic=x"))
    );
    assert_eq!(r.header("content-length"), Some("0"));
    assert_eq!(r.header("content-type"), None);
    assert!(r.body.is_empty());

    let r = d.get("/PING").await;
    assert_eq!((r.status, r.header("location")), (301, Some("/ping")));
    let r = d.get("/Stats/?a=1&b=2").await;
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/stats?a=1&b=2"))
    );
    assert_eq!(
        r.text(),
        "<a href=\"/stats?a=1&amp;b=2\">Moved Permanently</a>.\n\n"
    );
    let r = d.get("//ping").await;
    assert_eq!((r.status, r.header("location")), (301, Some("/ping")));
    let r = d.get("/config/log_level/").await;
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/config/log_level"))
    );
    let r = d.req("PUT", "/CONFIG/log_level", b"debug").await;
    assert_eq!(
        (r.status, r.header("location")),
        (307, Some("/config/log_level"))
    );
    // Only the request method's own routes redirect.
    d.post("/PING", b"").await.assert_err(404, "NOT_FOUND");
    d.req("HEAD", "/ping/", b"").await;
    d.get("/config/").await.assert_err(404, "NOT_FOUND");
    // The path is matched unescaped; redirects re-escape it.
    assert_eq!(d.get("/p%69ng").await.text(), "OK");
    let r = d.get("/config/a%20b/").await;
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/config/a%20b"))
    );
    let r = d.get("/p%zzing").await;
    assert_eq!((r.status, r.text().as_str()), (400, "400 Bad Request"));
    let r = d.req("OPTIONS", "*", b"").await;
    assert_eq!(
        (r.status, r.header("content-length"), r.header("allow")),
        (200, Some("0"), None)
    );
    d.h.shutdown().await;
}

#[tokio::test]
async fn tls_required_answers_403() {
    let pki = nsq_testkit::certs::Pki::new();
    let (h, _dir) = common::start_with(&[
        "--tls-required=true".to_string(),
        format!("--tls-cert={}", pki.server.cert_path()),
        format!("--tls-key={}", pki.server.key_path()),
    ])
    .await;
    let https_port = h.nsqd.https_addr.expect("an HTTPS listener").port();
    let want = format!("{{\"message\": \"TLS_REQUIRED\", \"https_port\": {https_port}}}");
    for (m, p) in [
        ("GET", "/ping"),
        ("OPTIONS", "/nope"),
        ("POST", "/pub?topic=t"),
    ] {
        let r = request(h.http_addr().unwrap(), m, p, &[], b"x").await;
        assert_eq!((r.status, r.text()), (403, want.clone()));
        assert_eq!(
            r.header("content-type"),
            Some("application/json; charset=utf-8")
        );
        assert_eq!(r.header("x-nsq-content-type"), Some("nsq; version=1.0"));
    }
    h.shutdown().await;
}

// ---- publishing -----------------------------------------------------------------------------

#[tokio::test]
async fn pub_checks_and_query_quirks() {
    let d = Daemon::start(&["--max-msg-size=10"]).await;
    d.post("/pub?topic=t", b"hello").await.assert_text_ok("OK");
    d.post("/pub?topic=t", b"")
        .await
        .assert_err(400, "MSG_EMPTY");
    d.post("/pub", b"").await.assert_err(400, "MSG_EMPTY");
    d.post("/pub?topic=t", b"0123456789a")
        .await
        .assert_err(413, "MSG_TOO_BIG");
    d.post("/pub?topic=t", b"0123456789")
        .await
        .assert_text_ok("OK");
    // Without Content-Length (chunked), the read limit decides.
    let r = request(
        d.http(),
        "POST",
        "/pub?topic=t",
        &[("Transfer-Encoding", "chunked")],
        b"0123456789abc",
    )
    .await;
    r.assert_err(413, "MSG_TOO_BIG");
    let r = request(
        d.http(),
        "POST",
        "/pub?topic=t",
        &[("Transfer-Encoding", "chunked")],
        b"chunked",
    )
    .await;
    r.assert_text_ok("OK");
    d.post("/pub?topic=h1;x=1", b"m")
        .await
        .assert_err(400, "INVALID_REQUEST");
    d.post("/pub?topic=%zz", b"m")
        .await
        .assert_err(400, "INVALID_REQUEST");
    d.post("/pub", b"m")
        .await
        .assert_err(400, "MISSING_ARG_TOPIC");
    d.post("/pub?topic=", b"m")
        .await
        .assert_err(400, "INVALID_TOPIC");
    d.post("/pub?topic=a/b", b"m")
        .await
        .assert_err(400, "INVALID_TOPIC");
    d.post("/pub?topic=h1&topic=h2", b"m")
        .await
        .assert_text_ok("OK");
    d.post("/pub?topic=e%23ephemeral", b"m")
        .await
        .assert_text_ok("OK");

    let s = d.stats("").await;
    assert_eq!(topic(&s, "t")["depth"], 3);
    assert_eq!(topic(&s, "t")["message_count"], 3);
    assert_eq!(topic(&s, "t")["message_bytes"], 5 + 10 + 7);
    assert_eq!(topic(&s, "h1")["depth"], 1);
    assert_eq!(topic(&s, "e#ephemeral")["depth"], 1);
    assert!(s["topics"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["topic_name"] != "h2"));
    d.h.shutdown().await;
}

#[tokio::test]
async fn pub_defer() {
    let d = Daemon::start(&[]).await;
    d.post("/channel/create?topic=t&channel=c", b"")
        .await
        .assert_err(404, "TOPIC_NOT_FOUND");
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    d.post("/channel/create?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    d.post("/pub?topic=t&defer=60000", b"later")
        .await
        .assert_text_ok("OK");
    d.post("/pub?topic=t&defer=%2B5000", b"later")
        .await
        .assert_text_ok("OK");
    d.post("/pub?topic=t&defer=0", b"now")
        .await
        .assert_text_ok("OK");
    for bad in [
        "abc",
        "-1",
        "3600001",
        "",
        "1.5",
        "99999999999999999999",
        "9223372036854775807",
    ] {
        d.post(&format!("/pub?topic=t&defer={bad}"), b"x")
            .await
            .assert_err(400, "INVALID_DEFER");
    }
    // The topic is created before the defer check fails.
    d.post("/pub?topic=fresh&defer=abc", b"x")
        .await
        .assert_err(400, "INVALID_DEFER");
    eventually(async || {
        let s = d.stats("").await;
        let c = channel(&s, "t", "c");
        c["deferred_count"] == 2 && c["depth"] == 1 && c["message_count"] == 3
    })
    .await;
    let s = d.stats("").await;
    assert_eq!(topic(&s, "fresh")["depth"], 0);
    d.h.shutdown().await;
}

#[tokio::test]
async fn mpub_text_mode() {
    let d = Daemon::start(&["--max-msg-size=5", "--max-body-size=40"]).await;
    d.post("/mpub?topic=t", b"a\nb\n\nc")
        .await
        .assert_text_ok("OK");
    assert_eq!(topic(&d.stats("").await, "t")["message_count"], 3);
    d.post("/mpub?topic=r", b"ab\r\ncd\r\n")
        .await
        .assert_text_ok("OK");
    let s = d.stats("").await;
    assert_eq!(
        (
            topic(&s, "r")["message_count"].clone(),
            topic(&s, "r")["message_bytes"].clone()
        ),
        (2.into(), 6.into())
    );
    // Nothing to publish is fine; the topic exists now.
    d.post("/mpub?topic=empty", b"\n\n")
        .await
        .assert_text_ok("OK");
    d.post("/mpub?topic=empty", b"").await.assert_text_ok("OK");
    assert_eq!(topic(&d.stats("").await, "empty")["message_count"], 0);
    d.post("/mpub?topic=t&binary=false", b"x\ny")
        .await
        .assert_text_ok("OK");
    d.post("/mpub?topic=t&binary=0", b"x\ny")
        .await
        .assert_text_ok("OK");
    d.post("/mpub?topic=t&defer=1000", b"x\ny")
        .await
        .assert_text_ok("OK");
    assert_eq!(topic(&d.stats("").await, "t")["message_count"], 9);

    d.post("/mpub?topic=t", b"abc\nabcdef\n")
        .await
        .assert_err(413, "MSG_TOO_BIG");
    d.post("/mpub?topic=t", &[b'a'; 41])
        .await
        .assert_err(413, "BODY_TOO_BIG");
    let big = b"abcd\n".repeat(9);
    let r = request(
        d.http(),
        "POST",
        "/mpub?topic=t",
        &[("Transfer-Encoding", "chunked")],
        &big,
    )
    .await;
    r.assert_err(413, "BODY_TOO_BIG");
    let r = request(
        d.http(),
        "POST",
        "/mpub?topic=t",
        &[("Transfer-Encoding", "chunked")],
        b"ab\ncd",
    )
    .await;
    r.assert_text_ok("OK");
    assert_eq!(topic(&d.stats("").await, "t")["message_count"], 11);

    d.post("/mpub", b"a")
        .await
        .assert_err(400, "MISSING_ARG_TOPIC");
    d.post("/mpub?topic=a;b", b"a")
        .await
        .assert_err(400, "INVALID_REQUEST");
    d.post("/mpub?topic=a*", b"a")
        .await
        .assert_err(400, "INVALID_TOPIC");
    d.h.shutdown().await;
}

fn mpub_body(msgs: &[&[u8]]) -> Vec<u8> {
    let mut b = (msgs.len() as u32).to_be_bytes().to_vec();
    for m in msgs {
        b.extend_from_slice(&(m.len() as u32).to_be_bytes());
        b.extend_from_slice(m);
    }
    b
}

#[tokio::test]
async fn mpub_binary_mode() {
    let d = Daemon::start(&["--max-msg-size=5", "--max-body-size=100"]).await;
    let ok = mpub_body(&[b"a\nb", b"c", b"hello"]);
    d.post("/mpub?topic=t&binary=true", &ok)
        .await
        .assert_text_ok("OK");
    assert_eq!(topic(&d.stats("").await, "t")["message_count"], 3);
    // Any unparsable value means binary; trailing bytes are ignored.
    let mut trailing = mpub_body(&[b"x"]);
    trailing.extend_from_slice(b"junk");
    d.post("/mpub?topic=t&binary=yes", &trailing)
        .await
        .assert_text_ok("OK");
    d.post("/mpub?topic=t&binary=", &mpub_body(&[b"y"]))
        .await
        .assert_text_ok("OK");
    let r = request(
        d.http(),
        "POST",
        "/mpub?topic=t&binary=1",
        &[("Transfer-Encoding", "chunked")],
        &ok,
    )
    .await;
    r.assert_text_ok("OK");
    assert_eq!(topic(&d.stats("").await, "t")["message_count"], 8);

    d.post("/mpub?topic=t&binary=1", b"")
        .await
        .assert_err(413, "BAD_BODY");
    d.post("/mpub?topic=t&binary=1", b"\0\0")
        .await
        .assert_err(413, "BAD_BODY");
    d.post("/mpub?topic=t&binary=1", &0u32.to_be_bytes())
        .await
        .assert_err(413, "BAD_BODY");
    d.post("/mpub?topic=t&binary=1", &(-1i32).to_be_bytes())
        .await
        .assert_err(413, "BAD_BODY");
    // (100 - 4) / 5 = 19 messages at most.
    d.post("/mpub?topic=t&binary=1", &20u32.to_be_bytes())
        .await
        .assert_err(413, "BAD_BODY");
    d.post("/mpub?topic=t&binary=1", &mpub_body(&[b"toolong"]))
        .await
        .assert_err(413, "BAD_MESSAGE");
    d.post("/mpub?topic=t&binary=1", &mpub_body(&[b""]))
        .await
        .assert_err(413, "BAD_MESSAGE");
    let mut truncated = mpub_body(&[b"abc", b"def"]);
    truncated.truncate(truncated.len() - 1);
    d.post("/mpub?topic=t&binary=1", &truncated)
        .await
        .assert_err(413, "BAD_MESSAGE");
    let mut short_size = 2u32.to_be_bytes().to_vec();
    short_size.extend_from_slice(&[0, 0, 0, 1, b'a', 0, 0]);
    d.post("/mpub?topic=t&binary=1", &short_size)
        .await
        .assert_err(413, "BAD_MESSAGE");
    d.post("/mpub?topic=t&binary=1", &[0u8; 101])
        .await
        .assert_err(413, "BODY_TOO_BIG");
    assert_eq!(topic(&d.stats("").await, "t")["message_count"], 8);
    d.h.shutdown().await;
}

// ---- topic and channel administration -------------------------------------------------------

#[tokio::test]
async fn topic_admin() {
    let d = Daemon::start(&[]).await;
    d.post("/topic/create", b"")
        .await
        .assert_err(400, "MISSING_ARG_TOPIC");
    d.post("/topic/create", b"topic=x")
        .await
        .assert_err(400, "MISSING_ARG_TOPIC");
    d.post("/topic/create?topic=a;b", b"")
        .await
        .assert_err(400, "INVALID_REQUEST");
    d.post("/topic/create?topic=a/b", b"")
        .await
        .assert_err(400, "INVALID_TOPIC");
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();

    d.post("/pub?topic=t", b"m1").await.assert_text_ok("OK");
    d.post("/pub?topic=t", b"m2").await.assert_text_ok("OK");
    assert_eq!(topic(&d.stats("").await, "t")["depth"], 2);
    d.post("/topic/empty?topic=nope", b"")
        .await
        .assert_err(404, "TOPIC_NOT_FOUND");
    d.post("/topic/empty?topic=a/b", b"")
        .await
        .assert_err(400, "INVALID_TOPIC");
    d.post("/topic/empty", b"")
        .await
        .assert_err(400, "MISSING_ARG_TOPIC");
    d.post("/topic/empty?topic=t", b"").await.assert_empty_ok();
    let s = d.stats("").await;
    assert_eq!(
        (
            topic(&s, "t")["depth"].clone(),
            topic(&s, "t")["message_count"].clone()
        ),
        (0.into(), 2.into())
    );

    d.post("/topic/pause?topic=nope", b"")
        .await
        .assert_err(404, "TOPIC_NOT_FOUND");
    d.post("/topic/pause?topic=a/b", b"")
        .await
        .assert_err(404, "TOPIC_NOT_FOUND");
    d.post("/topic/pause", b"")
        .await
        .assert_err(400, "MISSING_ARG_TOPIC");
    d.post("/topic/pause?topic=t", b"").await.assert_empty_ok();
    assert_eq!(topic(&d.stats("").await, "t")["paused"], true);
    assert!(d.nsqd_dat().contains("\"paused\":true"), "{}", d.nsqd_dat());
    let text = d.get("/stats").await.text();
    assert!(text.contains("\n*P [t              ] depth: 0"), "{text}");
    d.post("/topic/unpause?topic=t", b"")
        .await
        .assert_empty_ok();
    assert_eq!(topic(&d.stats("").await, "t")["paused"], false);
    assert!(
        !d.nsqd_dat().contains("\"paused\":true"),
        "{}",
        d.nsqd_dat()
    );

    d.post("/topic/delete?topic=a/b", b"")
        .await
        .assert_err(404, "TOPIC_NOT_FOUND");
    d.post("/topic/delete?topic=nope", b"")
        .await
        .assert_err(404, "TOPIC_NOT_FOUND");
    d.post("/topic/delete?topic=a;b", b"")
        .await
        .assert_err(400, "INVALID_REQUEST");
    d.post("/topic/delete", b"")
        .await
        .assert_err(400, "MISSING_ARG_TOPIC");
    d.post("/topic/delete?topic=t", b"").await.assert_empty_ok();
    assert_eq!(d.stats("").await["topics"], serde_json::json!([]));
    d.post("/topic/delete?topic=t", b"")
        .await
        .assert_err(404, "TOPIC_NOT_FOUND");
    d.h.shutdown().await;
}

#[tokio::test]
async fn channel_admin() {
    let d = Daemon::start(&[]).await;
    for ep in ["create", "delete", "empty", "pause", "unpause"] {
        let p = format!("/channel/{ep}");
        d.post(&format!("{p}?topic=t;"), b"")
            .await
            .assert_err(400, "INVALID_REQUEST");
        d.post(&p, b"").await.assert_err(400, "MISSING_ARG_TOPIC");
        d.post(&format!("{p}?topic=a/b&channel=c"), b"")
            .await
            .assert_err(400, "INVALID_ARG_TOPIC");
        d.post(&format!("{p}?topic=t"), b"")
            .await
            .assert_err(400, "MISSING_ARG_CHANNEL");
        d.post(&format!("{p}?topic=t&channel=a/b"), b"")
            .await
            .assert_err(400, "INVALID_ARG_CHANNEL");
        d.post(&format!("{p}?topic=t&channel=c"), b"")
            .await
            .assert_err(404, "TOPIC_NOT_FOUND");
    }
    d.post("/topic/create?topic=t", b"").await.assert_empty_ok();
    for ep in ["delete", "empty", "pause", "unpause"] {
        d.post(&format!("/channel/{ep}?topic=t&channel=c"), b"")
            .await
            .assert_err(404, "CHANNEL_NOT_FOUND");
    }
    d.post("/channel/create?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    d.post("/channel/create?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    d.post("/channel/create?topic=t&channel=d%23ephemeral", b"")
        .await
        .assert_empty_ok();
    let s = d.stats("").await;
    let chans: Vec<&str> = topic(&s, "t")["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["channel_name"].as_str().unwrap())
        .collect();
    assert_eq!(chans, ["c", "d#ephemeral"]);

    d.post("/pub?topic=t", b"m").await.assert_text_ok("OK");
    eventually(async || channel(&d.stats("").await, "t", "c")["depth"] == 1).await;
    d.post("/channel/empty?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    assert_eq!(channel(&d.stats("").await, "t", "c")["depth"], 0);

    d.post("/channel/pause?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    assert_eq!(channel(&d.stats("").await, "t", "c")["paused"], true);
    assert!(d.nsqd_dat().contains("\"paused\":true"), "{}", d.nsqd_dat());
    let text = d.get("/stats").await.text();
    assert!(
        text.contains("\n   *P [c                        ] depth: 0"),
        "{text}"
    );
    d.post("/channel/unpause?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    assert_eq!(channel(&d.stats("").await, "t", "c")["paused"], false);
    assert!(
        !d.nsqd_dat().contains("\"paused\":true"),
        "{}",
        d.nsqd_dat()
    );

    d.post("/channel/delete?topic=t&channel=c", b"")
        .await
        .assert_empty_ok();
    d.post("/channel/delete?topic=t&channel=c", b"")
        .await
        .assert_err(404, "CHANNEL_NOT_FOUND");
    let s = d.stats("").await;
    assert_eq!(topic(&s, "t")["channels"].as_array().unwrap().len(), 1);
    d.h.shutdown().await;
}

// ---- /stats ---------------------------------------------------------------------------------

#[tokio::test]
async fn stats_json_shape_and_filters() {
    let d = Daemon::start(&[]).await;
    let r = d.get("/stats?format=json").await;
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(r.header("x-nsq-content-type"), Some("nsq; version=1.0"));
    let text = r.text();
    assert!(
        text.starts_with("{\"version\":\"1.3.0\",\"health\":\"OK\",\"start_time\":"),
        "{text}"
    );
    assert!(
        text.contains(",\"topics\":[],\"memory\":{\"heap_objects\":"),
        "{text}"
    );
    assert!(
        text.ends_with(",\"gc_total_runs\":0},\"producers\":null,\"draining\":false}"),
        "{text}"
    );

    d.post("/topic/create?topic=a", b"").await.assert_empty_ok();
    d.post("/topic/create?topic=b", b"").await.assert_empty_ok();
    d.post("/channel/create?topic=b&channel=c1", b"")
        .await
        .assert_empty_ok();
    d.post("/channel/create?topic=b&channel=c2", b"")
        .await
        .assert_empty_ok();
    let r = d.get("/stats?format=json&include_mem=0").await;
    let text = r.text();
    let start = text.find("\"start_time\":").unwrap();
    let tail = &text[text[start..].find(',').unwrap() + start..];
    assert_eq!(
        tail,
        ",\"topics\":[\
         {\"topic_name\":\"a\",\"channels\":[],\"depth\":0,\"backend_depth\":0,\"message_count\":0,\"message_bytes\":0,\"paused\":false,\"e2e_processing_latency\":{\"count\":0,\"percentiles\":null}},\
         {\"topic_name\":\"b\",\"channels\":[\
         {\"channel_name\":\"c1\",\"depth\":0,\"backend_depth\":0,\"in_flight_count\":0,\"deferred_count\":0,\"message_count\":0,\"requeue_count\":0,\"timeout_count\":0,\"client_count\":0,\"clients\":[],\"paused\":false,\"e2e_processing_latency\":{\"count\":0,\"percentiles\":null}},\
         {\"channel_name\":\"c2\",\"depth\":0,\"backend_depth\":0,\"in_flight_count\":0,\"deferred_count\":0,\"message_count\":0,\"requeue_count\":0,\"timeout_count\":0,\"client_count\":0,\"clients\":[],\"paused\":false,\"e2e_processing_latency\":{\"count\":0,\"percentiles\":null}}],\
         \"depth\":0,\"backend_depth\":0,\"message_count\":0,\"message_bytes\":0,\"paused\":false,\"e2e_processing_latency\":{\"count\":0,\"percentiles\":null}}],\
         \"producers\":null,\"draining\":false}"
    );

    let s = d.stats("&topic=b").await;
    assert_eq!(s["topics"].as_array().unwrap().len(), 1);
    let s = d.stats("&topic=nope&include_mem=0").await;
    assert_eq!(
        s,
        serde_json::json!({"version":"1.3.0","health":"OK","start_time":s["start_time"],"topics":null,"producers":null,"draining":false})
    );
    let s = d.stats("&channel=c2").await;
    assert_eq!(s["topics"].as_array().unwrap().len(), 1);
    assert_eq!(topic(&s, "b")["channels"].as_array().unwrap().len(), 1);
    let s = d.stats("&channel=zz").await;
    assert_eq!(s["topics"], serde_json::json!([]));
    let s = d.stats("&include_clients=false").await;
    assert_eq!(channel(&s, "b", "c1")["clients"], Value::Null);
    assert_eq!(channel(&s, "b", "c1")["client_count"], 0);
    let s = d.stats("&include_clients=yes&include_mem=whatever").await;
    assert_eq!(channel(&s, "b", "c1")["clients"], serde_json::json!([]));
    assert!(s.get("memory").is_some());
    assert!(d.stats("&include_mem=false").await.get("memory").is_none());
    d.get("/stats?format=json;")
        .await
        .assert_err(400, "INVALID_REQUEST");
    d.h.shutdown().await;
}

#[tokio::test]
async fn stats_text_format() {
    let d = Daemon::start(&[]).await;
    let r = d.get("/stats").await;
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("x-nsq-content-type"), Some("nsq; version=1.0"));
    let text = r.text();
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(lines[0].starts_with("nsqd v1.3.0 (built w/"), "{text}");
    assert!(
        lines[1].starts_with("start_time ")
            && lines[1].len() == "start_time 2026-11-29T10:48:27Z".len(),
        "{text}"
    );
    assert!(
        lines[2].starts_with("uptime ") && lines[2].ends_with('s'),
        "{text}"
    );
    assert_eq!(lines[3..6], ["", "Health: OK", ""]);
    assert_eq!(lines[6], "Memory:");
    assert!(
        lines[7].starts_with("   heap_objects             \t"),
        "{text}"
    );
    assert!(
        text.ends_with("\nTopics: None\n\nProducers: None\n"),
        "{text}"
    );

    d.post("/channel/create?topic=t_prod&channel=ch", b"").await;
    d.post("/topic/create?topic=t_prod", b"")
        .await
        .assert_empty_ok();
    d.post("/channel/create?topic=t_prod&channel=ch", b"")
        .await
        .assert_empty_ok();
    d.post("/pub?topic=t_prod", b"hi")
        .await
        .assert_text_ok("OK");
    eventually(async || channel(&d.stats("").await, "t_prod", "ch")["depth"] == 1).await;
    let text = d.get("/stats?format=text&include_mem=0").await.text();
    let body = &text[text.find("\nHealth").unwrap()..];
    assert_eq!(
        body,
        "\nHealth: OK\n\
         \nTopics:\
         \n   [t_prod         ] depth: 0     be-depth: 0     msgs: 1        e2e%: \n\
         \x20     [ch                       ] depth: 1     be-depth: 0     inflt: 0    def: 0    re-q: 0     timeout: 0     msgs: 1        e2e%: \n\
         \nProducers: None\n"
    );
    d.h.shutdown().await;
}

#[tokio::test]
async fn stats_clients_producers_and_e2e() {
    let d = Daemon::start(&["--e2e-processing-latency-percentile=1.0,0.99"]).await;
    let mut producer = d.v2().await;
    producer.cmd("PUB t_prod", Some(b"m1")).await;
    producer.expect_response(b"OK").await;
    producer.cmd("PUB t_prod2", Some(b"m2")).await;
    producer.expect_response(b"OK").await;

    let mut consumer = d.v2().await;
    consumer.cmd("SUB t_prod ch", None).await;
    consumer.expect_response(b"OK").await;
    consumer.cmd("RDY 3", None).await;
    let id = consumer.message().await.id;
    let id = std::str::from_utf8(&id.0).unwrap().to_string();
    consumer.cmd(&format!("FIN {id}"), None).await;
    eventually(async || {
        channel(&d.stats("").await, "t_prod", "ch")["clients"][0]["finish_count"] == 1
    })
    .await;

    let s = d.stats("").await;
    let producers = s["producers"].as_array().unwrap();
    assert_eq!(producers.len(), 1);
    let p = &producers[0];
    assert_eq!(p["client_id"], "127.0.0.1");
    assert_eq!(p["version"], "V2");
    assert_eq!(p["pub_counts"].as_array().unwrap().len(), 1, "{p}");
    assert!(p.get("authed").is_none() && p.get("auth_identity").is_none());
    let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
    assert!(keys.contains(&&"tls_negotiated_protocol_is_mutual".to_string()));
    let filtered = d.stats("&topic=t_prod2").await;
    assert_eq!(
        filtered["producers"][0]["pub_counts"],
        serde_json::json!([{"topic":"t_prod2","count":1}])
    );

    let c = channel(&s, "t_prod", "ch");
    assert_eq!(c["client_count"], 1);
    let cl = &c["clients"][0];
    assert_eq!(
        (
            cl["state"].clone(),
            cl["ready_count"].clone(),
            cl["message_count"].clone()
        ),
        (3.into(), 3.into(), 1.into())
    );
    assert!(cl.get("pub_counts").is_none());
    assert_eq!(c["e2e_processing_latency"]["count"], 1);
    let pct = c["e2e_processing_latency"]["percentiles"]
        .as_array()
        .unwrap();
    assert_eq!(pct.len(), 2);
    assert_eq!(pct[0]["quantile"], 1.0);
    assert_eq!(pct[1]["quantile"], 0.99);
    assert_eq!(topic(&s, "t_prod")["e2e_processing_latency"]["count"], 1);
    assert_eq!(
        topic(&s, "t_prod2")["e2e_processing_latency"],
        serde_json::json!({"count":0,"percentiles":null})
    );
    // Quantiles print without a trailing `.0`.
    let raw = d.get("/stats?format=json&topic=t_prod").await.text();
    assert!(raw.contains("{\"quantile\":1,\"value\":"), "{raw}");

    let text = d.get("/stats").await.text();
    let prod_line = text
        .lines()
        .skip_while(|l| *l != "Producers:")
        .nth(1)
        .unwrap()
        .to_string();
    assert!(prod_line.starts_with("   [V2 127.0.0.1:"), "{text}");
    assert!(
        prod_line.contains("] msgs: 1        topics: t_prod"),
        "{prod_line}"
    );
    assert!(
        prod_line.ends_with(" connected: 0s") || prod_line.ends_with(" connected: 1s"),
        "{prod_line}"
    );
    let consumer_line = text
        .lines()
        .find(|l| l.starts_with("        [V2 "))
        .unwrap();
    assert!(consumer_line.contains("] state: 3 inflt: 0    rdy: 3    fin: 1        re-q: 0        msgs: 1        connected: "), "{consumer_line}");
    let ch_line = text.lines().find(|l| l.starts_with("      [ch ")).unwrap();
    assert!(
        ch_line.contains(" e2e%: ") && ch_line.matches("s, ").count() == 1,
        "{ch_line}"
    );

    let s = d.stats("&include_clients=0").await;
    assert_eq!(s["producers"], Value::Null);
    assert_eq!(channel(&s, "t_prod", "ch")["clients"], Value::Null);
    assert_eq!(channel(&s, "t_prod", "ch")["client_count"], 1);
    drop(producer);
    drop(consumer);
    d.h.shutdown().await;
}

// ---- /config --------------------------------------------------------------------------------

#[tokio::test]
async fn config_get_and_put() {
    let d = Daemon::start(&["--e2e-processing-latency-percentile=1.0,0.99"]).await;
    let r = d.get("/config/log_level").await;
    assert_eq!((r.status, r.text()), (200, "2".to_string()));
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    d.get("/config/log_prefix").await.assert_text_ok("[nsqd] ");
    d.get("/config/tls_cert").await.assert_empty_ok();
    assert_eq!(d.get("/config/msg_timeout").await.text(), "60000000000");
    assert_eq!(d.get("/config/max_msg_size").await.text(), "1048576");
    assert_eq!(d.get("/config/deflate").await.text(), "true");
    assert_eq!(d.get("/config/nsqlookupd_tcp_addresses").await.text(), "[]");
    assert_eq!(
        d.get("/config/e2e_processing_latency_percentiles")
            .await
            .text(),
        "[1,0.99]"
    );
    assert_eq!(
        d.get("/config/broadcast_tcp_port").await.text(),
        d.h.tcp_addr().port().to_string()
    );
    for bad in [
        "node_id",
        "queue_scan_interval",
        "client_timeout",
        "verbose",
        "nope",
    ] {
        d.get(&format!("/config/{bad}"))
            .await
            .assert_err(400, "INVALID_OPTION");
    }

    let r = d.req("PUT", "/config/log_level", b"debug").await;
    assert_eq!((r.status, r.text()), (200, "1".to_string()));
    assert_eq!(d.get("/config/log_level").await.text(), "1");
    d.req("PUT", "/config/log_level", b"WARN").await;
    assert_eq!(d.get("/config/log_level").await.text(), "3");
    d.req("PUT", "/config/log_level", b"info\n")
        .await
        .assert_err(400, "INVALID_VALUE");
    d.req("PUT", "/config/log_level", b"loud")
        .await
        .assert_err(400, "INVALID_VALUE");
    d.req("PUT", "/config/log_level", b"")
        .await
        .assert_err(413, "INVALID_VALUE");
    d.req("PUT", "/config/msg_timeout", b"1s")
        .await
        .assert_err(400, "INVALID_OPTION");
    d.req("PUT", "/config/nope", b"")
        .await
        .assert_err(413, "INVALID_VALUE");
    d.req("PUT", "/config/log_level;", b"debug")
        .await
        .assert_err(400, "INVALID_OPTION");

    let r = d
        .req(
            "PUT",
            "/config/nsqlookupd_tcp_addresses",
            b"[ \"127.0.0.1:1\" ]",
        )
        .await;
    assert_eq!((r.status, r.text()), (200, "[\"127.0.0.1:1\"]".to_string()));
    assert_eq!(
        d.get("/config/nsqlookupd_tcp_addresses").await.text(),
        "[\"127.0.0.1:1\"]"
    );
    assert_eq!(
        d.req("PUT", "/config/nsqlookupd_tcp_addresses", b"null")
            .await
            .text(),
        "null"
    );
    assert_eq!(
        d.req("PUT", "/config/nsqlookupd_tcp_addresses", b"[]")
            .await
            .text(),
        "[]"
    );
    d.req("PUT", "/config/nsqlookupd_tcp_addresses", b"\"x\"")
        .await
        .assert_err(400, "INVALID_VALUE");
    d.h.shutdown().await;
}

#[tokio::test]
async fn config_put_body_limit() {
    let d = Daemon::start(&["--max-msg-size=4"]).await;
    d.req("PUT", "/config/log_level", b"debug")
        .await
        .assert_err(413, "INVALID_VALUE");
    assert_eq!(d.req("PUT", "/config/log_level", b"warn").await.text(), "3");
    d.h.shutdown().await;
}

// ---- /debug ---------------------------------------------------------------------------------

#[tokio::test]
async fn debug_endpoints() {
    let d = Daemon::start(&[]).await;
    let r = d.req("PUT", "/debug/setblockrate?rate=abc", b"").await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (
            400,
            "invalid block rate : strconv.Atoi: parsing \"abc\": invalid syntax"
        )
    );
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("x-nsq-content-type"), None);
    d.req("PUT", "/debug/setblockrate?rate=1", b"")
        .await
        .assert_err(500, "INTERNAL_ERROR");
    d.post("/debug/freememory", b"")
        .await
        .assert_err(500, "INTERNAL_ERROR");
    let r = d.get("/debug/freememory").await;
    assert_eq!((r.status, r.header("allow")), (405, Some("OPTIONS, POST")));
    let r = d.get("/debug/pprof/").await;
    assert_eq!(
        (r.status, r.header("content-type")),
        (200, Some("text/html; charset=utf-8"))
    );
    let r = d.get("/debug/pprof/cmdline").await;
    assert_eq!(r.status, 200);
    let r = d.post("/debug/pprof/symbol", b"").await;
    assert_eq!((r.status, r.text().as_str()), (200, "num_symbols: 0\n"));
    assert_eq!(d.get("/debug/pprof/heap").await.status, 501);
    d.get("/debug/pprof/nope")
        .await
        .assert_err(404, "NOT_FOUND");
    d.h.shutdown().await;
}

#[tokio::test]
async fn keep_alive_requests() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = Daemon::start(&[]).await;
    let mut s = tokio::net::TcpStream::connect(d.http()).await.unwrap();
    s.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\nPOST /pub?topic=k HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nm")
        .await
        .unwrap();
    let mut buf = Vec::new();
    while String::from_utf8_lossy(&buf).matches("\r\n\r\nOK").count() < 2 {
        let mut chunk = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "connection closed early");
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    d.h.shutdown().await;
}

/// Requests Go's server reads and hyper by default does not, and Go's bytes for one it cannot
/// parse (issue 21, defect 5; nsq_http::serve): a 1 MB header and 10,000 headers are
/// served; a malformed request gets `400 Bad Request` as a plain-text body, then the close.
#[tokio::test]
async fn http_heads_as_go_reads_them() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = Daemon::start(&[]).await;
    let addr = d.http();
    let exchange = |req: Vec<u8>| async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = s.write_all(&req).await;
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("closed within 10 s")
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    };
    let mut big = b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: ".to_vec();
    big.resize(big.len() + 1_000_000, b'a');
    big.extend_from_slice(b"\r\n\r\n");
    let mut many = b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".to_vec();
    for i in 0..10_000 {
        many.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    for req in [big, many] {
        let resp = exchange(req).await;
        assert!(
            resp.starts_with("HTTP/1.1 200 OK\r\n") && resp.ends_with("\r\n\r\nOK"),
            "{resp}"
        );
    }
    assert_eq!(
        exchange(b"GET /ping HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n".to_vec()).await,
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Connection: close\r\n\r\n400 Bad Request"
    );
    let resp = exchange(b"GET /ping HTTP/1.0\r\n\r\n".to_vec()).await;
    assert!(resp.starts_with("HTTP/1.0 200 OK\r\n"), "{resp}");
    d.h.shutdown().await;
}
