#!/usr/bin/env bash
# Renewal-wave benchmark: N subscriptions across M merchants due at once, charged by the
# release `keeper` binary, next to the same `chargeMany` batches sent directly (the node's
# limit, same run, same chain state). Prints a table. Needs Postgres on 127.0.0.1:5432 and
# the chain tools (scripts/chain-tools). Knobs: BENCH_WAVE_SUBS (10000), BENCH_WAVE_MERCHANTS
# (50).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p chainsub-indexer -p chainsub-keeper --bins
exec cargo bench -q -p chainsub-keeper --bench wave "$@"
