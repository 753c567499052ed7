//! Two in-process nsqd replicating (issue 22, docs/replication.md), shared by the
//! replication tests: A publishes with `--replicas=2` and B as its peer; B keeps A's backlog.

use std::path::Path;

use nsqd::replication::BacklogInfo;
use nsqd::NsqdHandle;
use tempfile::TempDir;

/// A free TCP port on 127.0.0.1 for a daemon started later (`nsq_testkit::free_port`: not
/// an ephemeral one, which another socket could take meanwhile).
pub fn free_port() -> u16 {
    nsq_testkit::free_port()
}

/// A daemon on `dir` with `extra` flags, a small replica segment size (so trimming shows),
/// once the replica backlogs it holds are replayed.
pub async fn start_on(dir: &Path, extra: &[String]) -> NsqdHandle {
    let mut o = super::options(dir, extra);
    o.replication_segment_bytes = 2048;
    super::start_replayed(o).await
}

pub struct Pair {
    pub a: NsqdHandle,
    pub b: Option<NsqdHandle>,
    pub a_dir: TempDir,
    pub b_dir: TempDir,
    pub b_port: u16,
}

impl Pair {
    /// A: `--replicas=2 --replication-peer=B` plus `a_extra`; B: `--replication-peer=A`.
    pub async fn start(a_extra: &[&str]) -> Pair {
        Pair::start_with(a_extra, &[]).await
    }

    /// [`Pair::start`] with `b_extra` for B.
    pub async fn start_with(a_extra: &[&str], b_extra: &[&str]) -> Pair {
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let b_port = free_port();
        let mut args = vec![
            "--replicas=2".to_string(),
            format!("--replication-peer=127.0.0.1:{b_port}"),
        ];
        args.extend(a_extra.iter().map(|s| s.to_string()));
        let a = start_on(a_dir.path(), &args).await;
        let mut p = Pair {
            a,
            b: None,
            a_dir,
            b_dir,
            b_port,
        };
        p.start_b_with(b_extra).await;
        p
    }

    pub async fn start_b(&mut self) {
        self.start_b_with(&[]).await;
    }

    pub async fn start_b_with(&mut self, extra: &[&str]) {
        let mut args = vec![
            format!("--tcp-address=127.0.0.1:{}", self.b_port),
            format!("--replication-peer={}", self.a.tcp_addr()),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        self.b = Some(start_on(self.b_dir.path(), &args).await);
    }

    pub fn b(&self) -> &NsqdHandle {
        self.b.as_ref().expect("B running")
    }

    pub fn a_node(&self) -> u64 {
        self.a.nsqd.replication.as_ref().unwrap().identity.node_id
    }

    /// B's backlog of A.
    pub fn backlog(&self) -> Option<BacklogInfo> {
        let node = self.a_node();
        self.b()
            .nsqd
            .replication
            .as_ref()
            .unwrap()
            .backlogs()
            .into_iter()
            .find(|b| b.origin == node)
    }

    /// The segment files of B's backlog of A on disk: (count, bytes).
    pub fn backlog_files(&self) -> (usize, u64) {
        let epoch = self.backlog().unwrap().epoch;
        let dir = nsq_core::replica::backlog_dir(self.b_dir.path(), self.a_node(), epoch);
        let mut n = 0;
        let mut bytes = 0;
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.file_name().to_string_lossy().ends_with(".seg") {
                n += 1;
                bytes += e.metadata().unwrap().len();
            }
        }
        (n, bytes)
    }

    /// The messages B's backlog of A holds (0 without one).
    pub fn replicated(&self) -> u64 {
        self.backlog().map_or(0, |b| b.messages)
    }

    /// Stops B, then A.
    pub async fn shutdown(mut self) {
        if let Some(b) = self.b.take() {
            b.shutdown().await;
        }
        self.a.shutdown().await;
    }
}
