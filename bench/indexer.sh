#!/usr/bin/env bash
# Indexer benchmark: builds >= 100k contract events on anvil (spread and dense) and prints a
# table (end-to-end backfill, source alone, sink alone, live latency, depth-10 reorg).
# Needs Postgres on 127.0.0.1:5432 and `npm ci` (anvil). Knobs: BENCH_ACCOUNTS, BENCH_PLANS,
# BENCH_SHAPES=spread,dense, BENCH_LIVE_SAMPLES; BENCH_BINARY_ONLY=1 runs only the indexer
# binary's backfill (its own peak RSS), e.g. 1M dense events:
#   BENCH_BINARY_ONLY=1 BENCH_SHAPES=dense BENCH_PLANS=1700 bench/indexer.sh
# BENCH_INDEXER_WRAPPER="heaptrack -o /tmp/indexer" runs that binary under a profiler.
# BENCH_SINK_PREFILL=100000,1000000 runs the sink alone again onto 1M and 10M events already in
# the index (bench/api/load.sql's rows on another chain; the 10M load takes ~20 GB and minutes):
#   BENCH_SHAPES=spread BENCH_SINK_PREFILL=100000,1000000 bench/indexer.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The end-to-end row also runs the `indexer` binary as an operator would (release build).
cargo build -q --release -p chainsub-indexer --bins
exec cargo bench -p chainsub-indexer --bench indexer "$@"
