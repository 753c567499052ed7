//! nsq-client against the real nsqd and nsqlookupd binaries: exactly-once delivery of 100k
//! messages, REQ delay and attempts, TOUCH past the message timeout, max_in_flight 1 over three
//! nsqd, lookupd discovery (a node that appears, a node that leaves), graceful stop, an nsqd
//! killed mid-stream, producer error codes and reconnects.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nsq_client::{Config, Consumer, ErrorCode, Message, Producer};
use nsq_integration_tests::{int, Nsqd, Nsqlookupd};
use tokio::time::timeout;

/// Fast RDY redistribution and reconnects, so tests do not wait go-nsq's default seconds.
fn fast_config(max_in_flight: usize) -> Config {
    Config {
        max_in_flight,
        lookupd_poll_interval: Duration::from_millis(300),
        lookupd_poll_jitter: 0.0,
        rdy_redistribute_interval: Duration::from_millis(50),
        low_rdy_idle_timeout: Duration::from_millis(200),
        low_rdy_timeout: Duration::from_millis(400),
        backoff_multiplier: Duration::from_millis(20),
        stop_timeout: Duration::from_secs(10),
        ..Config::default()
    }
}

async fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn publish_numbered(p: &Producer, topic: &str, range: std::ops::Range<usize>) {
    let all: Vec<usize> = range.collect();
    for chunk in all.chunks(1000) {
        let bodies: Vec<String> = chunk.iter().map(|i| i.to_string()).collect();
        p.multi_publish(topic, bodies).await.expect("MPUB");
    }
}

/// Stops `consumer` while finishing whatever it still delivers, until the stream ends.
async fn stop_draining(mut consumer: Consumer) {
    let stop = consumer.stop_handle();
    let stopping = tokio::spawn(async move { stop.stop().await });
    timeout(Duration::from_secs(5), async {
        while let Some(m) = consumer.next().await {
            m.finish();
        }
    })
    .await
    .expect("the stream ends after stop");
    stopping.await.unwrap();
}

