//! Beyond the reference: nsqadmin's own time series, so charts need no Graphite. A background
//! task polls every producer's `/stats` (all topics, no clients) every `--history-interval` and
//! appends one sample per topic, per channel and for the whole cluster to a bounded ring buffer
//! (`--history-size` samples each). `/api/history/...` serves them.
//!
//! Channel and topic series also carry the queue-settings counters (messages given up on:
//! `expired`, `dead_lettered`, `dropped`, with per-second rates) in a side buffer that exists
//! only while one of them is non-zero somewhere in the series, so a deployment without queue
//! settings keeps NSQ-like memory use and JSON.
//!
//! Memory per series (64-bit): the [`Series`] header is 48 bytes; each retained sample costs
//! `size_of::<Sample>()` = 56 bytes, plus `size_of::<GivenUp>()` = 72 bytes only in a series
//! whose side buffer exists. With the default `--history-size=720` that is ≈ 40 KB per series
//! (≈ 92 KB with the counters); `VecDeque` grows by doubling, so up to 1024 slots may be
//! allocated (57 KB / 131 KB). Pinned by the `memory_per_sample` test.

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

/// The queue-settings counters of a channel (summed over nodes) or of a topic (its channels'
/// sums plus the topic's own drops) at one sample: cumulative, and per second since the
/// previous sample (computed as [`Sample::rate`] is: `null` for the first sample or after a
/// counter reset).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct GivenUp {
    /// Cumulative `expired_count` (ttl).
    pub expired: i64,
    /// Cumulative `dead_lettered_count` (max_attempts).
    pub dead_lettered: i64,
    /// Cumulative `dropped_count` (overflow=drop_oldest).
    pub dropped: i64,
    pub expired_rate: Option<f64>,
    pub dead_lettered_rate: Option<f64>,
    pub dropped_rate: Option<f64>,
}

impl GivenUp {
    fn is_zero(&self) -> bool {
        let zero = |r: Option<f64>| r.is_none_or(|r| r == 0.0);
        self.expired == 0
            && self.dead_lettered == 0
            && self.dropped == 0
            && zero(self.expired_rate)
            && zero(self.dead_lettered_rate)
            && zero(self.dropped_rate)
    }
}

/// One point of `/api/history` JSON: a [`Sample`], plus the [`GivenUp`] fields when the series
/// has a non-zero counter anywhere (then on every point of it).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Point {
    #[serde(flatten)]
    pub sample: Sample,
    #[serde(flatten)]
    pub given_up: Option<GivenUp>,
}

impl std::ops::Deref for Point {
    type Target = Sample;
    fn deref(&self) -> &Sample {
        &self.sample
    }
}

/// `[expired, dead_lettered, dropped]`, cumulative, as polled.
type Counts = [i64; 3];

/// The [`GivenUp`] side buffer of a series, parallel to its samples.
#[derive(Debug, Default)]
struct GivenUpSeries {
    points: VecDeque<GivenUp>,
    /// How many of `points` are not [`GivenUp::is_zero`]; the buffer is freed at 0.
    nonzero: usize,
}

#[derive(Debug, Default)]
struct Series {
    samples: VecDeque<Sample>,
    /// Only while a queue-settings counter is non-zero in the series (a boxed side buffer, so
    /// a series without them pays one pointer and no per-sample byte).
    given_up: Option<Box<GivenUpSeries>>,
    /// The poll tick that last updated the series (for pruning vanished topics).
    tick: u64,
}

/// The per-second increase of a cumulative counter over `dt` seconds (`None` after a reset).
fn per_second(prev: i64, cur: i64, dt: f64) -> Option<f64> {
    (dt > 0.0 && cur >= prev).then(|| (cur - prev) as f64 / dt)
}

