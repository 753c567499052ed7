//! In-process daemons for the cross-daemon tests of this directory (nsqadmin against nsqd and
//! nsqlookupd): starters on ephemeral loopback ports and an HTTP client that shows redirects.
//! The binaries' starters and everything daemon-independent are in `nsq_integration_tests`
//! (`tests/src/lib.rs`, re-exporting `nsq-testkit`).

#![allow(dead_code, unreachable_pub)]

pub mod cluster;

use std::time::Duration;

use nsq_http::client::{HttpClient, Response};
use nsqadmin::AdminHandle;
use nsqd::NsqdHandle;
use serde_json::Value;

/// A client that shows redirects instead of following them.
pub fn client() -> HttpClient {
    HttpClient::new(&nsq_http::client::ClientOptions {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(10),
        user_agent: "nsqadmin-test".to_string(),
        tls: Default::default(),
        follow_redirects: false,
    })
    .unwrap()
}

/// One request with [`client`].
pub async fn raw(url: &str, method: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    client().request(method, url, headers, body).await.unwrap()
}

/// One request: the status and the body as JSON (a JSON string of the text if it is not JSON).
pub async fn send(url: &str, method: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let r = raw(url, method, headers, body).await;
    let v = serde_json::from_slice(&r.body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&r.body).into_owned()));
    (r.status, v)
}

/// nsqd on 127.0.0.1 ephemeral ports (HTTPS too, if `extra` configures TLS), broadcasting
/// `127.0.0.1`, with a fresh data directory; `extra` flags come last and win.
pub async fn start_nsqd(extra: &[String]) -> (NsqdHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let data = format!("--data-path={}", dir.path().display());
    let mut args: Vec<String> = [
        "nsqd",
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        "--https-address=127.0.0.1:0",
        "--broadcast-address=127.0.0.1",
        &data,
    ]
    .map(String::from)
    .to_vec();
    args.extend_from_slice(extra);
    let nsqd::options::ParseOutcome::Run(opts) = nsqd::options::parse_args(args).unwrap() else {
        panic!("not a run")
    };
    (nsqd::start(opts).await.unwrap(), dir)
}

/// nsqadmin on an ephemeral loopback port with `args`.
pub async fn start_admin(args: &[String]) -> AdminHandle {
    let mut v = vec![
        "nsqadmin".to_string(),
        "--http-address=127.0.0.1:0".to_string(),
    ];
    v.extend_from_slice(args);
    let nsqadmin::options::ParseOutcome::Run(opts) = nsqadmin::options::parse_args(v).unwrap()
    else {
        panic!("not a run")
    };
    nsqadmin::start(opts).await.unwrap()
}

/// A local address nothing listens on.
pub fn dead_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}
