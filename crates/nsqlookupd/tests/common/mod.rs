//! nsqlookupd in-process on 127.0.0.1:0 for this crate's integration tests, and a raw V1 TCP
//! client on the size-prefixed framing of `nsq-testkit` (whose raw HTTP client and polling
//! the tests use as well).

#![allow(dead_code, unreachable_pub)]

pub use nsq_testkit::http::request;
use nsq_testkit::http::HttpResponse;
pub use nsq_testkit::{eventually, frame};
use nsq_testkit::{sized, FrameConn, Value};
use nsqlookupd::{NsqlookupdHandle, NsqlookupdOptions};

/// The broadcast address the test daemons report in IDENTIFY.
pub const BROADCAST: &str = "lookup1.example";

pub struct Lookupd {
    pub h: NsqlookupdHandle,
}

impl Lookupd {
    pub async fn start() -> Lookupd {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(f: impl FnOnce(&mut NsqlookupdOptions)) -> Lookupd {
        let mut o = NsqlookupdOptions::with_hostname(BROADCAST);
        o.tcp_address = "127.0.0.1:0".into();
        o.http_address = "127.0.0.1:0".into();
        f(&mut o);
        Lookupd {
            h: nsqlookupd::start(o).await.unwrap(),
        }
    }

    pub async fn connect(&self) -> Client {
        Client(FrameConn::connect(self.h.tcp_addr(), b"").await)
    }

    /// A connected client that sent the magic and IDENTIFYed with `body`.
    pub async fn identified(&self, body: &str) -> Client {
        let mut c = self.connect().await;
        c.send(b"  V1").await;
        c.identify(body.as_bytes()).await;
        let reply = c.frame().await.expect("IDENTIFY reply");
        assert!(
            reply.starts_with(b"{"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
        c
    }

    pub async fn req(&self, method: &str, target: &str) -> HttpResponse {
        request(self.h.http_addr(), method, target, &[], b"").await
    }

    pub async fn get(&self, target: &str) -> HttpResponse {
        self.req("GET", target).await
    }

    pub async fn post(&self, target: &str) -> HttpResponse {
        self.req("POST", target).await
    }

    /// GET and parse a JSON 200.
    pub async fn json(&self, target: &str) -> Value {
        let r = self.get(target).await;
        assert_eq!(r.status, 200, "{target}: {}", r.text());
        serde_json::from_slice(&r.body).unwrap()
    }
}

/// An nsqd-like IDENTIFY body.
pub fn nsqd_body(addr: &str, tcp: u16, http: u16) -> String {
    format!(
        r#"{{"broadcast_address":"{addr}","hostname":"{addr}-host","http_port":{http},"tcp_port":{tcp},"version":"1.3.0"}}"#
    )
}

/// A raw V1 connection: [`FrameConn`] whose frames are nsqlookupd's `[size][data]` replies.
pub struct Client(pub FrameConn);

impl std::ops::Deref for Client {
    type Target = FrameConn;
    fn deref(&self) -> &FrameConn {
        &self.0
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut FrameConn {
        &mut self.0
    }
}

impl Client {
    /// `IDENTIFY\n[size][body]`.
    pub async fn identify(&mut self, body: &[u8]) {
        self.0.send(&sized("IDENTIFY\n", body)).await;
    }

    /// One response frame's data; `None` at EOF.
    pub async fn frame(&mut self) -> Option<Vec<u8>> {
        self.0.data_frame().await
    }

    /// Sends `cmd` and returns the response data as text.
    pub async fn cmd(&mut self, cmd: &str) -> String {
        self.0.send(cmd.as_bytes()).await;
        let f = self.frame().await.expect("a response");
        String::from_utf8(f).unwrap()
    }

    /// Asserts the next bytes are exactly one error frame with `text`, then EOF.
    pub async fn expect_fatal(&mut self, text: &str) {
        let raw = self.0.rest().await;
        assert_eq!(
            String::from_utf8_lossy(&raw),
            String::from_utf8_lossy(&frame(text.as_bytes()))
        );
    }
}
