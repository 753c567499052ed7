//! Test harness for black-box tests of the real `nsqd` binary: [`Nsqd`] starts the daemon on
//! ephemeral ports with its own data directory (like nats.rs's `nats-server` helper) and kills
//! it on drop, [`Nsqlookupd`] does the same for `nsqlookupd` (and can restart it on the same
//! ports), [`http_get`]/[`http_post`]/[`curl`] talk to its HTTP API, and [`V2Conn`] speaks
//! the raw V2 TCP protocol with the frame/command codecs of `nsq-protocol`. Everything that
//! does not start a binary (HTTP and TCP clients, [`certs`], `/stats` lookups, waiting) comes
//! from the `nsq-testkit` crate, shared with the daemon crates' own tests, and is re-exported
//! here under its old names. What the tests of the utilities share is in [`util`].
//!
//! The binaries are not built by the tests: run `cargo build -p nsqd-bin -p nsqlookupd-bin`
//! first, or set `NSQD_BIN` / `NSQLOOKUPD_BIN` to a binary.

pub use nsq_testkit::certs;
pub use nsq_testkit::{
    consume_all, curl, describe, eventually, find_channel, find_topic, have_program, http_get,
    http_post, http_request, int, wait_until, HttpResponse, ReadError, V2Conn,
};
pub mod util;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub use nsq_testkit::{Bytes, Value};

/// How long [`Nsqd::start`] waits for both "listening on" log lines.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a graceful shutdown may take before the test fails.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// The `nsqd` binary under test: `$NSQD_BIN` if set, else the newest of
/// `<target>/release/nsqd` and `<target>/debug/nsqd` (`<target>` = `$CARGO_TARGET_DIR` or the
/// workspace's `target/`). Panics with instructions when there is none.
pub fn nsqd_bin() -> PathBuf {
    find_bin("NSQD_BIN", "nsqd", "nsqd-bin")
}

/// The `nsqlookupd` binary under test: `$NSQLOOKUPD_BIN` if set, else the newest of
/// `<target>/release/nsqlookupd` and `<target>/debug/nsqlookupd`. Panics with instructions
/// (`cargo build -p nsqlookupd-bin`) when there is none.
pub fn nsqlookupd_bin() -> PathBuf {
    find_bin("NSQLOOKUPD_BIN", "nsqlookupd", "nsqlookupd-bin")
}

/// The `nsqadmin` binary under test: `$NSQADMIN_BIN` if set, else the newest of
/// `<target>/release/nsqadmin` and `<target>/debug/nsqadmin` (`cargo build -p nsqadmin-bin`).
pub fn nsqadmin_bin() -> PathBuf {
    find_bin("NSQADMIN_BIN", "nsqadmin", "nsqadmin-bin")
}

/// The `to_nsq` utility under test (`cargo build -p to_nsq-bin`); see [`util_bin`].
pub fn to_nsq_bin() -> PathBuf {
    util_bin("TO_NSQ_BIN", "to_nsq", "to_nsq-bin")
}

/// The `nsq_tail` utility under test (`cargo build -p nsq_tail-bin`); see [`util_bin`].
pub fn nsq_tail_bin() -> PathBuf {
    util_bin("NSQ_TAIL_BIN", "nsq_tail", "nsq_tail-bin")
}

/// The `nsq_to_file` utility under test (`cargo build -p nsq_to_file-bin`); see [`util_bin`].
pub fn nsq_to_file_bin() -> PathBuf {
    util_bin("NSQ_TO_FILE_BIN", "nsq_to_file", "nsq_to_file-bin")
}

/// The `nsq_to_http` utility under test (`cargo build -p nsq_to_http-bin`); see [`util_bin`].
pub fn nsq_to_http_bin() -> PathBuf {
    util_bin("NSQ_TO_HTTP_BIN", "nsq_to_http", "nsq_to_http-bin")
}

/// The `nsq_to_nsq` utility under test (`cargo build -p nsq_to_nsq-bin`); see [`util_bin`].
pub fn nsq_to_nsq_bin() -> PathBuf {
    util_bin("NSQ_TO_NSQ_BIN", "nsq_to_nsq", "nsq_to_nsq-bin")
}

/// The `nsq_stat` utility under test (`cargo build -p nsq_stat-bin`); see [`util_bin`].
pub fn nsq_stat_bin() -> PathBuf {
    util_bin("NSQ_STAT_BIN", "nsq_stat", "nsq_stat-bin")
}

