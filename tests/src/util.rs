//! What the black-box tests of the utilities (tests/tests/util_*.rs) share: a running tool
//! whose stderr is collected and that can be signalled ([`Tool`]), publishing a batch of
//! bodies ([`publish`]), waiting for a channel to be drained ([`wait_finished`]), an nsqd
//! registered with an nsqlookupd ([`nsqd_registered_with`], [`wait_registered`]), and the
//! command-line checks every tool gets ([`assert_fatal`], [`assert_usage_error`],
//! [`assert_version`], [`assert_help_lists`]).

use std::io::Read;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::{assert_go_log_line, find_channel, int, run_tool, Bytes, Nsqd, Nsqlookupd, Value};

/// How long the helpers here wait for a tool or a daemon before failing the test (they
/// return as soon as what they wait for has happened).
pub const PATIENCE: Duration = Duration::from_secs(300);

/// A running utility: stdout discarded, stderr collected by a thread (so the pipe never
/// fills); killed on drop, and its stderr printed then if the test is failing.
pub struct Tool {
    name: String,
    child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl Tool {
    /// Starts `bin args` with stdin from /dev/null.
    pub fn start(bin: &Path, args: &[&str]) -> Tool {
        Tool::spawn(bin, args, Stdio::null())
    }

    /// Starts `bin args` with a pipe to its stdin, which the caller holds (and closes by
    /// dropping it).
    pub fn start_with_stdin(bin: &Path, args: &[&str]) -> (Tool, ChildStdin) {
        let mut tool = Tool::spawn(bin, args, Stdio::piped());
        let stdin = tool.child.stdin.take().expect("stdin");
        (tool, stdin)
    }

    fn spawn(bin: &Path, args: &[&str], stdin: Stdio) -> Tool {
        let name = bin.file_name().map_or_else(
            || bin.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut child = Command::new(bin)
            .args(args)
            .stdin(stdin)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut pipe = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        let reader = thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .expect("stderr lock")
                    .extend_from_slice(&buf[..n]);
            }
        });
        Tool {
            name,
            child,
            stderr,
            reader: Some(reader),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr lock")).into_owned()
    }

    /// `kill -<sig> <pid>` (`"TERM"`, `"INT"`, `"HUP"`, `"KILL"`).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([format!("-{sig}"), self.pid().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{sig} {} failed", self.name);
    }

    /// Waits for the exit (panics with stderr after `timeout`); stderr is complete once this
    /// returns.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "{} still running after {timeout:?}; stderr:\n{}",
                self.name,
                self.stderr()
            );
            thread::sleep(Duration::from_millis(20));
        };
        // The reader ends with the pipe, which closed with the process.
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        status
    }

    /// Sends `sig`, waits for the exit; returns the status and everything written to stderr.
    pub fn stop(mut self, sig: &str) -> (ExitStatus, String) {
        self.signal(sig);
        let status = self.wait(PATIENCE);
        (status, self.stderr())
    }

    /// [`Tool::stop`] that asserts exit status 0; returns stderr.
    pub fn stop_ok(self, sig: &str) -> String {
        let name = self.name.clone();
        let (status, err) = self.stop(sig);
        assert_eq!(
            status.code(),
            Some(0),
            "{name} after SIG{sig}; stderr:\n{err}"
        );
        err
    }

    /// Polls `pred` every 50 ms until it holds (panics with stderr after `timeout`).
    pub fn wait_for(&self, what: &str, timeout: Duration, mut pred: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !pred() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; {} stderr:\n{}",
                self.name,
                self.stderr()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("{} stderr:\n{}", self.name, self.stderr());
        }
    }
}

/// Publishes `bodies` to `topic` in order, over TCP, as MPUBs of up to 1000.
pub fn publish<B: AsRef<[u8]>>(nsqd: &Nsqd, topic: &str, bodies: &[B]) {
    let mut c = nsqd.connect();
    for chunk in bodies.chunks(1000) {
        c.mpublish(
            topic,
            chunk
                .iter()
                .map(|b| Bytes::copy_from_slice(b.as_ref()))
                .collect(),
        );
    }
}

