//! The AUTH client against a tiny in-test auth server: the exact request, the accept/reject
//! rules for the answer, failover between servers, the permission rule (nsq's
//! internal/auth/authorizations.go, `IsAllowed`), expiry, and HTTPS auth servers verified
//! with `--tls-root-ca-file` (directly, and through the reference's retry of a `403` on the
//! body's `https_port`), also end to end through nsqd's TCP `AUTH`.

use std::sync::Arc;
use std::time::Duration;

use nsq_http::client::{ClientOptions, HttpClient, TlsOptions};
use nsq_testkit::certs::Pki;
use nsq_testkit::FakeHttp;
use nsqd::auth::{self, AuthState, Permission};
use tokio::net::TcpListener;

async fn auth_server(status: u16, body: &str) -> FakeHttp {
    FakeHttp::start(status, body).await
}

/// An address nothing listens on.
async fn closed_port() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap().to_string();
    drop(l);
    a
}

fn client(root_ca_file: &str) -> HttpClient {
    HttpClient::new(&ClientOptions {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        user_agent: "nsqd/test".to_string(),
        tls: TlsOptions {
            root_ca_file: root_ca_file.to_string(),
            ..TlsOptions::default()
        },
        follow_redirects: true,
    })
    .unwrap()
}

async fn query(addrs: &[String], secret: &[u8]) -> Result<AuthState, String> {
    auth::query(&client(""), addrs, secret, "127.0.0.1", false, "")
        .await
        .map_err(|e| e.to_string())
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

    let reqs = srv.requests();
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
        &client(""),
        &[url],
        b"a b&c=d",
        "10.0.0.1",
        true,
        "CN=client/x",
    )
    .await
    .unwrap();
    let reqs = srv.requests();
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
        assert_eq!(srv.requests().len(), i);
    }

    let srv2 = auth_server(500, "").await;
    assert!(query(&[down, srv2.addr], b"x").await.is_err());
    assert!(query(&[], b"x").await.is_err());
}

/// An HTTPS auth server with the PKI's server certificate, answering `body` to everything.
async fn https_auth_server(pki: &Pki, body: &str) -> FakeHttp {
    use tokio_rustls::rustls;
    let certs = vec![rustls::pki_types::CertificateDer::from(
        pki.server.der.clone(),
    )];
    let key = {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::PrivateKeyDer::from_pem_slice(pki.server.key_pem.as_bytes()).unwrap()
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    // A client that rejects our certificate fails the handshake: the connection is dropped.
    FakeHttp::start_with(200, body, move |tcp| {
        let acceptor = acceptor.clone();
        async move { acceptor.accept(tcp).await.ok() }
    })
    .await
}

#[tokio::test]
async fn https_auth_server_is_verified_with_the_root_ca() {
    let pki = Pki::new();
    let srv = https_auth_server(&pki, ALLOW).await;
    let url = format!("https://{}/auth", srv.addr);
    let st = auth::query(
        &client(pki.ca_path()),
        std::slice::from_ref(&url),
        b"good",
        "127.0.0.1",
        true,
        "",
    )
    .await
    .unwrap();
    assert_eq!(st.identity, "bob");
    let reqs = srv.requests();
    assert!(
        reqs[0].starts_with(
            "GET /auth?common_name=&remote_ip=127.0.0.1&secret=good&tls=true HTTP/1.1\r\n"
        ),
        "{}",
        reqs[0]
    );

    // Without the CA the server's certificate is refused, with Go's words.
    let e = auth::query(&client(""), &[url], b"good", "127.0.0.1", true, "")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with(
            ": tls: failed to verify certificate: x509: certificate signed by unknown authority"
        ),
        "{e}"
    );
    assert_eq!(srv.requests().len(), 1);
}

#[tokio::test]
async fn a_403_with_https_port_is_retried_over_https() {
    let pki = Pki::new();
    let tls_srv = https_auth_server(&pki, ALLOW).await;
    let port = tls_srv.addr.rsplit_once(':').unwrap().1.to_string();
    let plain = auth_server(
        403,
        &format!(r#"{{"message":"TLS_REQUIRED","https_port":{port}}}"#),
    )
    .await;
    let addr = plain.addr.clone();
    let st = auth::query(
        &client(pki.ca_path()),
        &[addr],
        b"s",
        "127.0.0.1",
        false,
        "",
    )
    .await
    .unwrap();
    assert_eq!(st.identity, "bob");
    assert_eq!(plain.requests().len(), 1);
    let reqs = tls_srv.requests();
    assert_eq!(reqs.len(), 1);
    assert!(
        reqs[0].starts_with(
            "GET /auth?common_name=&remote_ip=127.0.0.1&secret=s&tls=false HTTP/1.1\r\n"
        ),
        "{}",
        reqs[0]
    );
}

#[tokio::test]
async fn nsqd_authenticates_against_an_https_auth_server() {
    let pki = Pki::new();
    let srv = https_auth_server(&pki, ALLOW).await;
    let data = tempfile::tempdir().unwrap();
    let args = vec![
        "nsqd".to_string(),
        "--tcp-address=127.0.0.1:0".to_string(),
        "--http-address=127.0.0.1:0".to_string(),
        format!("--data-path={}", data.path().display()),
        format!("--auth-http-address=https://{}/auth", srv.addr),
        format!("--tls-root-ca-file={}", pki.ca_path()),
    ];
    let nsqd::options::ParseOutcome::Run(opts) = nsqd::options::parse_args(args).unwrap() else {
        panic!("not a run")
    };
    let h = nsqd::start(opts).await.unwrap();
    let addr = h.tcp_addr();
    let reply = tokio::task::spawn_blocking(move || {
        let mut c = nsq_testkit::V2Conn::connect(addr);
        c.identify("{}");
        c.send(&[nsq_protocol::command::Command::Auth {
            body: nsq_testkit::Bytes::from_static(b"good"),
        }]);
        c.read_non_heartbeat(Duration::from_secs(15)).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(reply.frame_type, 0, "{}", nsq_testkit::describe(&reply));
    assert_eq!(
        &reply.data[..],
        br#"{"identity":"bob","identity_url":"http://x/bob","permission_count":1}"#
    );
    assert!(srv.requests()[0].contains("secret=good"));
    h.shutdown().await;
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
