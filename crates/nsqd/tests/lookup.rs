//! nsqd as an nsqlookupd client, against a fake lookupd speaking the V1 protocol (TCP) and
//! answering `/channels` (HTTP): IDENTIFY body, REGISTER replay, REGISTER/UNREGISTER on
//! changes, reconnection, and channel pre-creation for a new topic.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use nsq_protocol::lookup::{put_lookup_response, LookupCommand, LookupDecoder, LookupLimits};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the fake lookupd saw: one line per command (`IDENTIFY <json>`, `REGISTER t c`, ...).
type Log = Arc<Mutex<Vec<String>>>;

/// A fake lookupd: TCP V1 on one port, HTTP `/channels` on another. Each accepted TCP
/// connection is logged; `drop_after` closes a connection after that many commands.
async fn fake_lookupd(
    channels_json: &'static str,
    drop_after: Option<usize>,
) -> (String, nsq_testkit::FakeHttp, Log) {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = nsq_testkit::FakeHttp::start(200, channels_json).await;
    let tcp_addr = tcp.local_addr().unwrap().to_string();
    let http_port: u16 = http.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let log: Log = Arc::default();
    let l = log.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = tcp.accept().await.unwrap();
            let l = l.clone();
            tokio::spawn(async move {
                let mut magic = [0u8; 4];
                s.read_exact(&mut magic).await.unwrap();
                assert_eq!(&magic, b"  V1");
                let mut dec = LookupDecoder::new(LookupLimits::default());
                let mut buf = BytesMut::new();
                let mut n = 0;
                loop {
                    while let Some(cmd) = dec.decode(&mut buf, |_, _| Ok(())).unwrap() {
                        let (line, resp) = match cmd {
                            LookupCommand::Identify { body } => (
                                format!("IDENTIFY {}", String::from_utf8_lossy(&body)),
                                format!(
                                    r#"{{"broadcast_address":"127.0.0.1","hostname":"fake","http_port":{http_port},"tcp_port":1,"version":"1.3.0"}}"#
                                ),
                            ),
                            LookupCommand::Ping => ("PING".to_string(), "OK".to_string()),
                            LookupCommand::Register { topic, channel } => (
                                format!("REGISTER {topic} {}", channel.unwrap_or_default()),
                                "OK".into(),
                            ),
                            LookupCommand::Unregister { topic, channel } => (
                                format!("UNREGISTER {topic} {}", channel.unwrap_or_default()),
                                "OK".into(),
                            ),
                        };
                        l.lock().push(line.trim_end().to_string());
                        let mut out = BytesMut::new();
                        put_lookup_response(&mut out, resp.as_bytes());
                        s.write_all(&out).await.unwrap();
                        n += 1;
                        if drop_after == Some(n) {
                            return;
                        }
                    }
                    if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                        return;
                    }
                }
            });
        }
    });
    (tcp_addr, http, log)
}

async fn start(lookupd: &str) -> (nsqd::NsqdHandle, tempfile::TempDir) {
    common::start_with(&[
        "--broadcast-address=127.0.0.1".to_string(),
        format!("--lookupd-tcp-address={lookupd}"),
    ])
    .await
}

async fn wait_for(log: &Log, line: &str) {
    wait_until(log, |l| l == line, line).await
}

async fn wait_for_prefix(log: &Log, prefix: &str) {
    wait_until(log, |l| l.starts_with(prefix), prefix).await
}

