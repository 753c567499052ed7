//! The AUTH client against a tiny in-test auth server: the exact request, the accept/reject
//! rules for the answer, failover between servers, the permission rule of TCP spec §9.3 and
//! expiry.

use std::sync::Arc;
use std::time::Duration;

use nsqd::auth::{self, AuthState, Permission};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A one-answer-fits-all HTTP server; records each request's head.
struct AuthServer {
    addr: String,
    requests: Arc<Mutex<Vec<String>>>,
}

async fn auth_server(status: u16, body: &str) -> AuthServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let recorded = requests.clone();
    let body = body.to_string();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            recorded
                .lock()
                .push(String::from_utf8_lossy(&head).to_string());
            let resp = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
        }
    });
    AuthServer { addr, requests }
}

/// An address nothing listens on.
async fn closed_port() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap().to_string();
    drop(l);
    a
}

async fn query(addrs: &[String], secret: &[u8]) -> Result<AuthState, String> {
    auth::query(
        addrs,
        secret,
        "127.0.0.1",
        false,
        "",
        Duration::from_secs(2),
        Duration::from_secs(5),
    )
    .await
}

const ALLOW: &str = r#"{"ttl":3600,"identity":"bob","identity_url":"http://x/bob","authorizations":[{"topic":".*","channels":[".*"],"permissions":["subscribe","publish"]}]}"#;

#[tokio::test]
async fn allow_sends_the_reference_request() {
    let srv = auth_server(200, ALLOW).await;
    let st = query(std::slice::from_ref(&srv.addr), b"good")
        .await
        .unwrap();
    assert_eq!(st.identity, "bob");
    assert_eq!(st.identity_url, "http://x/bob");
    assert_eq!(st.permission_count(), 1);
    assert_eq!(
        st.authorizations[0].permissions,
        vec![Permission::Subscribe, Permission::Publish]
    );
    assert!(!st.is_expired());
    assert_eq!(
        st.response_json(),
        br#"{"identity":"bob","identity_url":"http://x/bob","permission_count":1}"#.to_vec()
    );

    let reqs = srv.requests.lock().clone();
    assert_eq!(reqs.len(), 1);
    let mut lines = reqs[0].split("\r\n");
    assert_eq!(
        lines.next().unwrap(),
        "GET /auth?common_name=&remote_ip=127.0.0.1&secret=good&tls=false HTTP/1.1"
    );
    assert!(
        reqs[0].contains("\r\nAccept: application/vnd.nsq; version=1.0\r\n"),
        "{}",
        reqs[0]
    );
    assert!(reqs[0].contains(&format!("\r\nHost: {}\r\n", srv.addr)));
}

