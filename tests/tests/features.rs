//! Connection features and per-channel statistics, black-box against the real nsqd binary:
//!
//! * TLS (TCP spec §10.2) with an unmodified third-party client (crates.io `tokio-nsq` 0.14,
//!   which uses rustls 0.19): a CA-signed certificate, a self-signed certificate with
//!   `--tls-required=true` (stats then only over HTTPS), deflate inside TLS, and a client that
//!   trusts another CA failing its handshake.
//! * snappy and deflate (§10.3, §10.4) with tokio-nsq.
//! * End-to-end processing latency percentiles in `/stats` (internals §14, HTTP API §7.1).
//! * IDENTIFY `sample_rate` (§12.4) on a raw V2 connection.
//!
//! Every tokio-nsq round trip publishes 1000 messages (900 PUB + one MPUB of 100, ten of them
//! 100 kB so snappy needs several chunks per message) and consumes and FINs all of them.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nsq_integration_tests::certs::{CertFiles, Pki};
use nsq_integration_tests::{
    consume_all, curl, describe, find_channel, find_topic, have_program, http_get, int, Bytes,
    Nsqd, Value,
};
use nsq_protocol::command::Command;
use serde_json::json;
use tokio::time::timeout;
use tokio_nsq::{
    NSQChannel, NSQConfigShared, NSQConfigSharedCompression, NSQConfigSharedTLS, NSQConsumer,
    NSQConsumerConfig, NSQConsumerConfigSources, NSQDeflateLevel, NSQEvent, NSQProducer,
    NSQProducerConfig, NSQTopic,
};

/// Messages per tokio-nsq round trip.
const N: usize = 1000;

// ---------------------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------------------

/// A server certificate and key (PEM files for `--tls-cert`/`--tls-key`) and the certificate
/// a client must trust: a CA's, or the server certificate itself if self-signed. Made by the
/// test kit's [`Pki`] (removed with it).
struct ServerPki {
    _pki: Pki,
    server: CertFiles,
    trust: CertFiles,
}

impl ServerPki {
    fn cert_arg(&self) -> String {
        format!("--tls-cert={}", self.server.cert_path())
    }

    fn key_arg(&self) -> String {
        format!("--tls-key={}", self.server.key_path())
    }
}

/// A CA and a server certificate for `localhost`/`127.0.0.1` it signed.
fn ca_signed_pki() -> ServerPki {
    let pki = Pki::new();
    ServerPki {
        server: pki.server.clone(),
        trust: pki.ca.clone(),
        _pki: pki,
    }
}

/// A self-signed server certificate for `localhost`/`127.0.0.1` (the client trusts it
/// directly).
fn self_signed_pki() -> ServerPki {
    let pki = Pki::new();
    ServerPki {
        server: pki.stranger.clone(),
        trust: pki.stranger.clone(),
        _pki: pki,
    }
}

/// tokio-nsq TLS options whose rustls 0.19 config trusts exactly `trust_der`. The name checked
/// is `localhost`: webpki 0.21 (under rustls 0.19) only verifies DNS names, not IP addresses,
/// so the connection goes to 127.0.0.1 while the certificate is checked for `localhost`.
fn tls_trusting(trust_der: &[u8]) -> NSQConfigSharedTLS {
    let mut config = rustls::ClientConfig::new();
    config
        .root_store
        .add(&rustls::Certificate(trust_der.to_vec()))
        .expect("add trust anchor");
    NSQConfigSharedTLS::new("localhost")
        .set_required(true)
        .set_client_config(Arc::new(config))
}

// ---------------------------------------------------------------------------------------
// tokio-nsq round trip
// ---------------------------------------------------------------------------------------

/// Body `i` of a run tagged `tag`: unique, compressible, mostly 64..263 bytes, every 100th
/// (i % 100 == 7) 100 kB.
fn body(tag: &str, i: usize) -> Vec<u8> {
    let len = if i % 100 == 7 { 100_000 } else { 64 + i % 200 };
    let mut b = format!("{tag}-{i:04}-").into_bytes();
    let filler = format!("message {i} of the {tag} run; ");
    while b.len() < len {
        b.extend_from_slice(filler.as_bytes());
    }
    b.truncate(len);
    b
}

