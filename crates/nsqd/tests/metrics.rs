//! `nsqd::metrics::render` in process, without promtool: every sample belongs to the family
//! announced right above it, every family has `# HELP` then `# TYPE` and appears once, and the
//! numbers are the node's (the black-box tests in tests/tests/metrics.rs add promtool, `/stats`
//! comparisons and a real Prometheus scrape).

mod common;

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;

/// Checks the exposition's structure; returns the family names in order.
fn check_structure(text: &str) -> Vec<String> {
    let mut families: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    let mut help: Option<String> = None;
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap().to_string();
            assert!(rest.len() > name.len() + 1, "empty help: {line}");
            help = Some(name);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert_eq!(help.as_deref(), Some(name), "TYPE without HELP: {line}");
            assert!(seen.insert(name.to_string()), "family {name} twice");
            assert!(["counter", "gauge", "summary"].contains(&kind), "{line}");
            assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
            families.push(name.to_string());
            current = Some((name.to_string(), kind.to_string()));
        } else {
            let series = line.split([' ', '{']).next().unwrap();
            let (family, kind) = current.as_ref().unwrap_or_else(|| panic!("orphan {line}"));
            let base = if kind == "summary" {
                series
                    .strip_suffix("_sum")
                    .or_else(|| series.strip_suffix("_count"))
                    .unwrap_or(series)
            } else {
                series
            };
            assert_eq!(base, family, "sample outside its family: {line}");
            let value = line.rsplit(' ').next().unwrap();
            assert!(
                value.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&value),
                "{line}"
            );
        }
    }
    families
}

#[tokio::test]
async fn exposition_structure_and_values() {
    let (h, _dir) = common::start_with(&["--e2e-processing-latency-percentile=0.9"]).await;
    let t = h.nsqd.topic("m").await.unwrap();
    t.get_or_create_channel("c").unwrap();
    for _ in 0..3 {
        t.put(Bytes::from_static(b"body"), Duration::ZERO).unwrap();
    }
    t.channels()[0].pause();

    let text = nsqd::metrics::render(&h.nsqd, true);
    let families = check_structure(&text);
    for f in [
        "nsq_nsqd_healthy",
        "nsq_nsqd_draining",
        "nsq_topic_depth",
        "nsq_channel_depth",
        "nsq_channel_e2e_processing_latency_seconds",
        "nsq_client_ready",
        "nsq_producer_messages_total",
        "process_resident_memory_bytes",
    ] {
        assert!(families.iter().any(|x| x == f), "{f} missing:\n{text}");
    }
    for line in [
        "nsq_nsqd_draining 0",
        "nsq_topic_messages_total{topic=\"m\"} 3",
        "nsq_topic_message_bytes_total{topic=\"m\"} 12",
        "nsq_channel_depth{topic=\"m\",channel=\"c\"} 3",
        "nsq_channel_paused{topic=\"m\",channel=\"c\"} 1",
        "nsq_channel_e2e_processing_latency_seconds{topic=\"m\",channel=\"c\",quantile=\"0.9\"} 0",
    ] {
        assert!(
            text.contains(&format!("\n{line}\n")),
            "{line} missing:\n{text}"
        );
    }

    h.nsqd.start_drain();
    let text = nsqd::metrics::render(&h.nsqd, false);
    check_structure(&text);
    assert!(text.contains("\nnsq_nsqd_draining 1\n"));
    assert!(
        !text.contains("nsq_client_ready"),
        "per-client series need per_client"
    );
    h.shutdown().await;
}
