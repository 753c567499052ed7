//! Waiting for a condition without fixed sleeps: poll often, give up late (the test machine is
//! loaded), return as soon as the condition holds.

use std::time::{Duration, Instant};

/// How long [`eventually`] and [`wait_until`] poll before failing the test.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Polls `f` every 20 ms until it is true; panics after [`PATIENCE`].
pub async fn eventually(mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("condition not reached within {PATIENCE:?}");
}

/// The blocking [`eventually`], for tests of the binaries.
pub fn wait_until(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("condition not reached within {PATIENCE:?}");
}
