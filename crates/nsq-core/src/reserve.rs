//! Disk space set aside for what nsqd holds only in memory, so a clean shutdown can always
//! write it out.
//!
//! The reference flushes its memory queues, in-flight and deferred messages to the diskqueue
//! on exit (nsqd/channel.go, `flush`) and, when that write fails — a full disk —, logs
//! `failed to flush channel to backend` and drops them, though every one was acknowledged. Here
//! memory never holds more than a file in the data directory, `nsqd.reserve`, has allocated
//! (fallocate, so the blocks are really taken, not a sparse file):
//!
//! - every message that enters a memory queue from a publish is *admitted* first
//!   ([`Reserve::admit`]); a refused admission sends it to the diskqueue instead, where a full
//!   disk refuses the publish — nsqd stops acknowledging into memory what it could not persist;
//! - a background thread (one per engine) sums what topics and channels hold in memory
//!   ([`crate::Engine`] asks each), keeps the file ahead of it (growing by doubling, shrinking
//!   when it is four times too large) and renews the admission budget;
//! - shutdown deletes the file before the flush, which then finds at least that much room.
//!
//! What is counted: the diskqueue record size (4 + 26 + body) of every message in a memory
//! queue, in flight from memory, or deferred without a journal. Messages read from a diskqueue
//! are not counted: their record stays on disk until settled (docs/durability.md). A message
//! deferred by REQ in the default mode (its record settled, now held only in memory) is counted
//! from the next tick on but not admitted: a REQ cannot be refused.
//!
//! The budget is renewed from a consistent lower bound: the thread reads the admitted total
//! *before* summing what is held, so admissions it did not see are still charged against the
//! new budget (`limit = admitted_before + reserved - held`); admissions it saw twice only make
//! the budget smaller.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// The file's name in the data directory (the Go nsqd ignores files it does not know).
pub const RESERVE_FILE: &str = "nsqd.reserve";

/// The smallest reserve kept (and the first one made at start).
const MIN_RESERVE: u64 = 4 << 20;

/// How often the budget is renewed without being asked.
const TICK: Duration = Duration::from_millis(100);

/// The reserve file and the admission budget (see the module docs).
#[derive(Debug)]
pub struct Reserve {
    path: PathBuf,
    file: Mutex<Option<File>>,
    /// Bytes the file holds now.
    reserved: AtomicU64,
    /// Every byte ever admitted (monotonic, wraps never in practice).
    admitted: AtomicU64,
    /// Admissions may bring `admitted` up to this.
    limit: AtomicU64,
    /// The last growth failed (the disk is full): logged once until it succeeds again.
    short: AtomicBool,
    /// Set by an admission that found the budget low; the thread renews at once.
    wanted: Mutex<bool>,
    wake: Condvar,
    /// Deleted for the shutdown flush: no more growth.
    released: AtomicBool,
}

