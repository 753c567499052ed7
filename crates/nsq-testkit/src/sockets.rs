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