/// A producer with `shared` that has completed its handshake (including every upgrade).
async fn producer(nsqd: &Nsqd, shared: NSQConfigShared) -> NSQProducer {
    let mut p = NSQProducerConfig::new(nsqd.tcp_addr.to_string())
        .set_shared(shared)
        .build();
    let ev = timeout(Duration::from_secs(20), p.consume())
        .await
        .expect("producer handshake within 20 s");
    assert!(
        matches!(ev, Some(NSQEvent::Healthy())),
        "producer: expected Healthy, got {ev:?}"
    );
    p
}

/// How hard a round trip pushes: PUBs sent before waiting for their acks, and the
/// consumer's max_in_flight.
#[derive(Clone, Copy)]
struct Pace {
    pub_batch: usize,
    max_in_flight: u32,
}

/// Everything at once: 900 PUBs queued before the first ack is awaited, RDY 100.
const FULL_SPEED: Pace = Pace {
    pub_batch: 900,
    max_in_flight: 100,
};

/// For tokio-nsq's deflate layer (async-compression 0.3), which stalls under bursts, in both
/// directions, until the next 30 s heartbeat exchange pushes more bytes through it. Observed
/// through a logging proxy: the producer's encoder sent exactly 8192 compressed bytes (553
/// PUBs) and then nothing more until it answered a heartbeat 30 s later; the consumer's
/// decoder held back 56 messages nsqd had sent and sync-flushed (nsqd showed them in flight
/// and a zlib raw-inflate client receives the same traffic without any delay). Small bursts
/// avoid it.
const DEFLATE_PACE: Pace = Pace {
    pub_batch: 25,
    max_in_flight: 10,
};

/// tokio-nsq flushes its writes every 250 ms by default; with small bursts that dominates.
const DEFLATE_FLUSH: Duration = Duration::from_millis(10);

/// Waits for `n` publish acknowledgements.
async fn await_acks(p: &mut NSQProducer, n: usize) {
    for acks in 0..n {
        match timeout(Duration::from_secs(30), p.consume()).await {
            Ok(Some(NSQEvent::Ok())) => {}
            Ok(other) => panic!("producer: expected Ok after {acks} acks, got {other:?}"),
            Err(_) => panic!("producer: only {acks} of {n} acks within 30 s"),
        }
    }
}

/// Publishes `N` messages with a producer using `shared` (900 PUB, one MPUB of 100) and
/// consumes them on channel `ch` with a consumer using `shared`, FINing each one and checking
/// every body arrives exactly once. Returns both clients still connected (for `/stats`).
async fn publish_and_consume(
    nsqd: &Nsqd,
    topic_name: &str,
    shared: NSQConfigShared,
    pace: Pace,
) -> (NSQProducer, NSQConsumer) {
    let started = Instant::now();
    let topic = NSQTopic::new(topic_name).expect("topic name");
    let mut cons = NSQConsumerConfig::new(topic.clone(), NSQChannel::new("ch").expect("channel"))
        .set_max_in_flight(pace.max_in_flight)
        .set_sources(NSQConsumerConfigSources::Daemons(vec![nsqd
            .tcp_addr
            .to_string()]))
        .set_shared(shared.clone())
        .build();
    let mut prod = producer(nsqd, shared).await;

    let mut unacked = 0;
    for i in 0..900 {
        prod.publish(&topic, body(topic_name, i))
            .await
            .expect("queue PUB");
        unacked += 1;
        if unacked == pace.pub_batch {
            await_acks(&mut prod, unacked).await;
            unacked = 0;
        }
    }
    prod.publish_multiple(&topic, (900..N).map(|i| body(topic_name, i)).collect())
        .await
        .expect("queue MPUB");
    await_acks(&mut prod, unacked + 1).await;
    eprintln!("{topic_name}: published {N} in {:?}", started.elapsed());

    let expected: HashSet<Vec<u8>> = (0..N).map(|i| body(topic_name, i)).collect();
    let mut seen: HashSet<Vec<u8>> = HashSet::with_capacity(N);
    while seen.len() < N {
        let msg = timeout(Duration::from_secs(30), cons.consume_filtered())
            .await
            .unwrap_or_else(|_| panic!("only {} of {N} messages within 30 s", seen.len()))
            .expect("consumer stream ended");
        let preview = String::from_utf8_lossy(&msg.body[..msg.body.len().min(40)]).into_owned();
        assert!(
            expected.contains(&msg.body),
            "unexpected or corrupted body ({} bytes) {preview:?}",
            msg.body.len()
        );
        assert_eq!(msg.attempt, 1, "redelivery of {preview:?}");
        assert!(
            seen.insert(msg.body.clone()),
            "duplicate delivery of {preview:?}"
        );
        msg.finish().await;
    }
    eprintln!("{topic_name}: round trip of {N} in {:?}", started.elapsed());
    (prod, cons)
}

