//! An unmodified third-party client (crates.io `tokio-nsq` 0.14) against our nsqd: bulk
//! PUB/MPUB and consumption with FIN, REQ with a delay, and TOUCH past the message timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nsq_integration_tests::{find_channel, find_topic, int, Nsqd};
use tokio::time::timeout;
use tokio_nsq::{
    NSQChannel, NSQConsumer, NSQConsumerConfig, NSQConsumerConfigSources, NSQEvent, NSQProducer,
    NSQProducerConfig, NSQRequeueDelay, NSQTopic,
};

fn consumer(nsqd: &Nsqd, topic: &Arc<NSQTopic>, channel: &str, max_in_flight: u32) -> NSQConsumer {
    NSQConsumerConfig::new(
        topic.clone(),
        NSQChannel::new(channel).expect("channel name"),
    )
    .set_max_in_flight(max_in_flight)
    .set_sources(NSQConsumerConfigSources::Daemons(vec![nsqd
        .tcp_addr
        .to_string()]))
    .build()
}

/// A producer that has completed its handshake.
async fn producer(nsqd: &Nsqd) -> NSQProducer {
    let mut p = NSQProducerConfig::new(nsqd.tcp_addr.to_string()).build();
    let ev = timeout(Duration::from_secs(20), p.consume())
        .await
        .expect("producer handshake within 20 s");
    assert!(
        matches!(ev, Some(NSQEvent::Healthy())),
        "producer: expected Healthy, got {ev:?}"
    );
    p
}

