//! Engine options (the subset of nsqd's flags the queue engine needs) and the health flag.

use std::path::PathBuf;
use std::time::Duration;

use parking_lot::Mutex;

/// Queue-engine settings, with the reference nsqd's defaults.
#[derive(Debug, Clone)]
pub struct Options {
    pub data_path: PathBuf,
    /// Capacity of each topic's and channel's in-memory queue (`--mem-queue-size`).
    pub mem_queue_size: usize,
    pub max_bytes_per_file: i64,
    pub sync_every: i64,
    pub sync_timeout: Duration,
    /// `--max-msg-size`; diskqueue records may be up to this + 26 bytes.
    pub max_msg_size: i64,
    pub max_msg_timeout: Duration,
    /// `--max-channel-consumers` (0 = unlimited).
    pub max_channel_consumers: usize,
    pub node_id: i64,
    pub queue_scan: ScanOptions,
    /// `--e2e-processing-latency-percentile`, sorted descending (empty = disabled).
    pub e2e_percentiles: Vec<f64>,
    pub e2e_window: Duration,
    /// Publishes are acknowledged only once fdatasync'd (`--durable`, or `--sync-every=1`):
    /// topics fill a [`crate::PutReceipt`] for the daemon to await before its OK.
    pub durable: bool,
    /// Keep a disk reserve for what memory holds, so a clean shutdown can always write it out
    /// (see [`crate::reserve`]). nsqd turns it on; off for tests and tools that embed the
    /// engine without a data directory of their own.
    pub reserve: bool,
    /// The node's default queue settings (`--max-queue-depth`, …; see
    /// [`crate::queue_settings`]): what a topic or channel without its own value uses.
    pub queue_defaults: crate::queue_settings::QueueSettings,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            data_path: PathBuf::from("."),
            mem_queue_size: 10_000,
            max_bytes_per_file: 100 * 1024 * 1024,
            sync_every: 2500,
            sync_timeout: Duration::from_secs(2),
            max_msg_size: 1024 * 1024,
            max_msg_timeout: Duration::from_secs(15 * 60),
            max_channel_consumers: 0,
            node_id: 0,
            queue_scan: ScanOptions::default(),
            e2e_percentiles: Vec::new(),
            e2e_window: Duration::from_secs(600),
            durable: false,
            reserve: false,
            queue_defaults: Default::default(),
        }
    }
}

/// The queue scanner's knobs (`--queue-scan-*`).
#[derive(Debug, Clone)]
pub struct ScanOptions {
    pub interval: Duration,
    pub refresh_interval: Duration,
    pub selection_count: usize,
    pub worker_pool_max: usize,
    /// Fraction of sampled channels that must be dirty to loop again at once.
    pub dirty_percent: f64,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            interval: Duration::from_millis(100),
            refresh_interval: Duration::from_secs(5),
            selection_count: 20,
            worker_pool_max: 4,
            dirty_percent: 0.25,
        }
    }
}

/// nsqd's health: the result of the last attempted disk write (`/ping` → `NOK - <err>`).
#[derive(Debug, Default)]
pub struct Health {
    last_error: Mutex<Option<String>>,
}

impl Health {
    /// Records the outcome of a backend write.
    pub fn record<T, E: std::fmt::Display>(&self, r: &Result<T, E>) {
        match r {
            Ok(_) => {
                let mut g = self.last_error.lock();
                if g.is_some() {
                    *g = None;
                }
            }
            Err(e) => *self.last_error.lock() = Some(e.to_string()),
        }
    }

    /// Clears the error if it is still `seen` (a write that failed since keeps its own);
    /// `true` when it cleared it. For a check that found the disk writable again.
    pub fn clear_if(&self, seen: &str) -> bool {
        let mut g = self.last_error.lock();
        if g.as_deref() == Some(seen) {
            *g = None;
            true
        } else {
            false
        }
    }

    /// `None` when healthy, else the last error text.
    pub fn error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    pub fn is_healthy(&self) -> bool {
        self.last_error.lock().is_none()
    }

    /// The string `/stats` reports: `OK` or `NOK - <error>`.
    pub fn status(&self) -> String {
        match self.error() {
            None => "OK".to_string(),
            Some(e) => format!("NOK - {e}"),
        }
    }
}
