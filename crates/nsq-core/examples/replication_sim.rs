//! The long form of the replication simulation (docs/replication.md, "The simulation"):
//! `cargo run --release -p nsq-core --example replication_sim -- --steps 10000000 [--seed S]`
//! runs seeds from S on until that many simulated steps have passed and prints every
//! failing seed (add them to `REGRESSIONS` in tests/replication_sim.rs).

#[path = "../tests/sim/mod.rs"]
mod sim;

use std::time::{Duration, Instant};

fn main() {
    let mut steps_goal: u64 = 10_000_000;
    let mut seed: u64 = 1_000_000;
    let mut run_for = Duration::from_secs(300);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--steps" => steps_goal = v.parse().expect("--steps N"),
            "--seed" => seed = v.parse().expect("--seed S"),
            "--run-for" => run_for = Duration::from_secs(v.parse().expect("--run-for SECONDS")),
            _ => panic!("unknown argument {a}"),
        }
    }
    let began = Instant::now();
    let (mut steps, mut runs, mut failed) = (0u64, 0u64, Vec::new());
    let mut total = sim::Report::default();
    let mut drained_max = Duration::ZERO;
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
        drained_max = drained_max.max(r.dead_origin_drained.unwrap_or_default());
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
    if failed.is_empty() {
        println!("no failure");
    } else {
        println!("failing seeds: {failed:?}");
        std::process::exit(1);
    }
}
