//! Health that follows the disk (docs/durability.md, "Full disk"): nsqd is unhealthy from a
//! failed disk write until a write succeeds (nsqd/nsqd.go `SetHealth`, as NSQ). In NSQ only a
//! later message write clears it, and with the memory queues absorbing publishes that write
//! may never come: a node behind a load balancer that health-checks `/ping` gets no traffic,
//! so it never writes, so it never recovers. So while unhealthy this task tries a write of its
//! own every [`RECHECK_EVERY`] — [`PROBE_BYTES`] to a file in the data path, synced, then
//! removed — and clears the error once that succeeds (unless a newer failure replaced it).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::nsqd::Nsqd;

/// How often an unhealthy node tries the disk again.
pub const RECHECK_EVERY: Duration = Duration::from_secs(1);
/// The size of the probe write: enough that a disk with only a sliver of space left stays
/// unhealthy.
pub const PROBE_BYTES: usize = 64 * 1024;
/// The probe file, in the data path (removed after each probe).
const PROBE_FILE: &str = ".nsqd-health-probe.tmp";

/// Writes, syncs and removes a probe file in `dir`. Blocking.
pub fn probe(dir: &Path) -> std::io::Result<()> {
    let path: PathBuf = dir.join(PROBE_FILE);
    let r = (|| {
        let mut f = std::fs::File::create(&path)?;
        f.write_all(&[0u8; PROBE_BYTES])?;
        f.sync_all()
    })();
    let _ = std::fs::remove_file(&path);
    r
}

/// Re-checks the disk while nsqd is unhealthy, until the task is aborted (shutdown).
pub async fn recheck(nsqd: Arc<Nsqd>) {
    let dir = nsqd.engine.options().data_path.clone();
    let mut tick = tokio::time::interval(RECHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(seen) = nsqd.engine.health().error() else {
            continue;
        };
        let d = dir.clone();
        if let Ok(Ok(())) = tokio::task::spawn_blocking(move || probe(&d)).await {
            if nsqd.engine.health().clear_if(&seen) {
                tracing::info!("the disk is writable again (was: {seen}); healthy");
            }
        }
    }
}
