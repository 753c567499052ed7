//! nsq-client's connection features against the real nsqd: TLS (custom CA, skip-verify),
//! snappy, deflate (a 10k burst must arrive without waiting for a heartbeat — the stall
//! tokio-nsq 0.14 has), and AUTH through a small fake auth HTTP server.

use std::time::{Duration, Instant};

use nsq_client::{Config, Consumer, Error, Producer, SignedDuration};
use nsq_integration_tests::certs::Pki;
use nsq_integration_tests::{find_channel, Nsqd};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

/// Publishes `n` messages and consumes them with `config` on both sides; returns how long
/// consuming took and the consumer's connection stats from nsqd.
async fn round_trip(nsqd: &Nsqd, topic: &str, n: usize, config: Config) -> (Duration, Value) {
    let addr = nsqd.tcp_addr.to_string();
    let producer = Producer::new(&addr, config.clone()).unwrap();
    let bodies: Vec<String> = (0..n).map(|i| format!("message {i}")).collect();
    for chunk in bodies.chunks(500) {
        producer.multi_publish(topic, chunk.to_vec()).await.unwrap();
    }
    let mut consumer = Consumer::new(topic, "ch", config).unwrap();
    let start = Instant::now();
    consumer.connect_to_nsqd(&addr).await.unwrap();
    let mut got = 0;
    timeout(Duration::from_secs(25), async {
        while got < n {
            let m = consumer.next().await.unwrap();
            assert_eq!(m.body().as_ref(), format!("message {got}").as_bytes());
            got += 1;
            m.finish();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{got} of {n} messages"));
    let took = start.elapsed();
    let stats = nsqd.stats();
    let client = find_channel(&stats, topic, "ch").unwrap()["clients"][0].clone();
    consumer.stop().await;
    (took, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_custom_ca_and_with_skip_verify() {
    let pki = Pki::new();
    let nsqd = Nsqd::start(&[
        &format!("--tls-cert={}", pki.server.cert_path()),
        &format!("--tls-key={}", pki.server.key_path()),
    ]);
    let mut config = Config {
        tls_v1: true,
        max_in_flight: 100,
        ..Config::default()
    };
    config.tls.root_ca_file = Some(pki.ca_path().into());
    let (_, client) = round_trip(&nsqd, "f_tls", 200, config).await;
    assert_eq!(client["tls"], true, "{client}");

    let mut skip = Config {
        tls_v1: true,
        ..Config::default()
    };
    skip.tls.insecure_skip_verify = true;
    Producer::new(nsqd.tcp_addr.to_string(), skip)
        .unwrap()
        .publish("f_tls", "skip")
        .await
        .unwrap();

    // Without the CA the handshake fails.
    let untrusted = Config {
        tls_v1: true,
        ..Config::default()
    };
    let e = Producer::new(nsqd.tcp_addr.to_string(), untrusted)
        .unwrap()
        .publish("f_tls", "x")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Tls(_)), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snappy_round_trip() {
    let nsqd = Nsqd::start(&[]);
    let config = Config {
        snappy: true,
        max_in_flight: 200,
        ..Config::default()
    };
    let (_, client) = round_trip(&nsqd, "f_snappy", 2000, config).await;
    assert_eq!(client["snappy"], true, "{client}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deflate_burst_arrives_without_waiting_for_a_heartbeat() {
    let nsqd = Nsqd::start(&[]);
    let config = Config {
        deflate: true,
        deflate_level: 6,
        max_in_flight: 2500,
        heartbeat_interval: SignedDuration::from_std(Duration::from_secs(30)),
        ..Config::default()
    };
    let (took, client) = round_trip(&nsqd, "f_deflate", 10_000, config).await;
    assert_eq!(client["deflate"], true, "{client}");
    // A stalled stream would only move on at the next heartbeat (30 s).
    assert!(took < Duration::from_secs(10), "10k messages took {took:?}");
}

/// A one-route HTTP server answering every `GET /auth?...` with `body`.
async fn fake_auth_server(body: &'static str) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_secret_is_sent_when_nsqd_requires_it() {
    let auth = fake_auth_server(
        r#"{"ttl":3600,"identity":"tester","identity_url":"","authorizations":[{"permissions":["subscribe","publish"],"topic":".*","channels":[".*"]}]}"#,
    )
    .await;
    let nsqd = Nsqd::start(&[&format!("--auth-http-address={auth}")]);
    let config = Config {
        auth_secret: Some("s3cret".into()),
        max_in_flight: 10,
        ..Config::default()
    };
    let (_, client) = round_trip(&nsqd, "f_auth", 10, config).await;
    assert_eq!(client["authed"], true, "{client}");
    assert_eq!(client["auth_identity"], "tester", "{client}");

    let e = Producer::new(nsqd.tcp_addr.to_string(), Config::default())
        .unwrap()
        .publish("f_auth", "x")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::AuthRequired), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_are_answered_so_idle_connections_stay_up() {
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    // nsqd closes a client that misses two heartbeats; 1 s is the smallest interval.
    let config = Config {
        heartbeat_interval: SignedDuration::from_std(Duration::from_secs(1)),
        read_timeout: Duration::from_secs(3),
        ..Config::default()
    };
    let producer = Producer::new(&addr, config.clone()).unwrap();
    producer.publish("f_hb", "1").await.unwrap();
    let mut consumer = Consumer::new("f_hb", "ch", config).unwrap();
    consumer.connect_to_nsqd(&addr).await.unwrap();
    let m = timeout(Duration::from_secs(5), consumer.next())
        .await
        .unwrap()
        .unwrap();
    m.finish();
    let connect_ts = |s: &Value| {
        let ch = find_channel(s, "f_hb", "ch").unwrap();
        ch["clients"][0]["connect_ts"].clone()
    };
    let producer_ts = |s: &Value| s["producers"][0]["connect_ts"].clone();
    let stats = nsqd.stats();
    let (before, producer_before) = (connect_ts(&stats), producer_ts(&stats));
    assert!(producer_before.is_number(), "{stats}");
    tokio::time::sleep(Duration::from_millis(3500)).await;
    producer.publish("f_hb", "2").await.unwrap();
    let m = timeout(Duration::from_secs(5), consumer.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.body().as_ref(), b"2");
    m.finish();
    // Same consumer connection as before the idle period, and the producer never redialed.
    let stats = nsqd.stats();
    assert_eq!(connect_ts(&stats), before);
    assert_eq!(producer_ts(&stats), producer_before);
    let t = nsq_integration_tests::find_topic(&nsqd.stats(), "f_hb")
        .unwrap()
        .clone();
    assert_eq!(t["message_count"], 2, "{t}");
    consumer.stop().await;
}
