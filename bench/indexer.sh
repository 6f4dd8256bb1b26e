#!/usr/bin/env bash
# Indexer benchmark: builds >= 100k contract events on anvil (spread and dense) and prints a
# table (end-to-end backfill, source alone, sink alone, live latency, depth-10 reorg).
# Needs Postgres on 127.0.0.1:5432 and `npm ci` (anvil). Knobs: BENCH_ACCOUNTS, BENCH_PLANS,
# BENCH_SHAPES=spread,dense, BENCH_LIVE_SAMPLES.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo bench -p chainsub-indexer --bench indexer "$@"
