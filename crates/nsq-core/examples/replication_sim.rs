//! The long form of the replication simulation (docs/replication.md, "The simulation"):
//! `cargo run --release -p nsq-core --example replication_sim -- --steps 10000000 [--seed S]
//! [--run-for SECONDS] [--verbose 1]` runs seeds S, S+1, … (runs of 300 s by default, each
//! then healed and settled) until that many simulated steps have passed, and prints every
//! failing seed (add them to `REGRESSIONS` in tests/replication_sim.rs), then the totals:
//! acknowledged messages, faults, takeovers, duplicate deliveries by class (with the longest
//! lag), the two-taker window and how soon a permanently dead origin was drained. Every
//! invariant and bound is asserted per run (tests/sim/dups.rs); `--verbose 1` prints each
//! run's figures. Exit status 1 if any seed failed.

#[path = "../tests/sim/mod.rs"]
mod sim;

use std::time::{Duration, Instant};

fn main() {
    let mut steps_goal: u64 = 10_000_000;
    let mut seed: u64 = 1_000_000;
    let mut run_for = Duration::from_secs(300);
    let mut verbose = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--steps" => steps_goal = v.parse().expect("--steps N"),
            "--seed" => seed = v.parse().expect("--seed S"),
            "--verbose" => verbose = v == "1",
            "--run-for" => run_for = Duration::from_secs(v.parse().expect("--run-for SECONDS")),
            _ => panic!("unknown argument {a}"),
        }
    }
    let began = Instant::now();
    let (mut steps, mut runs, mut failed) = (0u64, 0u64, Vec::new());
    let mut total = sim::Report::default();
    let mut drained_max = Duration::ZERO;
    // Planned leaves: begun, finished, the longest handover without and with partitions.
    let (mut leaves, mut leaves_done) = (0u64, 0u64);
    let (mut leave_max, mut leave_max_part) = (Duration::ZERO, Duration::ZERO);
    let mut holders_max = 0;
    // Duplicates of runs without partitions (crashes, wipes, delays, skew, lookupd faults)
    // and of runs with them, and what each acknowledged.
    let (mut crash_dups, mut part_dups) = (sim::DupStats::default(), sim::DupStats::default());
    let (mut crash_acked, mut part_acked) = (0u64, 0u64);
    let mut lag_seed = 0;
    while steps < steps_goal {
        let p = sim::Params::from_seed(seed, run_for);
        let r = sim::World::new(p.clone()).run();
        steps += r.steps;
        runs += 1;
        total.acked += r.acked;
        total.duplicates += r.duplicates;
        total.double_takers += r.double_takers;
        total.handoffs += r.handoffs;
        total.crashes += r.crashes;
        total.wipes += r.wipes;
        total.cuts += r.cuts;
        total.takeovers += r.takeovers;
        total.max_copies = total.max_copies.max(r.max_copies);
        total.dups.add(&r.dups);
        if p.partitions {
            part_dups.add(&r.dups);
            part_acked += r.acked;
        } else {
            crash_dups.add(&r.dups);
            crash_acked += r.acked;
        }
        total.two_taker_window = total.two_taker_window.max(r.two_taker_window);
        total.dropped_takeovers += r.dropped_takeovers;
        if r.partition_lag_lookupds > total.partition_lag_lookupds {
            total.partition_lag_lookupds = r.partition_lag_lookupds;
            lag_seed = seed;
        }
        total.linked_second_takers += r.linked_second_takers;
        drained_max = drained_max.max(r.dead_origin_drained.unwrap_or_default());
        leaves += r.leaves;
        leaves_done += r.leaves_done;
        holders_max = holders_max.max(r.max_holders);
        if p.partitions {
            leave_max_part = leave_max_part.max(r.longest_leave);
        } else {
            leave_max = leave_max.max(r.longest_leave);
        }
        if verbose {
            println!(
                "seed {seed} partitions={} nodes={} N={} T={:?} lookupds={}: {}two takers unaware {:?}, drained {:?}",
                p.partitions,
                p.nodes,
                p.replicas,
                p.takeover_timeout,
                p.lookupds,
                r.dups,
                r.two_taker_window,
                r.dead_origin_drained
            );
        }
        if !r.failures.is_empty() {
            println!("FAIL seed {seed} {p:?}");
            for f in &r.failures {
                println!("  {f}");
            }
            failed.push(seed);
        }
        seed += 1;
    }
    println!(
        "{runs} runs, {steps} steps in {:?}: {} acknowledged, {} crashes ({} wipes), {} cuts, {} takeovers, {} epochs with two takers, {} handoffs, {} duplicate deliveries (max {} copies of one), dead origin drained within {:?}",
        began.elapsed(),
        total.acked,
        total.crashes,
        total.wipes,
        total.cuts,
        total.takeovers,
        total.double_takers,
        total.handoffs,
        total.duplicates,
        total.max_copies,
        drained_max
    );
    println!(
        "planned leaves: {leaves} begun, {leaves_done} handed over and exited; longest {leave_max:?} without partitions, {leave_max_part:?} with; at the end at most {holders_max} members held a live origin's epoch"
    );
    println!("duplicates by class: {}", total.dups);
    println!("  runs without partitions ({crash_acked} acknowledged): {crash_dups}");
    println!("  runs with partitions ({part_acked} acknowledged): {part_dups}");
    println!(
        "two takers of one epoch both claiming it, unaware of each other, for at most {:?} ({} such windows ended by a takeover dropped; {} second takers started while linked to the first)",
        total.two_taker_window, total.dropped_takeovers, total.linked_second_takers
    );
    println!(
        "partitions with nsqlookupds: a taker re-delivered what its origin settled at most {:?} after the copy's last frame (seed {lag_seed})",
        total.partition_lag_lookupds
    );
    if failed.is_empty() {
        println!("no failure");
    } else {
        println!("failing seeds: {failed:?}");
        std::process::exit(1);
    }
}