/// A utility binary: `$<env>` if set, else `<name>` next to `$NSQD_BIN` if that is set and
/// holds one, else the newest `<target>/{release,debug}/<name>`.
pub fn util_bin(env: &str, name: &str, package: &str) -> PathBuf {
    if std::env::var_os(env).is_none() {
        if let Some(nsqd) = std::env::var_os("NSQD_BIN") {
            if let Some(p) = Path::new(&nsqd).parent().map(|d| d.join(name)) {
                if p.is_file() {
                    return p;
                }
            }
        }
    }
    find_bin(env, name, package)
}

/// Asserts `stderr` is one Go standard-logger line `YYYY/MM/DD HH:MM:SS <msg>`.
pub fn assert_go_log_line(stderr: &[u8], msg: &str) {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{text:?}"));
    assert!(!line.contains('\n'), "one line expected: {text:?}");
    let (stamp, rest) = line.split_at(19.min(line.len()));
    let shape: String = stamp
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    assert_eq!(shape, "9999/99/99 99:99:99", "{text:?}");
    assert_eq!(rest, format!(" {msg}"), "{text:?}");
}

/// The messages of `stderr`'s Go standard-logger lines, the `YYYY/MM/DD HH:MM:SS ` stamp of
/// each checked and stripped (as [`assert_go_log_line`] does for one line).
pub fn go_log_msgs(stderr: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .map(|line| {
            let (stamp, rest) = line.split_at(20.min(line.len()));
            let shape: String = stamp
                .chars()
                .map(|c| if c.is_ascii_digit() { '9' } else { c })
                .collect();
            assert_eq!(shape, "9999/99/99 99:99:99 ", "{text:?}");
            rest.to_string()
        })
        .collect()
}

/// Runs `program args`, feeding `stdin` and closing it, and returns its exit status, stdout
/// and stderr; kills it and panics if it has not exited within `timeout`.
pub fn run_tool(
    program: &Path,
    args: &[&str],
    stdin: &[u8],
    timeout: Duration,
) -> std::process::Output {
    let mut child = Process::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let feeder = thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = tx.send(());
        out
    });
    if rx.recv_timeout(timeout).is_err() {
        let _ = Process::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        let out = waiter.join().expect("waiter").expect("wait");
        panic!(
            "{} {args:?} did not exit within {timeout:?}; stderr:\n{}",
            program.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = feeder.join();
    waiter.join().expect("waiter").expect("wait")
}

/// `$<env>` if set, else the newest `<target>/{release,debug}/<name>`.
fn find_bin(env: &str, name: &str, package: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "{env}={} is not a file", p.display());
        return p;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let newest = ["release", "debug"]
        .iter()
        .map(|profile| target.join(profile).join(name))
        .filter_map(|p| {
            let modified = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((modified, p))
        })
        .max();
    match newest {
        Some((_, p)) => p,
        None => panic!(
            "{name} binary not found under {}: run `cargo build -p {package}` before \
             `cargo test -p nsq-integration-tests`, or set {env}",
            target.display()
        ),
    }
}

/// The workspace root (the parent of this package's directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A data directory: a temporary one owned by the test, or a path the test manages.
#[derive(Debug)]
pub enum DataDir {
    Temp(TempDir),
    Path(PathBuf),
}

impl DataDir {
    /// A fresh temporary directory, removed when dropped.
    pub fn temp() -> Self {
        DataDir::Temp(
            tempfile::Builder::new()
                .prefix("nsqd-it-")
                .tempdir()
                .expect("tempdir"),
        )
    }

    pub fn path(&self) -> &Path {
        match self {
            DataDir::Temp(t) => t.path(),
            DataDir::Path(p) => p,
        }
    }
}

impl From<TempDir> for DataDir {
    fn from(t: TempDir) -> Self {
        DataDir::Temp(t)
    }
}

impl From<PathBuf> for DataDir {
    fn from(p: PathBuf) -> Self {
        DataDir::Path(p)
    }
}

impl From<&Path> for DataDir {
    fn from(p: &Path) -> Self {
        DataDir::Path(p.to_path_buf())
    }
}

/// A running `nsqd` process on `127.0.0.1` with ephemeral TCP and HTTP ports.
///
/// Dropping it kills the process (SIGKILL) and, for a temporary data dir, removes the dir.
/// When the test is panicking, the daemon's log is printed to help diagnose the failure.
pub struct Nsqd {
    child: Option<Child>,
    pub tcp_addr: SocketAddr,
    pub http_addr: SocketAddr,
    data_dir: Option<DataDir>,
    /// Every stderr line so far, kept by the drain thread so the pipe never fills.
    log: Arc<Mutex<Vec<String>>>,
}