/// [`publish_and_consume`], then waits (over plain HTTP `/stats`) for the channel to drain and
/// checks the topic and channel counters.
async fn roundtrip(
    nsqd: &Nsqd,
    topic_name: &str,
    shared: NSQConfigShared,
    pace: Pace,
) -> (NSQProducer, NSQConsumer) {
    let clients = publish_and_consume(nsqd, topic_name, shared, pace).await;
    let stats = nsqd.wait_stats(
        &format!("{topic_name}/ch to drain"),
        Duration::from_secs(20),
        |s| {
            find_channel(s, topic_name, "ch")
                .is_some_and(|c| int(c, "depth") == 0 && int(c, "in_flight_count") == 0)
        },
    );
    let t = find_topic(&stats, topic_name).expect("topic in /stats");
    assert_eq!(int(t, "message_count"), N as i64);
    let expected_bytes: i64 = (0..N).map(|i| body(topic_name, i).len() as i64).sum();
    assert_eq!(int(t, "message_bytes"), expected_bytes);
    let c = find_channel(&stats, topic_name, "ch").expect("channel in /stats");
    assert_eq!(int(c, "message_count"), N as i64);
    assert_eq!(int(c, "requeue_count"), 0);
    assert_eq!(int(c, "timeout_count"), 0);
    clients
}

/// The consumer (the only client of `topic/ch`) and the producer (the only entry of
/// `producers`) in a `/stats` document.
fn tokio_nsq_clients(stats: &Value, topic: &str) -> (Value, Value) {
    let c = find_channel(stats, topic, "ch").expect("channel in /stats");
    let clients = c["clients"].as_array().expect("clients array");
    assert_eq!(clients.len(), 1, "one consumer on {topic}/ch: {c}");
    let producers = stats["producers"].as_array().expect("producers array");
    assert_eq!(producers.len(), 1, "one producer: {}", stats["producers"]);
    let (consumer, producer) = (clients[0].clone(), producers[0].clone());
    for (what, cl) in [("consumer", &consumer), ("producer", &producer)] {
        assert!(
            cl["user_agent"]
                .as_str()
                .is_some_and(|ua| ua.starts_with("tokio_nsq/")),
            "{what} user_agent: {cl}"
        );
    }
    assert_eq!(int(&consumer, "finish_count"), N as i64, "{consumer}");
    (consumer, producer)
}

