//! What the kernel says about a test's sockets: the backlog of a listening socket (from
//! `ss`), and the system's `net.core.somaxconn`.

use std::process::Command;

/// The system's `net.core.somaxconn` (the backlog every daemon listener should get), or
/// `None` where it cannot be read.
pub fn somaxconn() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The backlog of the listening TCP socket on `port`: `ss -ltn` shows it in the Send-Q
/// column. `None` when `ss` is missing or no such socket listens.
pub fn listen_backlog(port: u16) -> Option<u32> {
    let out = Command::new("ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // State Recv-Q Send-Q Local-Address:Port Peer-Address:Port
    text.lines().next()?.split_whitespace().nth(2)?.parse().ok()
}

/// A TCP port on 127.0.0.1 that is free now, for a daemon started later on an address that
/// another daemon must be given first (a replication peer, a lookupd). Chosen at random
/// below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`): a port from
/// `bind(:0)` is an ephemeral one, which any outgoing connection of any test may take before
/// the daemon binds it (seen as `Address already in use` in a loop of the whole suite); a
/// port below the range is only ever taken by an explicit bind.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (from, to) = (10_000u16, low.max(10_001));
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ (u64::from(std::process::id()) << 32);
    for i in 0..1000u64 {
        // A small mix of the seed and a counter: spread over the range, different per call.
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let x =
            (seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i.wrapping_mul(0xBF58_476D_1CE4_E5B9))
                .wrapping_mul(0x94D0_49BB_1331_11EB);
        let port = from + (x >> 33) as u16 % (to - from);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // Everything tried was taken: fall back to the kernel's choice.
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}