impl Nsqd {
    /// Starts nsqd in a fresh temporary data dir with `extra_args` appended to
    /// `--tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 --data-path=<dir>`.
    pub fn start(extra_args: &[&str]) -> Nsqd {
        Nsqd::start_in(DataDir::temp(), extra_args)
    }

    /// Starts nsqd on an existing data dir (e.g. the one returned by [`Nsqd::sigterm_and_wait`]).
    pub fn start_in(data_dir: impl Into<DataDir>, extra_args: &[&str]) -> Nsqd {
        let data_dir = data_dir.into();
        let mut cmd = Process::new(nsqd_bin());
        cmd.arg("--tcp-address=127.0.0.1:0")
            .arg("--http-address=127.0.0.1:0")
            .arg(format!("--data-path={}", data_dir.path().display()))
            .args(extra_args);
        let log = Arc::new(Mutex::new(Vec::new()));
        let (child, tcp_addr, http_addr) =
            launch(cmd, "nsqd", &log).unwrap_or_else(|e| panic!("{e}"));
        Nsqd {
            child: Some(child),
            tcp_addr,
            http_addr,
            data_dir: Some(data_dir),
            log,
        }
    }

    /// The data directory in use.
    pub fn data_path(&self) -> &Path {
        self.data_dir.as_ref().expect("data dir").path()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("child").id()
    }

    /// A copy of the daemon's stderr so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("log lock").clone()
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().expect("child").try_wait(), Ok(None))
    }

    /// Sends SIGTERM (via `kill -TERM <pid>`), waits for the process to exit, asserts it exited
    /// with status 0, and hands back the data dir for a restart.
    pub fn sigterm_and_wait(mut self) -> DataDir {
        let status = self.terminate();
        assert!(
            status.success(),
            "nsqd exited with {status} after SIGTERM; log:\n{}",
            self.log().join("\n")
        );
        self.data_dir.take().expect("data dir")
    }

    /// Sends SIGTERM and waits for exit; returns the exit status without judging it.
    pub fn terminate(&mut self) -> ExitStatus {
        let pid = self.pid();
        let sent = Process::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill -TERM");
        assert!(sent.success(), "kill -TERM {pid} failed");
        let child = self.child.as_mut().expect("child");
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                thread::sleep(Duration::from_millis(50)); // let the drain thread catch up
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "nsqd did not exit within {SHUTDOWN_TIMEOUT:?} of SIGTERM; log:\n{}",
                    self.log().join("\n")
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process with SIGKILL (a crash) and hands back the data dir.
    pub fn kill9(mut self) -> DataDir {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.data_dir.take().expect("data dir")
    }

    /// `GET /stats?format=json` as JSON.
    pub fn stats(&self) -> Value {
        let r = http_get(self.http_addr, "/stats?format=json");
        assert_eq!(r.status, 200, "/stats: {}", r.text());
        r.json()
    }

    /// The topic object of `/stats`, if the topic exists.
    pub fn topic_stats(&self, topic: &str) -> Option<Value> {
        find_topic(&self.stats(), topic).cloned()
    }

    /// The channel object of `/stats`, if it exists.
    pub fn channel_stats(&self, topic: &str, channel: &str) -> Option<Value> {
        find_channel(&self.stats(), topic, channel).cloned()
    }

    /// Polls `/stats` until `pred` holds (up to `timeout`), returning the last stats; panics
    /// with the last stats on timeout.
    pub fn wait_stats(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.stats();
            if pred(&s) {
                return s;
            }
            if Instant::now() >= deadline {
                panic!("timed out after {timeout:?} waiting for {what}; last /stats: {s}");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// A raw V2 connection (magic already sent).
    pub fn connect(&self) -> V2Conn {
        V2Conn::connect(self.tcp_addr)
    }

    /// Publishes over HTTP `/pub` and asserts `200 OK`.
    pub fn http_pub(&self, topic: &str, body: &[u8]) {
        let r = http_post(self.http_addr, &format!("/pub?topic={topic}"), body);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "OK"),
            "/pub?topic={topic}"
        );
    }

    /// `POST path` and assert 200.
    pub fn http_ok(&self, path: &str) {
        let r = http_post(self.http_addr, path, b"");
        assert_eq!(r.status, 200, "POST {path}: {}", r.text());
    }

    /// Sends a signal (`kill -<sig> <pid>`, e.g. `"TERM"`, `"INT"`) without waiting.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid();
        let sent = Process::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{sig} {pid} failed");
    }

    /// Waits up to `timeout` for the process to exit on its own and returns its status
    /// (panics with the log if it is still running then).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .expect("child")
                .try_wait()
                .expect("try_wait")
            {
                thread::sleep(Duration::from_millis(50)); // let the drain thread catch up
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "nsqd did not exit within {timeout:?}; log:\n{}",
                    self.log().join("\n")
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Hands back the data dir of an exited process (for a restart with [`Nsqd::start_in`]).
    pub fn into_data_dir(mut self) -> DataDir {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.data_dir.take().expect("data dir")
    }
}

