//! The replication core under a deterministic simulation (docs/replication.md, "The
//! simulation"): many seeds, each a short run of a whole group under faults; every seed that
//! ever failed stays in `REGRESSIONS`. The long form is `examples/replication_sim.rs`.

mod sim;

use std::time::Duration;

use sim::{Params, World};

/// Seeds that once failed (each a fixed case).
const REGRESSIONS: &[u64] = &[];

fn run(seed: u64) -> sim::Report {
    World::new(Params::from_seed(seed, Duration::from_secs(40))).run()
}

fn check(seeds: impl Iterator<Item = u64>) {
    let mut failed = Vec::new();
    let (mut steps, mut acked, mut dups, mut doubles, mut handoffs) = (0, 0, 0, 0, 0);
    for seed in seeds {
        let r = run(seed);
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
        .unwrap_or(300);
    check(1..=n);
}
