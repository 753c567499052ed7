//! The statsd pusher (nsqd/statsd.go, `statsdLoop`): every `--statsd-interval` it takes a
//! [`Snapshot`] (`stats.rs`) of the topics and channels, turns it into statsd lines ([`lines`]: counters as deltas since the
//! previous push, gauges as current values), packs the lines into datagrams of at most
//! `--statsd-udp-packet-size` bytes ([`pack`]) and sends them over a fresh UDP socket, spread
//! evenly over the interval minus one second so a large node does not burst its statsd.
//!
//! Differences from the reference:
//! * the spread window is max(interval − 1 s, 100 ms); the reference panics when the interval
//!   is ≤ 1 s and there is something to send;
//! * `mem.*` values are our closest equivalents: `mem.heap_in_use_bytes` is the resident set
//!   size, every other `mem.*` gauge and the `mem.gc_runs` counter are 0 (there is no GC);
//! * the prefix is inserted literally, whereas the reference uses it as part of a `Printf`
//!   format, so a prefix containing `%` verbs other than the startup-expanded `%s` differs.

use std::sync::Arc;
use std::time::Duration;

use nsq_core::Engine;
use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::time::{timeout, Instant, MissedTickBehavior};

use crate::nsqd::Nsqd;
use crate::options::NsqdOptions;
pub use crate::stats::{ChannelSnapshot, MemStats, Snapshot, TopicSnapshot};

/// The shortest window the datagrams of one push are spread over.
const MIN_SPREAD: Duration = Duration::from_millis(100);
/// The reference's UDP "dial" timeout (name resolution).
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// Go's `bufio` default, used by the reference when the packet size is not positive.
const DEFAULT_PACKET_SIZE: usize = 4096;

/// `0.99` → `99`, `1.0` → `100`, `0.999` → `100` (Go's `%.0f` of `q × 100`).
pub fn percentile_name(q: f64) -> String {
    format!("{:.0}", q * 100.0)
}

/// The metric lines (without `\n`) of one push, in the reference's order, given the previous
/// push's counters (`None` on the first push: counters are the totals). Counter deltas of 0 are
/// sent; a counter that went down (topic re-created) gives a negative delta, as in the
/// reference's `int64(uint64 difference)`.
pub fn lines(
    prefix: &str,
    current: &Snapshot,
    previous: Option<&Snapshot>,
    exclude_ephemeral: bool,
    percentiles: &[f64],
    mem: Option<&MemStats>,
) -> Vec<String> {
    let mut out = Vec::new();
    let counter = |out: &mut Vec<String>, name: &str, now: u64, before: u64| {
        out.push(format!(
            "{prefix}{name}:{}|c",
            now.wrapping_sub(before) as i64
        ));
    };
    let gauge = |out: &mut Vec<String>, name: &str, value: i64| {
        out.push(format!("{prefix}{name}:{value}|g"));
    };
    let names: Vec<String> = percentiles.iter().map(|&q| percentile_name(q)).collect();
    let empty_topic = TopicSnapshot::default();
    let empty_channel = ChannelSnapshot::default();

    for t in &current.topics {
        if exclude_ephemeral && t.name.ends_with("#ephemeral") {
            continue;
        }
        let last = previous
            .and_then(|p| p.topics.iter().find(|x| x.name == t.name))
            .unwrap_or(&empty_topic);
        let tn = format!("topic.{}", t.name);
        counter(
            &mut out,
            &format!("{tn}.message_count"),
            t.message_count,
            last.message_count,
        );
        counter(
            &mut out,
            &format!("{tn}.message_bytes"),
            t.message_bytes,
            last.message_bytes,
        );
        gauge(&mut out, &format!("{tn}.depth"), t.depth);
        gauge(&mut out, &format!("{tn}.backend_depth"), t.backend_depth);
        for (p, v) in names.iter().zip(&t.e2e) {
            gauge(
                &mut out,
                &format!("{tn}.e2e_processing_latency_{p}"),
                *v as i64,
            );
        }
        for c in &t.channels {
            if exclude_ephemeral && c.name.ends_with("#ephemeral") {
                continue;
            }
            let lc = last
                .channels
                .iter()
                .find(|x| x.name == c.name)
                .unwrap_or(&empty_channel);
            let cn = format!("{tn}.channel.{}", c.name);
            counter(
                &mut out,
                &format!("{cn}.message_count"),
                c.message_count,
                lc.message_count,
            );
            gauge(&mut out, &format!("{cn}.depth"), c.depth);
            gauge(&mut out, &format!("{cn}.backend_depth"), c.backend_depth);
            gauge(
                &mut out,
                &format!("{cn}.in_flight_count"),
                c.in_flight_count as i64,
            );
            gauge(
                &mut out,
                &format!("{cn}.deferred_count"),
                c.deferred_count as i64,
            );
            counter(
                &mut out,
                &format!("{cn}.requeue_count"),
                c.requeue_count,
                lc.requeue_count,
            );
            counter(
                &mut out,
                &format!("{cn}.timeout_count"),
                c.timeout_count,
                lc.timeout_count,
            );
            gauge(&mut out, &format!("{cn}.clients"), c.clients as i64);
            for (p, v) in names.iter().zip(&c.e2e) {
                gauge(
                    &mut out,
                    &format!("{cn}.e2e_processing_latency_{p}"),
                    *v as i64,
                );
            }
        }
    }

    if let Some(m) = mem {
        let g = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        gauge(&mut out, "mem.heap_objects", g(m.heap_objects));
        gauge(&mut out, "mem.heap_idle_bytes", g(m.heap_idle_bytes));
        gauge(&mut out, "mem.heap_in_use_bytes", g(m.heap_in_use_bytes));
        gauge(
            &mut out,
            "mem.heap_released_bytes",
            g(m.heap_released_bytes),
        );
        gauge(&mut out, "mem.gc_pause_usec_100", g(m.gc_pause_usec_100));
        gauge(&mut out, "mem.gc_pause_usec_99", g(m.gc_pause_usec_99));
        gauge(&mut out, "mem.gc_pause_usec_95", g(m.gc_pause_usec_95));
        gauge(&mut out, "mem.next_gc_bytes", g(m.next_gc_bytes));
        counter(&mut out, "mem.gc_runs", m.gc_runs, 0);
    }
    out
}

