//! `GET /metrics`: nsqadmin's own health in the Prometheus text exposition format
//! (nsqio/nsq #732): how many requests it sent to each upstream (nsqlookupd, nsqd, Graphite,
//! the notification endpoint) and how many of them failed, plus the standard `process_*`
//! families. The cluster's own numbers are scraped from nsqd and nsqlookupd directly;
//! docs/metrics.md lists every family.
//!
//! The counters are process-wide statics fed by [`crate::client::HttpClient`] (one nsqadmin
//! runs per process; in-process tests that start several admins share the counts).

use std::collections::BTreeMap;

use nsq_prometheus::process::ProcessStats;
use nsq_prometheus::{Exposition, Kind};
use parking_lot::Mutex;

/// Why an upstream request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// No answer: bad URL, connect error or timeout, I/O error, unparsable response.
    Transport,
    /// An answer whose status was not 200 (`GETV1`/`POSTV1`).
    Status,
}

impl Failure {
    fn as_str(self) -> &'static str {
        match self {
            Failure::Transport => "transport",
            Failure::Status => "status",
        }
    }
}

/// Upstream `host:port` → requests sent. A short lock: one map update per request.
static REQUESTS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
/// (upstream `host:port`, failure) → failed requests.
static ERRORS: Mutex<BTreeMap<(String, Failure), u64>> = Mutex::new(BTreeMap::new());

/// The `host:port` label of a URL (the URL itself, when it does not parse).
fn upstream(url: &str) -> String {
    crate::client::upstream(url)
}

/// Counts one request to `url`.
pub(crate) fn request_sent(url: &str) {
    *REQUESTS.lock().entry(upstream(url)).or_default() += 1;
}

/// Counts one failed request to `url`.
pub(crate) fn request_failed(url: &str, why: Failure) {
    *ERRORS.lock().entry((upstream(url), why)).or_default() += 1;
}

/// Renders the whole exposition.
pub fn render() -> String {
    let mut e = Exposition::new();
    e.family(
        "nsq_admin_info",
        Kind::Gauge,
        "Always 1; the label carries the nsqadmin version.",
    )
    .sample(
        "nsq_admin_info",
        &[("version", crate::options::VERSION)],
        1.0,
    );
    let name = "nsq_admin_upstream_requests_total";
    e.family(
        name,
        Kind::Counter,
        "HTTP requests nsqadmin sent to an upstream (nsqlookupd, nsqd, Graphite, notification endpoint).",
    );
    for (up, n) in REQUESTS.lock().iter() {
        e.sample(name, &[("upstream", up)], *n as f64);
    }
    let name = "nsq_admin_upstream_request_errors_total";
    e.family(
        name,
        Kind::Counter,
        "Upstream HTTP requests that failed: reason=\"transport\" (no answer) or \"status\" (not 200).",
    );
    for ((up, why), n) in ERRORS.lock().iter() {
        e.sample(
            name,
            &[("upstream", up), ("reason", why.as_str())],
            *n as f64,
        );
    }
    ProcessStats::read().write(&mut e);
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_upstream_and_reason() {
        request_sent("http://127.0.0.9:4161/topics");
        request_sent("http://127.0.0.9:4161/nodes");
        request_failed("http://127.0.0.9:4161/nodes", Failure::Status);
        request_failed("not a url", Failure::Transport);
        let text = render();
        assert!(text.contains("nsq_admin_upstream_requests_total{upstream=\"127.0.0.9:4161\"} 2\n"));
        assert!(text.contains(
            "nsq_admin_upstream_request_errors_total{upstream=\"127.0.0.9:4161\",reason=\"status\"} 1\n"
        ));
        assert!(text.contains(
            "nsq_admin_upstream_request_errors_total{upstream=\"not a url\",reason=\"transport\"} 1\n"
        ));
    }
}