/// Asserts the TLS fields of a client object describe an upgraded connection.
fn assert_tls_client(what: &str, cl: &Value) {
    assert_eq!(cl["tls"], json!(true), "{what}: {cl}");
    let version = cl["tls_version"].as_str().unwrap_or("");
    assert!(
        version == "TLS1.2" || version == "TLS1.3",
        "{what}: tls_version {version:?} (rustls 0.19 speaks TLS 1.2 and 1.3): {cl}"
    );
    assert!(
        cl["tls_cipher_suite"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{what}: tls_cipher_suite: {cl}"
    );
    assert_eq!(
        cl["tls_negotiated_protocol_is_mutual"],
        json!(true),
        "{what}: {cl}"
    );
}

/// Asserts the compression flags of a client object.
fn assert_compression(what: &str, cl: &Value, snappy: bool, deflate: bool) {
    assert_eq!(
        (&cl["snappy"], &cl["deflate"]),
        (&json!(snappy), &json!(deflate)),
        "{what} (snappy, deflate): {cl}"
    );
}

// ---------------------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_nsq_over_tls_with_a_ca_signed_certificate() {
    let pki = ca_signed_pki();
    let nsqd = start_tls(&pki, &[]);

    let shared = NSQConfigShared::new().set_tls(tls_trusting(&pki.trust.der));
    let (prod, cons) = roundtrip(&nsqd, "feat_tls", shared, FULL_SPEED).await;

    let stats = nsqd.stats();
    let (consumer, producer) = tokio_nsq_clients(&stats, "feat_tls");
    assert_tls_client("consumer", &consumer);
    assert_tls_client("producer", &producer);
    assert_compression("consumer", &consumer, false, false);
    eprintln!(
        "TLS: consumer {} {}, producer {} {}",
        consumer["tls_version"],
        consumer["tls_cipher_suite"],
        producer["tls_version"],
        producer["tls_cipher_suite"]
    );
    drop((prod, cons));

    // TLS is optional here: a plaintext connection still publishes, and shows tls false.
    let mut plain = nsqd.connect();
    plain.publish("feat_tls_plain", b"plaintext");
    let stats = nsqd.stats();
    let producers = stats["producers"].as_array().expect("producers");
    let p = producers
        .iter()
        .find(|p| p["pub_counts"].to_string().contains("feat_tls_plain"))
        .unwrap_or_else(|| panic!("plaintext producer in {}", stats["producers"]));
    assert_eq!(
        (&p["tls"], &p["tls_version"], &p["tls_cipher_suite"]),
        (&json!(false), &json!(""), &json!("")),
        "{p}"
    );

    // A client trusting a different CA must fail the handshake (the certificate really is
    // verified, not accepted blindly).
    let other = ca_signed_pki();
    let mut bad = NSQProducerConfig::new(nsqd.tcp_addr.to_string())
        .set_shared(NSQConfigShared::new().set_tls(tls_trusting(&other.trust.der)))
        .build();
    // tokio-nsq 0.14 never delivers its `Unhealthy` event (the send future is not awaited),
    // so the check is that no `Healthy` arrives.
    if let Ok(ev) = timeout(Duration::from_secs(3), bad.consume()).await {
        panic!("a client trusting another CA must not complete the handshake, got {ev:?}");
    }
}

/// Deflate runs inside TLS (§10.1: TLS first, then compression).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_nsq_deflate_inside_tls() {
    let pki = ca_signed_pki();
    let nsqd = start_tls(&pki, &[]);
    let shared = NSQConfigShared::new()
        .set_tls(tls_trusting(&pki.trust.der))
        .set_compression(NSQConfigSharedCompression::Deflate(
            NSQDeflateLevel::new(5).expect("level"),
        ))
        .set_flush_interval(DEFLATE_FLUSH);
    let (_prod, _cons) = roundtrip(&nsqd, "feat_tls_deflate", shared, DEFLATE_PACE).await;
    let stats = nsqd.stats();
    let (consumer, producer) = tokio_nsq_clients(&stats, "feat_tls_deflate");
    for (what, cl) in [("consumer", &consumer), ("producer", &producer)] {
        assert_tls_client(what, cl);
        assert_compression(what, cl, false, true);
    }
}

