//! Beyond the reference: nsqadmin's own time series, so charts need no Graphite. A background
//! task polls every producer's `/stats` (all topics, no clients) every `--history-interval` and
//! appends one sample per topic, per channel and for the whole cluster to a bounded ring buffer
//! (`--history-size` samples each). `/api/history/...` serves them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;

use crate::stats::ClusterStats;

/// One point of a series.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Sample {
    /// Unix milliseconds.
    pub t: i64,
    pub depth: i64,
    pub in_flight: i64,
    pub deferred: i64,
    /// Cumulative `message_count`.
    pub messages: i64,
    /// Messages per second since the previous sample (`null` for the first one or after a
    /// counter reset).
    pub rate: Option<f64>,
}

#[derive(Debug, Default)]
struct Series {
    samples: VecDeque<Sample>,
    /// The poll tick that last updated the series (for pruning vanished topics).
    tick: u64,
}

impl Series {
    fn push(&mut self, mut s: Sample, cap: usize, tick: u64) {
        if let Some(prev) = self.samples.back() {
            let dt = (s.t - prev.t) as f64 / 1000.0;
            if dt > 0.0 && s.messages >= prev.messages {
                s.rate = Some((s.messages - prev.messages) as f64 / dt);
            }
        }
        self.samples.push_back(s);
        while self.samples.len() > cap {
            self.samples.pop_front();
        }
        self.tick = tick;
    }

    fn to_vec(&self) -> Vec<Sample> {
        self.samples.iter().copied().collect()
    }
}

#[derive(Debug, Default)]
struct Inner {
    tick: u64,
    total: Series,
    topics: HashMap<String, Series>,
    channels: HashMap<(String, String), Series>,
}

/// The ring buffers. A plain mutex: held only to copy samples in or out, never across an
/// `.await`.
#[derive(Debug)]
pub struct History {
    pub interval: Duration,
    cap: usize,
    inner: Mutex<Inner>,
}

/// `/api/history/topics/:topic`.
#[derive(Debug, Serialize)]
pub struct TopicHistory {
    pub interval_ms: u64,
    pub topic: String,
    pub samples: Vec<Sample>,
    pub channels: Vec<ChannelHistory>,
}

/// `/api/history/topics/:topic/:channel` (and the entries of [`TopicHistory::channels`]).
#[derive(Debug, Serialize)]
pub struct ChannelHistory {
    pub interval_ms: u64,
    pub topic: String,
    pub channel: String,
    pub samples: Vec<Sample>,
}