impl Series {
    fn push(&mut self, mut s: Sample, counts: Counts, cap: usize, tick: u64) {
        let prev = self.samples.back().copied();
        let dt = prev.map(|p| (s.t - p.t) as f64 / 1000.0);
        if let (Some(prev), Some(dt)) = (prev, dt) {
            if let Some(r) = per_second(prev.messages, s.messages, dt) {
                s.rate = Some(r);
            }
        }
        if self.given_up.is_none() && counts != [0; 3] {
            // The first non-zero counter: the retained samples had zeros (rates 0 where the
            // message rate is known, as it would have been computed).
            let points = self
                .samples
                .iter()
                .map(|p| {
                    let r = p.rate.map(|_| 0.0);
                    GivenUp {
                        expired_rate: r,
                        dead_lettered_rate: r,
                        dropped_rate: r,
                        ..GivenUp::default()
                    }
                })
                .collect();
            self.given_up = Some(Box::new(GivenUpSeries { points, nonzero: 0 }));
        }
        if let Some(g) = self.given_up.as_mut() {
            let [expired, dead_lettered, dropped] = counts;
            let mut p = GivenUp {
                expired,
                dead_lettered,
                dropped,
                ..GivenUp::default()
            };
            if let (Some(last), Some(dt)) = (g.points.back(), dt) {
                p.expired_rate = per_second(last.expired, expired, dt);
                p.dead_lettered_rate = per_second(last.dead_lettered, dead_lettered, dt);
                p.dropped_rate = per_second(last.dropped, dropped, dt);
            }
            g.nonzero += usize::from(!p.is_zero());
            g.points.push_back(p);
        }
        self.samples.push_back(s);
        while self.samples.len() > cap {
            self.samples.pop_front();
            if let Some(g) = self.given_up.as_mut() {
                if g.points.pop_front().is_some_and(|p| !p.is_zero()) {
                    g.nonzero -= 1;
                }
            }
        }
        if self.given_up.as_ref().is_some_and(|g| g.nonzero == 0) {
            self.given_up = None;
        }
        self.tick = tick;
    }