/// Waits until `topic/channel` has received `n` messages and has none left queued, in
/// flight or deferred (every one finished); returns the channel's stats.
pub fn wait_finished(nsqd: &Nsqd, topic: &str, channel: &str, n: i64) -> Value {
    let stats = nsqd.wait_stats(
        &format!("{n} messages finished on {topic}/{channel}"),
        PATIENCE,
        |s| {
            find_channel(s, topic, channel).is_some_and(|c| {
                int(c, "message_count") == n
                    && int(c, "depth") == 0
                    && int(c, "in_flight_count") == 0
                    && int(c, "deferred_count") == 0
            })
        },
    );
    find_channel(&stats, topic, channel)
        .expect("channel")
        .clone()
}

/// An nsqd that registers with `lookupd` (broadcasting 127.0.0.1).
pub fn nsqd_registered_with(lookupd: &Nsqlookupd) -> Nsqd {
    let reg = format!("--lookupd-tcp-address={}", lookupd.tcp_addr);
    Nsqd::start(&["--broadcast-address=127.0.0.1", &reg])
}

/// Waits until `lookupd` answers `/lookup?topic=<topic>` with 200.
pub fn wait_registered(lookupd: &Nsqlookupd, topic: &str) {
    let deadline = Instant::now() + PATIENCE;
    while lookupd.get(&format!("/lookup?topic={topic}")).status != 200 {
        assert!(Instant::now() < deadline, "no registration of {topic}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts the exit status, showing stderr if it differs.
#[track_caller]
pub fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `bin args` (stdin empty) and asserts exit status 1 with `msg` as the one Go log line.
#[track_caller]
pub fn assert_fatal(bin: &Path, args: &[&str], msg: &str) {
    let out = run_tool(bin, args, b"", PATIENCE);
    assert_eq!(out.status.code(), Some(1), "{args:?}");
    assert_go_log_line(&out.stderr, msg);
}

/// Runs `bin args` and asserts a command-line error: exit status 2, stderr `first`, then the
/// usage text of `program`.
#[track_caller]
pub fn assert_usage_error(bin: &Path, program: &str, args: &[&str], first: &str) {
    let out = run_tool(bin, args, b"", PATIENCE);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!("{first}\nUsage of {program}:\n")),
        "{err}"
    );
}

/// Whether `line` (a Go standard-logger line) is one of go-nsq's own lines, which every tool
/// prints through go-nsq's default logger: `INF    1 [t/c] (addr) connecting to nsqd`.
pub fn is_go_nsq_line(line: &str) -> bool {
    let msg = line.get(20..).unwrap_or("");
    let (lvl, rest) = msg.split_at(msg.len().min(4));
    matches!(lvl, "DBG " | "INF " | "WRN " | "ERR ")
        && rest.len() > 4
        && rest[..4].trim_start().chars().all(|c| c.is_ascii_digit())
        && rest.as_bytes()[3] != b' '
        && rest.as_bytes()[4] == b' '
}

/// `stderr` without go-nsq's own lines: what the tool itself logged.
pub fn tool_lines(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !is_go_nsq_line(l))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `bin -h` exits 0 and its usage text (stderr) starts `Usage of <program>:`. A Go tool
/// whose flags live on the global `flag.CommandLine` names itself by `os.Args[0]`, the path
/// it was started as ([`argv0`]).
#[track_caller]
pub fn assert_help_header(bin: &Path, program: &str) {
    let out = run_tool(bin, &["-h"], b"", PATIENCE);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with(&format!("Usage of {program}:\n")), "{err}");
}

/// The `os.Args[0]` a tool started by [`run_tool`] sees: the binary's path.
pub fn argv0(bin: &Path) -> String {
    bin.to_string_lossy().into_owned()
}

/// `bin --version` prints `<program> v1.3.0` and exits 0.
#[track_caller]
pub fn assert_version(bin: &Path, program: &str) {
    let out = run_tool(bin, &["--version"], b"", PATIENCE);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, format!("{program} v1.3.0\n").into_bytes());
}

/// `bin -h` exits 0 and its usage text (stderr) has a line `  <flag>\n` for each of `flags`;
/// returns the text.
#[track_caller]
pub fn assert_help_lists(bin: &Path, flags: &[&str]) -> String {
    let out = run_tool(bin, &["-h"], b"", PATIENCE);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    for flag in flags {
        assert!(err.contains(&format!("  {flag}\n")), "{flag}: {err}");
    }
    err
}
