//! nsqd in-process for this crate's integration tests: [`options`] builds options the way the
//! command line does (ephemeral ports, a temporary data path), [`start_with`] starts a daemon
//! on them, and [`Daemon`] adds raw HTTP calls. The clients themselves (raw HTTP, TCP frames,
//! certificates, waiting) come from the `nsq-testkit` crate.

#![allow(dead_code, unreachable_pub)]

pub mod lookupd_tcp;
pub mod origin;
pub mod pair;

use std::net::SocketAddr;
use std::path::Path;

use nsq_testkit::http::{request, HttpResponse};
use nsq_testkit::{FrameConn, Value};
use nsqd::options::{parse_args, NsqdOptions, ParseOutcome};
use nsqd::NsqdHandle;
use tempfile::TempDir;

/// `nsqd --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 --https-address=127.0.0.1:0
/// --data-path=<data_path>` plus `extra` (a later flag wins), parsed by nsqd's own flag parser.
/// The HTTPS listener only starts when `extra` configures TLS.
pub fn options<S: AsRef<str>>(data_path: &Path, extra: &[S]) -> NsqdOptions {
    let mut args = vec![
        "nsqd".to_string(),
        "--tcp-address=127.0.0.1:0".to_string(),
        "--http-address=127.0.0.1:0".to_string(),
        "--https-address=127.0.0.1:0".to_string(),
        format!("--data-path={}", data_path.display()),
    ];
    args.extend(extra.iter().map(|s| s.as_ref().to_string()));
    let ParseOutcome::Run(opts) = parse_args(args).unwrap() else {
        panic!("not a run")
    };
    opts
}

/// A daemon on [`options`] with a fresh data directory (kept until the `TempDir` drops).
pub async fn start_with<S: AsRef<str>>(extra: &[S]) -> (NsqdHandle, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let h = nsqd::start(options(dir.path(), extra)).await.unwrap();
    (h, dir)
}

/// Starts nsqd on `opts` and, with replication on, waits until the replica backlogs it holds
/// are replayed (nsqd serves its clients before that: docs/replication.md, "The replica
/// store").
pub async fn start_replayed(opts: NsqdOptions) -> NsqdHandle {
    let h = nsqd::start(opts).await.unwrap();
    if let Some(r) = &h.nsqd.replication {
        assert!(r.replayed().await, "replica backlogs replayed");
    }
    h
}

/// [`start_with`] no extra flags.
pub async fn start() -> (NsqdHandle, TempDir) {
    start_with::<&str>(&[]).await
}

/// Channel `channel` of topic `topic` in `h`'s engine; panics if either does not exist.
pub fn channel(h: &NsqdHandle, topic: &str, channel: &str) -> std::sync::Arc<nsq_core::Channel> {
    h.nsqd
        .engine
        .get_topic(topic)
        .expect("topic exists")
        .get_channel(channel)
        .expect("channel exists")
}

/// A V2 connection to `h` (magic sent).
pub async fn v2(h: &NsqdHandle) -> FrameConn {
    FrameConn::connect(h.tcp_addr(), b"  V2").await
}

/// A started daemon with its data directory, and raw HTTP calls to it.
pub struct Daemon {
    pub h: NsqdHandle,
    pub dir: TempDir,
}

impl Daemon {
    pub async fn start(extra: &[&str]) -> Daemon {
        let (h, dir) = start_with(extra).await;
        Daemon { h, dir }
    }

    pub fn http(&self) -> SocketAddr {
        self.h.http_addr().unwrap()
    }

    pub async fn req(&self, method: &str, target: &str, body: &[u8]) -> HttpResponse {
        request(self.http(), method, target, &[], body).await
    }

    pub async fn get(&self, target: &str) -> HttpResponse {
        self.req("GET", target, b"").await
    }

    pub async fn post(&self, target: &str, body: &[u8]) -> HttpResponse {
        self.req("POST", target, body).await
    }

    /// `/stats?format=json<query>`, which must answer 200.
    pub async fn stats(&self, query: &str) -> Value {
        let r = self.get(&format!("/stats?format=json{query}")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_slice(&r.body).unwrap()
    }

    /// The metadata file as written so far (empty if there is none).
    pub fn nsqd_dat(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nsqd.dat")).unwrap_or_default()
    }

    /// A V2 connection (magic sent).
    pub async fn v2(&self) -> FrameConn {
        v2(&self.h).await
    }
}
