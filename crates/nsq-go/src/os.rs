//! What Go's `os` package gives the daemons: the host name as `os.Hostname` finds it, and
//! I/O errors in the `*PathError` text (`open /x: no such file or directory`).

/// The machine's host name, as Go's `os.Hostname` finds it on Linux: `/proc/sys/kernel/hostname`,
/// else `$HOSTNAME`, else `localhost`. It is the default of every `--broadcast-address` and the
/// input of nsqd's default `--node-id`.
pub fn hostname() -> String {
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let s = s.trim();
        if !s.is_empty() {
            return s.to_string();
        }
    }
    match std::env::var("HOSTNAME") {
        Ok(s) if !s.trim().is_empty() => s.trim().to_string(),
        _ => "localhost".to_string(),
    }
}

/// An I/O error in Go's `*PathError` form: `open /x: no such file or directory`.
pub fn path_error(op: &str, path: &str, e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(p) => &text[..p],
        None => &text,
    };
    let mut chars = text.chars();
    let lowered = match chars.next() {
        Some(c) => c.to_lowercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    };
    format!("{op} {path}: {lowered}")
}
