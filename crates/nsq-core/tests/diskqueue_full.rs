//! DiskQueue on a full disk: a put that does not fit fails with nothing of it counted or left
//! behind (no later read and no restart delivers a record that was never acknowledged), the
//! queue stays usable and puts succeed again once space returns; a failed rotation is the same;
//! a failed metadata write is logged and retried, never fatal.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nsq_core::backend::{BackendError, BackendQueue, WriteTicket};
use nsq_core::diskqueue::{DiskQueue, DiskQueueOptions};

fn opts(dir: &Path, max_bytes_per_file: i64) -> DiskQueueOptions {
    DiskQueueOptions {
        data_path: dir.to_path_buf(),
        max_bytes_per_file,
        min_msg_size: 26,
        max_msg_size: 1024 * 1024 + 26,
        sync_every: 2500,
        sync_timeout: Duration::from_millis(50),
    }
}

fn data_file(dir: &Path, name: &str, n: i64) -> PathBuf {
    dir.join(format!("{name}.diskqueue.{n:06}.dat"))
}

fn meta_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.diskqueue.meta.dat"))
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    let mut p = format!("{i:026}").into_bytes();
    p.resize(len.max(26), b'f');
    p
}

fn read_all(q: &DiskQueue) -> Vec<Bytes> {
    let mut out = Vec::new();
    while q.read_batch(1000, &mut out) > 0 {}
    out
}

fn is_enospc(e: &BackendError) -> bool {
    matches!(e, BackendError::Io(io) if io.raw_os_error() == Some(28))
}

/// Puts `n` records with ids from `next`; on success they count as acknowledged.
fn put_batch(
    q: &DiskQueue,
    acked: &mut Vec<Vec<u8>>,
    next: &mut usize,
    n: usize,
    len: usize,
) -> Result<WriteTicket, BackendError> {
    let batch: Vec<Vec<u8>> = (0..n).map(|k| payload(*next + k, len)).collect();
    *next += n;
    let t = q.put_batch(n, &mut |i, out| out.extend_from_slice(&batch[i]))?;
    acked.extend(batch);
    Ok(t)
}

fn assert_exactly(got: &[Bytes], acked: &[Vec<u8>]) {
    assert_eq!(got.len(), acked.len(), "delivered vs acknowledged");
    for (k, (g, a)) in got.iter().zip(acked).enumerate() {
        assert_eq!(g.as_ref(), a.as_slice(), "record {k}");
    }
}