    fn to_vec(&self) -> Vec<Point> {
        let given_up = self.given_up.as_ref().map(|g| &g.points);
        self.samples
            .iter()
            .enumerate()
            .map(|(i, s)| Point {
                sample: *s,
                given_up: given_up.and_then(|g| g.get(i).copied()),
            })
            .collect()
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
    pub samples: Vec<Point>,
    pub channels: Vec<ChannelHistory>,
}

/// `/api/history/topics/:topic/:channel` (and the entries of [`TopicHistory::channels`]).
#[derive(Debug, Serialize)]
pub struct ChannelHistory {
    pub interval_ms: u64,
    pub topic: String,
    pub channel: String,
    pub samples: Vec<Point>,
}

/// `/api/history`: the whole cluster.
#[derive(Debug, Serialize)]
pub struct TotalHistory {
    pub interval_ms: u64,
    pub samples: Vec<Point>,
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
        let mut topics: HashMap<&str, (Sample, Counts)> = HashMap::new();
        let blank = Sample {
            t,
            depth: 0,
            in_flight: 0,
            deferred: 0,
            messages: 0,
            rate: None,
        };
        for ts in &stats.topics {
            let (s, n) = topics
                .entry(ts.topic_name.as_str())
                .or_insert((blank, [0; 3]));
            // The topic's channels' counters (summed per node) plus the topic's own drops.
            let q = &ts.queue_counters;
            n[0] += q.expired_count;
            n[1] += q.dead_lettered_count;
            n[2] += q.dropped_count + ts.own_dropped_count;
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
        for (name, (s, n)) in &topics {
            total.depth += s.depth;
            total.in_flight += s.in_flight;
            total.deferred += s.deferred;
            inner
                .topics
                .entry((*name).to_string())
                .or_default()
                .push(*s, *n, cap, tick);
        }
        for (_, c) in &stats.channels {
            total.depth += c.depth;
            // The cluster "messages" series counts what channels processed (as /api/counter).
            total.messages += c.message_count;
            let q = &c.queue_counters;
            let counts = [q.expired_count, q.dead_lettered_count, q.dropped_count];
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
                .push(s, counts, cap, tick);
        }
        inner.total.push(total, [0; 3], cap, tick);
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

    /// Channel `c` with the three counters, channel `d` with none, the topic's own drops.
    fn counted(expired: i64, dead: i64, dropped: i64, topic_dropped: i64) -> ClusterStats {
        let raw: RawStats = serde_json::from_value(serde_json::json!({"topics":[
            {"topic_name":"t","message_count":0,"dropped_count":topic_dropped,"channels":[
                {"channel_name":"c","expired_count":expired,"dead_lettered_count":dead,
                 "dropped_count":dropped},
                {"channel_name":"d"}]}]}))
        .unwrap();
        let mut cs = ClusterStats::default();
        cs.add_node(raw, "a:1", "h", None, 0);
        cs
    }

    #[test]
    fn given_up_counters_and_rates() {
        let h = History::new(Duration::from_secs(1), 4);
        h.record_at(&counted(0, 0, 0, 0), 0);
        h.record_at(&counted(0, 0, 0, 0), 1000);
        // Nothing given up: no fields at all (NSQ-like JSON).
        for v in [
            serde_json::to_value(h.topic("t")).unwrap(),
            serde_json::to_value(h.total()).unwrap(),
        ] {
            let text = v.to_string();
            assert!(
                !text.contains("expired") && !text.contains("dropped"),
                "{text}"
            );
        }
        assert_eq!(
            serde_json::to_value(h.channel("t", "c").samples[1]).unwrap(),
            serde_json::json!({"t":1000,"depth":0,"in_flight":0,"deferred":0,"messages":0,
                "rate":0.0})
        );

        // 4 expired, 2 dead-lettered over 2 s; 1 dropped by the channel and 3 by the topic.
        h.record_at(&counted(4, 2, 1, 3), 3000);
        h.record_at(&counted(5, 2, 1, 3), 4000);
        let c = h.channel("t", "c").samples;
        assert_eq!(c.len(), 4);
        // Backfilled zeros on the earlier points: null rate where the message rate is null.
        assert_eq!(c[0].given_up, Some(GivenUp::default()));
        assert_eq!(c[1].given_up.unwrap().expired_rate, Some(0.0));
        let g = c[2].given_up.unwrap();
        assert_eq!((g.expired, g.dead_lettered, g.dropped), (4, 2, 1));
        assert_eq!(
            (g.expired_rate, g.dead_lettered_rate, g.dropped_rate),
            (Some(2.0), Some(1.0), Some(0.5))
        );
        let g = c[3].given_up.unwrap();
        assert_eq!(
            (g.expired, g.expired_rate, g.dead_lettered_rate),
            (5, Some(1.0), Some(0.0))
        );
        let json = serde_json::to_value(c[3]).unwrap();
        assert_eq!(json["expired"], 5);
        assert_eq!(json["expired_rate"], 1.0);
        assert_eq!(json["messages"], 0);
        // The other channel and the cluster stay without the fields.
        assert!(h
            .channel("t", "d")
            .samples
            .iter()
            .all(|p| p.given_up.is_none()));
        assert!(h.total().samples.iter().all(|p| p.given_up.is_none()));
        // The topic: its channels' sums plus its own drops.
        let t = h.topic("t").samples;
        let g = t[2].given_up.unwrap();
        assert_eq!((g.expired, g.dead_lettered, g.dropped), (4, 2, 4));
        assert_eq!(g.dropped_rate, Some(2.0));

        // A counter reset (nsqd restarted): null rate, as for messages.
        h.record_at(&counted(1, 2, 1, 3), 5000);
        let g = h.channel("t", "c").samples[3].given_up.unwrap();
        assert_eq!((g.expired, g.expired_rate), (1, None));

        // Once the counters are 0 throughout the buffer, the side buffer (and fields) go.
        for i in 6..11 {
            h.record_at(&counted(0, 0, 0, 0), 1000 * i);
        }
        assert!(h
            .channel("t", "c")
            .samples
            .iter()
            .all(|p| p.given_up.is_none()));
        let text = serde_json::to_string(&h.topic("t")).unwrap();
        assert!(!text.contains("expired"), "{text}");
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn memory_per_sample() {
        // Stated in the module docs; the counters must not grow `Sample`.
        assert_eq!(std::mem::size_of::<Sample>(), 56);
        assert_eq!(std::mem::size_of::<GivenUp>(), 72);
        assert_eq!(std::mem::size_of::<Series>(), 48);
    }
}
