//! Two in-process nsqd and an nsqadmin over both (`--nsqd-http-address` each), shared by the
//! nsqadmin API tests: requests to nsqadmin and to each nsqd, and the nsqd state they check.

use std::sync::Arc;
use std::time::Duration;

use nsq_integration_tests::find_channel;
use nsqadmin::AdminHandle;
use nsqd::NsqdHandle;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{client, send, start_admin, start_nsqd};

pub struct Cluster {
    pub nsqds: Vec<(NsqdHandle, tempfile::TempDir)>,
    pub admin: AdminHandle,
}

impl Cluster {
    /// Two plain nsqd; `extra` are nsqadmin's flags.
    pub async fn start(extra: &[String]) -> Cluster {
        Cluster::start_with(&[], extra).await
    }

    /// The first nsqd with `first` as its flags (the second plain); `extra` nsqadmin's.
    pub async fn start_with(first: &[String], extra: &[String]) -> Cluster {
        let nsqds = vec![start_nsqd(first).await, start_nsqd(&[]).await];
        let mut args: Vec<String> = nsqds
            .iter()
            .map(|(h, _)| format!("--nsqd-http-address={}", h.http_addr().unwrap()))
            .collect();
        args.extend(extra.iter().cloned());
        let admin = start_admin(&args).await;
        Cluster { nsqds, admin }
    }

    /// nsqd `i`'s HTTP address.
    pub fn node(&self, i: usize) -> String {
        self.nsqds[i].0.http_addr().unwrap().to_string()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin.http_addr())
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        send(&self.url(path), "GET", &[], b"").await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        send(&self.url(path), "POST", &[], body.to_string().as_bytes()).await
    }

    pub async fn delete(&self, path: &str, body: &[u8]) -> (u16, Value) {
        send(&self.url(path), "DELETE", &[], body).await
    }

    /// A request to nsqd `i`: its status and JSON.
    pub async fn nsqd(
        &self,
        i: usize,
        method: &str,
        path_query: &str,
        body: &[u8],
    ) -> (u16, Value) {
        send(
            &format!("http://{}{path_query}", self.node(i)),
            method,
            &[],
            body,
        )
        .await
    }

    /// A POST to nsqd `i` that must answer 200.
    pub async fn nsqd_ok(&self, i: usize, path_query: &str, body: &[u8]) {
        let r = client()
            .request(
                "POST",
                &format!("http://{}{path_query}", self.node(i)),
                &[],
                body,
            )
            .await
            .unwrap();
        assert_eq!(
            r.status,
            200,
            "{path_query}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }

    /// nsqd `i`'s own `/stats` JSON.
    pub async fn nsqd_stats(&self, i: usize) -> Value {
        let b = client()
            .get_v1(&format!("http://{}/stats?format=json", self.node(i)))
            .await
            .unwrap();
        serde_json::from_slice(&b).unwrap()
    }

    /// nsqd `i`'s `/stats` of `topic`/`channel`.
    pub async fn channel(&self, i: usize, topic: &str, channel: &str) -> Value {
        let s = self.nsqd_stats(i).await;
        find_channel(&s, topic, channel)
            .unwrap_or_else(|| panic!("no {topic}/{channel} on nsqd {i}: {s}"))
            .clone()
    }

    pub async fn depth(&self, i: usize, topic: &str, channel: &str) -> u64 {
        self.channel(i, topic, channel).await["depth"]
            .as_u64()
            .unwrap()
    }

    pub async fn create_channel(&self, i: usize, topic: &str, channel: &str) {
        self.nsqd_ok(i, &format!("/topic/create?topic={topic}"), b"")
            .await;
        self.nsqd_ok(
            i,
            &format!("/channel/create?topic={topic}&channel={channel}"),
            b"",
        )
        .await;
    }

    /// `n` messages `m0`, `m1`, … published to `topic` on nsqd `i`.
    pub async fn publish(&self, i: usize, topic: &str, n: usize) {
        for k in 0..n {
            self.nsqd_ok(
                i,
                &format!("/pub?topic={topic}"),
                format!("m{k}").as_bytes(),
            )
            .await;
        }
    }

    pub async fn shutdown(self) {
        self.admin.shutdown().await;
        for (h, _d) in self.nsqds {
            h.shutdown().await;
        }
    }
}

/// The node entry of `node` in an answer's `nodes`.
pub fn node_entry<'a>(v: &'a Value, node: &str) -> &'a Value {
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == node)
        .unwrap_or_else(|| panic!("no node {node} in {v}"))
}

/// A tiny HTTP endpoint recording request bodies.
pub async fn notification_sink() -> (String, Arc<Mutex<Vec<Value>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let g = g.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(p) = text.find("\r\n\r\n") {
                        let len: usize = text[..p]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= p + 4 + len {
                            assert!(text.starts_with("POST "));
                            assert!(text
                                .to_ascii_lowercase()
                                .contains("content-type: application/json"));
                            let v: Value =
                                serde_json::from_slice(&buf[p + 4..p + 4 + len]).unwrap();
                            g.lock().push(v);
                            let _ = s
                                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                                .await;
                            return;
                        }
                    }
                }
            });
        }
    });
    (format!("http://{addr}/notify"), got)
}

pub async fn wait_for(got: &Arc<Mutex<Vec<Value>>>, n: usize) -> Vec<Value> {
    for _ in 0..100 {
        if got.lock().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    got.lock().clone()
}

/// A V2 consumer subscribed to `topic`/`channel` on `nsqd` (it shows up as a client), with
/// `RDY rdy` sent when `rdy` is not 0.
pub async fn subscribe(nsqd: &NsqdHandle, topic: &str, channel: &str, rdy: u32) -> TcpStream {
    let mut s = TcpStream::connect(nsqd.tcp_addr()).await.unwrap();
    s.write_all(format!("  V2SUB {topic} {channel}\n").as_bytes())
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).await.unwrap();
    assert!(
        n >= 10 && &buf[8..10] == b"OK",
        "SUB answered {:?}",
        &buf[..n]
    );
    if rdy > 0 {
        s.write_all(format!("RDY {rdy}\n").as_bytes())
            .await
            .unwrap();
    }
    s
}