/// Spawns `cmd` (stdin/stdout null, stderr piped into `log` by a drain thread so the pipe never
/// fills) and waits for both `TCP: listening on <addr>` and `HTTP: listening on <addr>` log
/// lines. On failure the child is reaped and the error carries the log so far.
fn launch(
    mut cmd: Process,
    what: &str,
    log: &Arc<Mutex<Vec<String>>>,
) -> Result<(Child, SocketAddr, SocketAddr), String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel::<(bool, SocketAddr)>();
    let log2 = log.clone();
    let drained = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drained2 = drained.clone();
    thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&line).trim_end().to_string();
            for (is_tcp, marker) in [(false, "HTTP: listening on "), (true, "TCP: listening on ")] {
                if let Some(at) = text.find(marker) {
                    if let Ok(addr) = text[at + marker.len()..].trim().parse::<SocketAddr>() {
                        let _ = tx.send((is_tcp, addr));
                    }
                    break;
                }
            }
            log2.lock().expect("log lock").push(text);
        }
        drained2.store(true, std::sync::atomic::Ordering::SeqCst);
    });

    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let (mut tcp, mut http) = (None, None);
    // nsqadmin has no TCP listener.
    let want_tcp = what != "nsqadmin";
    while (want_tcp && tcp.is_none()) || http.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(Duration::from_millis(100))) {
            Ok((true, a)) => tcp = Some(a),
            Ok((false, a)) => http = Some(a),
            Err(_) => {
                if let Ok(Some(status)) = child.try_wait() {
                    // Let the drain thread collect the last lines.
                    let until = Instant::now() + Duration::from_secs(2);
                    while !drained.load(std::sync::atomic::Ordering::SeqCst)
                        && Instant::now() < until
                    {
                        thread::sleep(Duration::from_millis(10));
                    }
                    return Err(format!(
                        "{what} exited during startup ({status}):\n{}",
                        log.lock().expect("log lock").join("\n")
                    ));
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{what} did not log its 'TCP: listening on' and 'HTTP: listening on' \
                         lines within {STARTUP_TIMEOUT:?}:\n{}",
                        log.lock().expect("log lock").join("\n")
                    ));
                }
            }
        }
    }
    let http = http.expect("http");
    Ok((child, tcp.unwrap_or(http), http))
}

