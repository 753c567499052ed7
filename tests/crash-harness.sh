#!/usr/bin/env bash
# The long crash harness (tests/tests/crash_harness.rs): SIGKILLs nsqd CRASH_KILLS times
# (default 20) at random moments under mixed publishers and consumers, in durable mode and in
# the default mode, and prints lost / duplicated / unknown counts for each.
#
#   tests/crash-harness.sh                 # 20 kills, every mode, release build
#   CRASH_KILLS=50 CRASH_SEED=42 tests/crash-harness.sh durable
#   CRASH_KILLS=720 tests/crash-harness.sh mem0   # the long form: ~30 minutes of kills every
#                                                 # 1-4 s, data dir size printed at each kill
#
# Modes: durable (--durable), mem0 (--mem-queue-size=0), default (--mem-queue-size=100), all.
# Each prints lost / duplicate FINs (with the bound it asserts) / unknown.
set -euo pipefail
cd "$(dirname "$0")/.."
export CRASH_KILLS="${CRASH_KILLS:-20}"
mode="${1:-all}"
profile="${PROFILE:-release}"
if [ "$profile" = release ]; then
    cargo build --release -p nsqd-bin
else
    cargo build -p nsqd-bin
fi
export NSQD_BIN="$PWD/target/$profile/nsqd"
case "$mode" in
    durable) filter='test(durable_mode)' ;;
    mem0) filter='test(zero_memory_mode)' ;;
    default) filter='test(default_mode)' ;;
    *) filter='binary(crash_harness)' ;;
esac
cargo nextest run -p nsq-integration-tests -E "$filter" --no-capture --test-threads=1 \
    2>&1 | grep -E '^\[(durable|mem0|default)\]|CRASH_SEED|PASS|FAIL|panicked'