/// Waits for `n` publish acknowledgements.
async fn await_acks(p: &mut NSQProducer, n: usize) {
    let mut acks = 0;
    while acks < n {
        match timeout(Duration::from_secs(30), p.consume()).await {
            Ok(Some(NSQEvent::Ok())) => acks += 1,
            Ok(other) => panic!("producer: expected Ok after {acks} acks, got {other:?}"),
            Err(_) => panic!("producer: only {acks} of {n} acks within 30 s"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_messages_pub_mpub_consume_fin() {
    let nsqd = Nsqd::start(&[]);
    let topic = NSQTopic::new("tn_load").expect("topic name");
    let mut cons = consumer(&nsqd, &topic, "ch", 500);
    let mut prod = producer(&nsqd).await;

    // 5,000 single PUBs and 50 MPUBs of 100.
    let body = |i: usize| format!("tokio-nsq-{i:05}").into_bytes();
    let mut commands = 0;
    for i in 0..5_000 {
        prod.publish(&topic, body(i)).await.expect("queue PUB");
        commands += 1;
    }
    for batch in 0..50 {
        let bodies = (0..100).map(|j| body(5_000 + batch * 100 + j)).collect();
        prod.publish_multiple(&topic, bodies)
            .await
            .expect("queue MPUB");
        commands += 1;
    }
    await_acks(&mut prod, commands).await;

    let mut seen: HashMap<Vec<u8>, u16> = HashMap::new();
    let started = Instant::now();
    while seen.len() < 10_000 {
        let msg = timeout(Duration::from_secs(30), cons.consume_filtered())
            .await
            .unwrap_or_else(|_| panic!("only {} of 10000 messages within 30 s", seen.len()))
            .expect("consumer stream ended");
        assert_eq!(msg.attempt, 1, "first delivery must carry attempts 1");
        let prev = seen.insert(msg.body.clone(), msg.attempt);
        assert!(
            prev.is_none(),
            "duplicate delivery of {:?}",
            String::from_utf8_lossy(&msg.body)
        );
        msg.finish().await;
    }
    for i in 0..10_000 {
        assert!(seen.contains_key(&body(i)), "message {i} never delivered");
    }
    eprintln!("consumed 10000 messages in {:?}", started.elapsed());

    let expected_bytes: i64 = (0..10_000).map(|i| body(i).len() as i64).sum();
    let stats = nsqd.wait_stats("tn_load/ch to drain", Duration::from_secs(20), |s| {
        find_channel(s, "tn_load", "ch")
            .is_some_and(|c| int(c, "in_flight_count") == 0 && int(c, "depth") == 0)
    });
    let t = find_topic(&stats, "tn_load").expect("topic in stats");
    assert_eq!(int(t, "depth"), 0);
    assert_eq!(int(t, "message_count"), 10_000);
    assert_eq!(int(t, "message_bytes"), expected_bytes);
    let c = find_channel(&stats, "tn_load", "ch").expect("channel in stats");
    assert_eq!(int(c, "message_count"), 10_000);
    assert_eq!(int(c, "deferred_count"), 0);
    assert_eq!(int(c, "requeue_count"), 0);
    assert_eq!(int(c, "timeout_count"), 0);
    assert_eq!(int(c, "client_count"), 1);
    let finished: i64 = c["clients"]
        .as_array()
        .expect("clients")
        .iter()
        .map(|cl| int(cl, "finish_count"))
        .sum();
    assert_eq!(finished, 10_000, "finish_count of the consumer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn req_with_delay_redelivers_after_delay_with_attempts_2() {
    let nsqd = Nsqd::start(&[]);
    let topic = NSQTopic::new("tn_req").expect("topic name");
    let mut cons = consumer(&nsqd, &topic, "ch", 1);
    let mut prod = producer(&nsqd).await;
    prod.publish(&topic, b"requeue-me".to_vec())
        .await
        .expect("queue PUB");
    await_acks(&mut prod, 1).await;

    let first = timeout(Duration::from_secs(20), cons.consume_filtered())
        .await
        .expect("first delivery within 20 s")
        .expect("consumer stream");
    assert_eq!(
        (first.body.as_slice(), first.attempt),
        (&b"requeue-me"[..], 1)
    );
    let requeued_at = Instant::now();
    first
        .requeue(NSQRequeueDelay::CustomDelay(Duration::from_millis(1500)))
        .await;

    // While deferred it shows in deferred_count.
    nsqd.wait_stats("the message to be deferred", Duration::from_secs(5), |s| {
        find_channel(s, "tn_req", "ch").is_some_and(|c| int(c, "deferred_count") == 1)
    });

    let second = timeout(Duration::from_secs(20), cons.consume_filtered())
        .await
        .expect("redelivery within 20 s")
        .expect("consumer stream");
    let waited = requeued_at.elapsed();
    assert_eq!(
        (second.body.as_slice(), second.attempt),
        (&b"requeue-me"[..], 2)
    );
    assert!(
        waited >= Duration::from_millis(1400),
        "redelivered after {waited:?}, before the 1500 ms delay"
    );
    second.finish().await;

    let stats = nsqd.wait_stats("tn_req/ch to drain", Duration::from_secs(10), |s| {
        find_channel(s, "tn_req", "ch").is_some_and(|c| int(c, "in_flight_count") == 0)
    });
    let c = find_channel(&stats, "tn_req", "ch").expect("channel");
    assert_eq!(int(c, "depth"), 0);
    assert_eq!(int(c, "deferred_count"), 0);
    assert_eq!(int(c, "message_count"), 1);
    assert_eq!(int(c, "requeue_count"), 1);
    assert_eq!(int(c, "timeout_count"), 0);
    assert_eq!(
        int(
            find_topic(&stats, "tn_req").expect("topic"),
            "message_count"
        ),
        1
    );
}

/// tokio-nsq cannot send IDENTIFY `msg_timeout`, so the daemon runs with `--msg-timeout=2s`.
/// First a control: an untouched message times out and comes back with attempts 2. Then a
/// message touched every 500 ms stays in flight for 6 s (3× the timeout) and is finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touch_keeps_a_message_past_its_timeout() {
    let nsqd = Nsqd::start(&["--msg-timeout=2s"]);
    let topic = NSQTopic::new("tn_touch").expect("topic name");
    let mut cons = consumer(&nsqd, &topic, "ch", 1);
    let mut prod = producer(&nsqd).await;

    // Control: no TOUCH → timeout → redelivery with attempts 2.
    prod.publish(&topic, b"untouched".to_vec())
        .await
        .expect("queue PUB");
    await_acks(&mut prod, 1).await;
    let first = timeout(Duration::from_secs(20), cons.consume_filtered())
        .await
        .expect("delivery within 20 s")
        .expect("consumer stream");
    assert_eq!(
        (first.body.as_slice(), first.attempt),
        (&b"untouched"[..], 1)
    );
    let delivered_at = Instant::now();
    let again = timeout(Duration::from_secs(20), cons.consume_filtered())
        .await
        .expect("redelivery after the 2 s timeout (within 20 s)")
        .expect("consumer stream");
    assert!(
        delivered_at.elapsed() >= Duration::from_millis(1500),
        "timed out too early"
    );
    assert_eq!(
        (again.body.as_slice(), again.attempt),
        (&b"untouched"[..], 2)
    );
    assert_eq!(again.id, first.id);
    // Dropping `first` would send REQ for the ID that is in flight again; leak it instead.
    std::mem::forget(first);
    again.finish().await;

    // TOUCH every 500 ms for 6 s: no redelivery, then FIN succeeds.
    prod.publish(&topic, b"touched".to_vec())
        .await
        .expect("queue PUB");
    await_acks(&mut prod, 1).await;
    let msg = timeout(Duration::from_secs(20), cons.consume_filtered())
        .await
        .expect("delivery within 20 s")
        .expect("consumer stream");
    assert_eq!((msg.body.as_slice(), msg.attempt), (&b"touched"[..], 1));
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        msg.touch().await;
        if let Ok(other) = timeout(Duration::from_millis(500), cons.consume_filtered()).await {
            let other = other.expect("consumer stream");
            let (body, attempt) = (
                String::from_utf8_lossy(&other.body).into_owned(),
                other.attempt,
            );
            std::mem::forget(other);
            panic!("touched message was redelivered: {body:?} attempts {attempt}");
        }
    }
    msg.finish().await;

    let stats = nsqd.wait_stats("tn_touch/ch to drain", Duration::from_secs(10), |s| {
        find_channel(s, "tn_touch", "ch").is_some_and(|c| int(c, "in_flight_count") == 0)
    });
    let c = find_channel(&stats, "tn_touch", "ch").expect("channel");
    assert_eq!(int(c, "depth"), 0);
    assert_eq!(int(c, "message_count"), 2);
    assert_eq!(
        int(c, "timeout_count"),
        1,
        "only the untouched control message times out"
    );
    assert_eq!(int(c, "requeue_count"), 0);
    let finished: i64 = c["clients"]
        .as_array()
        .expect("clients")
        .iter()
        .map(|cl| int(cl, "finish_count"))
        .sum();
    assert_eq!(finished, 2);
}