/// A 2 MiB tmpfs mounted on a temp dir for the test's lifetime.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount() -> Option<Tmpfs> {
        // Root check: the effective uid in /proc/self/status.
        let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
        let root = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0");
        if !root {
            println!("SKIP: not root, cannot mount a small tmpfs to fill");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(dir.path())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            println!("SKIP: mount -t tmpfs failed (no CAP_SYS_ADMIN?)");
            return None;
        }
        Some(Tmpfs { dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn full_disk_fails_puts_cleanly_and_resumes_when_space_returns() {
    let Some(fsys) = Tmpfs::mount() else { return };
    let d = fsys.dir.path();
    // Leave ~600 KiB for the queue; 256 KiB files so batches also fail mid-rotation.
    let filler = d.join("filler");
    fs::write(&filler, vec![0u8; 1400 * 1024]).unwrap();
    let name = "full";
    let q = DiskQueue::open(name, opts(d, 256 * 1024)).unwrap();
    let (mut acked, mut next) = (Vec::new(), 0usize);
    let mut failures = 0;
    for round in 0..200 {
        // Alternate big batches (partial writes, rotations) and single records.
        let (n, len) = if round % 3 == 2 {
            (1, 500)
        } else {
            (100, 1000)
        };
        match put_batch(&q, &mut acked, &mut next, n, len) {
            Ok(_) => {}
            Err(e) => {
                assert!(is_enospc(&e), "unexpected error {e}");
                failures += 1;
                assert_eq!(q.depth(), acked.len() as i64, "a failed put counted");
            }
        }
    }
    assert!(failures > 50, "the disk never filled ({failures} failures)");
    assert!(!acked.is_empty());
    // Full disk: sync fails or succeeds, but never makes the queue unusable.
    let _ = q.sync();
    let _ = q.close();
    // Restart while the disk is still full: opens, nothing but acknowledged records.
    let q = DiskQueue::open(name, opts(d, 256 * 1024)).unwrap();
    assert_exactly(&read_all(&q), &acked);
    // Space returns (the reader freed files, and the filler goes): puts work again.
    fs::remove_file(&filler).unwrap();
    let mut acked2 = Vec::new();
    for _ in 0..5 {
        put_batch(&q, &mut acked2, &mut next, 100, 1000).expect("puts work once space returns");
    }
    q.close().unwrap();
    let q = DiskQueue::open(name, opts(d, 256 * 1024)).unwrap();
    assert_exactly(&read_all(&q), &acked2);
    q.close().unwrap();
}

#[test]
fn failed_rotation_leaves_nothing_behind() {
    // The next data file is /dev/full: every write to it fails with ENOSPC (works unprivileged).
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let name = "rot";
    let q = DiskQueue::open(name, opts(d, 1000)).unwrap();
    let (mut acked, mut next) = (Vec::new(), 0usize);
    let first = put_batch(&q, &mut acked, &mut next, 5, 96).unwrap(); // 500 bytes in file 0
    std::os::unix::fs::symlink("/dev/full", data_file(d, name, 1)).unwrap();
    // 10 records: 5 fit in file 0, the rest would rotate into file 1.
    // (Opening it fails first: /dev/full cannot be truncated; any error must roll back.)
    let e = put_batch(&q, &mut acked, &mut next, 10, 96).unwrap_err();
    assert!(matches!(e, BackendError::Io(_)), "{e}");
    assert_eq!(q.depth(), 5);
    assert_eq!(
        fs::metadata(data_file(d, name, 0)).unwrap().len(),
        500,
        "file 0 cut back"
    );
    // The records acknowledged before the failure still get a real fdatasync.
    let syncs = q.data_syncs();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(q.wait_durable(first)).unwrap();
    assert!(
        q.data_syncs() > syncs,
        "wait_durable returned without syncing file 0"
    );
    assert!(
        fs::symlink_metadata(data_file(d, name, 1)).is_err(),
        "rotated-into file removed"
    );
    // Usable again: the same batch now rotates into a real file 1.
    put_batch(&q, &mut acked, &mut next, 10, 96).unwrap();
    assert_eq!(q.depth(), 15);
    q.close().unwrap();
    let q = DiskQueue::open(name, opts(d, 1000)).unwrap();
    assert_exactly(&read_all(&q), &acked);
    q.close().unwrap();
}

#[test]
fn failed_write_to_current_file_is_rolled_back() {
    // The current write file is /dev/full from the start: the first put fails, the next one
    // (after the file is replaced) succeeds, and only it is ever delivered.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let name = "cur";
    std::os::unix::fs::symlink("/dev/full", data_file(d, name, 0)).unwrap();
    let q = DiskQueue::open(name, opts(d, 1 << 20)).unwrap();
    let (mut acked, mut next) = (Vec::new(), 0usize);
    assert!(put_batch(&q, &mut acked, &mut next, 3, 100).is_err());
    assert_eq!(q.depth(), 0);
    fs::remove_file(data_file(d, name, 0)).unwrap();
    put_batch(&q, &mut acked, &mut next, 3, 100).unwrap();
    assert_exactly(&read_all(&q), &acked);
    q.close().unwrap();
}

#[test]
fn metadata_write_failure_is_not_fatal_and_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let name = "mf";
    // A directory where the metadata file goes: every rename over it fails.
    fs::create_dir(meta_file(d, name)).unwrap();
    let q = DiskQueue::open(name, opts(d, 1 << 20)).unwrap();
    let (mut acked, mut next) = (Vec::new(), 0usize);
    put_batch(&q, &mut acked, &mut next, 3, 100).unwrap();
    assert!(q.sync().is_err(), "the metadata write must fail here");
    put_batch(&q, &mut acked, &mut next, 3, 100).unwrap();
    // Fixed: the timer retries without any further operation.
    fs::remove_dir(meta_file(d, name)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while fs::read(meta_file(d, name)).ok().as_deref() != Some(&b"6\n0,0\n0,624\n"[..]) {
        assert!(Instant::now() < deadline, "metadata never retried");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_exactly(&read_all(&q), &acked);
    q.close().unwrap();
}