/// Packs lines (each followed by `\n`) greedily into datagrams of at most `packet_size` bytes
/// without splitting a line; a line longer than that goes alone in an oversized datagram, and
/// a size ≤ 0 means 4096 (the reference's `bufio` behaviour).
pub fn pack(lines: &[String], packet_size: i64) -> Vec<Vec<u8>> {
    let size = usize::try_from(packet_size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(DEFAULT_PACKET_SIZE);
    let mut out = Vec::new();
    let mut cur: Vec<u8> = Vec::with_capacity(size);
    for l in lines {
        let len = l.len() + 1;
        if len > size - cur.len() && !cur.is_empty() {
            out.push(std::mem::replace(&mut cur, Vec::with_capacity(size)));
        }
        if len > size {
            let mut big = Vec::with_capacity(len);
            big.extend_from_slice(l.as_bytes());
            big.push(b'\n');
            out.push(big);
            continue;
        }
        cur.extend_from_slice(l.as_bytes());
        cur.push(b'\n');
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The statsd settings, taken from the options once at startup.
#[derive(Debug, Clone)]
pub struct Config {
    /// UDP `host:port`; empty disables the pusher.
    pub address: String,
    /// Already `%s`-expanded, ends with `.` unless empty.
    pub prefix: String,
    pub interval: Duration,
    pub mem_stats: bool,
    pub packet_size: i64,
    pub exclude_ephemeral: bool,
    pub percentiles: Vec<f64>,
}

impl Config {
    pub fn from_options(o: &NsqdOptions) -> Config {
        Config {
            address: o.statsd_address.clone(),
            prefix: o.statsd_prefix.clone(),
            interval: o.statsd_interval,
            mem_stats: o.statsd_mem_stats,
            packet_size: o.statsd_udp_packet_size,
            exclude_ephemeral: o.statsd_exclude_ephemeral,
            percentiles: o.e2e_processing_latency_percentiles.clone(),
        }
    }

    /// The window one push's datagrams are spread over.
    pub fn spread_window(&self) -> Duration {
        self.interval
            .saturating_sub(Duration::from_secs(1))
            .max(MIN_SPREAD)
    }
}

/// Pushes stats to `--statsd-address` every `--statsd-interval` until `stop` is notified
/// (`notify_waiters` or `notify_one`); returns at once when no address is configured.
pub async fn run(nsqd: Arc<Nsqd>, stop: Arc<Notify>) {
    run_with(nsqd.engine.clone(), Config::from_options(&nsqd.opts), stop).await;
}

/// [`run`] with explicit settings.
pub async fn run_with(engine: Arc<Engine>, cfg: Config, stop: Arc<Notify>) {
    if cfg.address.is_empty() {
        return;
    }
    let stopped = stop.notified();
    tokio::pin!(stopped);
    stopped.as_mut().enable();

    let interval = cfg.interval.max(Duration::from_millis(1));
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let window = cfg.spread_window();
    let mut last: Option<Snapshot> = None;

    loop {
        tokio::select! {
            _ = &mut stopped => break,
            _ = ticker.tick() => {}
        }
        let socket = match connect(&cfg.address).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(
                    "failed to create UDP socket to statsd({}) - {e}",
                    cfg.address
                );
                continue;
            }
        };
        tracing::info!("STATSD: pushing stats to {}", cfg.address);
        let snap = Snapshot::of_engine(&engine, &crate::stats::Filter::default());
        let mem = cfg.mem_stats.then(MemStats::current);
        let ls = lines(
            &cfg.prefix,
            &snap,
            last.as_ref(),
            cfg.exclude_ephemeral,
            &cfg.percentiles,
            mem.as_ref(),
        );
        last = Some(snap);
        let packets = pack(&ls, cfg.packet_size);
        if spread(&socket, &packets, window, stopped.as_mut()).await {
            break;
        }
    }
    tracing::info!("STATSD: closing");
}

/// A UDP socket connected to `address` (resolved within the reference's 1 s dial timeout).
async fn connect(address: &str) -> std::io::Result<UdpSocket> {
    let resolve = async {
        tokio::net::lookup_host(address)
            .await?
            .next()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no addresses found"))
    };
    let addr = timeout(DIAL_TIMEOUT, resolve)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "i/o timeout"))??;
    let local: std::net::SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(addr).await?;
    Ok(socket)
}