impl Reserve {
    /// Opens (or creates) the reserve file in `data_path` and allocates the initial reserve.
    /// A file left by a crash keeps its size. A disk too full for the initial reserve is
    /// logged, not fatal: memory then admits nothing until the reserve can grow.
    pub fn open(data_path: &Path) -> io::Result<Reserve> {
        let path = data_path.join(RESERVE_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let have = file.metadata()?.len();
        let r = Reserve {
            path,
            file: Mutex::new(Some(file)),
            reserved: AtomicU64::new(have),
            admitted: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            short: AtomicBool::new(false),
            wanted: Mutex::new(false),
            wake: Condvar::new(),
            released: AtomicBool::new(false),
        };
        r.renew(0, 0);
        Ok(r)
    }

    /// Asks for room for `bytes` more held in memory. `false`: put them on disk instead.
    pub fn admit(&self, bytes: u64) -> bool {
        let before = self.admitted.fetch_add(bytes, Ordering::AcqRel);
        let limit = self.limit.load(Ordering::Acquire);
        let ok = before + bytes <= limit;
        if !ok {
            self.admitted.fetch_sub(bytes, Ordering::AcqRel);
        }
        // Ask for a renewal before the budget runs out, so a steady stream is never refused
        // while the disk has room.
        let reserved = self.reserved.load(Ordering::Relaxed);
        if !ok || limit.saturating_sub(before + bytes) < reserved / 4 {
            self.request();
        }
        ok
    }

    fn request(&self) {
        let mut w = self.wanted.lock();
        if !*w {
            *w = true;
            self.wake.notify_one();
        }
    }

    /// The total admitted so far: read before summing what is held (see the module docs).
    pub(crate) fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Acquire)
    }

    /// Resizes the file for `held` bytes in memory and renews the budget; `admitted_before`
    /// is [`Reserve::admitted`] read before `held` was summed.
    pub(crate) fn renew(&self, admitted_before: u64, held: u64) {
        if self.released.load(Ordering::Acquire) {
            self.limit.store(0, Ordering::Release);
            return;
        }
        let headroom = held.max(MIN_RESERVE);
        let target = held + headroom;
        let have = self.reserved.load(Ordering::Acquire);
        if have < held + headroom / 2 || have > 4 * target {
            let got = self.resize(target);
            self.reserved.store(got, Ordering::Release);
        }
        let reserved = self.reserved.load(Ordering::Acquire);
        self.limit.store(
            admitted_before + reserved.saturating_sub(held),
            Ordering::Release,
        );
    }

    /// Makes the file `target` bytes long with its blocks allocated; returns the size it has.
    fn resize(&self, target: u64) -> u64 {
        let g = self.file.lock();
        let Some(file) = g.as_ref() else {
            return 0;
        };
        let have = file.metadata().map(|m| m.len()).unwrap_or(0);
        let r = if target > have {
            rustix::fs::fallocate(
                file,
                rustix::fs::FallocateFlags::empty(),
                have,
                target - have,
            )
            .map_err(io::Error::from)
        } else {
            file.set_len(target)
        };
        match r {
            Ok(()) => {
                if self.short.swap(false, Ordering::AcqRel) {
                    tracing::info!("memory reserve restored ({target} bytes)");
                }
                target
            }
            Err(e) => {
                if !self.short.swap(true, Ordering::AcqRel) {
                    tracing::error!(
                        "failed to grow the memory reserve {} to {target} bytes, memory queues take only what it covers - {e}",
                        self.path.display()
                    );
                }
                file.metadata().map(|m| m.len()).unwrap_or(have)
            }
        }
    }

    /// Waits until a renewal is asked for or the tick passes; `false` once released. The
    /// caller renews when asked, or when something was admitted since its last renewal (an
    /// idle daemon costs nothing).
    pub(crate) fn wait(&self) -> Option<bool> {
        let mut w = self.wanted.lock();
        if !*w {
            self.wake.wait_for(&mut w, TICK);
        }
        let asked = std::mem::take(&mut *w);
        (!self.released.load(Ordering::Acquire)).then_some(asked)
    }

    /// Shutdown: admits nothing more and deletes the file, so the flush that follows has its
    /// space.
    pub fn release(&self) {
        self.released.store(true, Ordering::Release);
        self.limit.store(0, Ordering::Release);
        let mut g = self.file.lock();
        if g.take().is_some() {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::error!(
                    "failed to remove the memory reserve {} - {e}",
                    self.path.display()
                );
            }
        }
        self.reserved.store(0, Ordering::Release);
        drop(g);
        self.request();
    }

    /// Bytes the file holds (tests, stats).
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_within_the_reserve_and_renews_from_what_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let r = Reserve::open(dir.path()).unwrap();
        assert_eq!(r.reserved(), MIN_RESERVE);
        let on_disk = std::fs::metadata(dir.path().join(RESERVE_FILE)).unwrap();
        assert_eq!(on_disk.len(), MIN_RESERVE);
        assert!(r.admit(MIN_RESERVE));
        assert!(!r.admit(1), "budget used up");
        // Everything admitted is held: the file doubles ahead of it.
        r.renew(r.admitted(), MIN_RESERVE);
        assert_eq!(r.reserved(), 2 * MIN_RESERVE);
        assert!(r.admit(MIN_RESERVE));
        assert!(!r.admit(1));
        // All of it was FINed: the whole file is budget again.
        r.renew(r.admitted(), 0);
        assert!(r.admit(2 * MIN_RESERVE));
        assert!(!r.admit(1));
        r.release();
        assert!(!dir.path().join(RESERVE_FILE).exists());
        r.renew(r.admitted(), 0);
        assert!(!r.admit(1), "nothing admitted after release");
    }

    #[test]
    fn admissions_the_renewal_did_not_see_still_count() {
        let dir = tempfile::tempdir().unwrap();
        let r = Reserve::open(dir.path()).unwrap();
        let before = r.admitted();
        // Admitted between reading `admitted` and summing `held` (so not in `held`).
        assert!(r.admit(MIN_RESERVE / 2));
        r.renew(before, 0);
        assert!(r.admit(MIN_RESERVE / 2));
        assert!(!r.admit(1));
    }
}
