//! The standard `process_*` metrics every Prometheus client library exports (names as in
//! prometheus/client_golang's process collector, so existing dashboards work), read from
//! `/proc/self` on Linux. Elsewhere, or when a file cannot be read, the affected metrics are
//! left out rather than reported as 0.

use crate::{Exposition, Kind};

/// Linux reports `/proc/<pid>/stat` times in `USER_HZ` ticks, fixed at 100 on every
/// architecture Linux supports (the kernel's `USER_HZ`, see proc(5)).
const USER_HZ: f64 = 100.0;

/// One reading of the process's resources.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: Option<f64>,
    pub resident_memory_bytes: Option<f64>,
    pub virtual_memory_bytes: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub start_time_seconds: Option<f64>,
    pub threads: Option<f64>,
}

impl ProcessStats {
    /// Reads `/proc/self/{stat,status,fd,limits}` and `/proc/stat`.
    pub fn read() -> ProcessStats {
        let mut p = ProcessStats::default();
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            let btime = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|s| boot_time(&s));
            parse_stat(&stat, btime, &mut p);
        }
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            p.resident_memory_bytes = vm_rss_bytes(&status);
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            // The directory handle itself is one of the entries; client_golang counts it too.
            p.open_fds = Some(dir.count() as f64);
        }
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
            p.max_fds = max_open_files(&limits);
        }
        p
    }

    /// Appends the families that could be read.
    pub fn write(&self, e: &mut Exposition) {
        let rows: [(&str, Kind, &str, Option<f64>); 7] = [
            (
                "process_cpu_seconds_total",
                Kind::Counter,
                "Total user and system CPU time spent in seconds.",
                self.cpu_seconds,
            ),
            (
                "process_resident_memory_bytes",
                Kind::Gauge,
                "Resident memory size in bytes.",
                self.resident_memory_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                Kind::Gauge,
                "Virtual memory size in bytes.",
                self.virtual_memory_bytes,
            ),
            (
                "process_open_fds",
                Kind::Gauge,
                "Number of open file descriptors.",
                self.open_fds,
            ),
            (
                "process_max_fds",
                Kind::Gauge,
                "Maximum number of open file descriptors.",
                self.max_fds,
            ),
            (
                "process_start_time_seconds",
                Kind::Gauge,
                "Start time of the process since unix epoch in seconds.",
                self.start_time_seconds,
            ),
            (
                "process_threads",
                Kind::Gauge,
                "Number of OS threads in the process.",
                self.threads,
            ),
        ];
        for (name, kind, help, value) in rows {
            if let Some(v) = value {
                e.single(name, kind, help, v);
            }
        }
    }
}

/// `/proc/stat`'s `btime` line: boot time in Unix seconds.
fn boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `/proc/self/stat`: the fields after the parenthesised command name (which may itself
/// contain spaces and parentheses, hence the last `)`), numbered as in proc(5).
fn parse_stat(stat: &str, btime: Option<f64>, p: &mut ProcessStats) {
    let Some(close) = stat.rfind(')') else { return };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // fields[0] is proc(5)'s field 3 (state).
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    if let (Some(utime), Some(stime)) = (field(14), field(15)) {
        p.cpu_seconds = Some((utime + stime) / USER_HZ);
    }
    p.threads = field(20);
    if let (Some(start), Some(btime)) = (field(22), btime) {
        p.start_time_seconds = Some(btime + start / USER_HZ);
    }
    p.virtual_memory_bytes = field(23);
}

/// `/proc/self/status`' `VmRSS:   1234 kB`.
fn vm_rss_bytes(status: &str) -> Option<f64> {
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024.0)
}

/// `/proc/self/limits`' soft limit of `Max open files` (`unlimited` → none).
fn max_open_files(limits: &str) -> Option<f64> {
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    rest.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 150 0 0 20 0 \
                    7 0 5000 123456789 900 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let mut p = ProcessStats::default();
        parse_stat(stat, Some(1_700_000_000.0), &mut p);
        assert_eq!(p.cpu_seconds, Some(4.0));
        assert_eq!(p.threads, Some(7.0));
        assert_eq!(p.start_time_seconds, Some(1_700_000_050.0));
        assert_eq!(p.virtual_memory_bytes, Some(123_456_789.0));
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000.0)
        );
        assert_eq!(
            vm_rss_bytes("Name:\tx\nVmRSS:\t   2048 kB\n"),
            Some(2048.0 * 1024.0)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 4096                 files\n";
        assert_eq!(max_open_files(limits), Some(1024.0));
    }

    #[test]
    fn reads_this_process() {
        if !std::path::Path::new("/proc/self/stat").exists() {
            eprintln!("skipping: no /proc on this system");
            return;
        }
        let p = ProcessStats::read();
        assert!(p.resident_memory_bytes.unwrap() > 0.0);
        assert!(p.open_fds.unwrap() >= 3.0);
        assert!(p.start_time_seconds.unwrap() > 1_000_000_000.0);
        let mut e = Exposition::new();
        p.write(&mut e);
        let text = e.finish();
        assert!(text.contains("# TYPE process_cpu_seconds_total counter\n"));
        assert!(text.contains("\nprocess_open_fds "));
    }
}