/// Sends the datagrams one every `window / n`, waiting after each (the reference's
/// `SpreadWriter`). Once `stop` fires the rest go out without waiting; returns whether it did.
async fn spread(
    socket: &UdpSocket,
    packets: &[Vec<u8>],
    window: Duration,
    mut stop: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
) -> bool {
    let start = Instant::now();
    if packets.is_empty() {
        tokio::select! {
            _ = &mut stop => return true,
            _ = tokio::time::sleep(window) => return false,
        }
    }
    let step = window / packets.len() as u32;
    let mut stopped = false;
    for (i, p) in packets.iter().enumerate() {
        // Like the reference, a failed send (e.g. nothing listening) is not reported.
        let _ = socket.send(p).await;
        if !stopped {
            tokio::select! {
                _ = &mut stop => stopped = true,
                _ = tokio::time::sleep_until(start + step * (i as u32 + 1)) => {}
            }
        }
    }
    stopped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_names() {
        assert_eq!(percentile_name(0.99), "99");
        assert_eq!(percentile_name(1.0), "100");
        assert_eq!(percentile_name(0.999), "100");
        assert_eq!(percentile_name(0.5), "50");
        // Go's %.0f rounds a tie to even.
        assert_eq!(percentile_name(0.125), "12");
    }

    #[test]
    fn packing() {
        let l = |s: &str| s.to_string();
        let ls = vec![l("aaaa"), l("bbbb"), l("cccccccccccc"), l("d")];
        let p = pack(&ls, 10);
        assert_eq!(
            p,
            vec![
                b"aaaa\nbbbb\n".to_vec(),
                b"cccccccccccc\n".to_vec(),
                b"d\n".to_vec()
            ]
        );
        assert_eq!(pack(&ls, 0).len(), 1);
    }

    #[test]
    fn window() {
        let mut c = Config {
            address: String::new(),
            prefix: String::new(),
            interval: Duration::from_secs(60),
            mem_stats: false,
            packet_size: 508,
            exclude_ephemeral: false,
            percentiles: Vec::new(),
        };
        assert_eq!(c.spread_window(), Duration::from_secs(59));
        c.interval = Duration::from_secs(1);
        assert_eq!(c.spread_window(), MIN_SPREAD);
    }
}