/// The `--https-address` port, from the daemon's `HTTPS: listening on <addr>` log line
/// (which may be logged a moment after the lines `Nsqd::start` waits for).
fn https_port_from_log(nsqd: &Nsqd) -> u16 {
    let marker = "HTTPS: listening on ";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = nsqd.log();
        let found = log.iter().find_map(|line| {
            let at = line.find(marker)?;
            line[at + marker.len()..]
                .trim()
                .parse::<std::net::SocketAddr>()
                .ok()
        });
        if let Some(addr) = found {
            return addr.port();
        }
        assert!(
            Instant::now() < deadline,
            "no {marker:?} line in the log: {log:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// nsqd with the certificate of `pki`, an HTTPS listener on an ephemeral port (the default
/// 0.0.0.0:4152 would collide between tests) and `extra` flags.
fn start_tls(pki: &ServerPki, extra: &[&str]) -> Nsqd {
    let (cert, key) = (pki.cert_arg(), pki.key_arg());
    let mut args = vec![cert.as_str(), key.as_str(), "--https-address=127.0.0.1:0"];
    args.extend_from_slice(extra);
    Nsqd::start(&args)
}

/// `--tls-required=true` with a self-signed certificate: plaintext TCP commands are refused,
/// plain HTTP answers 403 TLS_REQUIRED, tokio-nsq works over TLS, and `/stats` (fetched over
/// HTTPS with curl, trusting the certificate) shows both clients with TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_nsq_with_tls_required_and_a_self_signed_certificate() {
    let pki = self_signed_pki();
    let nsqd = start_tls(&pki, &["--tls-required=true"]);

    // Plaintext TCP: everything but IDENTIFY is refused (TCP spec §8).
    let mut plain = nsqd.connect();
    plain.send(&[Command::Pub {
        topic: "feat_tls_req".into(),
        body: Bytes::from_static(b"plaintext"),
    }]);
    plain.expect_fatal(b"E_INVALID cannot PUB in current state (TLS required)");

    // Plain HTTP: 403 TLS_REQUIRED (HTTP API §1.7; the port it advertises is checked by
    // `tls_required_403_advertises_the_https_port`).
    let r = http_get(nsqd.http_addr, "/stats?format=json");
    assert_eq!(r.status, 403, "plain HTTP /stats: {}", r.text());
    let body: Value =
        serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("403 body {:?}: {e}", r.text()));
    assert_eq!(body["message"], "TLS_REQUIRED", "{body}");

    // tokio-nsq over TLS: every message delivered exactly once (the counters are checked
    // through /stats in the other TLS tests; here /stats is only reachable over HTTPS, see
    // `tls_required_stats_over_https`).
    let shared = NSQConfigShared::new().set_tls(tls_trusting(&pki.trust.der));
    let (_prod, _cons) = publish_and_consume(&nsqd, "feat_tls_req", shared, FULL_SPEED).await;
}

/// HTTP API §1.7: with `--tls-required=true` only the plain listener answers 403; the HTTPS
/// listener serves the API, so `/stats` there shows a TLS producer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_required_stats_over_https() {
    assert!(have_program("curl"), "this test needs curl");
    let pki = self_signed_pki();
    let nsqd = start_tls(&pki, &["--tls-required=true"]);
    let shared = NSQConfigShared::new().set_tls(tls_trusting(&pki.trust.der));
    let topic = NSQTopic::new("feat_https").expect("topic");
    let mut prod = producer(&nsqd, shared).await;
    prod.publish(&topic, b"over tls".to_vec())
        .await
        .expect("queue PUB");
    await_acks(&mut prod, 1).await;

    let base = format!("https://127.0.0.1:{}", https_port_from_log(&nsqd));
    let trust = pki.trust.cert_path();
    let ping = curl(&["--cacert", trust, &format!("{base}/ping")]);
    assert_eq!(ping, "OK", "HTTPS /ping");
    let text = curl(&["--cacert", trust, &format!("{base}/stats?format=json")]);
    let stats: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("HTTPS /stats {text:?}: {e}"));
    assert_eq!(
        int(
            find_topic(&stats, "feat_https").expect("topic"),
            "message_count"
        ),
        1,
        "{stats}"
    );
    let producers = stats["producers"].as_array().expect("producers");
    assert_eq!(producers.len(), 1, "{stats}");
    assert_tls_client("producer", &producers[0]);
    // Prometheus /metrics is served over HTTPS too (nsqd::metrics).
    let metrics = curl(&["--cacert", trust, &format!("{base}/metrics")]);
    assert!(
        metrics.contains("\nnsq_topic_messages_total{topic=\"feat_https\"} 1\n"),
        "HTTPS /metrics: {metrics}"
    );
}

