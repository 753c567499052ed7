//! The replication core under a deterministic simulation (docs/replication.md, "The
//! simulation"): many seeds, each a short run of a whole group under faults; every seed that
//! ever failed stays in `REGRESSIONS`. The long form is `examples/replication_sim.rs`.

mod sim;

use std::time::Duration;

use sim::{Params, World};

/// Seeds that once failed, with their run's length in seconds (each a fixed case; the
/// commit that fixed each is in git log of crates/nsq-core/src/replication).
const REGRESSIONS: &[(u64, u64)] = &[
    (26, 40),
    (68, 40),
    (196, 40),
    (230, 40),
    (234, 40),
    (258, 40),
    (1_000_018, 300),
    (1_000_021, 300),
    (1_000_025, 300),
    (1_000_050, 300),
    (1_000_069, 300),
    (1_000_072, 300),
    (1_000_139, 300),
    (1_000_227, 300),
    (1_000_270, 300),
    (2_000_042, 300),
    (2_000_048, 300),
    (2_000_193, 300),
    (2_000_393, 300),
    (2_000_447, 300),
    (2_000_703, 300),
    (2_000_833, 300),
    (3_001_063, 300),
    (3_001_179, 300),
    (3_001_721, 300),
    (3_001_896, 300),
    (4_000_212, 300),
    (4_000_420, 300),
    (4_000_450, 300),
    (4_001_284, 300),
    (4_001_372, 300),
    (5_000_550, 300),
    (5_001_607, 300),
    (5_001_656, 300),
    (4_001_577, 300),
    (6_000_303, 300),
    (7_002_635, 300),
    (7_000_189, 300),
    (7_001_062, 300),
    // Issue 29: planned leaves with only the replica set storing (a join on the way to a new
    // epoch made a second holder; a leave emptied a takeover's adoptions).
    (26_000_107, 300),
    (34_000_012, 300),
    (34_000_049, 300),
    (34_000_099, 300),
    (34_000_149, 300),
];

/// How long a CI seed runs with producers and faults (then the final phase).
const CI_RUN_FOR: u64 = 15;

fn check(seeds: impl Iterator<Item = (u64, u64)>) {
    let mut failed = Vec::new();
    let (mut steps, mut acked, mut dups, mut doubles, mut handoffs) = (0, 0, 0, 0, 0);
    for (seed, secs) in seeds {
        let r = World::new(Params::from_seed(seed, Duration::from_secs(secs))).run();
        steps += r.steps;
        acked += r.acked;
        dups += r.duplicates;
        doubles += r.double_takers;
        handoffs += r.handoffs;
        if !r.failures.is_empty() {
            failed.push((seed, r.failures));
        }
    }
    println!(
        "{steps} steps, {acked} acknowledged, {dups} duplicate deliveries, {doubles} epochs with two takers, {handoffs} handoffs"
    );
    assert!(failed.is_empty(), "failing seeds: {failed:#?}");
}

/// `SIM_SEED=n SIM_TRACE=1 cargo test -p nsq-core --test replication_sim one_seed -- --nocapture`
#[test]
fn one_seed() {
    if let Some(seed) = std::env::var("SIM_SEED").ok().and_then(|v| v.parse().ok()) {
        let secs = std::env::var("SIM_RUN_FOR")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(40);
        let p = Params::from_seed(seed, Duration::from_secs(secs));
        println!("{p:?}");
        let r = World::new(p).run();
        println!("{r:#?}");
    }
}

#[test]
fn regression_seeds() {
    check(REGRESSIONS.iter().copied());
}

#[test]
fn many_seeds() {
    let n: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    check((1..=n).map(|seed| (seed, CI_RUN_FOR)));
}
