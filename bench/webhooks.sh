#!/usr/bin/env bash
# Webhook dispatcher benchmark: deliveries/s with 1 and 3 `api dispatch` processes to a
# local receiver next to a bare HTTP client (same receiver, same concurrency, no database),
# commit -> receive latency p50/p99, and the CPU each side used per 1,000 deliveries
# (dispatchers, Postgres, receiver; from /proc/<pid>/stat) with the cores busy. Needs Postgres (TEST_DATABASE_ADMIN_URL or
# postgres://postgres@127.0.0.1:5432/postgres). Knobs: BENCH_EVENTS (20000),
# BENCH_MERCHANTS (100), BENCH_LATENCY_EVENTS (500), PROFILE (release; or dev).
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-release}"
flag=()
[ "$profile" = release ] && flag=(--release)
cargo build -q -p chainsub-api --bins "${flag[@]}"
cargo test -q -p chainsub-api "${flag[@]}" --test it --no-run
out=$(cargo test -q -p chainsub-api "${flag[@]}" --test it -- webhooks_bench:: --ignored --nocapture 2>&1) || {
  echo "$out" >&2
  exit 1
}
echo "$out" | grep -E '^(\||webhook )'
echo "(host load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores)"
