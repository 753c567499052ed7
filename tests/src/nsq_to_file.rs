//! Helpers for the `nsq_to_file` black-box tests: where the binary is, and a running tool
//! process whose stderr is collected (so the pipe never fills), that can be signalled and is
//! killed on drop.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `nsq_to_file` utility under test (`cargo build -p nsq_to_file-bin`); see
/// [`crate::util_bin`].
pub fn nsq_to_file_bin() -> PathBuf {
    crate::util_bin("NSQ_TO_FILE_BIN", "nsq_to_file", "nsq_to_file-bin")
}

/// A running `nsq_to_file`.
pub struct Running {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Running {
    /// Starts `nsq_to_file args`.
    pub fn start(args: &[&str]) -> Running {
        let mut child = Command::new(nsq_to_file_bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nsq_to_file");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().expect("stderr lock");
                s.push_str(&line);
                s.push('\n');
            }
        });
        Running { child, stderr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// `kill -<sig> <pid>`.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([format!("-{sig}"), self.pid().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{sig} failed");
    }

    /// Waits for the exit (panics with stderr after `timeout`).
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "nsq_to_file still running after {timeout:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls `pred` every 50 ms until it holds (panics with stderr after `timeout`).
    pub fn wait_for(&self, what: &str, timeout: Duration, mut pred: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !pred() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; nsq_to_file stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("nsq_to_file stderr:\n{}", self.stderr());
        }
    }
}
