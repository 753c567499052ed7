//! Failures the model check found, kept as fixed cases (each fails without its fix).

use super::{check, Op};

/// A due deferred message whose write back to the queue failed was kept in memory; its FIN
/// left the journal entry behind (delivered again after a restart). It now goes back to the
/// deferred set until a write succeeds.
#[test]
fn regression_a_failed_release_left_its_journal_entry() {
    use Op::*;
    let ops = vec![
        FailWrites(true),
        Publish { n: 1, defer_ms: 1 },
        Tick(1),
        Advance(0),
    ];
    check(0, ops).unwrap();
}

/// A deferred message released, delivered and deferred again before the sync that settles
/// its release: the release's journal DEL, written after the sync, also killed the new ADD
/// (replay goes by ID) and a crash lost the message.
#[test]
fn regression_an_old_del_killed_a_newer_deferral() {
    use Op::*;
    let ops = vec![
        Take { client: 0, rdy: 1 },
        Publish { n: 1, defer_ms: 1 },
        DiskSync,
        Publish { n: 1, defer_ms: 0 },
        Tick(1),
        Fin { client: 0, k: 0 },
        Advance(5),
        Take { client: 1, rdy: 1 },
        Req {
            client: 1,
            k: 0,
            delay_ms: 1,
        },
        Advance(0),
        Advance(0),
        DiskSync,
        Settle,
        DiskSync,
        Crash { power: false },
    ];
    check(0, ops).unwrap();
}

/// A deferral's journal ADD was still being written when the message came due, was re-stored
/// and synced: the release's DEL went to the journal before the ADD, which then stayed live
/// (delivered again after a restart). The DEL now waits for its ADD.
#[test]
fn regression_a_del_written_before_its_add() {
    use Op::*;
    let ops = vec![
        Publish { n: 1, defer_ms: 0 },
        Advance(0),
        Take { client: 2, rdy: 1 },
        Req {
            client: 2,
            k: 0,
            delay_ms: 362,
        },
        Tick(1000),
        Advance(1),
        DiskSync,
        Settle,
    ];
    check(0, ops).unwrap();
}