fn number(m: &Message) -> usize {
    std::str::from_utf8(m.body()).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_messages_exactly_once() {
    const N: usize = 100_000;
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    let producer = Producer::new(&addr, Config::default()).unwrap();
    // Half by MPUB, half by PUB from 8 tasks sharing the producer.
    publish_numbered(&producer, "c_once", 0..N / 2).await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let p = producer.clone();
        tasks.push(tokio::spawn(async move {
            for i in (N / 2 + t..N).step_by(8) {
                p.publish("c_once", i.to_string()).await.expect("PUB");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }

    let mut consumer = Consumer::new("c_once", "ch", fast_config(500)).unwrap();
    consumer.connect_to_nsqd(&addr).await.unwrap();
    let mut seen = vec![false; N];
    let mut count = 0;
    timeout(Duration::from_secs(60), async {
        while count < N {
            let m = consumer.next().await.expect("stream ended");
            let i = number(&m);
            assert!(!seen[i], "message {i} delivered twice");
            seen[i] = true;
            count += 1;
            m.finish();
        }
    })
    .await
    .expect("100k messages in time");
    // Nothing more arrives, and nsqd has nothing left in flight.
    assert!(timeout(Duration::from_millis(300), consumer.next())
        .await
        .is_err());
    consumer.stop().await;
    let ch = nsqd.channel_stats("c_once", "ch").unwrap();
    assert_eq!(int(&ch, "depth"), 0, "{ch}");
    assert_eq!(int(&ch, "in_flight_count"), 0, "{ch}");
    assert_eq!(int(&ch, "message_count"), N as i64, "{ch}");
    assert_eq!(int(&ch, "requeue_count"), 0, "{ch}");
    assert_eq!(consumer.stats().messages_finished, N as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_errors_carry_the_code_and_the_next_call_reconnects() {
    let nsqd = Nsqd::start(&[]);
    let producer = Producer::new(nsqd.tcp_addr.to_string(), Config::default()).unwrap();
    producer.publish("c_err", "ok").await.unwrap();
    let e = producer.publish("bad!topic", "x").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadTopic), "{e}");
    assert!(e.to_string().starts_with("E_BAD_TOPIC"), "{e}");
    // nsqd closed the connection after the fatal error; the next call dials again.
    producer.publish("c_err", "again").await.unwrap();
    producer
        .deferred_publish("c_err", Duration::from_millis(10), "later")
        .await
        .unwrap();
    let e = producer
        .multi_publish("c_err", Vec::<&[u8]>::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadBody), "{e}");
    producer.publish("c_err", "third").await.unwrap();
    let t = nsqd.topic_stats("c_err").unwrap();
    assert_eq!(int(&t, "message_count"), 4, "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_with_delay_counts_attempts() {
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    Producer::new(&addr, Config::default())
        .unwrap()
        .publish("c_req", "m")
        .await
        .unwrap();
    let mut consumer = Consumer::new("c_req", "ch", fast_config(1)).unwrap();
    consumer.connect_to_nsqd(&addr).await.unwrap();
    let m = timeout(Duration::from_secs(10), consumer.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.attempts(), 1);
    let requeued = Instant::now();
    m.requeue_without_backoff(Some(Duration::from_millis(400)));
    let m = timeout(Duration::from_secs(10), consumer.next())
        .await
        .unwrap()
        .unwrap();
    assert!(requeued.elapsed() >= Duration::from_millis(350));
    assert_eq!(m.attempts(), 2);
    m.finish();
    consumer.stop().await;
    let ch = nsqd.channel_stats("c_req", "ch").unwrap();
    assert_eq!(int(&ch, "requeue_count"), 1, "{ch}");
    assert_eq!(int(&ch, "deferred_count"), 0, "{ch}");
    assert_eq!(consumer.stats().messages_requeued, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touch_keeps_a_message_past_its_timeout() {
    let nsqd = Nsqd::start(&["--msg-timeout=1s"]);
    let addr = nsqd.tcp_addr.to_string();
    Producer::new(&addr, Config::default())
        .unwrap()
        .publish("c_touch", "m")
        .await
        .unwrap();
    let mut consumer = Consumer::new("c_touch", "ch", fast_config(1)).unwrap();
    consumer.connect_to_nsqd(&addr).await.unwrap();
    let m = timeout(Duration::from_secs(10), consumer.next())
        .await
        .unwrap()
        .unwrap();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        m.touch();
    }
    m.finish();
    // Held 2.5 s with a 1 s timeout: no timeout, no redelivery.
    assert!(timeout(Duration::from_millis(500), consumer.next())
        .await
        .is_err());
    consumer.stop().await;
    let ch = nsqd.channel_stats("c_touch", "ch").unwrap();
    assert_eq!(int(&ch, "timeout_count"), 0, "{ch}");
    assert_eq!(int(&ch, "message_count"), 1, "{ch}");
    assert_eq!(int(&ch, "depth"), 0, "{ch}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_one_over_three_nsqd_reaches_every_node() {
    let nodes = [Nsqd::start(&[]), Nsqd::start(&[]), Nsqd::start(&[])];
    for (n, nsqd) in nodes.iter().enumerate() {
        let p = Producer::new(nsqd.tcp_addr.to_string(), Config::default()).unwrap();
        publish_numbered(&p, "c_mif", n * 100..n * 100 + 5).await;
    }
    let mut consumer = Consumer::new("c_mif", "ch", fast_config(1)).unwrap();
    for nsqd in &nodes {
        consumer
            .connect_to_nsqd(nsqd.tcp_addr.to_string())
            .await
            .unwrap();
    }
    let mut seen = HashSet::new();
    timeout(Duration::from_secs(30), async {
        while seen.len() < 15 {
            let m = consumer.next().await.unwrap();
            seen.insert(number(&m));
            m.finish();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("only got {seen:?}"));
    assert_eq!(consumer.stats().connections, 3);
    consumer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookupd_discovers_a_new_nsqd_and_drops_one_that_leaves() {
    let lookupd = Nsqlookupd::start(&[]);
    let lookup_arg = format!("--lookupd-tcp-address={}", lookupd.tcp_addr);
    let reg = ["--broadcast-address=127.0.0.1", lookup_arg.as_str()];
    let first = Nsqd::start(&reg);
    let p1 = Producer::new(first.tcp_addr.to_string(), Config::default()).unwrap();
    p1.publish("c_look", "1").await.unwrap();
    let http = lookupd.http_addr.to_string();
    // Wait until lookupd knows the topic.
    wait_until("lookupd registration", Duration::from_secs(10), || {
        lookupd.get("/lookup?topic=c_look").status == 200
    })
    .await;

    let mut consumer = Consumer::new("c_look", "ch", fast_config(10)).unwrap();
    consumer.connect_to_lookupd(&http).unwrap();
    let m = timeout(Duration::from_secs(10), consumer.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.body().as_ref(), b"1");
    m.finish();
    assert_eq!(consumer.stats().connections, 1);

    let second = Nsqd::start(&reg);
    let p2 = Producer::new(second.tcp_addr.to_string(), Config::default()).unwrap();
    p2.publish("c_look", "2").await.unwrap();
    let m = timeout(Duration::from_secs(15), consumer.next())
        .await
        .expect("the new nsqd was discovered")
        .unwrap();
    assert_eq!(m.body().as_ref(), b"2");
    assert_eq!(m.nsqd_address(), second.tcp_addr.to_string());
    m.finish();
    assert_eq!(consumer.stats().connections, 2);

    drop(p2);
    let _dir = second.sigterm_and_wait();
    let deadline = Instant::now() + Duration::from_secs(15);
    while consumer.stats().connections != 1 {
        assert!(
            Instant::now() < deadline,
            "the stopped nsqd is still connected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // It stays gone (lookupd no longer lists it) while the first keeps delivering.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(consumer.stats().connections, 1);
    p1.publish("c_look", "3").await.unwrap();
    let m = timeout(Duration::from_secs(10), consumer.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.body().as_ref(), b"3");
    m.finish();
    consumer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stop_loses_nothing() {
    const N: usize = 3000;
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    let producer = Producer::new(&addr, Config::default()).unwrap();
    publish_numbered(&producer, "c_stop", 0..N).await;

    let finished = Arc::new(AtomicUsize::new(0));
    let consumer = Consumer::new("c_stop", "ch", fast_config(200)).unwrap();
    consumer.connect_to_nsqd(&addr).await.unwrap();
    let stop = consumer.stop_handle();
    let f = finished.clone();
    let runner = tokio::spawn(consumer.run(
        move |_m: &Message| {
            let f = f.clone();
            async move {
                tokio::time::sleep(Duration::from_micros(200)).await;
                f.fetch_add(1, Ordering::Relaxed);
                Ok::<(), std::io::Error>(())
            }
        },
        8,
    ));
    wait_until("some progress", Duration::from_secs(20), || {
        finished.load(Ordering::Relaxed) > 500
    })
    .await;
    timeout(Duration::from_secs(20), stop.stop()).await.unwrap();
    timeout(Duration::from_secs(20), runner)
        .await
        .unwrap()
        .unwrap();
    let done = finished.load(Ordering::Relaxed);
    // The daemon forgets the client when its connection ends, which our graceful stop
    // starts (CLS, CLOSE_WAIT, close) but does not wait for: the count reaches 0 shortly
    // after, not necessarily by the time `stop` returns.
    wait_until("the client deregistered", Duration::from_secs(10), || {
        nsqd.channel_stats("c_stop", "ch")
            .is_some_and(|ch| int(&ch, "client_count") == 0)
    })
    .await;
    let ch = nsqd.channel_stats("c_stop", "ch").unwrap();
    assert_eq!(int(&ch, "in_flight_count"), 0, "{ch}");
    assert_eq!(
        int(&ch, "requeue_count"),
        0,
        "nothing was left hanging: {ch}"
    );
    assert_eq!(int(&ch, "depth") as usize + done, N, "{ch}");
    assert_eq!(int(&ch, "client_count"), 0, "{ch}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_reconnects_after_nsqd_is_killed_and_restarted() {
    const N: usize = 2000;
    // Every message on disk and synced before its OK: SIGKILL must not lose what nsqd
    // acknowledged.
    let durable = ["--mem-queue-size=0", "--sync-every=1"];
    let nsqd = Nsqd::start(&durable);
    let addr = nsqd.tcp_addr;
    let producer = Producer::new(addr.to_string(), Config::default()).unwrap();
    publish_numbered(&producer, "c_kill", 0..N).await;
    drop(producer);

    let mut consumer = Consumer::new("c_kill", "ch", fast_config(50)).unwrap();
    consumer.connect_to_nsqd(addr.to_string()).await.unwrap();
    let mut seen = HashSet::new();
    while seen.len() < N / 4 {
        let m = timeout(Duration::from_secs(10), consumer.next())
            .await
            .unwrap()
            .unwrap();
        seen.insert(number(&m));
        m.finish();
    }
    // No pause before the kill: with --mem-queue-size=0 --sync-every=1 every OK'd message is
    // on disk, and a read-but-unFINed one is re-read after the restart (the channel's durable
    // read watermark, docs/durability.md). This once lost the backlog when the kill came within
    // --sync-timeout of the publish.
    let dir = nsqd.kill9();
    let tcp_arg = format!("--tcp-address={addr}");
    let nsqd = Nsqd::start_in(dir, &[durable[0], durable[1], tcp_arg.as_str()]);
    assert_eq!(nsqd.tcp_addr, addr);
    timeout(Duration::from_secs(30), async {
        while seen.len() < N {
            let m = consumer.next().await.unwrap();
            seen.insert(number(&m));
            m.finish();
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{} of {N} after the restart; stats {:?}; nsqd /stats {}",
            seen.len(),
            consumer.stats(),
            nsqd.stats()
        )
    });
    // Redeliveries of what was in flight at the kill may still be queued: keep taking
    // messages while stopping, as a stream consumer must.
    stop_draining(consumer).await;
}