async fn wait_until(log: &Log, f: impl Fn(&str) -> bool, line: &str) {
    for _ in 0..200 {
        if log.lock().iter().any(|l| f(l)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("lookupd never saw {line:?}; saw {:?}", log.lock());
}

#[tokio::test]
async fn identifies_registers_and_unregisters() {
    let (tcp, _http, log) = fake_lookupd(r#"{"channels":[]}"#, None).await;
    let (h, _d) = start(&tcp).await;
    wait_for_prefix(&log, "IDENTIFY ").await;
    let identify = log
        .lock()
        .iter()
        .find(|l| l.starts_with("IDENTIFY "))
        .cloned()
        .unwrap();
    let hostname = nsqd::options::hostname();
    assert_eq!(
        identify,
        format!(
            r#"IDENTIFY {{"broadcast_address":"127.0.0.1","hostname":"{hostname}","http_port":{},"tcp_port":{},"version":"1.3.0"}}"#,
            h.http_addr().unwrap().port(),
            h.tcp_addr().port()
        )
    );
    let t = h.nsqd.topic("lt1").await.unwrap();
    t.get_or_create_channel("c1").unwrap();
    t.get_or_create_channel("e#ephemeral").unwrap();
    t.delete_channel("c1");
    h.nsqd.engine.delete_topic("lt1");
    wait_for(&log, "UNREGISTER lt1 e#ephemeral").await;
    let seen: Vec<String> = log
        .lock()
        .iter()
        .filter(|l| !l.starts_with("IDENTIFY"))
        .cloned()
        .collect();
    assert_eq!(
        seen,
        [
            "REGISTER lt1",
            "REGISTER lt1 c1",
            "REGISTER lt1 e#ephemeral",
            "UNREGISTER lt1 c1",
            "UNREGISTER lt1",
            "UNREGISTER lt1 e#ephemeral"
        ]
    );
    h.shutdown().await;
}

#[tokio::test]
async fn reconnects_and_replays_registrations() {
    // The fake closes each connection after 3 commands (IDENTIFY + 2).
    let (tcp, _http, log) = fake_lookupd(r#"{"channels":[]}"#, Some(3)).await;
    let (h, _d) = start(&tcp).await;
    let t = h.nsqd.topic("r1").await.unwrap();
    t.get_or_create_channel("a").unwrap();
    wait_for(&log, "REGISTER r1 a").await;
    // This command hits the closed connection; the next one reconnects and replays.
    h.nsqd.topic("r2").await.unwrap();
    h.nsqd.topic("r3").await.unwrap();
    for _ in 0..200 {
        if log
            .lock()
            .iter()
            .filter(|l| l.starts_with("IDENTIFY"))
            .count()
            >= 2
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Every re-IDENTIFY (the fake keeps dropping connections, so there may be several, the
    // last one possibly still in progress) is followed by the replay of `r1 a`.
    let mut replayed = false;
    for _ in 0..200 {
        let l = log.lock().clone();
        let reidentified: Vec<usize> = l
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, x)| x.starts_with("IDENTIFY"))
            .map(|(i, _)| i)
            .collect();
        if reidentified
            .first()
            .is_some_and(|&i| l.get(i + 1).map(String::as_str) == Some("REGISTER r1 a"))
        {
            replayed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(replayed, "{:?}", log.lock());
    h.shutdown().await;
}

#[tokio::test]
async fn new_topic_gets_lookupd_channels_before_first_message() {
    let (tcp, http, log) = fake_lookupd(r#"{"channels":["pre1","pre2#ephemeral"]}"#, None).await;
    let (h, _d) = start(&tcp).await;
    wait_for_prefix(&log, "IDENTIFY ").await;
    // The HTTP address is learned from the IDENTIFY answer; give the task a moment.
    for _ in 0..100 {
        if !h.nsqd.lookup.http_addresses().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = h.nsqd.topic("fresh").await.unwrap();
    t.put(bytes::Bytes::from_static(b"m"), Duration::ZERO)
        .unwrap();
    let names: Vec<String> = t.channels().iter().map(|c| c.name().to_string()).collect();
    assert_eq!(names, ["pre1"]);
    assert_eq!(t.get_channel("pre1").unwrap().depth(), 1);
    wait_for(&log, "REGISTER fresh pre1").await;
    let asked = http.requests();
    assert!(
        asked
            .iter()
            .any(|r| r.starts_with("GET /channels?topic=fresh ")),
        "{asked:?}"
    );
    h.shutdown().await;
}