#[tokio::test]
async fn parameters_are_escaped_and_full_urls_used() {
    let srv = auth_server(200, ALLOW).await;
    let url = format!("http://{}/v1/nsq", srv.addr);
    auth::query(
        &[url],
        b"a b&c=d",
        "10.0.0.1",
        true,
        "CN=client/x",
        Duration::from_secs(2),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let reqs = srv.requests.lock().clone();
    assert!(
        reqs[0].starts_with(
            "GET /v1/nsq?common_name=CN%3Dclient%2Fx&remote_ip=10.0.0.1&secret=a+b%26c%3Dd&tls=true HTTP/1.1\r\n"
        ),
        "{}",
        reqs[0]
    );
}

#[tokio::test]
async fn empty_authorizations_are_ok_but_allow_nothing() {
    let srv = auth_server(200, r#"{"ttl":60,"authorizations":[]}"#).await;
    let st = query(&[srv.addr], b"x").await.unwrap();
    assert_eq!(st.permission_count(), 0);
    assert!(!st.allows("t", "", false));
    assert_eq!(
        st.response_json(),
        br#"{"identity":"","identity_url":"","permission_count":0}"#.to_vec()
    );
}

#[tokio::test]
async fn failures_are_errors() {
    for (status, body) in [
        (500, ALLOW),
        (403, r#"{"https_port":4443}"#),
        (404, "not found"),
        (200, "not json"),
        (200, r#"{"ttl":0,"authorizations":[]}"#),
        (200, r#"{"ttl":-5,"authorizations":[]}"#),
        (200, r#"{"authorizations":[]}"#),
        (200, r#"{"ttl":1.5,"authorizations":[]}"#),
        (200, r#"{"ttl":"60","authorizations":[]}"#),
        (200, r#"[]"#),
        (200, "null"),
        (
            200,
            r#"{"ttl":60,"authorizations":[{"topic":".*","channels":[".*"],"permissions":["admin"]}]}"#,
        ),
        (
            200,
            r#"{"ttl":60,"authorizations":[{"topic":"(","channels":[".*"],"permissions":["publish"]}]}"#,
        ),
        (
            200,
            r#"{"ttl":60,"authorizations":[{"topic":".*","channels":["[a-"],"permissions":["publish"]}]}"#,
        ),
        (200, r#"{"ttl":60,"identity":5,"authorizations":[]}"#),
        (200, r#"{"ttl":60,"authorizations":{}}"#),
    ] {
        let srv = auth_server(status, body).await;
        let r = query(&[srv.addr], b"x").await;
        assert!(r.is_err(), "{status} {body} → {r:?}");
    }
}

#[tokio::test]
async fn go_json_leniency() {
    // Case-insensitive keys, unknown keys ignored, nulls are "absent".
    let st = AuthState::from_response(
        br#"{"TTL":10,"Identity":"i","extra":{"a":[1]},"identity_url":null,
            "AUTHORIZATIONS":[null,{"Topic":"^t$","CHANNELS":[null,"c"],"permissions":["publish"]}]}"#,
    )
    .unwrap();
    assert_eq!(st.identity, "i");
    assert_eq!(st.identity_url, "");
    assert_eq!(st.permission_count(), 2);
    // The null entry permits nothing; the second allows publishing because `null` decoded
    // as the pattern "" which matches the empty channel.
    assert!(st.allows("t", "", false));
    assert!(!st.allows("tt", "", false));
    assert!(!st.allows("t", "c", true));
}

#[tokio::test]
async fn unreachable_servers_fail_over() {
    let down = closed_port().await;
    assert!(query(std::slice::from_ref(&down), b"x").await.is_err());

    let srv = auth_server(200, ALLOW).await;
    let addrs = vec![down.clone(), srv.addr.clone()];
    // The start index is random: either way the live server answers exactly once per query.
    for i in 1..=8 {
        let st = query(&addrs, b"good").await.unwrap();
        assert_eq!(st.identity, "bob");
        assert_eq!(srv.requests.lock().len(), i);
    }

    let srv2 = auth_server(500, "").await;
    assert!(query(&[down, srv2.addr], b"x").await.is_err());
    assert!(query(&[], b"x").await.is_err());
}

#[tokio::test]
async fn https_is_not_supported_yet() {
    let e = query(&["https://127.0.0.1:1/auth".to_string()], b"x")
        .await
        .unwrap_err();
    assert!(e.contains("HTTPS auth servers are not supported"), "{e}");
}

fn state(json: &str) -> AuthState {
    AuthState::from_response(json.as_bytes()).unwrap()
}

#[tokio::test]
async fn permission_rules() {
    // Publish needs a channel pattern matching "".
    let st = state(
        r#"{"ttl":60,"authorizations":[{"topic":"^t$","channels":["^ch$"],"permissions":["publish","subscribe"]}]}"#,
    );
    assert!(!st.allows("t", "", false));
    assert!(st.allows("t", "ch", true));
    assert!(!st.allows("t", "ch2", true));
    assert!(!st.allows("tt", "ch", true));

    // Unanchored: a match anywhere counts.
    let st = state(
        r#"{"ttl":60,"authorizations":[{"topic":"foo","channels":[".*"],"permissions":["publish"]}]}"#,
    );
    assert!(st.allows("xfoox", "", false));
    assert!(!st.allows("bar", "", false));
    // Publish permission does not grant subscribe.
    assert!(!st.allows("foo", "c", true));

    // Subscribe only.
    let st = state(
        r#"{"ttl":60,"authorizations":[{"topic":".*","channels":["a"],"permissions":["subscribe"]}]}"#,
    );
    assert!(st.allows("t", "xa", true));
    assert!(!st.allows("t", "", false));
    assert!(!st.allows("t", "b", true));

    // Empty channel list permits nothing.
    let st = state(
        r#"{"ttl":60,"authorizations":[{"topic":".*","channels":[],"permissions":["subscribe","publish"]}]}"#,
    );
    assert!(!st.allows("t", "", false));
    assert!(!st.allows("t", "c", true));

    // Any entry suffices.
    let st = state(
        r#"{"ttl":60,"authorizations":[
            {"topic":"^a$","channels":[".*"],"permissions":["publish"]},
            {"topic":"^b$","channels":["^c$"],"permissions":["subscribe"]}]}"#,
    );
    assert!(st.allows("a", "", false));
    assert!(st.allows("b", "c", true));
    assert!(!st.allows("b", "", false));
    assert!(!st.allows("a", "c", true));
}

#[tokio::test]
async fn expires_after_ttl() {
    let srv = auth_server(200, &ALLOW.replace("3600", "2")).await;
    let st = query(&[srv.addr], b"good").await.unwrap();
    tokio::time::pause();
    assert!(!st.is_expired());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(!st.is_expired());
    tokio::time::advance(Duration::from_millis(1100)).await;
    assert!(st.is_expired());
}

#[tokio::test]
async fn response_json_escapes_like_go() {
    let st = state(r#"{"ttl":1,"identity":"a<b>&\"c","identity_url":"u","authorizations":[]}"#);
    assert_eq!(
        String::from_utf8(st.response_json()).unwrap(),
        r#"{"identity":"a\u003cb\u003e\u0026\"c","identity_url":"u","permission_count":0}"#
    );
}