/// `/api/history`: the whole cluster.
#[derive(Debug, Serialize)]
pub struct TotalHistory {
    pub interval_ms: u64,
    pub samples: Vec<Sample>,
    pub topics: Vec<String>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl History {
    pub fn new(interval: Duration, cap: usize) -> History {
        History {
            interval,
            cap: cap.max(2),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Appends one sample per topic, channel and for the cluster, taken from `stats` (all
    /// topics, per node).
    pub fn record(&self, stats: &ClusterStats) {
        self.record_at(stats, now_ms());
    }

    pub fn record_at(&self, stats: &ClusterStats, t: i64) {
        let mut topics: HashMap<&str, Sample> = HashMap::new();
        let blank = Sample {
            t,
            depth: 0,
            in_flight: 0,
            deferred: 0,
            messages: 0,
            rate: None,
        };
        for ts in &stats.topics {
            let s = topics.entry(ts.topic_name.as_str()).or_insert(blank);
            s.depth += ts.depth;
            s.messages += ts.message_count;
            for c in ts.channels.iter().flatten() {
                s.in_flight += c.in_flight_count;
                s.deferred += c.deferred_count;
            }
        }
        let mut total = blank;
        let mut inner = self.inner.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let cap = self.cap;
        for (name, s) in &topics {
            total.depth += s.depth;
            total.in_flight += s.in_flight;
            total.deferred += s.deferred;
            inner
                .topics
                .entry((*name).to_string())
                .or_default()
                .push(*s, cap, tick);
        }
        for (_, c) in &stats.channels {
            total.depth += c.depth;
            // The cluster "messages" series counts what channels processed (as /api/counter).
            total.messages += c.message_count;
            let s = Sample {
                t,
                depth: c.depth,
                in_flight: c.in_flight_count,
                deferred: c.deferred_count,
                messages: c.message_count,
                rate: None,
            };
            inner
                .channels
                .entry((c.topic_name.clone(), c.channel_name.clone()))
                .or_default()
                .push(s, cap, tick);
        }
        inner.total.push(total, cap, tick);
        // Forget series that have not been seen for a whole buffer length.
        let horizon = tick.saturating_sub(cap as u64);
        inner.topics.retain(|_, s| s.tick > horizon);
        inner.channels.retain(|_, s| s.tick > horizon);
    }

    fn interval_ms(&self) -> u64 {
        self.interval.as_millis() as u64
    }

    pub fn topic(&self, topic: &str) -> TopicHistory {
        let inner = self.inner.lock();
        let mut channels: Vec<ChannelHistory> = inner
            .channels
            .iter()
            .filter(|((t, _), _)| t == topic)
            .map(|((t, c), s)| ChannelHistory {
                interval_ms: self.interval_ms(),
                topic: t.clone(),
                channel: c.clone(),
                samples: s.to_vec(),
            })
            .collect();
        channels.sort_by(|a, b| a.channel.cmp(&b.channel));
        TopicHistory {
            interval_ms: self.interval_ms(),
            topic: topic.to_string(),
            samples: inner
                .topics
                .get(topic)
                .map(Series::to_vec)
                .unwrap_or_default(),
            channels,
        }
    }

    pub fn channel(&self, topic: &str, channel: &str) -> ChannelHistory {
        let inner = self.inner.lock();
        ChannelHistory {
            interval_ms: self.interval_ms(),
            topic: topic.to_string(),
            channel: channel.to_string(),
            samples: inner
                .channels
                .get(&(topic.to_string(), channel.to_string()))
                .map(Series::to_vec)
                .unwrap_or_default(),
        }
    }

    pub fn total(&self) -> TotalHistory {
        let inner = self.inner.lock();
        let mut topics: Vec<String> = inner.topics.keys().cloned().collect();
        topics.sort();
        TotalHistory {
            interval_ms: self.interval_ms(),
            samples: inner.total.to_vec(),
            topics,
        }
    }
}

/// The polling loop; ends when `stop` fires.
pub async fn run(
    admin: Arc<crate::admin::Admin>,
    history: Arc<History>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(history.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
        }
        let ci = admin.cluster();
        let mut warn = Vec::new();
        let producers = match ci.producers(&mut warn).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!("history: {e}");
                continue;
            }
        };
        match ci.stats(&producers, None, None, false, &mut warn).await {
            Ok(s) => history.record(&s),
            Err(e) => tracing::debug!("history: {e}"),
        }
        if !warn.is_empty() {
            tracing::debug!("history: {}", warn.join("; "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::RawStats;

    fn stats(mc: i64, depth: i64) -> ClusterStats {
        let raw: RawStats = serde_json::from_value(serde_json::json!({"topics":[
            {"topic_name":"t","depth":depth,"message_count":mc,"channels":[
                {"channel_name":"c","depth":depth,"in_flight_count":1,"message_count":mc}]}]}))
        .unwrap();
        let mut cs = ClusterStats::default();
        cs.add_node(raw, "a:1", "h", None, 0);
        cs
    }

    #[test]
    fn ring_buffer_and_rates() {
        let h = History::new(Duration::from_secs(1), 3);
        for i in 0..5 {
            h.record_at(&stats(i * 10, i), 1000 * i);
        }
        let t = h.topic("t");
        assert_eq!(t.samples.len(), 3);
        assert_eq!(t.samples[2].messages, 40);
        assert_eq!(t.samples[2].rate, Some(10.0));
        assert_eq!(t.samples[2].in_flight, 1);
        assert_eq!(t.channels.len(), 1);
        assert_eq!(h.channel("t", "c").samples[2].depth, 4);
        assert_eq!(h.total().samples.len(), 3);
        // A vanished topic is pruned after a full buffer length.
        for i in 5..10 {
            h.record_at(&ClusterStats::default(), 1000 * i);
        }
        assert!(h.topic("t").samples.is_empty());
        assert_eq!(h.total().topics.len(), 0);
    }
}