impl Drop for Nsqd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if thread::panicking() {
                let log = self.log();
                let tail = &log[log.len().saturating_sub(200)..];
                eprintln!(
                    "---- nsqd log (last {} lines) ----\n{}",
                    tail.len(),
                    tail.join("\n")
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// nsqlookupd
// ---------------------------------------------------------------------------------------

/// A running `nsqlookupd` process on `127.0.0.1` with ephemeral TCP and HTTP ports and
/// `--broadcast-address=127.0.0.1` (so nsqd's channel pre-creation queries reach it).
///
/// [`Nsqlookupd::restart_same_ports`] brings it back on the ports it had, so nsqd configured
/// with `--lookupd-tcp-address=<tcp_addr>` keeps pointing at it. Dropping it kills the process
/// (SIGKILL); when the test is panicking, its log (all runs) is printed.
pub struct Nsqlookupd {
    child: Option<Child>,
    pub tcp_addr: SocketAddr,
    pub http_addr: SocketAddr,
    extra_args: Vec<String>,
    /// Every stderr line of every run so far.
    log: Arc<Mutex<Vec<String>>>,
}

impl Nsqlookupd {
    /// Starts nsqlookupd with `extra_args` appended to `--tcp-address=127.0.0.1:0
    /// --http-address=127.0.0.1:0 --broadcast-address=127.0.0.1`.
    pub fn start(extra_args: &[&str]) -> Nsqlookupd {
        let log = Arc::new(Mutex::new(Vec::new()));
        let extra_args: Vec<String> = extra_args.iter().map(|a| a.to_string()).collect();
        let cmd = Nsqlookupd::command("127.0.0.1:0", "127.0.0.1:0", &extra_args);
        let (child, tcp_addr, http_addr) =
            launch(cmd, "nsqlookupd", &log).unwrap_or_else(|e| panic!("{e}"));
        Nsqlookupd {
            child: Some(child),
            tcp_addr,
            http_addr,
            extra_args,
            log,
        }
    }

    fn command(tcp: &str, http: &str, extra_args: &[String]) -> Process {
        let mut cmd = Process::new(nsqlookupd_bin());
        cmd.arg(format!("--tcp-address={tcp}"))
            .arg(format!("--http-address={http}"))
            .arg("--broadcast-address=127.0.0.1")
            .args(extra_args);
        cmd
    }

    /// `http://<http_addr>`, the form client libraries take.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("nsqlookupd is not running").id()
    }

    /// A copy of the daemon's stderr so far (all runs).
    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("log lock").clone()
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills the process with SIGKILL (a crash) and reaps it. No-op if not running.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the process (SIGKILL) if it still runs, then starts a new one on the SAME TCP and
    /// HTTP ports with the same extra arguments. Retries for a while if a port cannot be bound
    /// yet; panics if it never comes up.
    pub fn restart_same_ports(&mut self) {
        self.kill9();
        let (tcp, http) = (self.tcp_addr.to_string(), self.http_addr.to_string());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.log.lock().expect("log lock").push(format!(
                "---- harness: (re)starting nsqlookupd on {tcp} / {http} ----"
            ));
            let cmd = Nsqlookupd::command(&tcp, &http, &self.extra_args);
            match launch(cmd, "nsqlookupd", &self.log) {
                Ok((child, tcp_addr, http_addr)) => {
                    assert_eq!(
                        (tcp_addr, http_addr),
                        (self.tcp_addr, self.http_addr),
                        "restarted nsqlookupd listens elsewhere"
                    );
                    self.child = Some(child);
                    return;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("nsqlookupd restart failed, retrying: {e}");
                    thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("could not restart nsqlookupd on the same ports: {e}"),
            }
        }
    }

    /// `GET path` on the HTTP port.
    pub fn get(&self, path: &str) -> HttpResponse {
        http_get(self.http_addr, path)
    }

    /// `GET path`, asserting 200, as JSON.
    pub fn get_json(&self, path: &str) -> Value {
        let r = self.get(path);
        assert_eq!(r.status, 200, "GET {path} on nsqlookupd: {}", r.text());
        r.json()
    }

    /// `POST path` (empty body) and assert 200.
    pub fn http_ok(&self, path: &str) {
        let r = http_post(self.http_addr, path, b"");
        assert_eq!(r.status, 200, "POST {path} on nsqlookupd: {}", r.text());
    }
}

impl Drop for Nsqlookupd {
    fn drop(&mut self) {
        self.kill9();
        if thread::panicking() {
            let log = self.log();
            let tail = &log[log.len().saturating_sub(200)..];
            eprintln!(
                "---- nsqlookupd log (last {} lines) ----\n{}",
                tail.len(),
                tail.join("\n")
            );
        }
    }
}

/// A running `nsqadmin` binary on an ephemeral HTTP port. Dropping it kills the process
/// (SIGKILL); when the test is panicking, its log is printed.
pub struct Nsqadmin {
    child: Child,
    pub http_addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Nsqadmin {
    /// Starts nsqadmin with `--http-address=127.0.0.1:0` and `extra_args`.
    pub fn start(extra_args: &[&str]) -> Nsqadmin {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut cmd = Process::new(nsqadmin_bin());
        cmd.arg("--http-address=127.0.0.1:0").args(extra_args);
        let (child, _, http_addr) = launch(cmd, "nsqadmin", &log).unwrap_or_else(|e| panic!("{e}"));
        Nsqadmin {
            child,
            http_addr,
            log,
        }
    }

    /// A copy of the daemon's stderr so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("log lock").clone()
    }

    /// `GET path` on the HTTP API.
    pub fn get(&self, path: &str) -> HttpResponse {
        http_get(self.http_addr, path)
    }
}

impl Drop for Nsqadmin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("---- nsqadmin log ----\n{}", self.log().join("\n"));
        }
    }
}