/// HTTP API §1.7: with `--tls-required=true` the plain listener's 403 body carries the port
/// the HTTPS listener actually listens on (Go: `RealHTTPSAddr().Port`).
#[test]
fn tls_required_403_advertises_the_https_port() {
    let pki = self_signed_pki();
    let nsqd = start_tls(&pki, &["--tls-required=true"]);
    let https_port = https_port_from_log(&nsqd);
    let r = http_get(nsqd.http_addr, "/ping");
    assert_eq!(r.status, 403, "plain HTTP /ping: {}", r.text());
    assert_eq!(
        r.text(),
        format!(r#"{{"message": "TLS_REQUIRED", "https_port": {https_port}}}"#),
        "403 body while HTTPS listens on port {https_port}"
    );
}

// ---------------------------------------------------------------------------------------
// Compression
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_nsq_with_snappy() {
    let nsqd = Nsqd::start(&[]);
    let shared = NSQConfigShared::new().set_compression(NSQConfigSharedCompression::Snappy);
    let (_prod, _cons) = roundtrip(&nsqd, "feat_snappy", shared, FULL_SPEED).await;
    let stats = nsqd.stats();
    let (consumer, producer) = tokio_nsq_clients(&stats, "feat_snappy");
    for (what, cl) in [("consumer", &consumer), ("producer", &producer)] {
        assert_compression(what, cl, true, false);
        assert_eq!(cl["tls"], json!(false), "{what}: {cl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_nsq_with_deflate() {
    let nsqd = Nsqd::start(&[]);
    let shared = NSQConfigShared::new()
        .set_compression(NSQConfigSharedCompression::Deflate(
            NSQDeflateLevel::new(3).expect("level"),
        ))
        .set_flush_interval(DEFLATE_FLUSH);
    let (_prod, _cons) = roundtrip(&nsqd, "feat_deflate", shared, DEFLATE_PACE).await;
    let stats = nsqd.stats();
    let (consumer, producer) = tokio_nsq_clients(&stats, "feat_deflate");
    for (what, cl) in [("consumer", &consumer), ("producer", &producer)] {
        assert_compression(what, cl, false, true);
        assert_eq!(cl["tls"], json!(false), "{what}: {cl}");
    }
}

// ---------------------------------------------------------------------------------------
// End-to-end processing latency
// ---------------------------------------------------------------------------------------

/// Asserts an `e2e_processing_latency` object has `count` samples and one entry per quantile
/// of `quantiles`, in that order, with `quantile` then `value` keys. With samples the values
/// are positive and non-increasing (value(1.0) >= value(0.99) >= value(0.5) > 0); without
/// they are all 0.
fn assert_e2e(what: &str, e2e: &Value, count: i64, quantiles: &[f64]) {
    assert_eq!(int(e2e, "count"), count, "{what} count: {e2e}");
    let ps = e2e["percentiles"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: percentiles must be an array: {e2e}"));
    let got: Vec<f64> = ps
        .iter()
        .map(|p| p["quantile"].as_f64().expect("quantile"))
        .collect();
    assert_eq!(got, quantiles, "{what} quantiles in order: {e2e}");
    for p in ps {
        let keys: Vec<&String> = p.as_object().expect("percentile object").keys().collect();
        assert_eq!(keys, ["quantile", "value"], "{what}: {p}");
    }
    let values: Vec<f64> = ps
        .iter()
        .map(|p| p["value"].as_f64().expect("value"))
        .collect();
    if count == 0 {
        assert!(values.iter().all(|v| *v == 0.0), "{what}: {e2e}");
    } else {
        assert!(
            values.windows(2).all(|w| w[0] >= w[1]) && values.iter().all(|v| *v > 0.0),
            "{what}: expected value(q) positive and non-increasing in q order: {e2e}"
        );
    }
}

/// Publishes `n` messages to `topic` over TCP (MPUBs of 100).
fn publish_n(nsqd: &Nsqd, topic: &str, n: usize) {
    let mut p = nsqd.connect();
    let bodies: Vec<Bytes> = (0..n)
        .map(|i| Bytes::from(format!("{topic}-{i:04}")))
        .collect();
    for chunk in bodies.chunks(100) {
        p.mpublish(topic, chunk.to_vec());
    }
}

#[test]
fn e2e_processing_latency_percentiles_in_stats() {
    let nsqd = Nsqd::start(&["--e2e-processing-latency-percentile=1.0,0.99,0.5"]);
    let q = [1.0, 0.99, 0.5];

    let r = http_get(nsqd.http_addr, "/config/e2e_processing_latency_percentiles");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!([1, 0.99, 0.5]), "{}", r.text());

    nsqd.http_ok("/topic/create?topic=e2e_nochan");
    nsqd.http_ok("/topic/create?topic=e2e");
    for ch in ["ch1", "ch2", "idle"] {
        nsqd.http_ok(&format!("/channel/create?topic=e2e&channel={ch}"));
    }
    publish_n(&nsqd, "e2e", 200);
    std::thread::sleep(Duration::from_millis(50));
    for ch in ["ch1", "ch2"] {
        let got = consume_all(nsqd.tcp_addr, "e2e", ch, 50, 200, Duration::from_secs(30));
        let distinct: HashSet<&Bytes> = got.iter().map(|(b, _)| b).collect();
        assert_eq!(distinct.len(), 200, "consumed on e2e/{ch}");
    }

    let stats = nsqd.wait_stats(
        "200 latency samples on e2e/ch1 and e2e/ch2",
        Duration::from_secs(20),
        |s| {
            ["ch1", "ch2"].iter().all(|ch| {
                find_channel(s, "e2e", ch).is_some_and(|c| {
                    c["e2e_processing_latency"]["count"].as_i64() == Some(200)
                        && int(c, "in_flight_count") == 0
                })
            })
        },
    );
    for ch in ["ch1", "ch2"] {
        let c = find_channel(&stats, "e2e", ch).expect("channel");
        assert_e2e(&format!("e2e/{ch}"), &c["e2e_processing_latency"], 200, &q);
    }
    // A channel that received the messages but never FINed one: count 0, values 0.
    let idle = find_channel(&stats, "e2e", "idle").expect("idle channel");
    assert_eq!(int(idle, "depth"), 200);
    assert_e2e("e2e/idle", &idle["e2e_processing_latency"], 0, &q);
    // The topic merges its channels' samples.
    let t = find_topic(&stats, "e2e").expect("topic e2e");
    assert_e2e("topic e2e", &t["e2e_processing_latency"], 400, &q);
    // A topic without channels has no percentiles at all.
    let nochan = find_topic(&stats, "e2e_nochan").expect("topic e2e_nochan");
    assert_eq!(
        nochan["e2e_processing_latency"],
        json!({"count": 0, "percentiles": null}),
        "{nochan}"
    );

    // Go's float format: the integral quantile 1 is printed as `1`, not `1.0`.
    let raw = http_get(nsqd.http_addr, "/stats?format=json").text();
    assert!(
        raw.contains(r#"{"quantile":1,"value":"#) && !raw.contains(r#""quantile":1.0"#),
        "quantile 1 must print as 1: {raw}"
    );
}

/// The flag may be repeated; the values are merged and sorted descending.
#[test]
fn e2e_percentile_flag_repeats_merge_and_sort_descending() {
    let nsqd = Nsqd::start(&[
        "--e2e-processing-latency-percentile=0.5",
        "--e2e-processing-latency-percentile=1.0,0.99",
    ]);
    let r = http_get(nsqd.http_addr, "/config/e2e_processing_latency_percentiles");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!([1, 0.99, 0.5]), "{}", r.text());

    nsqd.http_ok("/topic/create?topic=e2e_rep");
    nsqd.http_ok("/channel/create?topic=e2e_rep&channel=ch");
    publish_n(&nsqd, "e2e_rep", 10);
    let got = consume_all(
        nsqd.tcp_addr,
        "e2e_rep",
        "ch",
        10,
        10,
        Duration::from_secs(30),
    );
    assert_eq!(got.len(), 10);
    let stats = nsqd.wait_stats("10 samples on e2e_rep/ch", Duration::from_secs(20), |s| {
        find_channel(s, "e2e_rep", "ch")
            .is_some_and(|c| c["e2e_processing_latency"]["count"].as_i64() == Some(10))
    });
    let c = find_channel(&stats, "e2e_rep", "ch").expect("channel");
    assert_e2e(
        "e2e_rep/ch",
        &c["e2e_processing_latency"],
        10,
        &[1.0, 0.99, 0.5],
    );
}

/// Without the flag every topic and channel reports `{"count":0,"percentiles":null}`, even
/// after messages were consumed and FINed.
#[test]
fn e2e_latency_is_null_without_the_flag() {
    let nsqd = Nsqd::start(&[]);
    let r = http_get(nsqd.http_addr, "/config/e2e_processing_latency_percentiles");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!([]), "{}", r.text());

    nsqd.http_ok("/topic/create?topic=e2e_off_nochan");
    nsqd.http_ok("/topic/create?topic=e2e_off");
    nsqd.http_ok("/channel/create?topic=e2e_off&channel=ch");
    nsqd.http_ok("/channel/create?topic=e2e_off&channel=idle");
    publish_n(&nsqd, "e2e_off", 20);
    let got = consume_all(
        nsqd.tcp_addr,
        "e2e_off",
        "ch",
        20,
        20,
        Duration::from_secs(30),
    );
    assert_eq!(got.len(), 20);
    let stats = nsqd.wait_stats("e2e_off/ch to drain", Duration::from_secs(20), |s| {
        find_channel(s, "e2e_off", "ch")
            .is_some_and(|c| int(c, "in_flight_count") == 0 && int(c, "depth") == 0)
    });
    let null = json!({"count": 0, "percentiles": null});
    let topics = stats["topics"].as_array().expect("topics");
    assert_eq!(topics.len(), 2, "{}", stats["topics"]);
    for t in topics {
        assert_eq!(
            t["e2e_processing_latency"], null,
            "topic {}",
            t["topic_name"]
        );
        for c in t["channels"].as_array().expect("channels") {
            assert_eq!(
                c["e2e_processing_latency"], null,
                "channel {}/{}",
                t["topic_name"], c["channel_name"]
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// sample_rate
// ---------------------------------------------------------------------------------------

/// IDENTIFY `sample_rate: 10`: about 11% of the messages are delivered; the others are
/// consumed from the channel without delivery (not in flight, not requeued), so the channel
/// drains completely.
#[test]
fn identify_sample_rate_delivers_a_sample_and_drains_the_channel() {
    let nsqd = Nsqd::start(&[]);
    let mut c = nsqd.connect();
    let f = c.identify(r#"{"feature_negotiation":true,"sample_rate":10}"#);
    assert_eq!(f.frame_type, 0, "IDENTIFY: {}", describe(&f));
    let resp: Value = serde_json::from_slice(&f.data)
        .unwrap_or_else(|e| panic!("IDENTIFY response {}: {e}", describe(&f)));
    assert_eq!(resp["sample_rate"], json!(10), "{resp}");
    c.subscribe("sampled", "ch");
    c.rdy(1000);

    publish_n(&nsqd, "sampled", 1000);

    let mut received: HashSet<Bytes> = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let batch = c.messages(Duration::from_millis(500));
        c.fin_all(batch.iter().map(|m| &m.id));
        let idle = batch.is_empty();
        for m in batch {
            assert_eq!(m.attempts, 1, "sampled messages are delivered once");
            assert!(received.insert(m.body), "duplicate delivery");
        }
        if idle {
            let drained = nsqd.channel_stats("sampled", "ch").is_some_and(|ch| {
                int(&ch, "message_count") == 1000
                    && int(&ch, "depth") == 0
                    && int(&ch, "in_flight_count") == 0
            });
            if drained {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "channel did not drain within 30 s; received {}; stats {:?}",
            received.len(),
            nsqd.channel_stats("sampled", "ch")
        );
    }
    let n = received.len();
    eprintln!("sample_rate 10: {n} of 1000 delivered");
    assert!(
        20 < n && n < 300,
        "sample_rate 10 delivered {n} of 1000 (expected about 110)"
    );

    let ch = nsqd.channel_stats("sampled", "ch").expect("channel");
    assert_eq!(int(&ch, "depth"), 0, "{ch}");
    assert_eq!(int(&ch, "deferred_count"), 0, "{ch}");
    assert_eq!(int(&ch, "requeue_count"), 0, "{ch}");
    assert_eq!(int(&ch, "timeout_count"), 0, "{ch}");
    let clients = ch["clients"].as_array().expect("clients");
    assert_eq!(clients.len(), 1, "{ch}");
    let cl = &clients[0];
    assert_eq!(int(cl, "sample_rate"), 10, "{cl}");
    assert_eq!(int(cl, "message_count"), n as i64, "{cl}");
    assert_eq!(int(cl, "finish_count"), n as i64, "{cl}");
    assert_eq!(int(cl, "in_flight_count"), 0, "{cl}");

    // Nothing is left for a second consumer on the same channel.
    drop(c);
    let mut late = nsqd.connect();
    late.subscribe("sampled", "ch");
    late.rdy(10);
    assert!(
        late.try_message(Duration::from_millis(500)).is_none(),
        "sampled-out messages must not be redelivered"
    );
}
