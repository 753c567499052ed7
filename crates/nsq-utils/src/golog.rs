//! Go's standard logger as the utilities use it (`log.Printf`, `log.Fatal`, default flags
//! `LstdFlags`): `YYYY/MM/DD HH:MM:SS <message>` on stderr; `Fatal` then exits with status 1.
//! Times are UTC (the reference prints local time; the machines we run on are on UTC).

use std::io::Write;

/// The `YYYY/MM/DD HH:MM:SS` stamp of Go's `log.LstdFlags`.
pub fn timestamp() -> String {
    nsq_http::logging::go_log_stamp(false)
}

/// `log.Printf`: one line on stderr (a trailing newline in `msg` is not doubled, as in Go).
pub fn log(msg: &str) {
    let line = format!(
        "{} {}\n",
        timestamp(),
        msg.strip_suffix('\n').unwrap_or(msg)
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `log.Fatal`: the line, then exit status 1.
pub fn fatal(msg: &str) -> ! {
    log(msg);
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamp_shape() {
        let t = super::timestamp();
        assert_eq!(t.len(), 19, "{t}");
        assert_eq!(&t[4..5], "/");
        assert_eq!(&t[10..11], " ");
    }
}
