#!/usr/bin/env bash
# The channel's model check (crates/nsq-core/src/channel/model/), long form.
#
#   bench/model-check.sh [CASES] [SEED]
#
# Runs both model-check properties with CASES cases each (default 1,000,000) in release mode,
# seeded with SEED (default: random, printed first). A failure prints the minimal failing
# sequence of events; add it to model/cases.rs as a fixed case. CI runs the same properties with
# 1,500 cases each (`cargo test -p nsq-core channel::model`).
set -euo pipefail
cd "$(dirname "$0")/.."
CASES=${1:-1000000}
SEED=${2:-$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')}
echo "model check: $CASES cases per property, seed $SEED"
start=$(date +%s)
PROPTEST_CASES=$CASES PROPTEST_RNG_SEED=$SEED \
  cargo test --release -p nsq-core --lib channel::model -- --nocapture --test-threads=2
echo "model check passed: $CASES cases per property, seed $SEED, $(( $(date +%s) - start )) s"
